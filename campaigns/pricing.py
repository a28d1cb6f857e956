"""What a set of coupons is worth for a cart: scope, conditions, stacking, per-line shares, the best combination.

This is the one place that prices coupons on a cart (issue 20): validate, reserve and redeem call it, nothing
else computes a cart discount. It is pure: no database, no Redis, no Django model. Its inputs are plain frozen
dataclasses (a `Cart` of `CartLine`s, `Candidate` coupons each carrying its campaign's `CouponRule`); its
outputs are frozen dataclasses of `Decimal` amounts in the currency's minor unit, which `as_json` turns into
the contract's JSON (decimal strings such as "350.00").

The rules, in the order they are checked for one coupon (`price_coupon`):

1. Scope. A line is *eligible* for a rule when it is included (no include list at all means every line; with
   include lists, its category is in `include_categories` or its SKU in `include_skus`) and not excluded (its
   category in `exclude_categories` or its SKU in `exclude_skus`): an exclude always wins. A rule in another
   currency than the cart's, or with no eligible line: `not_applicable` (code 20).
2. Quantity. Fewer eligible items (the sum of the eligible lines' quantities) than `min_quantity`:
   `min_quantity_not_met` (code 21).
3. Combination, against the coupons already on the order (`before`): `not_combinable` (code 19) when the
   order already holds MAX_COUPONS_PER_ORDER coupons, when `combinable()` refuses the pair with any of them
   (exclusive coupons combine with nothing; at most one coupon per campaign; `combinable_with` lists must
   accept each other), or when the order's cap is already reached (see 6).
4. Minimum spend, judged on what is still payable on the eligible lines after the coupons applied before this
   one (never on the undiscounted cart, never on lines out of scope: the trackers of Saleor and django-oscar
   have bugs from checking it against the undiscounted price): under `min_spend`: `min_spend_not_met` (12).
5. The discount: `campaigns.money.compute_discount` of the rule on that same still-payable eligible amount (a
   percentage of it, half-up, capped by `max_discount`; or the fixed amount), so it is never more than what
   is still payable on the eligible lines and never negative. A 40% coupon then a 70% one leave 18% to pay,
   never a free order (only a 100% coupon, or fixed amounts that cover the lines, make lines free).
6. The order's cap: `order_cap` bounds the total discount of all the order's coupons together; with several
   coupons the smallest cap among them holds. A coupon's discount is cut to what the cap leaves; when the
   coupons before it already reach the cap it is refused (`not_combinable`): so the order's total never
   exceeds any of its coupons' caps.
7. Shares: the discount is split over the eligible lines in proportion to what is still payable on each, by
   the largest remainder method in minor units: each line gets the floor of its exact share, and the units
   left over go one each to the lines with the largest remainders (ties: the line with more still payable,
   then the earlier line). The shares sum to the discount exactly, and no line is ever discounted below zero.

Stacking order. Coupons are applied one after the other, each on what the ones before it left. An order
built coupon by coupon (reserve, redeem) applies them in the order they arrived, each new one after those
already held (`price_coupon(..., before=...)`), so releasing one leaves the others' discounts as they were.
A set priced at once (`best_combination`, `price_stack`) applies in the canonical order `stacking_key`: fixed
amounts first, then percentages on the remainder (the merchant's convention: a percentage is of what the
shopper still pays), ties by campaign id and code. `best.codes` are in that order, so reserving them in that
order reproduces `best.discount` exactly.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from .money import MINOR_UNITS, compute_discount, minor_unit, money_text

# The most coupons one order may carry. Five is what the shops we copy allow in practice (Voucherify's
# default stack holds up to 5 redeemables per category, mall and Taobao one per kind); it also bounds the
# best-combination search to subsets of at most 5 of the candidates.
MAX_COUPONS_PER_ORDER = 5
# How many single-coupon evaluations best_combination may make (each ~3 us) before it stops with the best
# set found so far (`exact=False`). Every subset of at most 5 of 12 candidates takes under 20,000, so the
# answer is always exact for 12 usable campaigns or fewer, and in practice for many more (the bound prunes).
BEST_SEARCH_BUDGET = 20_000
# The budget POST /carts/validate searches with: ~10-20 ms for 50 coupons on 20 lines where BEST_SEARCH_BUDGET
# takes up to 65 ms; on the 18 seeded scenarios of bench/pricing_bench.py (seeds 20-25) it found the exact
# optimum's discount every time, stopped early in 12 of them (`exact=False`). reserve follows best.codes as given.
VALIDATE_SEARCH_BUDGET = 2_000
# A line's quantity, at most: keeps every amount far inside Decimal's 28 digits.
MAX_LINE_QUANTITY = 1_000_000

OK = "ok"
NOT_COMBINABLE = "not_combinable"  # code 19
NOT_APPLICABLE = "not_applicable"  # code 20
MIN_QUANTITY_NOT_MET = "min_quantity_not_met"  # code 21
MIN_SPEND_NOT_MET = "min_spend_not_met"  # code 12
DISCOUNT_TYPES = ("fixed", "percent")


class InvalidCart(ValueError):
    """A cart or a rule that breaks the preconditions below; the message says which."""


@dataclass(frozen=True)
class CartLine:
    """One line of a cart: `quantity` (1..MAX_LINE_QUANTITY) items of `sku` at `unit_price` (> 0, at most the
    currency's decimals) each; `category` None when the storefront sends none."""

    sku: str
    quantity: int
    unit_price: Decimal
    category: str | None = None

    @property
    def amount(self) -> Decimal:
        return self.quantity * self.unit_price


@dataclass(frozen=True)
class Cart:
    """A cart in one currency. Lines are identified by their position (two lines may share a SKU)."""

    currency: str
    lines: tuple[CartLine, ...]
    units: tuple[int, ...] = field(init=False, repr=False, compare=False)  # each line's amount in minor units

    def __post_init__(self) -> None:
        if self.currency not in MINOR_UNITS:
            raise InvalidCart(f"Unknown currency {self.currency!r}.")
        unit = minor_unit(self.currency)
        for line in self.lines:
            if type(line.quantity) is not int or not 1 <= line.quantity <= MAX_LINE_QUANTITY:
                raise InvalidCart(f"A line's quantity is a whole number from 1 to {MAX_LINE_QUANTITY}.")
            price = line.unit_price
            if not isinstance(price, Decimal) or not price.is_finite() or price <= 0 or price != price.quantize(unit):
                raise InvalidCart(f"A line's unit price is a positive Decimal of at most the {self.currency} decimals.")
        object.__setattr__(self, "units", tuple(_to_units(line.amount, self.currency) for line in self.lines))

    @property
    def amount(self) -> Decimal:
        return _money(sum(self.units), self.currency)


@dataclass(frozen=True)
class CouponRule:
    """A campaign's coupon rule, as pricing needs it (the Campaign fields of the same names).

    discount_type 'fixed' (discount_value off) or 'percent' (discount_value % off, at most 100, capped by
    max_discount); min_spend judged on the eligible lines (0: none); include_* / exclude_* the scope (empty
    include lists: every line; an exclude wins); min_quantity eligible items (0: none); exclusive: combines with
    nothing; combinable_with: the campaign ids this one may share an order with (empty: any non-exclusive
    coupon); order_cap: the most all the order's coupons together may take off (None: no cap).
    """

    discount_type: str
    discount_value: Decimal
    currency: str
    max_discount: Decimal | None = None
    min_spend: Decimal = Decimal(0)
    include_categories: frozenset[str] = frozenset()
    exclude_categories: frozenset[str] = frozenset()
    include_skus: frozenset[str] = frozenset()
    exclude_skus: frozenset[str] = frozenset()
    min_quantity: int = 0
    exclusive: bool = False
    combinable_with: frozenset[int] = frozenset()
    order_cap: Decimal | None = None

    def __post_init__(self) -> None:
        if self.currency not in MINOR_UNITS:
            raise InvalidCart(f"Unknown currency {self.currency!r}.")
        if self.discount_type not in DISCOUNT_TYPES:
            raise InvalidCart("discount_type is 'fixed' or 'percent'.")
        if not self.discount_value > 0 or (self.discount_type == "percent" and self.discount_value > 100):
            raise InvalidCart("discount_value is positive (a percentage at most 100).")
        for name in ("max_discount", "order_cap"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise InvalidCart(f"{name} is positive or None.")
        if self.min_spend < 0 or self.min_quantity < 0:
            raise InvalidCart("min_spend and min_quantity are not negative.")

    def covers(self, line: CartLine) -> bool:
        """Return whether `line` is in this rule's scope (eligible)."""
        if line.sku in self.exclude_skus or (line.category is not None and line.category in self.exclude_categories):
            return False
        if not self.include_skus and not self.include_categories:
            return True
        return line.sku in self.include_skus or (line.category is not None and line.category in self.include_categories)


@dataclass(frozen=True)
class Candidate:
    """A coupon the shopper could use: its code (a held coupon's or a typed one), its campaign and rule."""

    code: str
    campaign_id: int
    rule: CouponRule


@dataclass(frozen=True)
class LineShare:
    """A line's share of one coupon's discount. `index` is the line's position in the cart."""

    index: int
    sku: str
    discount: Decimal


@dataclass(frozen=True)
class CouponPricing:
    """One coupon on a cart: `status` OK or the slug refusing it; `discount` (0 when refused); `lines` the
    eligible lines' shares, in cart order (empty when refused), summing to `discount`."""

    candidate: Candidate
    status: str
    discount: Decimal
    lines: tuple[LineShare, ...] = ()

    @property
    def applicable(self) -> bool:
        return self.status == OK

    @property
    def code(self) -> str:
        return self.candidate.code


@dataclass(frozen=True)
class LineTotal:
    """A line after all the order's coupons: its amount, the discount on it, what is left to pay."""

    index: int
    sku: str
    amount: Decimal
    discount: Decimal
    payable: Decimal


@dataclass(frozen=True)
class OrderPricing:
    """Coupons applied in order to one cart. `coupons` has every coupon tried, refused ones included (with
    their status and no discount); `discount` is the total of those applied, `payable` = `amount` - `discount`."""

    currency: str
    coupons: tuple[CouponPricing, ...]
    amount: Decimal
    discount: Decimal
    payable: Decimal
    lines: tuple[LineTotal, ...]

    @property
    def applied(self) -> tuple[CouponPricing, ...]:
        return tuple(result for result in self.coupons if result.applicable)

    @property
    def codes(self) -> tuple[str, ...]:
        return tuple(result.code for result in self.applied)


@dataclass(frozen=True)
class BestCombination:
    """The allowed set of coupons that saves the most (`pricing`, in stacking order). `exact` is False only when
    the search ran out of BEST_SEARCH_BUDGET: then it is the best set found, at least as good as every single
    coupon. `evaluations`: how many single-coupon evaluations the search made (for benchmarks)."""

    pricing: OrderPricing
    exact: bool
    evaluations: int = 0

    @property
    def codes(self) -> tuple[str, ...]:
        return self.pricing.codes

    @property
    def discount(self) -> Decimal:
        return self.pricing.discount

    @property
    def payable(self) -> Decimal:
        return self.pricing.payable


@dataclass(frozen=True)
class CartValidation:
    """What POST /carts/validate answers: each candidate alone on the cart (input order) and the best set."""

    coupons: tuple[CouponPricing, ...]
    best: BestCombination


# The SKU of the one line of an order known by its amount alone (whole_order_cart): no scope lists it.
WHOLE_ORDER_SKU = ""


def whole_order_cart(amount: Decimal, currency: str) -> Cart:
    """Return the cart of an order sent without lines: one line of its whole amount (no category). A rule
    with a scope or a minimum quantity can't be judged on it (callers refuse such a rule as not applicable)."""
    return Cart(currency=currency, lines=(CartLine(sku=WHOLE_ORDER_SKU, quantity=1, unit_price=amount),))


def eligible_lines(cart: Cart, rule: CouponRule) -> tuple[int, ...]:
    """Return the positions of the cart's lines in the rule's scope (none when the currencies differ)."""
    if rule.currency != cart.currency:
        return ()
    return tuple(index for index, line in enumerate(cart.lines) if rule.covers(line))


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


def stacking_key(candidate: Candidate) -> tuple[int, int, str]:
    """Return the canonical stacking position of a coupon: fixed amounts first, then percentages."""
    return (DISCOUNT_TYPES.index(candidate.rule.discount_type), candidate.campaign_id, candidate.code)


def canonical_order(candidates: Iterable[Candidate]) -> tuple[Candidate, ...]:
    return tuple(sorted(candidates, key=stacking_key))


def price_coupon(cart: Cart, candidate: Candidate, *, before: Sequence[CouponPricing] = ()) -> CouponPricing:
    """Return what `candidate` gives `cart` applied after the coupons `before` (in their order; refused ones
    count for nothing). `before` is what the order already holds or used, priced on this same cart (stored
    shares rebuilt as CouponPricing will do)."""
    remaining = list(cart.units)
    held: list[Candidate] = []
    total = 0
    for result in before:
        if result.applicable:
            held.append(result.candidate)
            for share in result.lines:
                remaining[share.index] -= _to_units(share.discount, cart.currency)
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


def best_combination(cart: Cart, candidates: Sequence[Candidate], *, budget: int = BEST_SEARCH_BUDGET
                     ) -> BestCombination:
    """Return the allowed set of candidates (applied in stacking order) that saves the most; ties: fewer
    coupons, then the earlier set in stacking order. See _best for the search and what it guarantees."""
    return _best(cart, candidates, [price_coupon(cart, candidate) for candidate in candidates], budget)


def validate_cart(cart: Cart, candidates: Sequence[Candidate], *, budget: int = BEST_SEARCH_BUDGET
                  ) -> CartValidation:
    """Return each candidate alone on the cart, and the best combination of them (searched within `budget`
    single-coupon evaluations)."""
    alone = [price_coupon(cart, candidate) for candidate in candidates]
    return CartValidation(coupons=tuple(alone), best=_best(cart, candidates, alone, budget))


def as_json(result: CouponPricing | OrderPricing | BestCombination | CartValidation) -> dict[str, Any]:
    """Return the contract's JSON form of a result (amounts as decimal strings such as "350.00")."""
    if isinstance(result, CouponPricing):
        currency = result.candidate.rule.currency
        return {
            "code": result.code, "applicable": result.applicable, "status": result.status,
            "discount": money_text(result.discount, currency),
            "lines": [{"sku": share.sku, "discount": money_text(share.discount, currency)} for share in result.lines],
        }
    if isinstance(result, BestCombination):
        pricing = result.pricing
        return {
            "codes": list(pricing.codes), "discount": money_text(pricing.discount, pricing.currency),
            "payable": money_text(pricing.payable, pricing.currency),
        }
    if isinstance(result, OrderPricing):
        return {
            "codes": list(result.codes), "amount": money_text(result.amount, result.currency),
            "discount": money_text(result.discount, result.currency),
            "payable": money_text(result.payable, result.currency),
            "coupons": [as_json(coupon) for coupon in result.coupons],
            "lines": [
                {"sku": line.sku, "amount": money_text(line.amount, result.currency),
                 "discount": money_text(line.discount, result.currency),
                 "payable": money_text(line.payable, result.currency)}
                for line in result.lines
            ],
        }
    return {"coupons": [as_json(coupon) for coupon in result.coupons], "best": as_json(result.best)}


# --- internals: integer minor units throughout, Decimal at the edges ---

_NO_CAP = 1 << 126  # an order cap no amount reaches


def _to_units(amount: Decimal, currency: str) -> int:
    return int(amount.scaleb(MINOR_UNITS[currency]))


def _money(units: int, currency: str) -> Decimal:
    return Decimal(units).scaleb(-MINOR_UNITS[currency])


def _cap_of(held: Iterable[Candidate], currency: str) -> int:
    caps = [_to_units(c.rule.order_cap, currency) for c in held if c.rule.order_cap is not None]
    return min(caps, default=_NO_CAP)


@dataclass(frozen=True)
class _Terms:
    """A candidate's rule against one cart, in minor units: what the search evaluates thousands of times."""

    candidate: Candidate
    lines: tuple[int, ...]  # eligible positions
    quantity: int  # eligible items
    min_spend: int
    order_cap: int
    percent: float | None  # the rate of a percentage (0.15), None for a fixed amount: for the search's bounds only
    # compute_discount in whole units (None: a rule it can't follow exactly so, priced by compute_discount itself):
    # a percentage in hundredths of a percent and its cap in units; a fixed amount in units.
    hundredths: int | None = None
    cap_units: int | None = None
    fixed_units: int | None = None

    @classmethod
    def of(cls, cart: Cart, candidate: Candidate) -> _Terms:
        rule = candidate.rule
        lines = eligible_lines(cart, rule)
        cap = _NO_CAP if rule.order_cap is None else _to_units(rule.order_cap, cart.currency)
        hundredths = cap_units = fixed_units = None
        unit = minor_unit(cart.currency)
        if rule.discount_type == "percent":
            scaled = rule.discount_value * 100
            if scaled == scaled.to_integral_value():
                hundredths = int(scaled)
                cap_units = None if rule.max_discount is None else _to_units(
                    rule.max_discount.quantize(unit, rounding=ROUND_HALF_UP), cart.currency)
        else:
            fixed_units = _to_units(rule.discount_value.quantize(unit, rounding=ROUND_HALF_UP), cart.currency)
        return cls(
            candidate=candidate, lines=lines, quantity=sum(cart.lines[i].quantity for i in lines),
            min_spend=_to_units(rule.min_spend, cart.currency), order_cap=cap,
            percent=float(rule.discount_value) / 100 if rule.discount_type == "percent" else None,
            hundredths=hundredths, cap_units=cap_units, fixed_units=fixed_units,
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
        return OK, min(self.discount_units(eligible), cap - total)


def _line_rates(terms: Sequence[_Terms]) -> dict[int, list[tuple[float, int]]]:
    """Return, for each line some percentage covers, the (rate, position) of those percentages, largest first:
    sorted once per search, filtered at each node (_percent_masses)."""
    rates: dict[int, list[tuple[float, int]]] = {}
    for k, term in enumerate(terms):
        if term.percent is not None:
            for index in term.lines:
                rates.setdefault(index, []).append((term.percent, k))
    for rated in rates.values():
        rated.sort(key=lambda pair: (-pair[0], pair[1]))
    return rates


def _percent_masses(children: Sequence[tuple[int, int]], line_rates: dict[int, list[tuple[float, int]]],
                    remaining: Sequence[int], most: int) -> list[int]:
    """Return, for n = 0..most, the most that n of the percentage `children` can take together from `remaining`.

    Percentages multiply: on a line, percentages p1..pn (capped or not, after anything) leave at least
    (1-p1)...(1-pn) of what it had, less the rounding (half-up, then the largest remainder: under 2 units per
    coupon and line). So n of them take at most, over the lines, what the line has times 1 - the product of
    (1 - p) over the n largest percentages covering it, plus 2 units per coupon and line.
    """
    present = {k for _, k in children}
    masses = [0.0] * (most + 1)
    covered = 0  # lines covered by at least one of the children
    for index, rated in line_rates.items():
        left = remaining[index]
        kept = 1.0
        n = 0
        for rate, k in rated:
            if k in present:
                n += 1
                kept *= 1 - rate
                masses[n] += left * (1 - kept)
                if n == most:
                    break
        if n:
            covered += 1
            for more in range(n + 1, most + 1):  # fewer percentages cover the line than n: they take no more
                masses[more] += left * (1 - kept)
    slack = 2 * covered
    return [_ceil_bound(mass) + n * slack for n, mass in enumerate(masses)]


def _ceil_bound(value: float) -> int:
    """Return a bound computed in floats as whole units, rounded up past any float rounding: amounts stay far
    under 2**53 units and a product of at most 6 rates errs by under 1e-15 of it, so 1e-9 of it plus one unit
    more keeps it a bound (only ever a little looser than the exact one: the search prunes as before)."""
    return math.ceil(value * (1 + 1e-9)) + 1


def _subtree_bound(
    children: Sequence[tuple[int, int]], child: tuple[int, int], compatible: int, slots: int,
    terms: Sequence[_Terms], masses: Sequence[int], left: int, rates: Sequence[float], slack: int,
) -> int:
    """Return the most a set of `child` and at most `slots` of its followers can take (from what the node's
    coupons left): followers are `children` later than it and compatible with it, each worth at most its value
    here (`children`, value descending: it only sees less later). A set of k fixed amounts and n percentages
    takes at most the k largest fixed values plus the lesser of the n largest percentage values and
    `masses[n]` (_percent_masses), the child among them; the k that gives the most is the bound. A percentage
    child also takes exactly its value and leaves `left` units to pay, of which n percentages take at most
    1 - the product of (1 - p) over the n largest `rates` of the node's children, plus `slack` each."""
    units, j = child
    followers = [(u, k) for u, k in children if k > j and compatible >> k & 1]
    fixed = [u for u, k in followers if terms[k].percent is None]
    percent = [u for u, k in followers if terms[k].percent is not None]
    most = 0
    for k in range(min(slots, len(fixed)) + 1):
        n = min(slots - k, len(percent))
        if terms[j].percent is None:
            part = units + min(sum(percent[:n]), masses[n])
        else:
            kept = 1.0
            for rate in rates[:n]:
                kept *= 1 - rate
            after = _ceil_bound((left - units) * (1 - kept)) + n * slack
            part = min(units + sum(percent[:n]), masses[n + 1], units + after)
        most = max(most, sum(fixed[:k]) + part)
    return most


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


def _best(cart: Cart, candidates: Sequence[Candidate], alone: Sequence[CouponPricing],
          budget: int = BEST_SEARCH_BUDGET) -> BestCombination:
    """Search the allowed sets for the one that saves the most.

    What it prunes, each provably without losing the optimum:
    - a candidate refused alone, or worth nothing alone, is left out: on an order with others its eligible
      lines have at most as much left to pay, so its discount is at most its discount alone (the discount is
      non-decreasing in the amount it applies to), and a coupon worth nothing only adds a coupon (and maybe a
      lower cap) to a set;
    - candidates of one campaign with the same rule are interchangeable (one per order): the first in stacking
      order stands for them;
    - sets are built in stacking order, so a set's first coupons are priced once and each node of the search
      extends a priced prefix: every candidate that could follow it is priced on what the prefix left (its
      exact value as the next coupon), and since later coupons only see less to pay and a lower cap, that value
      bounds what it can add further down (_subtree_bound, which also knows that percentages multiply). A
      subtree whose bound cannot beat the best set found is not explored. Children are explored best first,
      so the first descent is a greedy one and the best set found is good early.
    Exclusive coupons are compatible with nothing, so they are compared as single coupons. The result is the
    optimum over every allowed set of at most MAX_COUPONS_PER_ORDER coupons unless the search spends
    BEST_SEARCH_BUDGET evaluations (`exact=False`: the best found, never worse than the best single coupon,
    since every single coupon is evaluated first).
    """
    chosen: dict[tuple[int, CouponRule], Candidate] = {}
    for candidate, result in zip(candidates, alone, strict=True):
        if result.applicable and result.discount > 0:
            key = (candidate.campaign_id, candidate.rule)
            if key not in chosen or stacking_key(candidate) < stacking_key(chosen[key]):
                chosen[key] = candidate
    order = canonical_order(chosen.values())
    terms = [_Terms.of(cart, candidate) for candidate in order]
    line_rates = _line_rates(terms)
    count = len(order)
    compatible = [
        sum(1 << j for j in range(count) if j != i and combinable(order[i], order[j])) for i in range(count)
    ]
    best: tuple[int, tuple[int, ...]] = (0, ())  # (total units, positions in `order`)
    evaluations = 0
    exact = True
    lines_total = line_slack = 0

    def better(total: int, subset: tuple[int, ...]) -> bool:
        best_total, best_subset = best
        return (-total, len(subset), subset) < (-best_total, len(best_subset), best_subset)

    def explore(subset: tuple[int, ...], remaining: list[int], total: int, cap: int, allowed: int) -> None:
        nonlocal best, evaluations, exact
        start = subset[-1] + 1 if subset else 0
        children: list[tuple[int, int]] = []  # (discount units, position)
        for j in range(start, count):
            if allowed >> j & 1:
                status, units = terms[j].after(remaining, total, cap)
                evaluations += 1
                if status == OK and units > 0:
                    children.append((units, j))
        children.sort(key=lambda child: (-child[0], child[1]))
        for units, j in children:
            if better(total + units, (*subset, j)):
                best = (total + units, (*subset, j))
        slots = MAX_COUPONS_PER_ORDER - len(subset) - 1  # coupons a child's subtree may still add
        if slots == 0:
            return
        masses = _percent_masses(children, line_rates, remaining, slots + 1)
        rates = sorted((r for _, k in children if (r := terms[k].percent) is not None), reverse=True)
        for units, j in children:
            cap_j = min(cap, terms[j].order_cap)
            most = _subtree_bound(
                children, (units, j), compatible[j], slots, terms, masses, lines_total - total, rates, line_slack
            )
            bound = total + min(most, lines_total - total, cap_j - total)
            best_total, best_subset = best
            if bound < best_total or (bound == best_total and len(subset) + 2 > len(best_subset)):
                continue
            if evaluations >= budget:
                exact = False
                return
            after = list(remaining)
            for index, share in zip(terms[j].lines, _allocate(units, terms[j].lines, remaining), strict=True):
                after[index] -= share
            explore((*subset, j), after, total + units, cap_j, allowed & compatible[j])

    lines_total = sum(cart.units)
    line_slack = 2 * len(cart.units)  # the rounding of one percentage over all the lines (_percent_masses)
    explore((), list(cart.units), 0, _NO_CAP, (1 << count) - 1)
    pricing = price_coupons(cart, [order[j] for j in best[1]])
    return BestCombination(pricing=pricing, exact=exact, evaluations=evaluations)
