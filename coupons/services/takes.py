"""A typed code's use taken from its campaign's stock in Redis (code_take.lua) and given back: one take, a
batch of them, the give-back of a coupon not written after all, and of the orphans reconciliation finds."""
from __future__ import annotations

import logging

from django.db import transaction

from campaigns import redis_state
from campaigns.errors import CampaignStateLost
from campaigns.models import Campaign
from campaigns.services import campaign_preheat
from core.errors import NotFound, Unavailable

from ..models import Coupon
from ..outcomes import UseCode, UseOutcome, refused
from .typed import SHARED_USE, UNIQUE_USE, _lock, _unique_uses_lock, take_member

log = logging.getLogger(__name__)


class _Undone(Exception):
    """A new use's coupon was refused after all: its transaction is rolled back (nothing stays)."""

    def __init__(self, outcome: UseOutcome | None) -> None:
        super().__init__()
        self.outcome = outcome


def _take(campaign: Campaign, coupon: Coupon) -> UseOutcome | None:
    """Take one use of the shared code for the coupon's use: None when taken, else the refusal. Raise NotFound
    (the campaign is not live in Redis either), Unavailable (Redis down, or its state lost: nothing taken)."""
    take = redis_state.TakeCode
    result = _run_take(campaign, coupon)
    if result == take.NO_STATE and campaign.preheated_at is None:
        campaign_preheat(campaign=campaign)  # published while Redis was away: its state is loaded at first use
        result = _run_take(campaign, coupon)
    if result in (take.TAKEN, take.ALREADY):
        return None
    if result == take.LIMIT_REACHED:
        return refused(UseCode.LIMIT_REACHED)
    if result == take.SOLD_OUT:
        return refused(UseCode.SOLD_OUT)
    if result == take.GROUP_LIMIT_REACHED:
        return refused(UseCode.GROUP_LIMIT_REACHED)
    if result == take.NO_STATE:
        raise CampaignStateLost()
    raise NotFound("No such coupon.")  # not started, ended or paused in Redis: the same 404 as PostgreSQL's


def _run_takes(coupons: list[Coupon]) -> list[redis_state.TakeCode]:
    try:
        return redis_state.run_code_takes([(c.campaign_id, c.user_id, take_member(c)) for c in coupons])
    except redis_state.StoreUnavailable as exc:
        raise Unavailable() from exc


def _run_take(campaign: Campaign, coupon: Coupon) -> redis_state.TakeCode:
    try:
        return redis_state.run_code_take(campaign_id=campaign.pk, user_id=coupon.user_id, member=take_member(coupon))
    except redis_state.StoreUnavailable as exc:
        raise Unavailable() from exc


def _give_back(coupon: Coupon) -> None:
    """Give a shared code's use back (once). Raise Unavailable when Redis is down."""
    try:
        redis_state.run_code_give_back(campaign_id=coupon.campaign_id, user_id=coupon.user_id,
                                       member=take_member(coupon))
    except redis_state.StoreUnavailable as exc:
        raise Unavailable() from exc


def _give_back_after_failure(taken: Coupon | None) -> None:
    """Give back the use taken for a coupon that was not written after all (never raises)."""
    if taken is None:
        return
    try:
        _give_back(taken)
    except Unavailable:
        log.error("could not give back the use %s of campaign %s (Redis unavailable): verify_campaign reports it "
                  "as taken without a coupon", take_member(taken), taken.campaign_id)


def code_uses_give_back_orphans(campaign: Campaign, members: list[str]) -> int:
    """Give back the uses (of a shared code or a unique code) taken in Redis whose coupon PostgreSQL does not
    hold, each checked under its use's lock (so no request of that use is running): requests that died
    between their take and their commit (reconciliation). Return how many were given back. Raise Unavailable."""
    given = 0
    for member in members:
        claim_id, _, user_id = member.rpartition("/")
        if claim_id.startswith(f"{SHARED_USE}{campaign.pk}:"):
            lock = claim_id.rpartition(":")[0] + ":"  # the use's (_shared_use)
        elif claim_id.startswith(UNIQUE_USE):
            lock = _unique_uses_lock(campaign.pk, user_id)
        else:
            continue
        with transaction.atomic():
            _lock(lock)
            if Coupon.objects.filter(claim_id=claim_id).exists():
                continue
            try:
                result = redis_state.run_code_give_back(campaign_id=campaign.pk, user_id=user_id, member=member)
            except redis_state.StoreUnavailable as exc:
                raise Unavailable() from exc
            given += result == redis_state.RestockResult.RESTOCKED
    return given

