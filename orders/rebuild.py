"""Rebuild a campaign's lost Redis state from its claims in PostgreSQL: the orders half of campaigns.rebuild.

The rebuild writes Redis and campaigns' rows (campaigns.rebuild.campaign_state_rebuild); campaigns imports
nothing of orders, so what it needs of the claims is read here and passed in: the drain first moves every claim
the ledger still holds into PostgreSQL, then the claims are read. No table of orders is read by campaigns.
"""
from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db.models import Count
from django.utils import timezone

from campaigns.errors import CampaignStateLost
from campaigns.models import Campaign
from campaigns.rebuild import ClaimRecords, RepairBusy, campaign_repair_lock, campaign_state_rebuild
from campaigns.redis_state import split_ref
from campaigns.services import campaign_preheat
from coupons.budget import load as budget_load
from coupons.services import held_uses

from .drain import drain_campaign
from .groups import group_restore_lost
from .models import Claim, ClaimStatus
from .sold_out import forget_sold_out
from .verify import BUCKET_SQL


def campaign_rebuild(*, campaign: Campaign) -> int:
    """Rebuild a campaign's lost Redis state from PostgreSQL and return the stock it now has.

    Drains whatever the ledger still holds first (taking over every unacknowledged entry), so that no
    claim Redis accepted is forgotten, then loads per-user counts, the stream's last id and the stock; a budget
    Redis lost is loaded from PostgreSQL (the budget less the discounts of its held and redeemed coupons), and so
    is a lost group hash (orders.groups: the coupons held of all the group's campaigns).
    One at a time per campaign (RepairBusy otherwise).
    """
    with campaign_repair_lock(campaign.pk) as taken:
        if not taken:
            raise RepairBusy()
        if campaign.budget is not None:  # what is left of its budget, from its coupons' discounts (a lost one)
            budget_load(campaign)
        if campaign.group:  # a lost group hash first, from PostgreSQL: its campaigns' claims and code uses wait
            group_restore_lost(campaign)
        try:
            return campaign_preheat(campaign=campaign).remaining
        except CampaignStateLost:
            pass
        if campaign.is_codes:  # no ledger: its uses are written straight to PostgreSQL
            stock = campaign_state_rebuild(campaign=campaign, claims=_use_records(campaign))
            forget_sold_out(campaign.pk)
            return stock
        drain_campaign(campaign_id=campaign.pk, reclaim_idle_ms=0, max_seconds=600)
        if campaign.buckets > 1:  # each bucket's shoppers' claims: the lost buckets are rebuilt from theirs
            stock = campaign_state_rebuild(campaign=campaign, claims=_claim_records(campaign, 0), buckets=[
                _claim_records(campaign, bucket) for bucket in range(campaign.buckets)])
        else:
            stock = campaign_state_rebuild(campaign=campaign, claims=_claim_records(campaign))
        forget_sold_out(campaign.pk)
        return stock


def _claim_records(campaign: Campaign, bucket: int | None = None) -> ClaimRecords:
    """Read what the rebuild needs of the campaign's claims (call once the ledger is drained); of one bucket's
    (its claim ids', redis_state.ledger_ref) when `bucket` is given."""
    of_campaign = Claim.objects.filter(campaign=campaign)
    if bucket is not None:
        of_campaign = of_campaign.extra(where=[f"{BUCKET_SQL.format('claim_id')} = %s"], params=[bucket])
    claims = of_campaign.exclude(status=ClaimStatus.CANCELLED)
    counts = dict(claims.values_list("user_id").annotate(n=Count("id")).values_list("user_id", "n"))
    last = (
        of_campaign
        .extra(select={"ms": "split_part(claim_id, '-', 2)::bigint", "seq": "split_part(claim_id, '-', 3)::bigint"})
        .order_by("-ms", "-seq")
        .values_list("ms", "seq")
        .first()
    )
    cancelled = list(of_campaign.filter(status=ClaimStatus.CANCELLED).values_list("claim_id", flat=True))
    keep = timedelta(seconds=settings.COUPONS_IDEMPOTENCY_TTL_SECONDS)
    prefix = len(f"{campaign.pk}-")
    rows = of_campaign.filter(claimed_at__gt=timezone.now() - keep).exclude(key_digest="")
    keyed = [(user_id, digest, split_ref(claim_id[prefix:])[0])  # the stream id, as claim.lua stores it
             for user_id, digest, claim_id in rows.values_list("user_id", "key_digest", "claim_id")]
    return ClaimRecords(per_user=counts, cancelled=cancelled, last_ledger_id=f"{last[0]}-{last[1]}" if last else "0-0",
                        keyed=keyed)


def _use_records(campaign: Campaign) -> ClaimRecords:
    """A codes campaign's uses that hold a unit (coupons.services.held_uses): per shopper, and
    the members of the takes. A use whose request died between its take and its coupon is not among them: the
    rebuilt Redis has that unit back."""
    live = list(held_uses(campaign).values_list("claim_id", "user_id"))
    counts: dict[str, int] = {}
    for _, user_id in live:
        counts[user_id] = counts.get(user_id, 0) + 1
    return ClaimRecords(per_user=counts, cancelled=[], last_ledger_id="0-0", keyed=[],
                        takes=[f"{claim_id}/{user_id}" for claim_id, user_id in live])
