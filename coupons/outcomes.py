"""Business outcomes of using a coupon (HTTP 200 with a code and status slug, docs/api.md)."""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from core.errors import SLUGS, Code

UseCode = Code  # a coupon use answers with the business codes of the one registry (core/errors.py)


# Each refusal's detail; its slug is the registry's (core.errors.SLUGS), looked up once here.
_DETAILS = {
    UseCode.LIMIT_REACHED: "You have used this code as many times as a shopper may.",
    UseCode.SOLD_OUT: "This code has been used as many times as it may be.",
    UseCode.EXPIRED: "The coupon is past its validity.",
    UseCode.ALREADY_REDEEMED: "The coupon was used by another order.",
    UseCode.MIN_SPEND_NOT_MET: "The order amount is under the coupon's minimum spend.",
    UseCode.NOT_YET_VALID: "The coupon's validity starts later.",
    UseCode.REVOKED: "The coupon was cancelled or revoked.",
    UseCode.NOT_ELIGIBLE: "The coupon is for new shoppers only.",
    UseCode.ON_HOLD: "The coupon is held for another order awaiting payment.",
    UseCode.HOLD_LAPSED: "This order's hold lapsed before it was confirmed; reserve again.",
    UseCode.NOT_HELD: "The coupon is not held for this order; reserve it first.",
    UseCode.NOT_COMBINABLE: "The order already holds or used a coupon this one may not be combined with.",
    UseCode.NOT_APPLICABLE: "No line of the order is in the coupon's scope.",
    UseCode.MIN_QUANTITY_NOT_MET: "The order has fewer items in the coupon's scope than it requires.",
    UseCode.BUDGET_EXHAUSTED: "The campaign's budget has not enough left for this discount.",
    UseCode.GROUP_LIMIT_REACHED: "You hold as many coupons of this campaign's group as a shopper may.",
}
REFUSALS = {code: (SLUGS[code], detail) for code, detail in _DETAILS.items()}


@dataclass(frozen=True)
class UseOutcome:
    """What a reserve, confirm, redeem or release decided, ready to be sent as the 200 body."""

    code: int
    status: str
    detail: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"code": self.code, "status": self.status}
        if self.detail:
            body["detail"] = self.detail
        body.update(self.extra)
        return body


def refused(code: UseCode) -> UseOutcome:
    status, detail = REFUSALS[code]
    return UseOutcome(int(code), status, detail)


def done(status: str, **extra: Any) -> UseOutcome:
    return UseOutcome(0, status, extra={k: jsonable(v) for k, v in extra.items()})


def jsonable(value: Any) -> Any:
    """Return `value` as JSON can carry it: Decimal as its text, datetime as ISO 8601."""
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, datetime):
        return value.isoformat()
    return value
