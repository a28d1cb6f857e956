"""Phase `verify`: the worker resumed and helped to drain every benched campaign, then manage.py verify_campaign
of each (the report's checks.verify_campaign; one not balanced makes the exit code 2).
"""
from __future__ import annotations

import time

from common import log, verify

from phases.context import Suite


def run(suite: Suite) -> None:
    from orders import ledger

    log("== verify: waiting for the worker to drain every benched campaign, then verify_campaign")
    suite.pause_worker(False)
    ids = [suite.sell_id, suite.storm_id]
    deadline = time.monotonic() + suite.args.drain_timeout
    while time.monotonic() < deadline:
        sizes = ledger.backlog_sizes(ids)
        if not any(sizes.values()):
            break
        log(f"  ledger backlog {sizes}")
        from orders import drain

        for cid, n in sizes.items():  # the worker drains on triggers; help it along
            if n:
                drain.drain_campaign(campaign_id=cid, max_seconds=2.0)
    results = {}
    for cid in ids:
        results[str(cid)] = verify(suite.env, cid)
    suite.report["checks"]["verify_campaign"] = {k: {"balanced": v["balanced"], "exit_code": v["exit_code"],
                                                     "output": v["output"]} for k, v in results.items()}
