"""Phase `drain`: the worker's drain (orders.drain.drain_campaign) in this process on the ledger the phases before
it filled over HTTP, beside the same function with batch size 1.
"""
from __future__ import annotations

from common import log, measure_drain

from phases.context import Suite


def run(suite: Suite) -> None:
    """orders.drain.drain_campaign on the selling campaign's ledger (filled by the real claim path over
    HTTP) vs the same function with batch size 1, in this process, worker paused."""
    from orders import ledger

    a = suite.args
    suite.pause_worker(True)
    backlog = ledger.backlog_sizes([suite.sell_id]).get(suite.sell_id, 0)
    log(f"== drain: campaign {suite.sell_id}'s ledger holds {backlog:,} claims not yet in PostgreSQL")
    if backlog < 1000:
        suite.report["scenarios"]["drain"] = {"skipped": f"ledger backlog only {backlog}"}
        return
    suite.report["scenarios"]["drain"] = {
        "what": "drain_campaign in process on the ledger filled over HTTP; baseline: the same with batch 1",
        "backlog": backlog,
        **measure_drain(suite.stores.database_url, suite.sell_id, baseline_seconds=a.drain_baseline_seconds,
                        max_seconds=a.drain_max_seconds),
    }
