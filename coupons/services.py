"""Write use cases of coupons: reserve, confirm, redeem, release, revoke, and what time does to them.

Every change of a coupon is a conditional UPDATE (status and version in the WHERE clause) plus one
CouponEvent, in one transaction; a change that loses a race re-reads the coupon and decides again.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db import connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from campaigns.models import Audience
from core.errors import ApplicationError, NotFound, Unavailable
from core.locks import AdvisoryLock

from .codes import normalize_code
from .models import Coupon, CouponEvent, CouponEventType, CouponStatus
from .outcomes import UseCode, UseOutcome, done, jsonable, refused

MAX_ATTEMPTS = 5
HOLD_SECONDS_DEFAULT = 900
HOLD_SECONDS_MAX = 86_400


class CurrencyMismatch(ApplicationError):
    http_status = 400
    code = 400
    status = "invalid_request"


class Contention(Unavailable):
    """The coupon changed under us MAX_ATTEMPTS times in a row; nothing was changed by this request."""

    message = "The coupon is changing too fast; retry."


@dataclass(frozen=True)
class Order:
    """The order a coupon is used for: validated by the caller."""

    order_id: str
    amount: Decimal
    currency: str


def coupon_owned_by(*, code: str, user_id: str) -> Coupon:
    """Return the shopper's coupon; an unknown code and someone else's code are the same NotFound."""
    canonical = normalize_code(code)
    coupon = (
        Coupon.objects.select_related("campaign").filter(code=canonical, user_id=user_id).first()
        if canonical
        else None
    )
    if coupon is None:
        raise NotFound("No such coupon.")
    return coupon


def _transition(
    coupon: Coupon, *, to: str, event: str, source: str, data: dict[str, Any], guard: dict[str, Any] | None = None,
    **fields: Any,
) -> bool:
    """Move the coupon to `to` if nobody changed it since it was read; write the event. Call in atomic.

    `guard` adds conditions on fields a change depends on that are not state changes (expires_at).
    """
    unchanged = Coupon.objects.filter(pk=coupon.pk, status=coupon.status, version=coupon.version, **(guard or {}))
    updated = unchanged.update(
        status=to, version=F("version") + 1, updated_at=timezone.now(), **fields
    )
    if not updated:
        return False
    CouponEvent.objects.create(coupon_id=coupon.pk, campaign_id=coupon.campaign_id, type=event, source=source,
                               data={k: jsonable(v) for k, v in data.items()})
    coupon.status = to
    coupon.version += 1
    for name, value in fields.items():
        setattr(coupon, name, value)
    return True


_NO_ORDER = {"order_id": None, "hold_until": None, "discount": None, "order_amount": None}


def coupon_settle(*, coupon: Coupon, now: datetime, source: str = "lazy") -> bool:
    """Apply what time did to the coupon: a hold past hold_until lapses; validity past its end expires.

    Return False when the coupon changed under us (re-read it). Call inside transaction.atomic.
    """
    if coupon.hold_lapsed_at(now):
        lapsed = {"order_id": coupon.order_id, "hold_until": coupon.hold_until}
        if not _transition(coupon, to=CouponStatus.ACTIVE, event=CouponEventType.HOLD_LAPSED, source=source,
                           data=lapsed, **_NO_ORDER):
            return False
    if coupon.status == CouponStatus.ACTIVE and coupon.is_expired_at(now):
        # Guarded by expires_at: a validity extension committed since the read keeps the coupon alive.
        if not _transition(coupon, to=CouponStatus.EXPIRED, event=CouponEventType.EXPIRED, source=source,
                           data={"expires_at": coupon.expires_at}, guard={"expires_at": coupon.expires_at}):
            return False
    return True


def coupons_settle_due(*, user_id: str) -> int:
    """Lapse the shopper's holds and expire their coupons whose time has come; return how many changed."""
    now = timezone.now()
    due = Coupon.objects.filter(user_id=user_id).filter(
        Q(status=CouponStatus.HELD, hold_until__lte=now)
        | Q(status=CouponStatus.ACTIVE, expires_at__lte=now - timedelta(seconds=1))
    )
    changed = 0
    for coupon in due[:500]:
        with transaction.atomic():
            before = coupon.version
            coupon_settle(coupon=coupon, now=now)
            changed += coupon.version != before
    return changed


def _retrying(code: str, user_id: str, decide: Any) -> UseOutcome:
    """Run `decide(coupon)` on a fresh, settled read of the coupon until it is not beaten by a race."""
    for _ in range(MAX_ATTEMPTS):
        with transaction.atomic():
            coupon = coupon_owned_by(code=code, user_id=user_id)
            now = timezone.now()
            if not coupon_settle(coupon=coupon, now=now):
                continue
            outcome = decide(coupon, now)
            if outcome is not None:
                return outcome
    raise Contention()


def _refusal_for_use(coupon: Coupon, order: Order, user_id: str, now: datetime) -> UseOutcome | None:
    """Return why an active coupon can't be used for this order, or None when it can."""
    if coupon.status == CouponStatus.EXPIRED:
        return refused(UseCode.EXPIRED)
    if coupon.status == CouponStatus.REVOKED:
        return refused(UseCode.REVOKED)
    if now < coupon.valid_from:
        return refused(UseCode.NOT_YET_VALID)
    campaign = coupon.campaign
    if order.currency != campaign.currency:
        raise CurrencyMismatch(f"This coupon is in {campaign.currency}; the order is in {order.currency}.")
    if order.amount < campaign.min_spend:
        return refused(UseCode.MIN_SPEND_NOT_MET)
    if campaign.audience == Audience.NEW:
        # "Never redeemed here" is a fact about all the shopper's coupons: serialize the shopper's uses of
        # new-shopper coupons (until this transaction ends), so two at once can't both count as the first.
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", [AdvisoryLock.NEW_SHOPPER_USE, user_id])
        if Coupon.objects.filter(user_id=user_id, status__in=[CouponStatus.REDEEMED, CouponStatus.HELD]).exclude(
            pk=coupon.pk
        ).exists():
            return refused(UseCode.NOT_ELIGIBLE)
    return None


def coupon_redeem(*, user_id: str, code: str, order: Order, source: str = "api") -> UseOutcome:
    """Redeem a coupon for an order in one step (also completes this order's own hold)."""

    def decide(coupon: Coupon, now: datetime) -> UseOutcome | None:
        if coupon.status == CouponStatus.REDEEMED:
            if coupon.order_id == order.order_id and coupon.order_amount == order.amount:
                return _redeemed(coupon)  # the same redemption asked again
            return refused(UseCode.ALREADY_REDEEMED)  # another order, or this order at another amount
        if coupon.status == CouponStatus.HELD and coupon.order_id != order.order_id:
            return refused(UseCode.ON_HOLD)
        refusal = _refusal_for_use(coupon, order, user_id, now)
        if refusal is not None:
            return refusal
        discount = coupon.campaign.discount_for(order.amount)
        data = {"order_id": order.order_id, "order_amount": order.amount, "currency": order.currency,
                "discount": discount.amount, "payable": discount.payable}
        if not _transition(coupon, to=CouponStatus.REDEEMED, event=CouponEventType.REDEEMED, source=source,
                           data=data, order_id=order.order_id, order_amount=order.amount,
                           discount=discount.amount, hold_until=None, redeemed_at=now):
            return None
        return _redeemed(coupon)

    return _retrying(code, user_id, decide)


def _redeemed(coupon: Coupon) -> UseOutcome:
    assert coupon.discount is not None and coupon.order_amount is not None
    return done("redeemed", discount=coupon.discount, payable=coupon.order_amount - coupon.discount)


def coupon_reserve(
    *, user_id: str, code: str, order: Order, hold_seconds: int = HOLD_SECONDS_DEFAULT, source: str = "api"
) -> UseOutcome:
    """Hold a coupon for an order awaiting payment, until now + hold_seconds (confirm or release it)."""
    if not 1 <= hold_seconds <= HOLD_SECONDS_MAX:
        raise ValueError("hold_seconds out of range")

    def decide(coupon: Coupon, now: datetime) -> UseOutcome | None:
        if coupon.status == CouponStatus.HELD:
            if coupon.order_id != order.order_id:
                return refused(UseCode.ON_HOLD)
            if coupon.order_amount == order.amount:
                return _reserved(coupon)  # the same hold asked again
            # This order's amount changed at checkout: hold again at the new price (checks run again).
        if coupon.status == CouponStatus.REDEEMED:
            return refused(UseCode.ALREADY_REDEEMED)
        refusal = _refusal_for_use(coupon, order, user_id, now)
        if refusal is not None:
            return refusal
        discount = coupon.campaign.discount_for(order.amount)
        hold_until = (now + timedelta(seconds=hold_seconds)).replace(microsecond=0)
        data = {"order_id": order.order_id, "order_amount": order.amount, "currency": order.currency,
                "discount": discount.amount, "hold_until": hold_until}
        if not _transition(coupon, to=CouponStatus.HELD, event=CouponEventType.RESERVED, source=source, data=data,
                           order_id=order.order_id, order_amount=order.amount, discount=discount.amount,
                           hold_until=hold_until):
            return None
        return _reserved(coupon)

    return _retrying(code, user_id, decide)


def _reserved(coupon: Coupon) -> UseOutcome:
    assert coupon.discount is not None and coupon.order_amount is not None
    return done("reserved", discount=coupon.discount, payable=coupon.order_amount - coupon.discount,
                hold_until=coupon.hold_until)


def coupon_confirm(*, user_id: str, code: str, order_id: str, source: str = "api") -> UseOutcome:
    """The held order was paid: turn its hold into a redemption."""

    def decide(coupon: Coupon, now: datetime) -> UseOutcome | None:
        if coupon.status == CouponStatus.HELD:
            if coupon.order_id != order_id:
                return refused(UseCode.ON_HOLD)
            data = {"order_id": order_id, "order_amount": coupon.order_amount, "discount": coupon.discount,
                    "confirmed": True}
            if not _transition(coupon, to=CouponStatus.REDEEMED, event=CouponEventType.REDEEMED, source=source,
                               data=data, hold_until=None, redeemed_at=now):
                return None
            return _redeemed(coupon)
        if coupon.status == CouponStatus.REDEEMED:
            return _redeemed(coupon) if coupon.order_id == order_id else refused(UseCode.ALREADY_REDEEMED)
        if coupon.status == CouponStatus.REVOKED:
            return refused(UseCode.REVOKED)
        lapsed_for_this_order = CouponEvent.objects.filter(
            coupon=coupon, type=CouponEventType.HOLD_LAPSED, data__order_id=order_id
        ).exists()
        if lapsed_for_this_order:
            return refused(UseCode.HOLD_LAPSED)
        if coupon.status == CouponStatus.EXPIRED:
            return refused(UseCode.EXPIRED)
        return refused(UseCode.NOT_HELD)

    return _retrying(code, user_id, decide)


def coupon_release(*, user_id: str, code: str, order_id: str, source: str = "api") -> UseOutcome:
    """Undo this order's hold or redemption (cancelled or unpaid): usable again if still valid. Idempotent."""

    def decide(coupon: Coupon, now: datetime) -> UseOutcome | None:
        if coupon.status in (CouponStatus.HELD, CouponStatus.REDEEMED) and coupon.order_id == order_id:
            data = {"order_id": order_id, "was": coupon.status}
            if not _transition(coupon, to=CouponStatus.ACTIVE, event=CouponEventType.RELEASED, source=source,
                               data=data, redeemed_at=None, **_NO_ORDER):
                return None
            if not coupon_settle(coupon=coupon, now=now):  # released after its validity: expired at once
                return None
        return done("released", coupon_status=coupon.status)

    return _retrying(code, user_id, decide)


def coupon_revoke(*, coupon: Coupon, source: str, reason: str, restocked: bool = False) -> UseOutcome:
    """Revoke an unused coupon (claim cancelled, or an operator's decision). Call inside transaction.atomic.

    Refuses a coupon in use (held or redeemed) or expired; a revoked coupon stays revoked (idempotent).
    """
    now = timezone.now()
    for _ in range(MAX_ATTEMPTS):
        if coupon_settle(coupon=coupon, now=now):
            if coupon.status == CouponStatus.REVOKED:
                return done("revoked")
            if coupon.status == CouponStatus.REDEEMED:
                return refused(UseCode.ALREADY_REDEEMED)
            if coupon.status == CouponStatus.HELD:
                return refused(UseCode.ON_HOLD)
            if coupon.status == CouponStatus.EXPIRED:
                return refused(UseCode.EXPIRED)
            if _transition(coupon, to=CouponStatus.REVOKED, event=CouponEventType.REVOKED, source=source,
                           data={"reason": reason}):
                if restocked:
                    CouponEvent.objects.create(coupon_id=coupon.pk, campaign_id=coupon.campaign_id,
                                               type=CouponEventType.RESTOCKED, source=source,
                                               data={"claim_id": coupon.claim_id})
                return done("revoked")
        coupon.refresh_from_db()
    raise Contention()


def coupon_extend_validity(*, coupon: Coupon, days: int, actor: str) -> bool:
    """Extend one still-usable coupon's validity by `days` (an operator's decision), with its event.

    Return False when the coupon is no longer usable (expired, redeemed, revoked) or changed meanwhile.
    Validate `days` with coupons.extension.check_days first.
    """
    with transaction.atomic():
        current = Coupon.objects.select_for_update().get(pk=coupon.pk)
        if current.status not in (CouponStatus.ACTIVE, CouponStatus.HELD) or current.is_expired_at(timezone.now()):
            return False
        new_expiry = current.expires_at + timedelta(days=days)
        Coupon.objects.filter(pk=current.pk).update(expires_at=new_expiry, updated_at=timezone.now())
        CouponEvent.objects.create(coupon_id=current.pk, campaign_id=current.campaign_id,
                                   type=CouponEventType.EXTENDED, source="admin",
                                   data={"days": days, "from": jsonable(current.expires_at),
                                         "to": jsonable(new_expiry), "actor": actor})
    return True
