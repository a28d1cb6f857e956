"""A unique code nobody holds yet, bound to the first shopper who uses it."""
from __future__ import annotations

from django.db import IntegrityError, transaction
from django.utils import timezone

from campaigns.models import CampaignState
from core.errors import NotFound

from .. import budget
from ..events_out import coupon_event_out
from ..models import Coupon, CouponEvent, CouponEventType, UniqueCode
from ..outcomes import UseCode, UseOutcome, refused
from .order import Order, _refusal_for_use
from .takes import _give_back_after_failure, _take, _Undone
from .transitions import Contention, Decide, _retrying
from .typed import UNIQUE_USE, _lock, _unique_uses_lock, coupon_owned_by


def _unique_use(code: str, user_id: str, decide: Decide, *, new_use: Order, source: str) -> UseOutcome:
    """Bind a unique code nobody holds yet to this shopper (the first to use it) and decide on its coupon.

    The coupon's code is the unique code (unique in PostgreSQL: of shoppers typing it at once, one insert
    wins, the others wait for it and fail), and the code row is bound by a conditional UPDATE (holder_id IS
    NULL). A shopper's unique codes of a campaign are counted against its per-user limit under a transaction
    lock of (campaign, shopper), and the use is taken from the campaign's stock in Redis (code_take.lua, as a
    shared code's: the stock is the campaign's uses in all), last before the commit; a failed commit gives it
    back."""
    row = UniqueCode.objects.select_related("campaign").filter(code=code).first()
    now = timezone.now()
    if row is None or row.holder_id is not None or row.campaign.state_at(now) != CampaignState.LIVE:
        raise NotFound("No such coupon.")
    campaign = row.campaign
    taken: Coupon | None = None
    try:
        with budget.kept(), transaction.atomic():  # a take of the budget given back if nothing stays
            _lock(_unique_uses_lock(campaign.pk, user_id))
            if Coupon.objects.filter(campaign=campaign, user_id=user_id).count() >= campaign.per_user_limit:
                return refused(UseCode.LIMIT_REACHED)
            valid_from, expires_at = campaign.coupon_validity(now)
            coupon = Coupon(code=row.code, campaign=campaign, user_id=user_id, claim_id=f"{UNIQUE_USE}{row.pk}",
                            valid_from=valid_from, expires_at=expires_at)
            refusal = _refusal_for_use(coupon, new_use, user_id, now)
            if refusal is not None:
                return refusal
            coupon.save(force_insert=True)
            CouponEvent.objects.create(coupon_id=coupon.pk, campaign_id=campaign.pk, type=CouponEventType.ISSUED,
                                       source=source, data={"unique_code": row.pk, "order_id": new_use.order_id})
            coupon_event_out(coupon, "issued", {"unique_code": row.pk, "order_id": new_use.order_id}, status="active")
            if not UniqueCode.objects.filter(pk=row.pk, holder_id__isnull=True).update(
                    holder_id=user_id, coupon=coupon, held_at=now):
                raise IntegrityError("the unique code was bound meanwhile")
            outcome = decide(coupon, now)
            if outcome is None or outcome.code != 0:
                raise _Undone(outcome)
            refusal = _take(campaign, coupon)  # the campaign's stock: its uses in all, shared code or unique
            if refusal is not None:
                raise _Undone(refusal)
            taken = coupon
            return outcome
    except _Undone as undone:
        if undone.outcome is None:
            raise Contention() from None
        return undone.outcome
    except IntegrityError:
        _give_back_after_failure(taken)
        # another request bound it first: if it was this shopper's, the code is now theirs (path a)
    except BaseException:
        _give_back_after_failure(taken)
        raise
    if Coupon.objects.filter(code=row.code, user_id=user_id).exists():
        return _retrying(lambda: coupon_owned_by(code=row.code, user_id=user_id), decide)
    raise NotFound("No such coupon.")

