"""Prometheus counters of the claim path: the claim pays one counter increment and one histogram sample.

With several web worker processes, set PROMETHEUS_MULTIPROC_DIR (an empty folder, `make run` does) so that
/metrics adds up every process; without it each process counts for itself.
"""
from __future__ import annotations

from prometheus_client import Counter, Histogram

CLAIMS = Counter("couponrush_claims", "Claim answers by campaign and outcome", ["campaign", "outcome"])
CLAIM_SECONDS = Histogram(
    "couponrush_claim_seconds", "Time to answer a claim (in the process, from request to answer)",
    buckets=(0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.1, 0.25, 0.5, 1.0),
)
