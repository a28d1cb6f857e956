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
"""
from __future__ import annotations

import hashlib
import hmac
import re
from functools import cache

from django.conf import settings

from .codes import ALPHABET, GROUP_LENGTH
from .models import UniqueCode

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
_BODY_RE = re.compile(rf"[{ALPHABET}]{{{BODY_SYMBOLS}}}")


@cache
def _key(secret: str) -> bytes:
    return hashlib.sha256(b"couponrush.unique-codes\x00" + secret.encode()).digest()


def _mac(prefix: str, serial: int) -> int:
    digest = hmac.digest(_key(settings.SECRET_KEY), f"{prefix}:{serial}".encode(), "sha256")
    return int.from_bytes(digest[:8], "big") % _MACS


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
    if not 0 <= serial < SERIALS:
        raise ValueError("serial out of range")
    scrambled = (serial * _SCRAMBLE + _OFFSET) % SERIALS
    body = _symbols(scrambled, SERIAL_SYMBOLS) + _symbols(_mac(prefix, serial), MAC_SYMBOLS)
    return f"{prefix}-{_grouped(body)}" if prefix else _grouped(body)


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


_IMPORTED_RE = re.compile(r"[A-Z0-9-]{4,40}")


def unique_code_lookup(text: str) -> str | None:
    """Return the stored code of the imported unique code `text` stands for, or None: the one place a typed code
    that is not MAC-valid (legacy codes from an operator's file carry no MAC of ours) is looked up in PostgreSQL.
    For now an imported code is looked up as typed, upper case (its import stores it so)."""
    code = text.strip().upper()
    if not code.isascii() or not _IMPORTED_RE.fullmatch(code):
        return None
    return UniqueCode.objects.filter(code=code).values_list("code", flat=True).first()
