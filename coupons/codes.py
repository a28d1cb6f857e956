"""Coupon codes: unguessable (CSPRNG, ~59 bits) and easy to read aloud (no 0/O, 1/I/L, U; grouped)."""
from __future__ import annotations

import re
import secrets

ALPHABET = "23456789ABCDEFGHJKMNPQRSTVWXYZ"  # 30 symbols that survive being read over the phone
GROUPS = 3
GROUP_LENGTH = 4
CODE_RE = re.compile(rf"[{ALPHABET}]{{{GROUP_LENGTH}}}(-[{ALPHABET}]{{{GROUP_LENGTH}}}){{{GROUPS - 1}}}")

# A byte < 240 is one of the 30 symbols with equal odds (240 = 8 x 30); the bytes >= 240 are dropped.
_SYMBOL_OF_BYTE = bytes(ord(ALPHABET[b % len(ALPHABET)]) for b in range(256))
_REJECTED_BYTES = bytes(range(256 - 256 % len(ALPHABET), 256))
_CODE_SYMBOLS = GROUPS * GROUP_LENGTH
_CODE_LENGTH = _CODE_SYMBOLS + GROUPS - 1  # with the dashes between the groups


def new_codes(n: int) -> list[str]:
    """Return `n` fresh random codes such as 'K7QM-3XRD-9PVA'.

    Built for a whole batch at once (the drain's): the CSPRNG's bytes mapped to symbols by one translate(),
    laid out in one buffer by strided slice assignment (symbol k of every code at once), then cut; no Python
    loop per symbol (a secrets.choice() per symbol cost ~50 us per code on the busy bench machine).
    """
    need = n * _CODE_SYMBOLS
    symbols = bytearray()
    while len(symbols) < need:
        fresh = secrets.token_bytes(need - len(symbols) + need // 8 + 16)
        symbols += fresh.translate(_SYMBOL_OF_BYTE, _REJECTED_BYTES)
    size = n * _CODE_LENGTH
    out = bytearray(b"-" * size)
    for k in range(_CODE_SYMBOLS):  # symbol k of code i is symbols[i * _CODE_SYMBOLS + k]
        out[k + k // GROUP_LENGTH : size : _CODE_LENGTH] = symbols[k:need:_CODE_SYMBOLS]
    text = out.decode()
    return [text[i : i + _CODE_LENGTH] for i in range(0, size, _CODE_LENGTH)]


def normalize_code(text: str) -> str | None:
    """Return the canonical form of a code typed by a person (case, spaces), or None if it is not a code."""
    compact = re.sub(r"[\s-]", "", text.upper())
    if len(compact) != GROUPS * GROUP_LENGTH:
        return None
    code = "-".join(compact[i : i + GROUP_LENGTH] for i in range(0, len(compact), GROUP_LENGTH))
    return code if CODE_RE.fullmatch(code) else None
