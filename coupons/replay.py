"""The event log is the truth: fold a coupon's events into the state its row must show."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.db.models import QuerySet

from .models import Coupon, CouponEvent, CouponEventType, CouponStatus

# Event type -> the status it leaves the coupon in (None: the status is unchanged, e.g. 'restocked').
_STATUS_AFTER: dict[str, str | None] = {
    CouponEventType.ISSUED: CouponStatus.ACTIVE,
    CouponEventType.RESERVED: CouponStatus.HELD,
    CouponEventType.REDEEMED: CouponStatus.REDEEMED,
    CouponEventType.RELEASED: CouponStatus.ACTIVE,
    CouponEventType.HOLD_LAPSED: CouponStatus.ACTIVE,
    CouponEventType.EXPIRED: CouponStatus.EXPIRED,
    CouponEventType.REVOKED: CouponStatus.REVOKED,
    CouponEventType.RESTOCKED: None,
    CouponEventType.EXTENDED: None,
}


@dataclass(frozen=True)
class Folded:
    status: str
    order_id: str | None
    version: int
    hold_until: str | None = None  # ISO 8601, while held


def fold(events: Iterable[CouponEvent]) -> Folded | None:
    """Return the state the events lead to (in id order), or None for a coupon without 'issued'.

    Id order is the order the changes happened: a coupon's events are written under its row lock.
    """
    status: str | None = None
    order_id: str | None = None
    hold_until: str | None = None
    version = 0
    for event in events:
        if event.type == CouponEventType.COMPENSATED:
            # A repair names the state the coupon was set to: it is the new starting point.
            status = event.data.get("status", status)
            order_id = event.data.get("order_id")
            hold_until = event.data.get("hold_until")
            version = int(event.data.get("version", version))
            continue
        after = _STATUS_AFTER.get(event.type)
        if after is None:
            continue
        if event.type == CouponEventType.ISSUED:
            version = 1
        else:
            version += 1
        status = after
        order_id = event.data.get("order_id") if after in (CouponStatus.HELD, CouponStatus.REDEEMED) else None
        hold_until = event.data.get("hold_until") if after == CouponStatus.HELD else None
    if status is None:
        return None
    return Folded(status=str(status), order_id=order_id, version=version, hold_until=hold_until)


@dataclass(frozen=True)
class Disagreement:
    coupon_id: int
    code: str
    row: dict[str, Any]
    events: dict[str, Any] | None


def disagreements(
    coupons: QuerySet[Coupon], *, chunk: int = 2000, after_id: int = 0, limit: int | None = None
) -> Iterable[Disagreement]:
    """Yield every coupon whose row disagrees with the fold of its events (keyset pages, bounded memory).

    With `limit`, look at no more than that many coupons with ids above `after_id`.
    """
    last_id = after_id
    seen = 0
    while limit is None or seen < limit:
        if limit is not None:
            chunk = min(chunk, limit - seen)
        page = list(coupons.filter(pk__gt=last_id).order_by("pk").values("pk", "code", "status", "order_id",
                                                                            "version")[:chunk])
        if not page:
            return
        last_id = page[-1]["pk"]
        seen += len(page)
        events: dict[int, list[CouponEvent]] = {}
        for event in CouponEvent.objects.filter(coupon_id__in=[row["pk"] for row in page]).order_by(
            "coupon_id", "id"
        ):
            events.setdefault(event.coupon_id, []).append(event)
        for row in page:
            folded = fold(events.get(row["pk"], []))
            actual = {"status": row["status"], "order_id": row["order_id"], "version": row["version"]}
            expected = None if folded is None else {
                "status": folded.status, "order_id": folded.order_id, "version": folded.version}
            if actual != expected:
                yield Disagreement(row["pk"], row["code"], actual, expected)
