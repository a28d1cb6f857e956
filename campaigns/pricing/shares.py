"""A discount split over its eligible lines, and an order's lines after all its coupons.

The split (rule 7 of the package's docstring): in proportion to what is still payable on each line, by the
largest remainder method in minor units: each line gets the floor of its exact share, and the units left over go
one each to the lines with the largest remainders (ties: the line with more still payable, then the earlier
line). The shares sum to the discount exactly, and no line is ever discounted below zero.
"""
from __future__ import annotations

from collections.abc import Sequence

from .benefits import _Terms
from .results import OK, CouponPricing, LineShare, LineTotal, OrderPricing
from .rules import Candidate, Cart
from .units import _money, _to_units


def _allocate(discount: int, lines: Sequence[int], remaining: Sequence[int]) -> list[int]:
    """Return each eligible line's share of `discount` units (largest remainder, see the module docstring)."""
    payable = sum(remaining[i] for i in lines)
    if discount == 0:
        return [0] * len(lines)
    shares: list[int] = []
    order: list[tuple[int, int, int]] = []
    for position, index in enumerate(lines):
        share, remainder = divmod(discount * remaining[index], payable)
        shares.append(share)
        order.append((-remainder, -remaining[index], position))
    for _, _, position in sorted(order)[: discount - sum(shares)]:
        shares[position] += 1
    return shares


def _result(
    cart: Cart, candidate: Candidate, terms: _Terms, status: str, units: int, remaining: Sequence[int]
) -> CouponPricing:
    currency = cart.currency
    if status != OK:
        return CouponPricing(candidate=candidate, status=status, discount=_money(0, currency))
    shares = _allocate(units, terms.lines, remaining)
    lines = tuple(
        LineShare(index=index, sku=cart.lines[index].sku, discount=_money(share, currency))
        for index, share in zip(terms.lines, shares, strict=True)
    )
    return CouponPricing(candidate=candidate, status=OK, discount=_money(units, currency), lines=lines)


def _order(cart: Cart, results: Sequence[CouponPricing]) -> OrderPricing:
    currency = cart.currency
    taken = [0] * len(cart.lines)
    for result in results:
        for share in result.lines:
            taken[share.index] += _to_units(share.discount, currency)
    total = sum(taken)
    lines = tuple(
        LineTotal(
            index=index, sku=line.sku, amount=_money(units, currency), discount=_money(taken[index], currency),
            payable=_money(units - taken[index], currency),
        )
        for index, (line, units) in enumerate(zip(cart.lines, cart.units, strict=True))
    )
    return OrderPricing(
        currency=currency, coupons=tuple(results), amount=cart.amount, discount=_money(total, currency),
        payable=_money(sum(cart.units) - total, currency), lines=lines,
    )
