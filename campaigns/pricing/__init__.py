"""What a set of coupons is worth for a cart: scope, conditions, stacking, per-line shares, the best combination.

This is the one place that prices coupons on a cart (issue 20): validate, reserve and redeem call it, nothing
else computes a cart discount. It is pure: no database, no Redis, no Django model. Its inputs are plain frozen
dataclasses (a `Cart` of `CartLine`s, `Candidate` coupons each carrying its campaign's `CouponRule`); its
outputs are frozen dataclasses of `Decimal` amounts in the currency's minor unit, which `as_json` turns into
the contract's JSON (decimal strings such as "350.00").

A rule's benefit (its `discount_type`) is an amount or a percentage off (below), tiers (满减), free shipping or
buy N get M (kinds.py: what each takes off, and where its shares go). A cart may carry `shipping`, payable beside
its lines; only free shipping takes it off (its share is the coupon's `shipping`, on no line).

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
A set priced at once (`best_combination`, `price_stack`) applies in the canonical order `stacking_key`: buy N
get M, tiers, fixed amounts, then percentages on the remainder (the merchant's convention: a percentage is of what
the shopper still pays), free shipping last; ties by campaign id and code. `best.codes` are in that order, so
reserving them in that order reproduces `best.discount` exactly.

    rules.py       the inputs: a cart and its lines, a coupon's rule and its scope, a candidate coupon
    results.py     the outputs: a coupon's status and line shares, an order's totals, the best set; as_json
    units.py       amounts as whole minor units (Decimal only at the edges), a split by largest remainder
    stacking.py    which coupons share an order (combinable), the canonical stacking order, the order cap held
    benefits.py    one coupon against one cart in minor units: the checks 1-6 above and its discount
    kinds.py       tiers, free shipping, buy N get M: what each takes off and how it splits
    shares.py      a discount split over its lines (7 above), an order's lines after all its coupons
    applicator.py  coupons applied one after the other: price_coupon, price_coupons, price_stack
    best.py        the allowed set that saves the most, searched within a budget: best_combination, validate_cart

The names below are the package's face, the same as when it was one module: `from campaigns.pricing import X`
and `pricing.X` read them.
"""

from .applicator import price_coupon, price_coupons, price_stack
from .best import BEST_SEARCH_BUDGET, VALIDATE_SEARCH_BUDGET, best_combination, validate_cart
from .results import (
    MIN_QUANTITY_NOT_MET,
    MIN_SPEND_NOT_MET,
    NOT_APPLICABLE,
    NOT_COMBINABLE,
    OK,
    BestCombination,
    CartValidation,
    CouponPricing,
    LineShare,
    LineTotal,
    OrderPricing,
    as_json,
)
from .rules import (
    BUY_GET,
    DISCOUNT_TYPES,
    FIXED,
    FREE_SHIPPING,
    MAX_LINE_QUANTITY,
    MAX_TIERS,
    PERCENT,
    TIERS,
    WHOLE_ORDER_SKU,
    Candidate,
    Cart,
    CartLine,
    CouponRule,
    InvalidCart,
    Tier,
    eligible_lines,
    tiers_problem,
    whole_order_cart,
)
from .stacking import MAX_COUPONS_PER_ORDER, STACKING_ORDER, canonical_order, combinable, stacking_key

__all__ = [
    "BUY_GET", "FIXED", "FREE_SHIPPING", "MAX_TIERS", "PERCENT", "STACKING_ORDER", "TIERS", "Tier", "tiers_problem",
    "BEST_SEARCH_BUDGET", "DISCOUNT_TYPES", "MAX_COUPONS_PER_ORDER", "MAX_LINE_QUANTITY", "MIN_QUANTITY_NOT_MET",
    "MIN_SPEND_NOT_MET", "NOT_APPLICABLE", "NOT_COMBINABLE", "OK", "VALIDATE_SEARCH_BUDGET", "WHOLE_ORDER_SKU",
    "BestCombination", "Candidate", "Cart", "CartLine", "CartValidation", "CouponPricing", "CouponRule", "InvalidCart",
    "LineShare", "LineTotal", "OrderPricing", "as_json", "best_combination", "canonical_order", "combinable",
    "eligible_lines", "price_coupon", "price_coupons", "price_stack", "stacking_key", "validate_cart",
    "whole_order_cart",
]
