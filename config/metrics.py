"""/metrics (Prometheus text): the counters of every process (claims, drain, coupon uses, expiry sweep; see
orders/metrics.py for multiprocess mode and the worker's own port), and figures read at scrape time, so
every web process answers the same without shared state: the latest reconciliation of each campaign (drift,
balance, per-user drift), remaining stock, ledger backlog and its age, Redis up, Celery queue length.
"""
from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest, multiprocess
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from redis import RedisError

import coupons.metrics  # noqa: F401  (the counters register themselves)
import orders.metrics  # noqa: F401
from orders.metrics import CLAIM_TALLY
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


# kombu's Redis transport keeps a queue as lists: the name itself (priority 0) and name + "\x06\x16" + step.
_KOMBU_PRIORITY_SEP = "\x06\x16"
_KOMBU_PRIORITY_STEPS = (0, 3, 6, 9)
_broker_clients: dict[str, Any] = {}


def _broker_client(url: str) -> Any:
    import redis

    client = _broker_clients.get(url)
    if client is None:
        timeout = settings.COUPONS_REDIS_SOCKET_TIMEOUT
        client = redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout)
        _broker_clients[url] = client
    return client


def celery_queue_names() -> list[str]:
    from config.celery import app

    names = [app.conf.task_default_queue]
    for queue in app.conf.task_queues or ():
        if queue.name not in names:
            names.append(queue.name)
    return names


class CeleryQueueCollector(Collector):
    """Tasks waiting in the broker's queues (LLEN), when the broker is Redis; nothing for another broker."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        url = settings.CELERY_BROKER_URL or ""
        if not url.startswith(("redis://", "rediss://", "unix://")):
            return
        length = GaugeMetricFamily("couponrush_celery_queue_length", "tasks waiting in the broker's queue",
                                   labels=["queue"])
        up = GaugeMetricFamily("couponrush_celery_broker_up", "1 when the broker answered the scrape")
        try:
            pipe = _broker_client(url).pipeline(transaction=False)
            names = celery_queue_names()
            for name in names:
                for step in _KOMBU_PRIORITY_STEPS:
                    pipe.llen(f"{name}{_KOMBU_PRIORITY_SEP}{step}" if step else name)
            sizes = pipe.execute()
            per_queue = len(_KOMBU_PRIORITY_STEPS)
            for i, name in enumerate(names):
                length.add_metric([name], sum(sizes[i * per_queue:(i + 1) * per_queue]))
            up.add_metric([], 1)
        except RedisError:
            up.add_metric([], 0)
        yield from (length, up)


def metrics(request: HttpRequest) -> HttpResponse:
    """The process's own counters (or every web process's, in multiprocess mode) and the reconciliations."""
    CLAIM_TALLY.flush()  # this process's claims up to now (the other processes' flush on their own)
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        body = generate_latest(registry)
    else:
        body = generate_latest(REGISTRY)
    scraped = CollectorRegistry()
    scraped.register(ReconciliationCollector())
    scraped.register(LiveCampaignCollector())
    scraped.register(CeleryQueueCollector())
    return HttpResponse(body + generate_latest(scraped), content_type=CONTENT_TYPE_LATEST)
