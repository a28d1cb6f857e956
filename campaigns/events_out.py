"""A campaign's webhooks: campaign.sold_out and campaign.ended, written to the outbox (webhooks.outbox).

campaign.sold_out: the drain, when it has caught up with a campaign's ledger and Redis holds no stock left
(orders.drain.drain_campaign calls campaign_sold_out_check): once per campaign (stock given back and sold again
sends no second one). Sent after the last coupon.issued the drain wrote, since the check runs after them.
campaign.ended: when the campaign is closed with its final figures (orders.close.campaign_close, in the same
transaction as its CLOSED event): once, after its end and once its whole ledger is in PostgreSQL.
"""
from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from webhooks.models import EventType
from webhooks.outbox import enqueue

from . import redis_state
from .models import Campaign


def _campaign_data(campaign: Campaign) -> dict[str, Any]:
    return {"campaign_id": campaign.pk, "name": campaign.name, "total_stock": campaign.total_stock,
            "starts_at": campaign.starts_at.isoformat(), "ends_at": campaign.ends_at.isoformat()}


def campaign_event_out(campaign: Campaign, type: EventType, data: dict[str, Any], *, once: str | None = None) -> None:
    """Write a campaign's webhook to the outbox. Call in the transaction of the campaign's own event."""
    enqueue(type, key=f"campaign:{campaign.pk}", campaign_id=campaign.pk, data={**_campaign_data(campaign), **data},
            once=once)


def campaign_sold_out_check(campaign: Campaign) -> bool:
    """Write campaign.sold_out once when Redis holds no stock left of this grab campaign; return whether it
    is sold out. Raise StoreUnavailable."""
    if campaign.is_codes:
        return False
    if redis_state.remaining_many([campaign.pk]).get(campaign.pk) != 0:
        return False
    with transaction.atomic():
        campaign_event_out(campaign, EventType.CAMPAIGN_SOLD_OUT, {"sold_out_at": timezone.now().isoformat()},
                           once=f"campaign.sold_out:{campaign.pk}")
    return True
