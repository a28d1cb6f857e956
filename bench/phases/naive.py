"""Phase `naive`: the naive PostgreSQL claim (bench/naive_claim.py: UPDATE ... WHERE stock > 0 + INSERT in one
transaction) on granian WSGI, the same wrk load as `selling`.
"""
from __future__ import annotations

import common
from common import log

from phases.context import BENCH_DIR, Suite, ratio


def run(suite: Suite) -> None:
    """The naive PostgreSQL claim (bench/naive_claim.py) on granian WSGI, the same wrk load."""
    import naive_claim

    a = suite.args
    campaign = 1
    naive_claim.prepare(suite.stores.database_url, campaign, a.sell_stock)

    def argv(port: int) -> list[str]:
        return common.resolve(["granian", "--interface", "wsgi", "naive_claim:app", "--working-dir",
                               str(BENCH_DIR), "--host", "127.0.0.1", "--port", str(port), "--workers",
                               str(a.workers), "--blocking-threads", "16"])

    log(f"== naive: UPDATE ... WHERE stock > 0 + INSERT in one PostgreSQL transaction, stock {a.sell_stock:,}")
    with suite.side_server("naive", argv, "/healthz", timeout=30) as (_, base):
        before = naive_claim.balance(suite.stores.database_url, campaign)
        naive = suite.wrk_with_ticker(
            "naive PostgreSQL", campaign,
            lambda: f"claims in PostgreSQL {naive_claim.balance(suite.stores.database_url, campaign)['claims']:,}",
            url=base, offset_key=-4)
    after = naive_claim.balance(suite.stores.database_url, campaign)
    sell = suite.report["scenarios"].get("selling", {}).get("couponrush", {})
    suite.report["scenarios"]["naive"] = {
        "what": "naive claim: one PostgreSQL transaction per claim on one stock row (bench/naive_claim.py)",
        "naive": naive, "balance": after, "balanced": after["remaining"] + after["claims"] == a.sell_stock,
        "sold": after["claims"] - before["claims"],
        "ratios": {"couponrush_selling_over_naive": ratio(sell.get("requests_per_s"), naive["requests_per_s"])},
    }
