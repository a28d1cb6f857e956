"""Coupons applied to a cart one after the other, each on what the ones before it left: one coupon after those an
order holds (`price_coupon`), a list in its order (`price_coupons`), a set in the canonical stacking order
(`price_stack`). The package's docstring, "Stacking order"."""
from __future__ import annotations

from collections.abc import Iterable, Sequence

from .benefits import _Terms
from .results import CouponPricing, OrderPricing
from .rules import Candidate, Cart
from .shares import _order, _result
from .stacking import _cap_of, canonical_order
from .units import _to_units


def price_coupon(cart: Cart, candidate: Candidate, *, before: Sequence[CouponPricing] = ()) -> CouponPricing:
    """Return what `candidate` gives `cart` applied after the coupons `before` (in their order; refused ones
    count for nothing). `before` is what the order already holds or used, priced on this same cart (stored
    shares, the lines' and the shipping's, rebuilt as CouponPricing will do)."""
    remaining = list(cart.priced)
    held: list[Candidate] = []
    total = 0
    for result in before:
        if result.applicable:
            held.append(result.candidate)
            for share in result.lines:
                remaining[share.index] -= _to_units(share.discount, cart.currency)
            remaining[-1] -= _to_units(result.shipping, cart.currency)
            total += _to_units(result.discount, cart.currency)
    terms = _Terms.of(cart, candidate)
    status, units = terms.price(remaining, total, _cap_of(held, cart.currency), held)
    return _result(cart, candidate, terms, status, units, remaining)


def price_coupons(cart: Cart, candidates: Sequence[Candidate]) -> OrderPricing:
    """Return the coupons applied one after the other in the order given, each after those before it."""
    results: list[CouponPricing] = []
    for candidate in candidates:
        results.append(price_coupon(cart, candidate, before=results))
    return _order(cart, results)


def price_stack(cart: Cart, candidates: Iterable[Candidate]) -> OrderPricing:
    """Return a set of coupons applied in the canonical stacking order."""
    return price_coupons(cart, canonical_order(candidates))

