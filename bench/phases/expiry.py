"""Phase `expiry`: bench/expiry_sweep.py (1,000,000 due coupons, its own database on the suite's server) beside
the row-by-row baseline; its output shown as it runs, its JSON summed up in the report.
"""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time

import common
from common import BASE_DIR, RESULTS_DIR, BenchError, log, rel

from phases.context import BENCH_DIR, Suite


def run(suite: Suite) -> None:
    a = suite.args
    argv = [sys.executable, str(BENCH_DIR / "expiry_sweep.py"), "--coupons", str(a.expiry_coupons),
            "--baseline", str(a.expiry_baseline), "--poll", "2"]
    log(f"== expiry: {shlex.join(argv[1:])}")
    env = {**os.environ, "DATABASE_URL": suite.stores.database_url, "REDIS_URL": suite.stores.redis_url}
    started = time.time()
    proc = subprocess.Popen(argv, cwd=BASE_DIR, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True, preexec_fn=common._child_setup)  # noqa: PLW1509
    assert proc.stdout is not None
    for line in proc.stdout:
        print("    " + line.rstrip(), flush=True)
    rc = proc.wait()
    files = sorted(p for p in RESULTS_DIR.glob("expiry_sweep-*.json") if p.stat().st_mtime >= started - 1)
    if not files:
        raise BenchError(f"expiry_sweep.py wrote no results (exit code {rc})")
    data = json.loads(files[-1].read_text())
    sweep, base = data["sweep"], data.get("baseline") or {}
    suite.report["scenarios"]["expiry"] = {
        "what": "coupons.compensation.expire_and_lapse_due on N due coupons vs row by row (bench/expiry_sweep.py)",
        "exit_code": rc, "results_file": rel(files[-1]),
        "sweep": {"coupons": sweep.get("expired"), "seconds": sweep.get("elapsed_s"),
                  "coupons_per_s": sweep.get("coupons_per_s"), "batches": sweep.get("batches"),
                  "batch_size": sweep.get("batch_size"), "batch_ms": sweep.get("batch_ms"),
                  "rss_kib": sweep.get("rss")},
        "row_by_row": {"coupons": base.get("expired"), "seconds": base.get("elapsed_s"),
                       "coupons_per_s": base.get("coupons_per_s"), "rss_kib": base.get("rss")},
        "ratios": data.get("ratios"), "checks_ok": rc == 0,
        "goal": {"coupons_per_s": 50_000, "met": (sweep.get("coupons_per_s") or 0) >= 50_000},
    }
