"""Which coupons may share an order and in what order a set stacks (rules 3 and 6 of the package's docstring):
the most coupons an order carries, `combinable`, the canonical stacking order, the order cap of coupons held."""
from __future__ import annotations

from collections.abc import Iterable

from .rules import BUY_GET, FIXED, FREE_SHIPPING, PERCENT, TIERS, Candidate
from .units import _NO_CAP, _to_units

# The most coupons one order may carry. Five is what the shops we copy allow in practice (Voucherify's
# default stack holds up to 5 redeemables per category, mall and Taobao one per kind); it also bounds the
# best-combination search to subsets of at most 5 of the candidates.
MAX_COUPONS_PER_ORDER = 5


def combinable(first: Candidate, second: Candidate) -> bool:
    """Return whether two coupons may be on one order.

    Never an exclusive coupon with another; never two coupons of one campaign; otherwise each one's
    `combinable_with` must admit the other's campaign (an empty list admits every campaign): both must agree,
    so the relation is symmetric and a set is allowed exactly when each of its pairs is.
    """
    a, b = first.rule, second.rule
    if a.exclusive or b.exclusive or first.campaign_id == second.campaign_id:
        return False
    return (not a.combinable_with or second.campaign_id in a.combinable_with) and (
        not b.combinable_with or first.campaign_id in b.combinable_with
    )


# The canonical stacking order of the benefits: items given (buy N get M) first, then the tiers judged on what the
# items cost after them, amounts off, percentages of what is left, and free shipping (it takes off the shipping
# alone, so its place changes only what an order cap leaves it).
STACKING_ORDER = {BUY_GET: 0, TIERS: 1, FIXED: 2, PERCENT: 3, FREE_SHIPPING: 4}


def stacking_key(candidate: Candidate) -> tuple[int, int, str]:
    """Return the canonical stacking position of a coupon: by its benefit (STACKING_ORDER: fixed amounts before
    percentages), then campaign and code."""
    return (STACKING_ORDER[candidate.rule.discount_type], candidate.campaign_id, candidate.code)


def canonical_order(candidates: Iterable[Candidate]) -> tuple[Candidate, ...]:
    return tuple(sorted(candidates, key=stacking_key))


def _cap_of(held: Iterable[Candidate], currency: str) -> int:
    caps = [_to_units(c.rule.order_cap, currency) for c in held if c.rule.order_cap is not None]
    return min(caps, default=_NO_CAP)

