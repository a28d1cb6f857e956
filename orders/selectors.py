"""Reads of claims and reconciliations for the operator's console (one query per page, not per row), and of the
campaigns whose ledger the drain, the housekeeping and the metrics look at."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection
from django.db.models import Count
from django.utils import timezone

from campaigns.models import Campaign

from .models import Claim, ClaimStatus, Reconciliation


def campaigns_to_drain() -> list[int]:
    """Return the ids of campaigns whose ledger may hold entries (loaded and not past end + grace)."""
    grace = timedelta(seconds=settings.COUPONS_KEY_GRACE_SECONDS)
    ids = Campaign.objects.with_redis_state(at=timezone.now(), grace=grace).values_list("pk", flat=True)
    return list(ids)


def claims_issued_counts(campaign_ids: list[int]) -> dict[int, int]:
    """Return how many claims became coupons, per campaign, in one query."""
    rows = (Claim.objects.filter(campaign_id__in=campaign_ids, status=ClaimStatus.ISSUED)
            .values_list("campaign_id").annotate(n=Count("id")).values_list("campaign_id", "n"))
    return dict(rows)


def latest_reconciliations(campaign_ids: list[int]) -> dict[int, Reconciliation]:
    """Return the last reconciliation of each campaign, in one query."""
    latest = (Reconciliation.objects.filter(campaign_id__in=campaign_ids)
              .order_by("campaign_id", "-created_at").distinct("campaign_id"))
    return {r.campaign_id: r for r in latest}


@dataclass(frozen=True)
class Timeline:
    """Claims per bucket since the campaign's start: what the burn-down chart draws."""

    start: datetime
    bucket_seconds: int
    counts: list[int]


def claims_timeline(campaign: Campaign, *, buckets: int = 60, now: datetime | None = None) -> Timeline:
    """Count the campaign's persisted claims in `buckets` equal slices from its start to now (or its end)."""
    now = now or timezone.now()
    end = min(now, campaign.ends_at)
    span = max((end - campaign.starts_at).total_seconds(), 1.0)
    width = max(int(span // buckets) + 1, 1)
    counts = [0] * buckets
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT floor(extract(epoch FROM claimed_at - %s) / %s)::int AS b, count(*) FROM {Claim._meta.db_table} "
            "WHERE campaign_id = %s AND claimed_at >= %s GROUP BY b",
            [campaign.starts_at, width, campaign.pk, campaign.starts_at],
        )
        for bucket, count in cursor.fetchall():
            if 0 <= bucket < buckets:
                counts[bucket] += count
    return Timeline(start=campaign.starts_at, bucket_seconds=width, counts=counts)


def claims_per_second(campaign: Campaign, *, minutes: int = 5, now: datetime | None = None) -> list[float]:
    """Return claims per second over each of the last `minutes` minutes (oldest first)."""
    now = now or timezone.now()
    since = now - timedelta(minutes=minutes)
    counts = [0] * minutes
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT floor(extract(epoch FROM claimed_at - %s) / 60)::int, count(*) FROM {Claim._meta.db_table} "
            "WHERE campaign_id = %s AND claimed_at >= %s GROUP BY 1",
            [since, campaign.pk, since],
        )
        for minute, count in cursor.fetchall():
            if 0 <= minute < minutes:
                counts[minute] = count
    return [round(c / 60, 2) for c in counts]
