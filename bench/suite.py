"""The benchmark suite of issue 6 (`make bench`): every scenario beside its baseline, measured in one run.

    .venv/bin/python bench/suite.py [--duration 10] [--quick] [--skip expiry,memory,...]

Phases (bench/README.md documents each and how to read the report):

  setup     stores (DATABASE_URL / REDIS_URL or embedded servers under var/bench/), wrk, seed-go
            (../shared/reference/seed-go/build.sh), the fixed-rate client bench/loadgen (Go, built into var/bench/),
            migrate, the web server of the run command (devstack.web_command), a Celery worker, seed-go
  selling   wrk -t2 -c100 on a campaign that never sells out (stock 2,000,000, limit 1), 15% repeated shoppers,
            beside seed-go and the bare endpoint of the same server (the worker is paused: the claim path alone)
  fixed     bench/loadgen at 80% and 50% of each one's measured maximum, latency from the intended send time,
            3 rounds interleaved with seed-go's, the median round of each reported
  profile   py-spy of the web workers under the same wrk load: the claim path's top frames
  drain     orders.drain.drain_campaign on the ledger the phases above filled, vs batch size 1
  storm     the flash sale: stock 10,000, wrk, worker running: sell-out, last claim -> last coupon in PostgreSQL
  soldout   wrk on the sold-out campaign vs the bare endpoint, measured right after
  naive     the naive PostgreSQL claim (bench/naive_claim.py), same wrk load
  verify    manage.py verify_campaign on the benched campaigns
  api       bench/api_routes.py: every shopper route beside the claim (issue 35), with its own web server on
            the suite's stores (the suite's web server, worker and seed-go stopped first)
  sale      bench/sale.py: shopper journeys at fixed rates through nginx, with a worker (issue 35, goal 4): shoppers
            served per second per web core, each step's p99 from the intended send, polling vs the long poll
  memory    Redis bytes per claimed shopper / ledger entry / answer key, 1,000,000 claims loaded into a private
            Valkey through the claim script
  expiry    bench/expiry_sweep.py: 1,000,000 due coupons vs row by row, peak RSS

seed-go lives outside the repository: when it is not beside the project (or does not build) every phase runs
without it, and the report says so (notes, setup.seed_go, each scenario's seed_go: {"skipped": reason}).

Writes bench/results/suite-<timestamp>.json, .svg (chart) and .md (docs/benchmarks.md's table). Exit 0: ran and every
check passed; 2: ran but a check failed (a campaign not balanced, a goal's check not run); 1: could not run.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import platform
import signal
import sys
import time
import traceback
from collections.abc import Callable
from datetime import UTC, datetime

import common
from common import (
    SETTINGS_MODULE,
    BenchError,
    Interrupted,
    Processes,
    Stores,
    default_workers,
    git_revision,
    install_signal_handlers,
    log,
)
from phases import (
    api,
    drain,
    expiry,
    fixed,
    memory,
    naive,
    profile,
    sale,
    selling,
    soldout,
    storm,
    syscalls,
    verify,
)
from phases.context import Suite
from phases.report import figures_table, print_summary, write_outputs

common.set_name("bench")

# The phases in the order they run (each one's module: bench/phases/<phase>.py)
PHASE_RUNS: dict[str, Callable[[Suite], None]] = {
    "selling": selling.run, "fixed": fixed.run, "syscalls": syscalls.run, "profile": profile.run,
    "drain": drain.run, "storm": storm.run, "soldout": soldout.run, "naive": naive.run, "verify": verify.run,
    "api": api.run, "sale": sale.run, "memory": memory.run, "expiry": expiry.run}
PHASES = list(PHASE_RUNS)


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--duration", type=float, default=10, help="seconds of each load run (10)")
    p.add_argument("--connections", type=int, default=100, help="connections, wrk -c and loadgen -c (100)")
    p.add_argument("--threads", type=int, default=2, help="wrk threads, -t (2)")
    p.add_argument("--workers", type=int, default=default_workers(),
                   help=f"web server workers ({default_workers()}: the run command's default, CPUs less one)")
    p.add_argument("--server-args", default="", help="extra options for the web server (config/server.py)")
    p.add_argument("--stock", type=int, default=10_000, help="stock of the storm campaign (10000)")
    p.add_argument("--sell-stock", type=int, default=2_000_000, help="stock of the selling campaign (2000000)")
    p.add_argument("--repeat", type=float, default=0.15, help="share of requests from an already-seen shopper (0.15)")
    p.add_argument("--shoppers", type=int, default=2_000_000, help="shoppers in the token file (2000000)")
    p.add_argument("--fixed-share", type=float, default=0.8, help="fixed rate as a share of the wrk maximum (0.8)")
    p.add_argument("--fixed-low-share", type=float, default=0.5, help="a second, lower fixed rate (0.5; 0: none)")
    p.add_argument("--fixed-rates", default="4000,8000,12000",
                   help="equal absolute fixed rates for both sides, comma-separated (4000,8000,12000; '': none)")
    p.add_argument("--fixed-rounds", type=int, default=None,
                   help="interleaved rounds of each fixed-rate load; the median round is reported (3; --quick: 1)")
    p.add_argument("--bare-path", default="/healthz", help="the bare JSON endpoint of the same server (/healthz)")
    p.add_argument("--drain-baseline-seconds", type=float, default=3.0, help="seconds of the batch-1 drain (3)")
    p.add_argument("--drain-max-seconds", type=float, default=60.0, help="cap of the bulk drain (60)")
    p.add_argument("--drain-timeout", type=float, default=60.0, help="wait for the storm's coupons (60)")
    p.add_argument("--memory-claims", type=int, default=1_000_000, help="claims of the memory phase (1000000)")
    p.add_argument("--memory-scripted", type=int, default=100_000,
                   help="of those, claims sent through the claim script (100000); the rest written directly")
    p.add_argument("--memory-rate", type=int, default=30_000,
                   help="claims/s assumed for the answer and rate keys alive at once (30000)")
    p.add_argument("--expiry-coupons", type=int, default=1_000_000, help="due coupons of the expiry phase")
    p.add_argument("--expiry-baseline", type=int, default=5_000, help="row-by-row coupons of the expiry phase")
    p.add_argument("--profile-rate", type=int, default=0,
                   help="profile under bench/loadgen at this fixed rate instead of a saturating wrk (0: wrk)")
    p.add_argument("--syscall-rate", type=int, default=4000,
                   help="fixed rate of the syscalls phase, both sides (4000 claims/s)")
    p.add_argument("--skip", default="", help=f"comma-separated phases to skip: {','.join(PHASES)}")
    p.add_argument("--quick", action="store_true", help="3 s loads, 100k memory claims, 100k expiry (a smoke run)")
    p.add_argument("--force-flush", action="store_true", help="flush the bench's Redis dbs even if not marked")
    args = p.parse_args(argv)
    if args.quick:
        args.duration, args.memory_claims, args.expiry_coupons, args.expiry_baseline = 3, 200_000, 100_000, 1000
        args.memory_scripted = 20_000
        args.shoppers = min(args.shoppers, 300_000)
    if args.fixed_rounds is None:
        args.fixed_rounds = 1 if args.quick else 3
    if args.fixed_rounds < 1:
        p.error("--fixed-rounds must be at least 1")
    try:
        args.fixed_rates = [int(r) for r in args.fixed_rates.split(",") if r.strip()]
    except ValueError:
        p.error("--fixed-rates takes whole claims/s, comma-separated")
    args.skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    unknown = args.skip - set(PHASES)
    if unknown:
        p.error(f"unknown phases {sorted(unknown)}; phases: {','.join(PHASES)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    install_signal_handlers()
    procs = Processes()
    stores_box: list[Stores] = []
    suite = Suite(args, procs, stores_box)
    rep = suite.report
    rep.update(timestamp=datetime.now(UTC).isoformat(timespec="seconds"), git=git_revision(),
               host={"cpus": os.cpu_count(), "loadavg_before": loadavg(), "python": platform.python_version()},
               config={k: (sorted(v) if isinstance(v, set) else v) for k, v in vars(args).items()},
               settings=SETTINGS_MODULE)
    exit_code = 0
    t0 = time.monotonic()
    phase_times: dict[str, float] = {}
    try:
        log("== setup")
        suite.setup()
        phase_times["setup"] = round(time.monotonic() - t0, 1)
        for phase in PHASES:
            if phase in args.skip:
                log(f"== {phase}: skipped (--skip)")
                continue
            if phase == "memory":
                suite.stop_services()
            t = time.monotonic()
            try:
                PHASE_RUNS[phase](suite)
            except (Interrupted, KeyboardInterrupt):
                raise
            except Exception as exc:  # noqa: BLE001 - one phase failing must not lose the others' figures
                log(f"ERROR in {phase}: {type(exc).__name__}: {exc}")
                if not isinstance(exc, BenchError):
                    traceback.print_exc()
                rep["scenarios"].setdefault(phase, {})["error"] = f"{type(exc).__name__}: {exc}"
                exit_code = 2
            phase_times[phase] = round(time.monotonic() - t, 1)
            log(f"== {phase} done in {phase_times[phase]}s (total {time.monotonic() - t0:.0f}s)")
    except Interrupted as exc:
        log(f"{exc}: stopping ...")
        exit_code = 130
    except BenchError as exc:
        log(f"ERROR: {exc}")
        exit_code = 1
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        with contextlib.suppress(Exception):
            suite.pause_worker(False)
        procs.stop_all()
        for stores in stores_box:
            if stores.embedded:
                log("stopping the embedded servers ...")
            stores.stop()
        log("cleaned up")
    rep["phase_seconds"] = phase_times
    rep["total_seconds"] = round(time.monotonic() - t0, 1)
    rep["host"]["loadavg_after"] = loadavg()
    if rep["scenarios"]:
        rep["table"] = figures_table(rep)
        write_outputs(rep)
        print_summary(rep)
        for v in rep["checks"].get("verify_campaign", {}).values():
            if not v["balanced"] and exit_code == 0:
                exit_code = 2
        if rep["scenarios"].get("expiry", {}).get("checks_ok") is False and exit_code == 0:
            exit_code = 2
    return exit_code


if __name__ == "__main__":
    sys.exit(main())
