"""Coupon codes: unguessable (CSPRNG, ~59 bits) and easy to read aloud (no 0/O, 1/I/L, U; grouped)."""
from __future__ import annotations

import re
import secrets

ALPHABET = "23456789ABCDEFGHJKMNPQRSTVWXYZ"  # 30 symbols that survive being read over the phone
GROUPS = 3
GROUP_LENGTH = 4
CODE_RE = re.compile(rf"[{ALPHABET}]{{{GROUP_LENGTH}}}(-[{ALPHABET}]{{{GROUP_LENGTH}}}){{{GROUPS - 1}}}")


def new_code() -> str:
    """Return a fresh random code such as 'K7QM-3XRD-9PVA'."""
    symbols = "".join(secrets.choice(ALPHABET) for _ in range(GROUPS * GROUP_LENGTH))
    return "-".join(symbols[i : i + GROUP_LENGTH] for i in range(0, len(symbols), GROUP_LENGTH))


def normalize_code(text: str) -> str | None:
    """Return the canonical form of a code typed by a person (case, spaces), or None if it is not a code."""
    compact = re.sub(r"[\s-]", "", text.upper())
    if len(compact) != GROUPS * GROUP_LENGTH:
        return None
    code = "-".join(compact[i : i + GROUP_LENGTH] for i in range(0, len(compact), GROUP_LENGTH))
    return code if CODE_RE.fullmatch(code) else None
