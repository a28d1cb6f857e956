"""Phase `soldout`: claims on the sold-out storm campaign beside the bare endpoint of the same server, then the
same claims to bench/bare_post.py (the project's web server answering fixed JSON once the body is in).
"""
from __future__ import annotations

import shlex
import sys

from common import log

from phases.context import BENCH_DIR, Suite, ratio


def run(suite: Suite) -> None:
    a = suite.args
    for _ in range(3):  # a slow host (or --quick's 3 s) may leave the storm some stock: sell it first
        if (left := suite.stock(suite.storm_id) or 0) <= 0:
            break
        log(f"== sold-out storm: the storm campaign has {left:,} left: selling it out first (not measured)")
        suite.wrk("selling out the storm campaign", suite.base, campaign_id=suite.storm_id)
    if (suite.stock(suite.storm_id) or 0) > 0:
        log("== sold-out storm: the storm campaign is not sold out: skipped")
        suite.report["scenarios"]["soldout"] = {"skipped": "storm campaign not sold out"}
        return
    log(f"== sold-out storm: campaign {suite.storm_id} (sold out) vs {a.bare_path}, same server, back to back; "
        "then the same claims to bench/bare_post.py: the same server, a fixed answer")
    soldout = suite.wrk_with_ticker("couponrush sold-out", suite.storm_id, lambda: "answering sold_out")
    bare = suite.wrk_with_ticker("bare again", None, lambda: "GET " + a.bare_path, url=suite.base + a.bare_path)

    def argv(port: int) -> list[str]:
        return [sys.executable, str(BENCH_DIR / "bare_post.py"), "--host", "127.0.0.1", "--port", str(port),
                "--workers", str(a.workers), *shlex.split(a.server_args)]

    with suite.side_server("bare-post", argv, "/") as (server, base):
        bare_post = suite.wrk_with_ticker("bare POST", suite.storm_id, lambda: "POST, body read, fixed answer",
                                         url=base, server=server)
    suite.report["scenarios"]["soldout"] = {
        "what": "claims on a sold-out campaign (local sold-out flag) vs the bare endpoint of the same server, "
                "and vs the same claim requests to the same server answering fixed JSON once the body is in "
                "(bench/bare_post.py: config/server.py with the web server's workers and options)",
        "couponrush": soldout, "bare": bare, "bare_post": bare_post,
        "ratios": {"soldout_over_bare": ratio(soldout["requests_per_s"], bare["requests_per_s"]),
                   "soldout_over_bare_post": ratio(soldout["requests_per_s"], bare_post["requests_per_s"])},
        "goal": {"soldout_over_bare": 1.0, "met": (ratio(soldout["requests_per_s"], bare["requests_per_s"])
                                                   or 0) >= 1.0},
    }
