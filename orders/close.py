"""Close an ended campaign: record its final figures once, when its ledger is all in PostgreSQL."""
from __future__ import annotations

from django.db import transaction
from django.db.models import Count
from django.utils import timezone

from campaigns.events_out import campaign_event_out
from campaigns.models import Campaign, CampaignEvent, CampaignEventType
from campaigns.redis_state import StoreUnavailable
from coupons.models import Coupon
from webhooks.models import EventType

from . import ledger
from .verify import campaign_verify


def campaign_close(*, campaign: Campaign) -> CampaignEvent | None:
    """Record an ended campaign's final figures once (a CLOSED event); None if not ready or done before.

    Ready when the campaign ended and its ledger is fully in PostgreSQL. Its Redis keys expire by
    themselves at the end plus the grace period (PEXPIREAT).
    """
    if timezone.now() < campaign.ends_at:
        return None
    with transaction.atomic():
        locked = Campaign.objects.select_for_update().get(pk=campaign.pk)
        if CampaignEvent.objects.filter(campaign=locked, type=CampaignEventType.CLOSED).exists():
            return None
        try:
            if ledger.backlog_sizes([campaign.pk]).get(campaign.pk, 0):
                return None
            balance = campaign_verify(campaign=locked)
        except StoreUnavailable:
            return None
        coupons = dict(Coupon.objects.filter(campaign=locked).values_list("status").annotate(n=Count("id"))
                       .values_list("status", "n"))
        figures = {"total_stock": locked.total_stock, "remaining": balance.remaining, "claims": balance.claims,
                   "given_back": balance.restocked, "balanced": balance.balanced, "coupons": coupons}
        closed = CampaignEvent.objects.create(campaign=locked, type=CampaignEventType.CLOSED, actor="housekeeping",
                                              data=figures)
        campaign_event_out(locked, EventType.CAMPAIGN_ENDED, {"figures": figures})  # its webhook, same transaction
        return closed
