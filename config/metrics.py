"""/metrics (Prometheus text). Figures read at scrape time from PostgreSQL, so every web process answers
the same without shared state: the latest reconciliation of each campaign (drift, balance, per-user drift).
"""
from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import timedelta

from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest, multiprocess
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

import orders.metrics  # noqa: F401  (the claim counters register themselves)
from orders.models import Reconciliation


class ReconciliationCollector(Collector):
    """The latest reconciliation of every campaign reconciled in the last day."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        latest = (
            Reconciliation.objects.filter(created_at__gte=timezone.now() - timedelta(days=1))
            .order_by("campaign_id", "-created_at")
            .distinct("campaign_id")
        )
        drift = GaugeMetricFamily("couponrush_reconciliation_drift",
                                  "total stock - (Redis remaining + claims - restocked) at the last reconciliation",
                                  labels=["campaign"])
        balanced = GaugeMetricFamily("couponrush_reconciliation_balanced",
                                     "1 when the last reconciliation balanced (after its repairs)", labels=["campaign"])
        users = GaugeMetricFamily("couponrush_reconciliation_users_drift",
                                  "shoppers whose Redis count was wrong at the last reconciliation",
                                  labels=["campaign"])
        repairs = GaugeMetricFamily("couponrush_reconciliation_repairs",
                                    "repairs made by the last reconciliation", labels=["campaign"])
        when = GaugeMetricFamily("couponrush_reconciliation_timestamp_seconds",
                                 "when the campaign was last reconciled", labels=["campaign"])
        for record in latest:
            label = [str(record.campaign_id)]
            if record.drift is not None:
                drift.add_metric(label, record.drift)
            balanced.add_metric(label, 1 if record.balanced else 0)
            users.add_metric(label, record.users_drift)
            repairs.add_metric(label, len(record.repairs))
            when.add_metric(label, record.created_at.timestamp())
        yield from (drift, balanced, users, repairs, when)


class LiveCampaignCollector(Collector):
    """Remaining stock, ledger backlog and the age of the oldest claim not yet in PostgreSQL, per campaign
    whose Redis state should exist, read at scrape time (pipelined) so every process answers the same."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        from campaigns.redis_state import StoreUnavailable, remaining_many
        from orders import ledger
        from orders.services import campaigns_to_drain

        remaining = GaugeMetricFamily("couponrush_remaining_stock", "coupons left in Redis", labels=["campaign"])
        backlog = GaugeMetricFamily("couponrush_ledger_backlog", "claims not yet persisted in PostgreSQL",
                                    labels=["campaign"])
        age = GaugeMetricFamily("couponrush_ledger_oldest_age_seconds",
                                "age of the oldest claim not yet in PostgreSQL", labels=["campaign"])
        up = GaugeMetricFamily("couponrush_redis_up", "1 when Redis answered the scrape")
        ids = campaigns_to_drain()[:500]
        try:
            stocks = remaining_many(ids)
            backlogs = ledger.backlog_sizes(ids)
            now_ms = timezone.now().timestamp() * 1000
            for campaign_id in ids:
                label = [str(campaign_id)]
                if stocks.get(campaign_id) is not None:
                    remaining.add_metric(label, stocks[campaign_id] or 0)
                size = backlogs.get(campaign_id, 0)
                backlog.add_metric(label, size)
                oldest = ledger.oldest_unacknowledged_ms(campaign_id) if size else None
                age.add_metric(label, max(0.0, (now_ms - oldest) / 1000) if oldest else 0.0)
            up.add_metric([], 1)
        except StoreUnavailable:
            up.add_metric([], 0)
        yield from (remaining, backlog, age, up)


def metrics(request: HttpRequest) -> HttpResponse:
    """The process's own counters (or every web process's, in multiprocess mode) and the reconciliations."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        body = generate_latest(registry)
    else:
        body = generate_latest(REGISTRY)
    scraped = CollectorRegistry()
    scraped.register(ReconciliationCollector())
    scraped.register(LiveCampaignCollector())
    return HttpResponse(body + generate_latest(scraped), content_type=CONTENT_TYPE_LATEST)
