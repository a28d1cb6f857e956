"""Phase `sale` (issue 35, goal 4): bench/sale.py, shopper journeys at fixed rates through nginx with a worker, on
the suite's stores.
"""
from __future__ import annotations

from common import RESULTS_DIR, BenchError, rel

from phases.context import Suite


def run(suite: Suite) -> None:
    """bench/sale.py on the suite's stores, with its own web server, worker, nginx and seed-go (the suite's are
    stopped first, as for the api phase)."""
    suite.stop_services()
    out = RESULTS_DIR / "sale.json"
    rc, data = suite.run_bench_script("sale", "sale.py", out, ok_codes=(0, 2))
    keys = ("label", "served_per_s", "shoppers_per_web_core_s", "status_requests_per_shopper", "claim_to_coupon",
            "failed")
    suite.report["scenarios"]["sale"] = {
        "what": "shopper journeys at fixed rates through nginx, 1 web worker, a Celery worker (bench/sale.py)",
        "results_file": rel(out), "runs": [{k: r[k] for k in keys} for r in data["runs"]],
        "step_p99_ms": {r["label"]: {s: v["p99_ms"] for s, v in r["steps"].items()} for r in data["runs"]},
        "claim_alone": data["claim_alone"], "longpoll": data.get("longpoll"), "checks": data.get("checks"),
        "loadavg": data["host"]}
    if rc == 2:
        raise BenchError("sale.py: the sale's campaign did not balance (verify_campaign)")
