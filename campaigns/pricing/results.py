"""What pricing answers: a coupon's status (OK or the slug refusing it), each coupon's discount and its line
shares, an order's totals, the best set, a cart's validation; and `as_json`, their form in the contract's JSON
(amounts as decimal strings such as "350.00")."""
from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from core.codes import SLUGS, Code

from ..money import money_text
from .rules import FREE_SHIPPING, Candidate

OK = "ok"
# The refusals' slugs, the registry's (core.errors): a use answers each with its code (coupons.services.order).
NOT_COMBINABLE = SLUGS[Code.NOT_COMBINABLE]
NOT_APPLICABLE = SLUGS[Code.NOT_APPLICABLE]
MIN_QUANTITY_NOT_MET = SLUGS[Code.MIN_QUANTITY_NOT_MET]
MIN_SPEND_NOT_MET = SLUGS[Code.MIN_SPEND_NOT_MET]


@dataclass(frozen=True)
class LineShare:
    """A line's share of one coupon's discount. `index` is the line's position in the cart."""

    index: int
    sku: str
    discount: Decimal


@dataclass(frozen=True)
class CouponPricing:
    """One coupon on a cart: `status` OK or the slug refusing it; `discount` (0 when refused); `lines` the
    eligible lines' shares, in cart order (empty when refused), and `shipping` the share taken off the shipping
    (free shipping's whole discount, its lines then empty; 0 for every other kind): together they sum to
    `discount`."""

    candidate: Candidate
    status: str
    discount: Decimal
    lines: tuple[LineShare, ...] = ()
    shipping: Decimal = Decimal(0)

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
    their status and no discount); `discount` is the total of those applied (`shipping_discount` of it off the
    shipping), `payable` = `amount` + `shipping` - `discount`."""

    currency: str
    coupons: tuple[CouponPricing, ...]
    amount: Decimal
    discount: Decimal
    payable: Decimal
    lines: tuple[LineTotal, ...]
    shipping: Decimal = Decimal(0)
    shipping_discount: Decimal = Decimal(0)

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



def as_json(result: CouponPricing | OrderPricing | BestCombination | CartValidation) -> dict[str, Any]:
    """Return the contract's JSON form of a result (amounts as decimal strings such as "350.00")."""
    if isinstance(result, CouponPricing):
        currency = result.candidate.rule.currency
        answer = {
            "code": result.code, "applicable": result.applicable, "status": result.status,
            "discount": money_text(result.discount, currency),
            "lines": [{"sku": share.sku, "discount": money_text(share.discount, currency)} for share in result.lines],
        }
        if result.candidate.rule.discount_type == FREE_SHIPPING:  # its share, off the shipping (lines: none)
            answer["shipping"] = money_text(result.shipping, currency)
        return answer
    if isinstance(result, BestCombination):
        pricing = result.pricing
        return {
            "codes": list(pricing.codes), "discount": money_text(pricing.discount, pricing.currency),
            "payable": money_text(pricing.payable, pricing.currency),
        }
    if isinstance(result, OrderPricing):
        return {
            "codes": list(result.codes), "amount": money_text(result.amount, result.currency),
            **({"shipping": money_text(result.shipping, result.currency)} if result.shipping else {}),
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

