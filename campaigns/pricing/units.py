"""Amounts as whole minor units: the package computes in integers throughout, Decimal at the edges."""
from __future__ import annotations

from decimal import Decimal

from ..money import MINOR_UNITS

_NO_CAP = 1 << 126  # an order cap no amount reaches


def _to_units(amount: Decimal, currency: str) -> int:
    return int(amount.scaleb(MINOR_UNITS[currency]))


def _money(units: int, currency: str) -> Decimal:
    return Decimal(units).scaleb(-MINOR_UNITS[currency])

