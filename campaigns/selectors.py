"""Reads of campaigns, with their live remaining stock from Redis."""
from __future__ import annotations

from django.db.models import QuerySet
from django.utils import timezone

from . import redis_state
from .models import Campaign


def visible_campaigns() -> QuerySet[Campaign]:
    """Return the published campaigns that are live or upcoming, soonest first."""
    return Campaign.objects.visible(at=timezone.now()).order_by("starts_at", "id")


def remaining_of(campaigns: list[Campaign]) -> dict[int, int | None]:
    """Return each campaign's live remaining stock (one pipelined round trip); None where unknown.

    A campaign never loaded into Redis still has its whole stock; one whose state is unreachable or lost
    is None (never guessed).
    """
    try:
        live = redis_state.remaining_many([c.pk for c in campaigns], {c.pk for c in campaigns if c.is_codes})
    except redis_state.StoreUnavailable:
        live = {}
    return {
        c.pk: live.get(c.pk) if live.get(c.pk) is not None or c.preheated_at else c.total_stock
        for c in campaigns
    }
