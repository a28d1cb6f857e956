"""What one coupon takes off a cart (rules 1-6 of the package's docstring, in their order): its rule against
one cart in minor units (`_Terms`), evaluated by reserve and redeem once and by the best-set search thousands of
times. An amount or a percentage off is priced here; tiers, free shipping and buy N get M by their benefit
(kinds.py)."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from decimal import ROUND_HALF_UP

from ..money import compute_discount, minor_unit
from .kinds import Benefit, benefit_of
from .results import MIN_QUANTITY_NOT_MET, MIN_SPEND_NOT_MET, NOT_APPLICABLE, NOT_COMBINABLE, OK
from .rules import FREE_SHIPPING, PERCENT, TIERS, Candidate, Cart, eligible_lines
from .stacking import MAX_COUPONS_PER_ORDER, combinable
from .units import _NO_CAP, _allocate, _money, _to_units


@dataclass(frozen=True)
class _Terms:
    """A candidate's rule against one cart, in minor units: what the search evaluates thousands of times."""

    candidate: Candidate
    lines: tuple[int, ...]  # eligible positions (none: not applicable, as free shipping on an order without)
    quantity: int  # eligible items
    min_spend: int
    order_cap: int
    percent: float | None  # the rate of a percentage (0.15), None for a fixed amount: for the search's bounds only
    # compute_discount in whole units (None: a rule it can't follow exactly so, priced by compute_discount itself):
    # a percentage in hundredths of a percent and its cap in units; a fixed amount in units.
    hundredths: int | None = None
    cap_units: int | None = None
    fixed_units: int | None = None
    benefit: Benefit | None = None  # tiers, free shipping, buy N get M (kinds.py); None: an amount or percentage

    @classmethod
    def of(cls, cart: Cart, candidate: Candidate) -> _Terms:
        rule = candidate.rule
        lines = eligible_lines(cart, rule)
        if rule.discount_type == FREE_SHIPPING and not cart.priced[-1]:
            lines = ()  # nothing to take off: not applicable
        cap = _NO_CAP if rule.order_cap is None else _to_units(rule.order_cap, cart.currency)
        hundredths = cap_units = fixed_units = None
        unit = minor_unit(cart.currency)
        benefit = benefit_of(cart, rule, lines)
        min_spend = rule.min_spend if rule.discount_type != TIERS else max(rule.min_spend, rule.tiers[0].threshold)
        if benefit is None and rule.discount_type == PERCENT:
            scaled = rule.discount_value * 100
            if scaled == scaled.to_integral_value():
                hundredths = int(scaled)
                cap_units = None if rule.max_discount is None else _to_units(
                    rule.max_discount.quantize(unit, rounding=ROUND_HALF_UP), cart.currency)
        elif benefit is None:
            fixed_units = _to_units(rule.discount_value.quantize(unit, rounding=ROUND_HALF_UP), cart.currency)
        return cls(
            candidate=candidate, lines=lines, quantity=sum(cart.lines[i].quantity for i in lines),
            min_spend=_to_units(min_spend, cart.currency), order_cap=cap,
            percent=float(rule.discount_value) / 100 if rule.discount_type == PERCENT else None,
            hundredths=hundredths, cap_units=cap_units, fixed_units=fixed_units, benefit=benefit,
        )

    def discount_units(self, eligible: int) -> int:
        """campaigns.money.compute_discount of the rule on `eligible` units, in units (the same figure: a
        percentage of an amount in units is a whole number of ten-thousandths of a unit, rounded half-up)."""
        if self.fixed_units is not None:
            return min(self.fixed_units, eligible)
        if self.hundredths is not None:
            discount = (eligible * self.hundredths + 5000) // 10000
            if self.cap_units is not None:
                discount = min(discount, self.cap_units)
            return max(min(discount, eligible), 0)
        rule = self.candidate.rule
        currency = rule.currency
        return _to_units(compute_discount(
            discount_type=rule.discount_type, value=rule.discount_value, cap=rule.max_discount,
            order_amount=_money(eligible, currency), currency=currency,
        ).amount, currency)

    def price(self, remaining: Sequence[int], total: int, cap: int, held: Sequence[Candidate]) -> tuple[str, int]:
        """Return (status, discount units) of this coupon after the coupons `held`, which took `total` units
        under the order cap `cap` and left `remaining` units on each line."""
        if not self.lines:
            return NOT_APPLICABLE, 0
        if self.quantity < self.candidate.rule.min_quantity:
            return MIN_QUANTITY_NOT_MET, 0
        if len(held) >= MAX_COUPONS_PER_ORDER or any(not combinable(self.candidate, other) for other in held):
            return NOT_COMBINABLE, 0
        return self.after(remaining, total, cap)

    def after(self, remaining: Sequence[int], total: int, cap: int) -> tuple[str, int]:
        """The checks that depend on what the coupons before took: the order cap, the minimum spend."""
        cap = min(cap, self.order_cap)
        if total >= cap:
            return NOT_COMBINABLE, 0
        eligible = sum(remaining[i] for i in self.lines)
        if eligible < self.min_spend:
            return MIN_SPEND_NOT_MET, 0
        if self.benefit is not None:
            return OK, min(self.benefit.units(eligible, remaining), cap - total)
        return OK, min(self.discount_units(eligible), cap - total)

    def split(self, units: int, remaining: Sequence[int]) -> list[tuple[int, int]]:
        """Return where this coupon's `units` go: (position in the cart's priced amounts, share), one for each
        eligible line (its share, maybe 0), or the shipping's alone for free shipping (shares.py, kinds.py)."""
        if self.benefit is not None:
            return self.benefit.split(units, self.lines, remaining)
        return list(zip(self.lines, _allocate(units, [remaining[i] for i in self.lines]), strict=True))
