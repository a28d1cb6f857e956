"""The benefits beyond an amount or a percentage off (issue 38), as django-oscar's offer benefits are: what a
rule takes off given what is still payable (`units`), and how that splits over the cart (`split`). In minor
units, on the cart's `priced` amounts (its lines, then its shipping).

- Tiers (满减): the highest tier whose threshold the eligible amount reaches: its amount off, or its
  percentage of the eligible amount (half-up, as a plain percentage); capped by max_discount; never more than
  the eligible amount. Below the first threshold the rule is refused (min_spend_not_met: the first threshold
  is its minimum spend). Tiers go up (rules.tiers_problem), so the discount never falls as the amount grows.
  Its shares: as a plain discount's, over the eligible lines in proportion to what is still payable on each.
- Free shipping: the shipping still payable, capped by max_discount; all of it on the shipping, none on a
  line (an order without shipping: not_applicable).
- Buy N get M: of the eligible items, for every N + M the M cheapest are free: floor(items / (N + M)) x M
  items, the cheapest by unit price (ties: the earlier line), capped by max_discount. Each free item is worth
  its line's still payable amount over its quantity (its unit price when no coupon came before), rounded
  half-up per line; its shares go to the lines of the free items, in proportion to their worth (largest
  remainder, so a cap splits as a plain discount does).

Each benefit's discount is non-decreasing in what is still payable (the best-set search prunes with that: a
coupon after others is worth at most what it is worth alone) and never more than the amounts it takes from.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from decimal import ROUND_HALF_UP

from ..money import minor_unit
from .rules import BUY_GET, FREE_SHIPPING, TIERS, Cart, CouponRule
from .units import _allocate, _to_units


@dataclass(frozen=True)
class _TiersBenefit:
    steps: tuple[tuple[int, int, bool], ...]  # (threshold, off: units, or hundredths of a percent, percent?)
    cap: int | None

    def units(self, eligible: int, remaining: Sequence[int]) -> int:
        discount = 0
        for threshold, off, percent in reversed(self.steps):
            if eligible >= threshold:
                discount = (eligible * off + 5000) // 10000 if percent else off  # half-up, as a plain percentage
                break
        if self.cap is not None:
            discount = min(discount, self.cap)
        return min(discount, eligible)

    def split(self, units: int, lines: tuple[int, ...], remaining: Sequence[int]) -> list[tuple[int, int]]:
        return list(zip(lines, _allocate(units, [remaining[i] for i in lines]), strict=True))


@dataclass(frozen=True)
class _FreeShipping:
    shipping: int  # its position in the cart's priced amounts
    cap: int | None

    def units(self, eligible: int, remaining: Sequence[int]) -> int:
        left = remaining[self.shipping]
        return left if self.cap is None else min(left, self.cap)

    def split(self, units: int, lines: tuple[int, ...], remaining: Sequence[int]) -> list[tuple[int, int]]:
        return [(self.shipping, units)]


@dataclass(frozen=True)
class _BuyGet:
    free: tuple[tuple[int, int, int], ...]  # (line, free items, the line's quantity), in line order
    cap: int | None

    def worth(self, remaining: Sequence[int]) -> dict[int, int]:
        """Each line's free items' worth: its still payable amount x free / quantity, half-up."""
        return {index: (2 * remaining[index] * count + quantity) // (2 * quantity)
                for index, count, quantity in self.free}

    def units(self, eligible: int, remaining: Sequence[int]) -> int:
        total = sum(self.worth(remaining).values())
        return total if self.cap is None else min(total, self.cap)

    def split(self, units: int, lines: tuple[int, ...], remaining: Sequence[int]) -> list[tuple[int, int]]:
        worth = self.worth(remaining)
        return list(zip(lines, _allocate(units, [worth.get(i, 0) for i in lines]), strict=True))


Benefit = _TiersBenefit | _FreeShipping | _BuyGet
_KINDS = frozenset({TIERS, FREE_SHIPPING, BUY_GET})


def benefit_of(cart: Cart, rule: CouponRule, lines: tuple[int, ...]) -> Benefit | None:
    """The benefit of a rule of one of these kinds on `cart` (its eligible `lines`); None for a plain amount or
    percentage (benefits._Terms prices those itself)."""
    if rule.discount_type not in _KINDS:
        return None
    currency = cart.currency
    cap = None if rule.max_discount is None else _to_units(
        rule.max_discount.quantize(minor_unit(currency), rounding=ROUND_HALF_UP), currency)
    if rule.discount_type == TIERS:
        return _TiersBenefit(steps=tuple(
            (_to_units(tier.threshold, currency),
             int(tier.off * 100) if tier.percent else _to_units(tier.off, currency), tier.percent)
            for tier in rule.tiers), cap=cap)
    if rule.discount_type == FREE_SHIPPING:
        return _FreeShipping(shipping=cart.shipping_index, cap=cap)
    if rule.discount_type == BUY_GET:
        items = sum(cart.lines[i].quantity for i in lines)
        left = items // (rule.buy + rule.get) * rule.get
        free: dict[int, int] = {}
        for index in sorted(lines, key=lambda i: (cart.lines[i].unit_price, i)):
            if left == 0:
                break
            count = min(left, cart.lines[index].quantity)
            free[index] = count
            left -= count
        return _BuyGet(free=tuple((i, free[i], cart.lines[i].quantity) for i in sorted(free)), cap=cap)
    return None
