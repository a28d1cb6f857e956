"""Amounts as whole minor units: the package computes in integers throughout, Decimal at the edges."""
from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal

from ..money import MINOR_UNITS

_NO_CAP = 1 << 126  # an order cap no amount reaches


def _to_units(amount: Decimal, currency: str) -> int:
    return int(amount.scaleb(MINOR_UNITS[currency]))


def _money(units: int, currency: str) -> Decimal:
    return Decimal(units).scaleb(-MINOR_UNITS[currency])


def _allocate(discount: int, weights: Sequence[int]) -> list[int]:
    """Return each line's share of `discount` units (at most the weights' sum), in proportion to its weight (what
    is still payable on it; a free item's worth for buy N get M), by the largest remainder (shares.py's docstring)."""
    payable = sum(weights)
    if discount == 0:
        return [0] * len(weights)
    shares: list[int] = []
    order: list[tuple[int, int, int]] = []
    for position, weight in enumerate(weights):
        share, remainder = divmod(discount * weight, payable)
        shares.append(share)
        order.append((-remainder, -weight, position))
    for _, _, position in sorted(order)[: discount - sum(shares)]:
        shares[position] += 1
    return shares
