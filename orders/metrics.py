"""Prometheus counters of the claim path and of the ledger drain.

The claim pays one counter increment and one histogram sample, added up in the process and written to the
metric values five times a second (ClaimTally below). The drain (Celery worker processes) counts
its batches, the claims it wrote and its failures.

Several processes add up through prometheus_client's multiprocess mode: set PROMETHEUS_MULTIPROC_DIR (an
empty folder at every start) in every process. Under `make run` the web workers and the Celery worker
share one folder, so the web's /metrics shows the drain's counters too. Where the worker runs apart
(docker-compose.yml, another host), set COUPONRUSH_WORKER_METRICS_PORT: the worker's main process then
serves the counters of its pool processes on that port (`worker_ready` below), for Prometheus to scrape
beside the web's /metrics.
"""
from __future__ import annotations

import atexit
import bisect
import logging
import os
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

from celery.signals import worker_ready
from django.utils import timezone
from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram, multiprocess, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)

CLAIMS = Counter("couponrush_claims", "Claim answers by campaign, outcome and storefront",
                 ["campaign", "outcome", "storefront"])
# The claims counter's storefront label: the id of the storefront whose key signed the shopper's token, or these.
DEFAULT_STOREFRONT = "default"  # a token of the default key (COUPONS_TOKEN_SECRET)
UNKNOWN_STOREFRONT = "-"  # refused before the token was found valid (no storefront can be told)
CLAIM_SECONDS = Histogram(
    "couponrush_claim_seconds", "Time to answer a claim (in the process, from request to answer)",
    buckets=(0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.1, 0.25, 0.5, 1.0),
)

DRAIN_BATCHES = Counter("couponrush_drain_batches", "Ledger batches the drain wrote to PostgreSQL and acknowledged",
                        ["campaign"])
DRAIN_ROWS = Counter("couponrush_drain_rows",
                     "Claims the drain wrote to PostgreSQL (new rows; a second delivery of an entry adds none)",
                     ["campaign"])
DRAIN_READ = Counter("couponrush_drain_read", "Ledger entries the drain read (new and taken over)", ["campaign"])
DRAIN_FAILURES = Counter("couponrush_drain_failures",
                         "Drains of a campaign that stopped on an error (its entries stay pending; the next drain "
                         "takes them over)", ["campaign"])
LEDGER_PARKED = Counter("couponrush_ledger_parked",
                        "Ledger entries the drain could never persist, parked (orders_parkedledgerentry) and "
                        "acknowledged so they hold back no other claim; once per entry", ["campaign"])



class ClaimTally:
    """The claim path's counter and histogram, added up in this process and handed to prometheus_client by a
    daemon thread every `every` seconds, before this process's /metrics answers, and at exit.

    In multiprocess mode each prometheus_client increment is a write to a memory-mapped file under a lock;
    a claim made three of them (its counter, its histogram bucket and sum), a tenth of the cost of a sold-out
    answer. Here a claim adds to a dict under an uncontended lock. What a scrape of another process's
    /metrics sees lags by at most `every` seconds; a process killed with SIGKILL loses at most that much.
    """

    def __init__(self, counter: Counter, histogram: Histogram, every: float = 0.2) -> None:
        self.counter, self.histogram, self.every = counter, histogram, every
        self.bounds = tuple(histogram._upper_bounds)  # pinned prometheus_client: the buckets' upper bounds
        self.lock = threading.Lock()
        self.counts: dict[tuple[str, str, str], int] = {}
        self.buckets = [0] * len(self.bounds)
        self.seconds = 0.0
        self.children: dict[tuple[str, str, str], Any] = {}  # a labelled child per (campaign, outcome, storefront)
        self.flushing = False  # whether this process's flusher thread runs
        os.register_at_fork(after_in_child=self._forked)

    def add(self, campaign: str, outcome: str, seconds: float, storefront: str = DEFAULT_STOREFRONT) -> None:
        if not self.flushing:  # the first claim of this process
            self._start_flusher()
        key = (campaign, outcome, storefront)
        with self.lock:
            counts = self.counts
            counts[key] = counts.get(key, 0) + 1
            self.buckets[bisect.bisect_left(self.bounds, seconds)] += 1
            self.seconds += seconds

    def flush(self) -> None:
        """Hand what was added since the last flush to the counter and the histogram."""
        with self.lock:
            if not self.counts:
                return
            counts, self.counts = self.counts, {}
            buckets, self.buckets = self.buckets, [0] * len(self.bounds)
            seconds, self.seconds = self.seconds, 0.0
        for key, n in counts.items():
            child = self.children.get(key)
            if child is None:
                if len(self.children) > 10_000:  # campaigns come and go: keep a bounded number of children
                    self.children.clear()
                child = self.children[key] = self.counter.labels(*key)
            child.inc(n)
        for i, n in enumerate(buckets):
            if n:
                self.histogram._buckets[i].inc(n)
        self.histogram._sum.inc(seconds)

    def _forked(self) -> None:
        """In a forked child: nothing counted yet (the parent's counts are the parent's), no thread, a new lock
        (another thread of the parent may have held it at the fork)."""
        self.lock = threading.Lock()
        self.counts, self.buckets, self.seconds = {}, [0] * len(self.bounds), 0.0
        self.children = {}
        self.flushing = False

    def _start_flusher(self) -> None:
        with self.lock:
            if self.flushing:
                return
            self.flushing = True
        threading.Thread(target=self._flush_forever, name="claim-metrics", daemon=True).start()
        atexit.register(self.flush)

    def _flush_forever(self) -> None:
        while True:
            time.sleep(self.every)
            try:
                self.flush()
            except Exception:  # never let the counting thread die: the next flush tries again
                log.exception("could not write the claim metrics")


CLAIM_TALLY = ClaimTally(CLAIMS, CLAIM_SECONDS)

WORKER_METRICS_PORT_ENV = "COUPONRUSH_WORKER_METRICS_PORT"


def worker_registry() -> CollectorRegistry:
    """The registry a worker serves: every process's counters in multiprocess mode, else this process's."""
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return REGISTRY
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)
    return registry


@worker_ready.connect
def serve_worker_metrics(**_: Any) -> None:
    """Serve the worker's counters on COUPONRUSH_WORKER_METRICS_PORT (unset: the web's /metrics has them)."""
    port = os.environ.get("COUPONRUSH_WORKER_METRICS_PORT")
    if not port:
        return
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        log.warning("%s is set without PROMETHEUS_MULTIPROC_DIR: the counters of the worker's pool processes "
                    "are not seen by the metrics server", WORKER_METRICS_PORT_ENV)
    start_http_server(int(port), registry=worker_registry())
    log.info("worker metrics on port %s", port)


# Read at scrape time (registered with core.metrics in OrdersConfig.ready()).


class ReconciliationCollector(Collector):
    """The latest reconciliation of every campaign reconciled in the last day."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        from .models import Reconciliation

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
        from orders.selectors import campaigns_to_drain

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
