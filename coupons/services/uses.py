"""The write use cases of a shopper's coupon (reserve, redeem, confirm, release) and of an operator (revoke,
extend), and the settling of a shopper's due coupons."""
from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from campaigns.claim_settled import claims_changed

from .. import budget
from ..models import Coupon, CouponEvent, CouponEventType, CouponStatus
from ..outcomes import UseCode, UseOutcome, done, jsonable, refused
from ..selectors import coupons_due
from .order import Order, _lines_data, _same_use, _use_answer, _use_checked, shares_of
from .resolve import _code_used
from .takes import _give_back
from .transitions import _NO_ORDER, MAX_ATTEMPTS, Change, Contention, _transition, coupon_settle, event_write
from .typed import _use_prefix, is_shared_use

HOLD_SECONDS_DEFAULT = 900


HOLD_SECONDS_MAX = 86_400


def coupons_settle_due(*, user_id: str) -> int:
    """Lapse the shopper's holds and expire their coupons whose time has come; return how many changed."""
    now = timezone.now()
    due = coupons_due(user_id=user_id, now=now)
    changed = 0
    for coupon in due[:500]:
        with transaction.atomic():
            before = coupon.version
            coupon_settle(coupon=coupon, now=now)
            changed += coupon.version != before
    return changed


def coupon_redeem(*, user_id: str, code: str, order: Order, source: str = "api", own: Coupon | None = None
                  ) -> UseOutcome:
    """Redeem a coupon for an order in one step (also completes this order's own hold)."""

    def decide(coupon: Coupon, now: datetime) -> UseOutcome | None:
        if coupon.status == CouponStatus.REDEEMED:
            if _same_use(coupon, order):
                return _redeemed(coupon)  # the same redemption asked again
            return refused(UseCode.ALREADY_REDEEMED)  # another order, or this order at another amount
        if coupon.status == CouponStatus.HELD and coupon.order_id != order.order_id:
            return refused(UseCode.ON_HOLD)
        change = redeem_change(coupon, now)
        if isinstance(change, UseOutcome):
            return change
        written = _use_written(coupon, change, source, _redeemed)
        if not written or isinstance(written, UseOutcome):
            return written or None
        return _redeemed(coupon)

    def redeem_change(coupon: Coupon, now: datetime, others: tuple[Coupon, ...] | None = None) -> UseOutcome | Change:
        checked = _use_checked(coupon, order, user_id, now, others)
        if isinstance(checked, UseOutcome):
            return checked
        priced, payable = checked
        shares = shares_of(order, priced, payable)
        data = {"order_id": order.order_id, "order_amount": order.amount, "currency": order.currency,
                "discount": priced.discount, "payable": payable, **_lines_data(order, shares)}
        return Change(to=CouponStatus.REDEEMED, event=CouponEventType.REDEEMED, data=data, fields={
            "order_id": order.order_id, "order_amount": order.amount, "discount": priced.discount, "shares": shares,
            "hold_until": None, "redeemed_at": now})

    return _code_used(code, user_id, order.order_id, decide, new_use=order, first_use=(redeem_change, _redeemed),
                      source=source, own=own)


def _use_written(coupon: Coupon, change: Change, source: str, answer: Callable[[Coupon], UseOutcome]
                 ) -> UseOutcome | bool:
    """Write a reserve's or redeem's change, its discount taken from the campaign's budget first (coupons.budget,
    nothing for a campaign without one): True written, False beaten by a race (nothing changed, nothing kept), or
    the budget's refusal (22)."""
    discount = change.fields["discount"]
    refusal = budget.take(coupon, discount)
    if refusal is not None:
        return refusal
    if not _transition(coupon, source=source, answer=answer, **change.arguments()):
        budget.untake(coupon, discount)
        return False
    return True


def _redeemed(coupon: Coupon) -> UseOutcome:
    return done("redeemed", **_use_answer(coupon))


def coupon_reserve(
    *, user_id: str, code: str, order: Order, hold_seconds: int = HOLD_SECONDS_DEFAULT, source: str = "api",
    own: Coupon | None = None,
) -> UseOutcome:
    """Hold a coupon for an order awaiting payment, until now + hold_seconds (confirm or release it)."""
    if not 1 <= hold_seconds <= HOLD_SECONDS_MAX:
        raise ValueError("hold_seconds out of range")

    def decide(coupon: Coupon, now: datetime) -> UseOutcome | None:
        if coupon.status == CouponStatus.HELD:
            if coupon.order_id != order.order_id:
                return refused(UseCode.ON_HOLD)
            if _same_use(coupon, order):
                return _reserved(coupon)  # the same hold asked again
            # This order's amount changed at checkout: hold again at the new price (checks run again).
        if coupon.status == CouponStatus.REDEEMED:
            return refused(UseCode.ALREADY_REDEEMED)
        change = reserve_change(coupon, now)
        if isinstance(change, UseOutcome):
            return change
        written = _use_written(coupon, change, source, _reserved)
        if not written or isinstance(written, UseOutcome):
            return written or None
        return _reserved(coupon)

    def reserve_change(coupon: Coupon, now: datetime, others: tuple[Coupon, ...] | None = None) -> UseOutcome | Change:
        checked = _use_checked(coupon, order, user_id, now, others)
        if isinstance(checked, UseOutcome):
            return checked
        priced, payable = checked
        shares = shares_of(order, priced, payable)
        hold_until = (now + timedelta(seconds=hold_seconds)).replace(microsecond=0)
        data = {"order_id": order.order_id, "order_amount": order.amount, "currency": order.currency,
                "discount": priced.discount, "hold_until": hold_until, **_lines_data(order, shares)}
        return Change(to=CouponStatus.HELD, event=CouponEventType.RESERVED, data=data, fields={
            "order_id": order.order_id, "order_amount": order.amount, "discount": priced.discount, "shares": shares,
            "hold_until": hold_until})

    return _code_used(code, user_id, order.order_id, decide, new_use=order, first_use=(reserve_change, _reserved),
                      source=source, own=own)


def _reserved(coupon: Coupon) -> UseOutcome:
    answer = _use_answer(coupon)
    return done("reserved", discount=answer.pop("discount"), payable=answer.pop("payable"),
                hold_until=coupon.hold_until, **answer)


def coupon_confirm(*, user_id: str, code: str, order_id: str, source: str = "api", own: Coupon | None = None
                   ) -> UseOutcome:
    """The held order was paid: turn its hold into a redemption."""

    def decide(coupon: Coupon, now: datetime) -> UseOutcome | None:
        if coupon.status == CouponStatus.HELD:
            if coupon.order_id != order_id:
                return refused(UseCode.ON_HOLD)
            data = {"order_id": order_id, "order_amount": coupon.order_amount, "discount": coupon.discount,
                    "confirmed": True}
            if not _transition(coupon, to=CouponStatus.REDEEMED, event=CouponEventType.REDEEMED, source=source,
                               data=data, answer=_redeemed, hold_until=None, redeemed_at=now):
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

    return _code_used(code, user_id, order_id, decide, absent=refused(UseCode.NOT_HELD), source=source, own=own)


def coupon_release(*, user_id: str, code: str, order_id: str, source: str = "api", own: Coupon | None = None
                   ) -> UseOutcome:
    """Undo this order's hold or redemption (cancelled or unpaid): usable again if still valid. Idempotent."""

    def decide(coupon: Coupon, now: datetime) -> UseOutcome | None:
        released = False
        if coupon.status in (CouponStatus.HELD, CouponStatus.REDEEMED) and coupon.order_id == order_id:
            data = {"order_id": order_id, "was": coupon.status}
            if not _transition(coupon, to=CouponStatus.ACTIVE, event=CouponEventType.RELEASED, source=source,
                               data=data, redeemed_at=None, **_NO_ORDER):
                return None
            released = True
        if coupon.status == CouponStatus.ACTIVE and (
            (released and is_shared_use(coupon))
            or coupon.claim_id.startswith(_use_prefix(coupon.campaign_id, user_id, order_id))
        ):
            # A shared code's use is over: its coupon is revoked and the use given back to the code, once.
            if not _transition(coupon, to=CouponStatus.REVOKED, event=CouponEventType.REVOKED, source=source,
                               data={"reason": "released", "order_id": order_id}):
                return None
            event_write(coupon, event=CouponEventType.RESTOCKED, source=source, data={"claim_id": coupon.claim_id})
            _give_back(coupon)  # before the commit: Redis down is a 503 and nothing changed
        elif released and not coupon_settle(coupon=coupon, now=now):  # released after its validity: expired
            return None
        return done("released", coupon_status=coupon.status)

    return _code_used(code, user_id, order_id, decide, absent=done("released", coupon_status=CouponStatus.REVOKED),
                      source=source, own=own)


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
        claims_changed([current.claim_id])  # its claim's settled record shows the old expiry
        Coupon.objects.filter(pk=current.pk).update(expires_at=new_expiry, updated_at=timezone.now())
        CouponEvent.objects.create(coupon_id=current.pk, campaign_id=current.campaign_id,
                                   type=CouponEventType.EXTENDED, source="admin",
                                   data={"days": days, "from": jsonable(current.expires_at),
                                         "to": jsonable(new_expiry), "actor": actor})
    return True

