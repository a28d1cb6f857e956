"""Prometheus counters of the claim path and of the ledger drain.

The claim pays one counter increment and one histogram sample. The drain (Celery worker processes) counts
its batches, the claims it wrote and its failures.

Several processes add up through prometheus_client's multiprocess mode: set PROMETHEUS_MULTIPROC_DIR (an
empty folder at every start) in every process. Under `make run` the web workers and the Celery worker
share one folder, so the web's /metrics shows the drain's counters too. Where the worker runs apart
(docker-compose.yml, another host), set COUPONRUSH_WORKER_METRICS_PORT: the worker's main process then
serves the counters of its pool processes on that port (`worker_ready` below), for Prometheus to scrape
beside the web's /metrics.
"""
from __future__ import annotations

import logging
import os
from typing import Any

from celery.signals import worker_ready
from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram, multiprocess, start_http_server

log = logging.getLogger(__name__)

CLAIMS = Counter("couponrush_claims", "Claim answers by campaign and outcome", ["campaign", "outcome"])
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
