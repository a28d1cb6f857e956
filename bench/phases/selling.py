"""Phase `selling`: claims/s while a campaign of 2,000,000 sells (never sold out), worker paused: couponrush beside
seed-go, the bare endpoint of the same server and the same application under granian's ASGI interface.
"""
from __future__ import annotations

import sys
from typing import Any

from claim_cost import commandstats, script_cost
from common import log

from phases.context import Suite, r3, ratio


def run(suite: Suite) -> None:
    """Claims/s while selling: nothing sells out; couponrush vs seed-go vs the bare endpoint."""
    a = suite.args
    log(f"== selling: wrk -t{a.threads} -c{a.connections} -d{a.duration}s, {a.repeat:.0%} repeated shoppers, "
        f"campaign {suite.sell_id} (stock {a.sell_stock:,}) vs {'seed-go vs ' if suite.seed else ''}{a.bare_path}")
    suite.pause_worker(True)
    before = suite.stock(suite.sell_id) or 0
    bare = suite.wrk_with_ticker("bare", None, lambda: "GET " + a.bare_path, url=suite.base + a.bare_path)
    stats_before = commandstats(suite.redis)
    claim = suite.wrk_with_ticker("couponrush selling", suite.sell_id,
                                 lambda: f"sold {before - (suite.stock(suite.sell_id) or 0):,}")
    claim["redis_evalsha"] = script_cost(stats_before, commandstats(suite.redis))
    log(f"couponrush selling: the claim script cost Redis {claim['redis_evalsha']['usec_per_call']} us per call "
        f"(INFO commandstats, {claim['redis_evalsha']['calls']:,} EVALSHA)")
    after = suite.stock(suite.sell_id) or 0
    seed = suite.seed_wrk("seed-go selling", 1, a.sell_stock, offset_key=-1)
    sold = before - after
    granian = granian_selling(suite)
    suite.report["scenarios"]["selling"] = {
        "what": "claims while selling (stock never runs out), worker paused",
        "couponrush": {**claim, "sold": sold, "sold_per_s": r3(sold / claim["elapsed_s"])},
        "seed_go": seed,
        "bare": bare,
        "granian_asgi": granian,
        "ratios": {"couponrush_over_seed_go": ratio(claim["requests_per_s"], seed.get("requests_per_s")),
                   "claim_over_bare": ratio(claim["requests_per_s"], bare["requests_per_s"]),
                   "couponrush_over_granian_asgi": ratio(claim["requests_per_s"], granian["requests_per_s"])},
        "goal": {"claims_per_s": 17_000, "p99_ms": 20, "floor_claims_per_s": 12_000,
                 "met": bool(claim["requests_per_s"] >= 17_000 and (claim.get("p99_ms") or 1e9) <= 20)},
    }


def granian_selling(suite: Suite) -> dict[str, Any]:
    """The same claims to the same application (config/asgi.py) under granian's ASGI interface, the web
    server before config/server.py, with the same workers: what the project's own server gains."""
    a = suite.args

    def argv(port: int) -> list[str]:
        return [sys.executable, "-m", "granian", "--interface", "asgi", "config.asgi:application",
                "--host", "127.0.0.1", "--port", str(port), "--workers", str(a.workers)]

    with suite.side_server("granian", argv, a.bare_path) as (server, base):
        before = suite.stock(suite.sell_id) or 0
        return suite.wrk_with_ticker("granian ASGI selling", suite.sell_id,
                                    lambda: f"sold {before - (suite.stock(suite.sell_id) or 0):,}",
                                    url=base, server=server)
