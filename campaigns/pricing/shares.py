"""A discount split over its eligible lines, and an order's lines after all its coupons.

The split (rule 7 of the package's docstring; units._allocate): in proportion to what is still payable on each
line, by the largest remainder method in minor units: each line gets the floor of its exact share, and the units
left over go one each to the lines with the largest remainders (ties: the line with more still payable, then
the earlier line). The shares sum to the discount exactly, and no line is ever discounted below zero. Buy N get M splits
by its free items' worth instead, free shipping puts it all on the shipping (kinds.py).
"""
from __future__ import annotations

from collections.abc import Sequence

from .benefits import _Terms
from .results import OK, CouponPricing, LineShare, LineTotal, OrderPricing
from .rules import Candidate, Cart
from .units import _money, _to_units


def _result(
    cart: Cart, candidate: Candidate, terms: _Terms, status: str, units: int, remaining: Sequence[int]
) -> CouponPricing:
    currency = cart.currency
    if status != OK:
        return CouponPricing(candidate=candidate, status=status, discount=_money(0, currency))
    lines: list[LineShare] = []
    shipping = 0
    at_shipping = cart.shipping_index
    for index, share in terms.split(units, remaining):
        if index == at_shipping:
            shipping = share
        else:
            lines.append(LineShare(index=index, sku=cart.lines[index].sku, discount=_money(share, currency)))
    return CouponPricing(candidate=candidate, status=OK, discount=_money(units, currency), lines=tuple(lines),
                         shipping=_money(shipping, currency))


def _order(cart: Cart, results: Sequence[CouponPricing]) -> OrderPricing:
    currency = cart.currency
    taken = [0] * len(cart.lines)
    shipping = 0
    for result in results:
        for share in result.lines:
            taken[share.index] += _to_units(share.discount, currency)
        shipping += _to_units(result.shipping, currency)
    total = sum(taken) + shipping
    lines = tuple(
        LineTotal(
            index=index, sku=line.sku, amount=_money(units, currency), discount=_money(taken[index], currency),
            payable=_money(units - taken[index], currency),
        )
        for index, (line, units) in enumerate(zip(cart.lines, cart.units, strict=True))
    )
    return OrderPricing(
        currency=currency, coupons=tuple(results), amount=cart.amount, discount=_money(total, currency),
        payable=_money(sum(cart.priced) - total, currency), lines=lines, shipping=cart.shipping,
        shipping_discount=_money(shipping, currency),
    )
