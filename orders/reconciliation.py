"""Reconciliation: compare a campaign's Redis state with PostgreSQL, repair what is safe, record the rest.

Repairs go only in the safe direction:
- a ledger entry PostgreSQL lacks is persisted (as cancelled if Redis already gave its stock back);
- a campaign whose Redis state is gone is rebuilt from PostgreSQL (sales answer 503 meanwhile);
- a per-user count is set to the number of that shopper's claims (compare-and-set: never over a change);
- a stock above total - claims + restocked is lowered to it (compare-and-set);
- a budget's money left above its budget less the discounts used is lowered to it (compare-and-set);
- a group's hash lost is restored from PostgreSQL (the rebuild), a shopper's count in it set to what the group's
  campaigns hold (compare-and-set);
- of a campaign split into buckets: a move of stock between buckets cut in half is finished (received once),
  and each bucket's stock above its share - its claims + its restocked is lowered to it.
A stock below that, or anything else, is reported and left alone: raising it could sell a coupon twice.
"""
from __future__ import annotations

import logging
from datetime import timedelta
from decimal import Decimal

from django.conf import settings
from django.utils import timezone

from campaigns import redis_state
from campaigns.models import Campaign
from campaigns.money import to_minor
from campaigns.rebuild import campaign_repair_lock
from campaigns.redis_state.budget import budget_key
from campaigns.services import campaign_preheat
from coupons.services import code_uses_give_back_orphans

from .cancel import persist_cancelled_entry
from .drain import persist_entries
from .groups import group_repair
from .models import Reconciliation
from .rebuild import campaign_rebuild
from .verify import Balance, campaign_verify

log = logging.getLogger(__name__)


def campaign_reconcile(*, campaign: Campaign, repair: bool, source: str) -> Reconciliation | None:
    """Compare, repair if asked, record. Return None when another reconciliation of it is running."""
    with campaign_repair_lock(campaign.pk) as taken:
        if not taken:
            return None
        finished = redis_state.finish_moves(campaign.pk, campaign.buckets) if repair else 0
        balance = campaign_verify(campaign=campaign)
        repairs: list[str] = []
        if repair:
            repairs = [f"finished {finished} moves of stock between buckets cut in half"] if finished else []
            repairs += _repair(campaign, balance)
            if repairs:
                balance = campaign_verify(campaign=campaign)
        record = Reconciliation.objects.create(
            campaign=campaign, source=source, total_stock=balance.total_stock, remaining=balance.remaining,
            claims=balance.claims, restocked=balance.restocked, drift=balance.drift,
            users_drift=len(balance.users_drift), problems=_problems(balance), repairs=repairs,
            balanced=balance.balanced,
        )
    if repairs or not record.balanced:
        log.warning("reconciled campaign %s: repairs %s; %s", campaign.pk, repairs or "none",
                    "balanced" if record.balanced else f"STILL DRIFTING: {record.problems}")
    return record


def _problems(balance: Balance) -> list[str]:
    problems = list(balance.problems)
    if balance.drift:
        problems.append(f"drift {balance.drift}: total {balance.total_stock} != remaining {balance.remaining} + "
                        f"claims {balance.claims} - restocked {balance.restocked}")
    if balance.users_drift:
        sample = dict(sorted(balance.users_drift.items())[:10])
        problems.append(f"{len(balance.users_drift)} per-user counts differ in Redis (Redis, expected): {sample}")
    if balance.users_over_limit:
        problems.append(f"shoppers above the per-user limit: {balance.users_over_limit[:10]}")
    return problems


def _repair(campaign: Campaign, balance: Balance) -> list[str]:
    repairs: list[str] = []
    if balance.remaining is None:
        if campaign.preheated_at is None or timezone.now() >= campaign.ends_at:
            return repairs  # never loaded, or over: nothing is sold from Redis any more
        left = campaign_rebuild(campaign=campaign)
        repairs.append(f"rebuilt the Redis state from PostgreSQL: {left} left")
        balance = campaign_verify(campaign=campaign)
    elif balance.group is not None and balance.group.lost and timezone.now() < campaign.ends_at:
        campaign_rebuild(campaign=campaign)  # its group hash, from PostgreSQL (orders.groups)
        repairs.append(f"restored group {campaign.group}'s hash from PostgreSQL")
        balance = campaign_verify(campaign=campaign)
    if balance.group is not None and balance.group.homeless and timezone.now() < campaign.ends_at:
        campaign_preheat(campaign=campaign)  # a refresh: its home written again, nothing else changed
        repairs.append(f"wrote the campaign's home again (its group {campaign.group})")
    if balance.group is not None and balance.group.drift:
        repairs += group_repair(balance.group)
    if balance.missing_entries:
        given_back = {e.claim_id for e in balance.missing_entries} & balance.given_back
        as_cancelled = [e for e in balance.missing_entries if e.claim_id in given_back]
        to_issue = [e for e in balance.missing_entries if e.claim_id not in given_back]
        issued = persist_entries(campaign, to_issue)
        cancelled = sum(persist_cancelled_entry(e) for e in as_cancelled)
        if issued or cancelled:
            repairs.append(f"persisted {issued} ledger entries missing from PostgreSQL"
                           + (f" and {cancelled} given back ones as cancelled" if cancelled else ""))
            balance = campaign_verify(campaign=campaign)
    keys = redis_state.campaign_keys(campaign.pk)

    def users_of(user: str) -> str:  # the user's bucket's counts
        return redis_state.campaign_keys(campaign.pk, redis_state.bucket_of(user, campaign.buckets)).users

    fixed = [u for u, (seen, expected) in sorted(balance.users_drift.items())
             if redis_state.compare_and_set(key=users_of(u), field=u, expected=seen, new=expected)]
    if fixed:
        repairs.append(f"set the per-user counts of {len(fixed)} shoppers to their claims: {fixed[:10]}")
    if balance.orphan_takes:
        given = code_uses_give_back_orphans(campaign, balance.orphan_takes)
        if given:
            repairs.append(f"gave back {given} uses taken in Redis whose coupon was never written")
    for bucket, drift in sorted(balance.bucket_drifts.items()):
        seen = balance.bucket_remaining.get(bucket)
        if drift < 0 and seen is not None and redis_state.compare_and_set(
                key=redis_state.campaign_keys(campaign.pk, bucket).stock, field=None, expected=seen,
                new=max(seen + drift, 0)):
            repairs.append(f"lowered bucket {bucket}'s stock from {seen} to {max(seen + drift, 0)} (its share - "
                           "its claims)")
    if balance.money_drift < 0 and balance.money is not None and balance.money["left"] is not None:
        seen = to_minor(Decimal(balance.money["left"]), campaign.currency)  # Redis could pay beyond the budget
        if redis_state.compare_and_set(key=budget_key(campaign.pk), field=None, expected=seen,
                                       new=seen + balance.money_drift):
            repairs.append(f"lowered the budget left from {balance.money['left']} to the budget less the "
                           "discounts used")
    if campaign.buckets > 1:
        return repairs  # its total drift is its buckets' (above), or a move in transit
    if balance.remaining is not None and balance.drift is not None and balance.drift < 0:
        target = balance.remaining + balance.drift  # drift < 0: Redis would sell more than exists
        if redis_state.compare_and_set(key=keys.left(codes=campaign.is_codes), field=None,
                                       expected=balance.remaining, new=max(target, 0)):
            repairs.append(f"lowered the stock from {balance.remaining} to {max(target, 0)} (total - claims)")
    return repairs


def campaigns_to_reconcile() -> list[Campaign]:
    """Live campaigns and those that ended within the last day (their keys still exist)."""
    now = timezone.now()
    recent = now - min(timedelta(days=1), timedelta(seconds=settings.COUPONS_KEY_GRACE_SECONDS))
    return list(Campaign.objects.filter(preheated_at__isnull=False, starts_at__lte=now, ends_at__gt=recent))
