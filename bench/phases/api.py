"""Phase `api` (issue 35): bench/api_routes.py, every shopper route beside the claim, on the suite's stores."""
from __future__ import annotations

from common import RESULTS_DIR, rel

from phases.context import Suite


def run(suite: Suite) -> None:
    """bench/api_routes.py on the suite's stores, the public reads through nginx too and each route with a goal
    again at its goal's rate (--proxy --paced); it runs its own web server (1 worker) and no worker, so the
    suite's are stopped first: they would share the cores, and the worker would drain its pending claims."""
    suite.stop_services()
    out = RESULTS_DIR / "api_routes.json"
    _, data = suite.run_bench_script("api", "api_routes.py", out, options=("--proxy", "--paced"))
    suite.report["scenarios"]["api"] = {
        "what": "every shopper route beside the claim, wrk -t2 -c50, 1 web worker, through nginx for the public "
                "reads, and paced at each goal's rate (bench/api_routes.py --proxy --paced)",
        "results_file": rel(out), "table": data["table"], "checks": data.get("checks"),
        "loadavg": data["host"]}
