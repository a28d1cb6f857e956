"""A shared code's use, created or decided on one request of (shopper, order) at a time: taken in Redis, then
its coupon written with its events (given back if that write fails)."""
from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from campaigns.models import Campaign

from .. import budget
from ..codes import new_codes
from ..events_out import coupon_event_out
from ..hot_reads import use_family
from ..models import Coupon, CouponEvent, CouponEventType, CouponStatus
from ..outcomes import UseOutcome
from .order import Order, _refusal_for_use
from .takes import _give_back_after_failure, _take, _Undone
from .transitions import MAX_ATTEMPTS, Contention, Decide, coupon_settle
from .typed import _lock, _use_prefix

_OVER = (CouponStatus.REVOKED, CouponStatus.EXPIRED)  # a shared code's use that is over: the next is a new one


def _shared_use(campaign: Campaign, user_id: str, order_id: str, decide: Decide, *, new_use: Order | None,
                absent: UseOutcome | None, source: str) -> UseOutcome:
    """Decide on this order's use of the campaign's shared code, creating it for a reserve or redeem.

    One request per (shopper, order) at a time (a transaction lock): the use is taken in Redis (code_take.lua:
    stock and per-user limit, atomic however many shoppers type the code at once), then its coupon is written
    with its events; if that write fails, the use is given back. Its claim id ends in n, the number of this
    order's earlier uses of the code that are over (released or expired).
    """
    prefix = _use_prefix(campaign.pk, user_id, order_id)
    for _ in range(MAX_ATTEMPTS):
        taken: Coupon | None = None
        try:
            with budget.kept(), transaction.atomic():  # a take of the budget given back if nothing stays
                _lock(prefix)
                family = use_family(user_id=user_id, campaign_id=campaign.pk, prefix=prefix)
                now = timezone.now()
                current = next((c for c in family if c.status not in _OVER), None)
                if current is not None:
                    if not coupon_settle(coupon=current, now=now):
                        continue
                    if current.status not in _OVER:
                        outcome = decide(current, now)
                        if outcome is None:
                            continue
                        return outcome
                if new_use is None:  # a confirm or release: decide on the last use, if any
                    if not family:
                        assert absent is not None
                        return absent
                    outcome = decide(family[-1], now)
                    if outcome is None:
                        continue
                    return outcome
                valid_from, expires_at = campaign.coupon_validity(now)
                coupon = Coupon(code=new_codes(1)[0], campaign=campaign, user_id=user_id,
                                claim_id=f"{prefix}{len(family)}", valid_from=valid_from, expires_at=expires_at)
                refusal = _refusal_for_use(coupon, new_use, user_id, now)
                if refusal is not None:
                    return refusal  # checked before the take: a refused use takes nothing
                refusal = _take(campaign, coupon)
                if refusal is not None:
                    return refusal
                taken = coupon
                coupon.save(force_insert=True)
                CouponEvent.objects.create(coupon_id=coupon.pk, campaign_id=campaign.pk, type=CouponEventType.ISSUED,
                                           source=source, data={"code": campaign.code, "order_id": order_id})
                coupon_event_out(coupon, "issued", {"shared_code": campaign.code, "order_id": order_id},
                                 status="active")
                outcome = decide(coupon, now)
                if outcome is None or outcome.code != 0:
                    raise _Undone(outcome)
                return outcome
        except _Undone as undone:
            _give_back_after_failure(taken)
            if undone.outcome is None:
                continue
            return undone.outcome
        except BaseException:
            _give_back_after_failure(taken)
            raise
    raise Contention()

