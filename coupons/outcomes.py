"""Business outcomes of using a coupon (HTTP 200 with a code and status slug, docs/api.md)."""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from core.errors import Code

UseCode = Code  # a coupon use answers with the business codes of the one registry (core/errors.py)


REFUSALS = {
    UseCode.LIMIT_REACHED: ("limit_reached", "You have used this code as many times as a shopper may."),
    UseCode.SOLD_OUT: ("sold_out", "This code has been used as many times as it may be."),
    UseCode.EXPIRED: ("expired", "The coupon is past its validity."),
    UseCode.ALREADY_REDEEMED: ("already_redeemed", "The coupon was used by another order."),
    UseCode.MIN_SPEND_NOT_MET: ("min_spend_not_met", "The order amount is under the coupon's minimum spend."),
    UseCode.NOT_YET_VALID: ("not_yet_valid", "The coupon's validity starts later."),
    UseCode.REVOKED: ("revoked", "The coupon was cancelled or revoked."),
    UseCode.NOT_ELIGIBLE: ("not_eligible", "The coupon is for new shoppers only."),
    UseCode.ON_HOLD: ("on_hold", "The coupon is held for another order awaiting payment."),
    UseCode.HOLD_LAPSED: ("hold_lapsed", "This order's hold lapsed before it was confirmed; reserve again."),
    UseCode.NOT_HELD: ("not_held", "The coupon is not held for this order; reserve it first."),
    UseCode.NOT_COMBINABLE: ("not_combinable", "The order already holds or used a coupon this one may not be "
                                               "combined with."),
    UseCode.NOT_APPLICABLE: ("not_applicable", "No line of the order is in the coupon's scope."),
    UseCode.MIN_QUANTITY_NOT_MET: ("min_quantity_not_met", "The order has fewer items in the coupon's scope than it "
                                                           "requires."),
}


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
