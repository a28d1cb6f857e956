"""Celery adapters of the drain: thin, take ids, safe to run twice (at-least-once delivery)."""
from __future__ import annotations

import logging
from datetime import timedelta

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from campaigns.models import Campaign, CampaignEventType
from campaigns.redis_state import StoreUnavailable, bucket_counts, clear_drain_trigger, finish_moves
from campaigns.services import campaign_preheat
from core.errors import Unavailable
from core.logs import log_fields

from . import drain, ledger
from .close import campaign_close
from .selectors import campaigns_to_drain

log = logging.getLogger(__name__)


@shared_task(name="orders.tasks.drain_campaign", ignore_result=True)
def drain_campaign(campaign_id: int) -> dict:
    """Drain one campaign's ledger (triggered after claims). Re-enqueues itself while more is waiting."""
    with log_fields(campaign=campaign_id):  # on every log line of the drain
        # Clear the trigger flag before reading: a claim after this point sets it again and sends a new
        # trigger, a claim before it is in the stream this run reads.
        try:
            clear_drain_trigger(campaign_id)
            # Measured: a batch of 500 takes ~43 ms (one INSERT ... unnest statement, local PostgreSQL), about
            # 11,500 claims/s; 5 s per task is ~50k claims before it re-enqueues itself.
            report = drain.drain_campaign(campaign_id=campaign_id, max_seconds=5.0)
        except StoreUnavailable:
            log.warning("drain of campaign %s: Redis unavailable; the sweep retries", campaign_id)
            return {"campaign_id": campaign_id, "error": "redis unavailable"}
        if report.read:
            log.info("drained campaign %s: %d claims read, %d new coupons, %d taken over from dead workers",
                     campaign_id, report.read, report.persisted, report.reclaimed)
        if not report.caught_up:
            drain_campaign.apply_async(args=[campaign_id], expires=60)
        return {"campaign_id": campaign_id, "read": report.read, "persisted": report.persisted}


@shared_task(name="orders.tasks.drain_sweep", ignore_result=True)
def drain_sweep() -> dict:
    """Every few seconds: drain every campaign with a backlog and take over entries of dead workers."""
    campaign_ids = campaigns_to_drain()
    try:
        backlog = ledger.backlog_sizes(campaign_ids)
    except StoreUnavailable:
        log.warning("drain sweep: Redis unavailable")
        return {"error": "redis unavailable"}
    drained = {}
    for campaign_id, size in backlog.items():
        if size:
            try:
                report = drain.drain_campaign(campaign_id=campaign_id, max_seconds=1.5)
            except StoreUnavailable:
                log.warning("drain sweep: Redis unavailable while draining campaign %s", campaign_id)
                continue
            drained[campaign_id] = report.read
            if report.read:
                log.info("sweep drained campaign %s: %d claims read, %d new coupons, %d taken over",
                         campaign_id, report.read, report.persisted, report.reclaimed)
    _finish_moves(campaign_ids)
    rebuilt = _rebuild_lost(set(campaign_ids) - set(backlog))
    return {"drained": drained, "rebuilt": rebuilt} if rebuilt else {"drained": drained}


def _finish_moves(campaign_ids: list[int]) -> None:
    """Finish the moves of stock between a campaign's buckets cut in half (a process died between their two
    scripts): within seconds, so that stock is never long out of every bucket's reach."""
    try:
        for campaign_id, buckets in bucket_counts(campaign_ids).items():
            finish_moves(campaign_id, buckets)
    except StoreUnavailable:
        log.warning("drain sweep: Redis unavailable while finishing moves of stock")


def _rebuild_lost(campaign_ids: set[int]) -> list[int]:
    """Rebuild, within seconds, live campaigns whose ledger is gone from Redis (Redis restarted empty):
    their sales answer 503 until then. Reconciliation's safe repair, run early; one at a time per campaign."""
    from .reconciliation import campaign_reconcile

    rebuilt = []
    now = timezone.now()
    for campaign in Campaign.objects.filter(pk__in=campaign_ids, starts_at__lte=now + timedelta(hours=1),
                                            ends_at__gt=now):
        try:
            record = campaign_reconcile(campaign=campaign, repair=True, source="drain-sweep")
        except (StoreUnavailable, Unavailable):
            log.warning("drain sweep: could not rebuild campaign %s (Redis unavailable)", campaign.pk)
            continue
        if record is not None and record.repairs:
            rebuilt.append(campaign.pk)
    return rebuilt


@shared_task(name="orders.tasks.preheat_due_campaigns", ignore_result=True)
def preheat_due_campaigns() -> dict:
    """Load published campaigns that start within the next hour into Redis before their first shopper."""
    loaded = []
    for campaign in Campaign.objects.due_for_preheat(at=timezone.now(), lead=timedelta(hours=1)):
        try:
            campaign_preheat(campaign=campaign)
            loaded.append(campaign.pk)
            log.info("preheated campaign %s (starts %s)", campaign.pk, campaign.starts_at.isoformat())
        except Unavailable:
            log.warning("preheat of campaign %s failed: Redis unavailable", campaign.pk)
    return {"preheated": loaded}


@shared_task(name="orders.tasks.reconcile_campaigns", ignore_result=True)
def reconcile_campaigns() -> dict:
    """Every few minutes: compare every live or recently ended campaign, repair the safe drift, record it."""
    from .reconciliation import campaign_reconcile, campaigns_to_reconcile

    results = {}
    for campaign in campaigns_to_reconcile():
        try:
            record = campaign_reconcile(campaign=campaign, repair=True, source="beat")
        except (StoreUnavailable, Unavailable):
            log.warning("reconciliation of campaign %s: Redis unavailable", campaign.pk)
            continue
        if record is not None:
            results[campaign.pk] = {"balanced": record.balanced, "repairs": len(record.repairs)}
    return results


@shared_task(name="orders.tasks.housekeeping", ignore_result=True)
def housekeeping() -> dict:
    """Every minute: trim persisted ledger entries past retention, purge idempotency records past 24 h,
    record the final figures of campaigns that ended."""
    from coupons.idempotency import purge_expired

    now_ms = int(timezone.now().timestamp() * 1000)
    retention_ms = settings.COUPONS_LEDGER_RETENTION_SECONDS * 1000
    trimmed = 0
    for campaign_id in campaigns_to_drain():
        try:
            trimmed += ledger.trim(campaign_id, retention_ms=retention_ms, now_ms=now_ms)
        except StoreUnavailable:
            log.warning("housekeeping: Redis unavailable while trimming campaign %s", campaign_id)
    purged = purge_expired()
    closed = []
    recently_ended = Campaign.objects.filter(preheated_at__isnull=False, ends_at__lte=timezone.now(),
                                             ends_at__gt=timezone.now() - timedelta(days=7))
    for campaign in recently_ended.exclude(events__type=CampaignEventType.CLOSED):
        if campaign_close(campaign=campaign) is not None:
            closed.append(campaign.pk)
            log.info("campaign %s closed: final figures recorded", campaign.pk)
    return {"trimmed": trimmed, "idempotency_purged": purged, "closed": closed}
