"""Unique codes of a codes campaign: a serial and a MAC, so a typed code not of ours is refused before any read.

A generated code is the operator's prefix (kept as given, upper case) and twelve symbols of the look-alike-free
alphabet of coupons.codes, in groups of four: `SPRING-K7QM-3XRD-9PVA`. The first six symbols are a serial
(from the PostgreSQL sequence `coupons_unique_code_serial`, so two codes never collide and nothing is checked
before it is inserted), scrambled by a fixed bijection so that neighbouring serials don't look alike; the last
six are a MAC of the prefix and the serial under a key derived from DJANGO_SECRET_KEY (~29 bits: one guess in
729 million passes, and the misses of a shopper are rate-limited). Why not randomness alone: a random code can
only be refused after a lookup; a MAC is checked in memory (a few microseconds), so a flood of made-up codes
never reaches the database.

Capacity: 30**6 = 729,000,000 serials in all (docs/operating.md). Rotating DJANGO_SECRET_KEY invalidates every
generated code that is not yet held.

Imported (legacy) codes carry no MAC: unique_code_lookup, the one function the use path calls, lets a text that
is not a generated code through to the database only while some imported batch exists (checked at most every
IMPORTED_RECHECK_SECONDS per process).
"""
from __future__ import annotations

import hashlib
import hmac
import re
import time
from collections.abc import Iterable
from functools import cache
from typing import Any

from django.conf import settings

from .codes import ALPHABET, GROUP_LENGTH

PREFIX_RE = re.compile(r"[A-Z0-9]{1,16}")
SERIAL_SYMBOLS = 6
MAC_SYMBOLS = 6
BODY_SYMBOLS = SERIAL_SYMBOLS + MAC_SYMBOLS
SERIALS = len(ALPHABET) ** SERIAL_SYMBOLS  # 729,000,000
_MACS = len(ALPHABET) ** MAC_SYMBOLS
# serial -> serial * _SCRAMBLE + _OFFSET (mod SERIALS) is a bijection: _SCRAMBLE is coprime to 2, 3 and 5.
_SCRAMBLE = 282_475_249  # 7 ** 10
_UNSCRAMBLE = pow(_SCRAMBLE, -1, SERIALS)
_OFFSET = 123_456_789
_VALUE = {symbol: i for i, symbol in enumerate(ALPHABET)}
_SHA256_BLOCK = 64  # bytes
_BODY_RE = re.compile(rf"[{ALPHABET}]{{{BODY_SYMBOLS}}}")
# Every 3 symbols of the alphabet, in value order: a 6-symbol value is _TRIPLES[v // 27000] + _TRIPLES[v % 27000]
# (a table look-up instead of a Python loop per symbol: 2.5x faster generation, bench/codes_bench.py).
_TRIPLES = [a + b + c for a in ALPHABET for b in ALPHABET for c in ALPHABET]
_TRIPLE = len(_TRIPLES)
# An imported (legacy) code as stored: upper case, trimmed, 4-40 of [A-Z0-9-] (docs/api.md, codes typed at checkout).
IMPORTED_CODE_RE = re.compile(r"[A-Z0-9-]{4,40}")
IMPORTED_RECHECK_SECONDS = 5.0


@cache
def _key(secret: str) -> bytes:
    return hashlib.sha256(b"couponrush.unique-codes\x00" + secret.encode()).digest()


@cache
def _hmac_states(secret: str) -> tuple[Any, Any]:
    """HMAC-SHA256 under _key(secret) as its two hash states after the padded key (RFC 2104: H(k ^ opad ||
    H(k ^ ipad || message))): a MAC is then two copies and two short updates, the same digest as hmac.digest's
    (tests/coupons/test_unique_codes.py) at about a third of its cost (~1.2 against ~3.4 us a code: OpenSSL's
    one-shot HMAC sets the key up again every call; bench/codes_bench.py)."""
    block = _key(secret).ljust(_SHA256_BLOCK, b"\x00")
    return (hashlib.sha256(bytes(b ^ 0x36 for b in block)), hashlib.sha256(bytes(b ^ 0x5C for b in block)))


def _mac(prefix: str, serial: int) -> int:
    inner, outer = _hmac_states(settings.SECRET_KEY)
    return _mac_of(inner, outer, f"{prefix}:{serial}".encode())


def _mac_of(inner: Any, outer: Any, message: bytes) -> int:
    """The MAC symbols' value of a message: the first 8 bytes of its HMAC-SHA256, modulo _MACS."""
    h = inner.copy()
    h.update(message)
    o = outer.copy()
    o.update(h.digest())
    return int.from_bytes(o.digest()[:8], "big") % _MACS


def _symbols(value: int, n: int) -> str:
    out = []
    for _ in range(n):
        value, rest = divmod(value, len(ALPHABET))
        out.append(ALPHABET[rest])
    return "".join(reversed(out))


def _value(symbols: str) -> int:
    value = 0
    for symbol in symbols:
        value = value * len(ALPHABET) + _VALUE[symbol]
    return value


def _grouped(body: str) -> str:
    return "-".join(body[i : i + GROUP_LENGTH] for i in range(0, len(body), GROUP_LENGTH))


def unique_code(prefix: str, serial: int) -> str:
    """Return the code of `serial` (0 <= serial < SERIALS) under `prefix` ('' or PREFIX_RE)."""
    return unique_codes(prefix, [serial])[0]


def unique_codes(prefix: str, serials: Iterable[int]) -> list[str]:
    """Return the codes of `serials` under `prefix`, in order: unique_code for a whole chunk of a batch."""
    head, tag = f"{prefix}-" if prefix else "", f"{prefix}:".encode()
    inner, outer = _hmac_states(settings.SECRET_KEY)
    inner_copy, outer_copy, from_bytes, triples = inner.copy, outer.copy, int.from_bytes, _TRIPLES
    out = []
    for serial in serials:
        if not 0 <= serial < SERIALS:
            raise ValueError("serial out of range")
        scrambled = (serial * _SCRAMBLE + _OFFSET) % SERIALS
        h = inner_copy()  # _mac_of, inlined: this loop is the generator's Python
        h.update(tag + str(serial).encode())
        o = outer_copy()
        o.update(h.digest())
        mac = from_bytes(o.digest()[:8], "big") % _MACS
        a, b = triples[scrambled // _TRIPLE], triples[scrambled % _TRIPLE]
        c, d = triples[mac // _TRIPLE], triples[mac % _TRIPLE]
        out.append(f"{head}{a}{b[0]}-{b[1:]}{c[:2]}-{c[2]}{d}")  # groups of GROUP_LENGTH (4)
    return out


def in_code_order(serials: Iterable[int]) -> list[int]:
    """Return the serials sorted so that their codes (under one prefix) come out in ascending order: a code
    starts with its scrambled serial in symbols whose values follow their ASCII order."""
    return sorted(serials, key=lambda serial: (serial * _SCRAMBLE + _OFFSET) % SERIALS)


def canonical_unique_code(text: str) -> str | None:
    """Return the canonical form of a typed generated code (case, spaces and dashes forgiven) if its MAC is
    ours, else None. Reads nothing: no database, no Redis."""
    compact = re.sub(r"[\s-]", "", text.upper())
    prefix, body = compact[:-BODY_SYMBOLS], compact[-BODY_SYMBOLS:]
    if not _BODY_RE.fullmatch(body) or (prefix and not PREFIX_RE.fullmatch(prefix)):
        return None
    serial = ((_value(body[:SERIAL_SYMBOLS]) - _OFFSET) * _UNSCRAMBLE) % SERIALS
    if not hmac.compare_digest(body[SERIAL_SYMBOLS:], _symbols(_mac(prefix, serial), MAC_SYMBOLS)):
        return None
    return f"{prefix}-{_grouped(body)}" if prefix else _grouped(body)


_imported: tuple[float, bool] = (float("-inf"), False)  # (when checked, whether some imported batch exists)


def imported_codes_exist() -> bool:
    """Return whether some imported batch exists, asking PostgreSQL at most every IMPORTED_RECHECK_SECONDS."""
    global _imported
    checked, exists = _imported
    now = time.monotonic()
    if now - checked >= IMPORTED_RECHECK_SECONDS:
        from .models import CodeBatch, CodeBatchSource  # here: models import nothing of this module, but stay light

        exists = CodeBatch.objects.filter(source=CodeBatchSource.IMPORTED, inserted__gt=0).exists()
        _imported = (now, exists)
    return exists


def forget_imported_codes() -> None:
    """Make the next imported_codes_exist() ask PostgreSQL (after an import; tests)."""
    global _imported
    _imported = (float("-inf"), False)


def unique_code_lookup(text: str) -> str | None:
    """Return the text worth one database look-up for a code a shopper typed, or None to refuse it unread.

    A generated code with our MAC: its canonical form (case, spaces and dashes forgiven), always. Any other
    text: upper-cased and trimmed, only if it has the form of an imported code and some imported batch exists
    (a process-level answer refreshed at most every IMPORTED_RECHECK_SECONDS); else None, before any read.
    """
    generated = canonical_unique_code(text)
    if generated is not None:
        return generated
    legacy = text.strip().upper()
    if IMPORTED_CODE_RE.fullmatch(legacy) and imported_codes_exist():
        return legacy
    return None
