"""Claim storm: how fast couponrush sells out a flash sale, and whether every claim becomes a coupon.

    .venv/bin/python bench/claim_storm.py [--stock 10000] [--duration 10] [--connections 100] [--threads 2]
                                          [--workers 2] [--with-seed-go] [--server-args "--threads 32"]

A benchmark, not a test. In one run it

  1. gets a PostgreSQL and a Redis: DATABASE_URL / REDIS_URL when set (the database is created when missing and
     migrated; the Redis db is FLUSHED at start, so give the bench a db of its own, e.g. /9: it refuses a db
     holding keys it did not write unless --force-flush), otherwise embedded servers under var/bench/ started
     the way devstack/ starts them;
  2. starts the web server with the run command's command line (devstack.web_command: config/server.py,
     --workers 2, plus --server-args) with DEBUG off, and a Celery worker (devstack.worker_command)
     that drains the claim ledger into PostgreSQL;
  3. creates a published campaign (`manage.py campaign_create ... --publish`), writes shoppers with valid tokens
     (../shared/reference/wrk/tokens.py) and storms the claim route with wrk and ../shared/reference/wrk/claim.lua,
     polling Redis every 50 ms for the time to sell out and PostgreSQL for the time until every claim is a coupon;
  4. runs `manage.py verify_campaign`, measures the bare /healthz endpoint of the same server with the same load
     (claim/bare ratio) and, with --with-seed-go, the seed's Go yardstick (../shared/reference/seed-go) on the
     same Redis (couponrush/seed-go ratio);
  5. prints a summary table, writes it as JSON to bench/results/claim_storm-<timestamp>.json and stops
     everything it started, also on Ctrl-C.

The machine is small and shared: absolute figures move from run to run, the ratios much less.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import signal
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import common  # noqa: E402 - bench/ is on sys.path when this runs as a script
from common import (
    CLAIM_LUA,
    DEVSTACK_PROBLEM,
    MARKER_KEY,
    RESULTS_DIR,
    SETTINGS_MODULE,
    TOKENS_PY,
    BenchError,
    Interrupted,
    Processes,
    Stores,
    build_seed_go,
    child_env,
    create_campaign,
    default_workers,  # noqa: E402
    ensure_wrk,
    flush_redis,
    free_port,
    git_revision,
    http_ok,
    install_signal_handlers,
    log,
    make_tokens,
    manage,
    redact,
    redis_db_of,
    rel,
    run_step,
    start_stores,
    verify,
    wait_until,
    wait_worker_ready,
    web_argv,
    with_redis_db,
    worker_argv,
)

common.set_name("claim_storm")


def run_wrk(label: str, url: str, args: argparse.Namespace, script_args: list[str] | None = None,
            script: Path | None = None) -> dict[str, Any]:
    return common.run_wrk(label, url, threads=args.threads, connections=args.connections, duration=args.duration,
                          script_args=script_args, script=script)

# ---------------------------------------------------------------------------------------------------------
# Sell-out monitor


class SellOutMonitor(threading.Thread):
    """Poll the campaign's stock in Redis every 50 ms and its coupons in PostgreSQL (every other tick once the
    load is over or the stock is gone) until every sold coupon is in PostgreSQL. Times are seconds since
    `t0` (the moment wrk was started)."""

    def __init__(self, *, redis_url: str, stock_key: str, campaign_id: int, initial_stock: int,
                 load_done: threading.Event, drain_timeout: float, interval: float = 0.05) -> None:
        super().__init__(name="sell-out-monitor", daemon=True)
        import redis

        self.redis = redis.Redis.from_url(redis_url, socket_timeout=2)
        self.stock_key, self.campaign_id, self.initial = stock_key, campaign_id, initial_stock
        self.load_done, self.drain_timeout, self.interval = load_done, drain_timeout, interval
        self.stop_event = threading.Event()
        self.t0 = time.monotonic()
        self.first_claim_at: float | None = None
        self.sold_out_at: float | None = None
        self.all_coupons_at: float | None = None
        self.load_done_at: float | None = None
        self.remaining: int | None = None
        self.coupons = 0
        self.error: str | None = None

    def count_coupons(self) -> int:
        from coupons.models import Coupon

        return Coupon.objects.filter(campaign_id=self.campaign_id).count()

    def run(self) -> None:
        from django.db import connection

        tick = 0
        try:
            while not self.stop_event.is_set():
                now = time.monotonic() - self.t0
                raw = self.redis.get(self.stock_key)
                self.remaining = int(raw) if raw is not None else None
                if self.remaining is not None:
                    if self.first_claim_at is None and self.remaining < self.initial:
                        self.first_claim_at = now
                    if self.sold_out_at is None and self.remaining <= 0:
                        self.sold_out_at = now
                if self.load_done.is_set() and self.load_done_at is None:
                    self.load_done_at = now
                final = self.remaining is not None and (self.remaining <= 0 or self.load_done.is_set())
                if final and tick % 2 == 0:
                    self.coupons = self.count_coupons()
                    if self.coupons >= self.initial - self.remaining:  # type: ignore[operator]
                        self.all_coupons_at = now
                        return
                if self.load_done_at is not None and now - self.load_done_at > self.drain_timeout:
                    self.error = f"coupons still {self.coupons} of {self.initial - (self.remaining or 0)} " \
                                 f"{self.drain_timeout:.0f}s after the load ended"
                    return
                tick += 1
                self.stop_event.wait(self.interval)
        except Exception as exc:  # noqa: BLE001 - reported in the summary
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            connection.close()

    @property
    def sold(self) -> int | None:
        return None if self.remaining is None else self.initial - self.remaining


def claim_storm(args: argparse.Namespace, env: dict[str, str], base: str, campaign_id: int, tokens: Path,
                stores: Stores) -> dict[str, Any]:
    """wrk on the claim route while the monitor records sell-out and the drain into PostgreSQL."""
    from campaigns.redis_state import campaign_keys

    load_done = threading.Event()
    monitor = SellOutMonitor(redis_url=stores.redis_url, stock_key=campaign_keys(campaign_id).stock,
                             campaign_id=campaign_id, initial_stock=args.stock, load_done=load_done,
                             drain_timeout=args.drain_timeout)
    monitor.start()
    try:
        figures = run_wrk("couponrush claim", base, args, [str(campaign_id), str(tokens)], CLAIM_LUA)
    finally:
        load_done.set()
    log(f"load over; waiting for every claim to be a coupon in PostgreSQL (up to {args.drain_timeout:.0f}s) ...")
    while monitor.is_alive():
        monitor.join(timeout=1)
    if monitor.error:
        log(f"WARNING: {monitor.error}")

    def since_first(t: float | None) -> float | None:
        if t is None or monitor.first_claim_at is None:
            return None
        return round(t - monitor.first_claim_at, 3)

    sell = {
        "initial_stock": args.stock,
        "sold": monitor.sold,
        "remaining": monitor.remaining,
        "coupons": monitor.coupons,
        "poll_interval_s": monitor.interval,
        "first_claim_after_wrk_start_s": _round(monitor.first_claim_at),
        "sold_out_after_wrk_start_s": _round(monitor.sold_out_at),
        "all_coupons_after_wrk_start_s": _round(monitor.all_coupons_at),
        "sell_out_s": since_first(monitor.sold_out_at),
        "all_coupons_s": since_first(monitor.all_coupons_at),
        "drain_lag_after_sell_out_s": (round(monitor.all_coupons_at - monitor.sold_out_at, 3)
                                       if monitor.all_coupons_at is not None and monitor.sold_out_at is not None
                                       else None),
        "error": monitor.error,
    }
    requests = figures.get("requests") or 0
    if monitor.sold is not None and requests:
        # 200 answers that were not a claim: limit_reached (a shopper drawn twice) or sold_out.
        sell["other_answers"] = requests - figures["non_2xx"] - monitor.sold
    sold_out = (f"sold out {sell['sell_out_s']}s after the first claim" if sell["sell_out_s"] is not None
                else f"NOT sold out ({monitor.remaining} left)")
    log(f"sold {sell['sold']} of {args.stock}: {sold_out}; all coupons in PostgreSQL "
        f"{_fmt(sell['all_coupons_s'])}s after the first claim")
    return {"wrk": figures, "sell_out": sell}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def seed_go_redis_url(args: argparse.Namespace, stores: Stores) -> str:
    """seed-go's Redis: the bench's server, db --seed-go-db or the bench's db + 1."""
    bench_db = redis_db_of(stores.redis_url)
    db = args.seed_go_db if args.seed_go_db is not None else (bench_db + 1 if bench_db < 15 else bench_db - 1)
    return with_redis_db(stores.redis_url, db)


def seed_go_storm(args: argparse.Namespace, env: dict[str, str], stores: Stores, procs: Processes,
                  binary: Path, campaign_id: int, tokens: Path) -> dict[str, Any]:
    """The same wrk load on the seed's Go service, on the same Redis (a db of its own), same stock."""
    seed_url = seed_go_redis_url(args, stores)
    db = redis_db_of(seed_url)
    parts = urlsplit(stores.redis_url)
    port = free_port()
    child = procs.start("seed-go", [str(binary), "-addr", f"127.0.0.1:{port}",
                                    "-redis", f"{parts.hostname or '127.0.0.1'}:{parts.port or 6379}",
                                    "-db", str(db), "-stock", str(args.stock)], env)
    base = f"http://127.0.0.1:{port}"
    wait_until("seed-go", lambda: http_ok(f"{base}/ping"), procs, timeout=30)
    try:
        figures = run_wrk("seed-go claim", base, args, [str(campaign_id), str(tokens)], CLAIM_LUA)
    finally:
        procs.stop(child)
    if args.flush:  # its keys are of no further use (the couponrush db is kept for inspection)
        import redis

        client = redis.Redis.from_url(seed_url, socket_timeout=5)
        client.flushdb()
        client.set(MARKER_KEY, "bench/claim_storm.py")
    return {"wrk": figures, "redis_db": db}


# ---------------------------------------------------------------------------------------------------------
# Summary


def _fmt(value: Any, spec: str = "") -> str:
    if value is None:
        return "-"
    return format(value, spec) if spec else str(value)


def _ratio(a: dict[str, Any] | None, b: dict[str, Any] | None) -> float | None:
    if not a or not b or not a.get("requests_per_s") or not b.get("requests_per_s"):
        return None
    return round(a["requests_per_s"] / b["requests_per_s"], 3)


def print_summary(summary: dict[str, Any]) -> None:
    """The table at the end of a run."""
    runs = summary["runs"]
    print()
    print(f"claim storm  {summary['timestamp']}  {summary['host']['cpus']} CPUs, load average before "
          f"{summary['host']['loadavg_before']}  (wrk -t{summary['config']['threads']} "
          f"-c{summary['config']['connections']} -d{summary['config']['duration']}s)")
    header = f"  {'run':<22} {'requests/s':>11} {'p50 ms':>8} {'p99 ms':>8} {'non-2xx':>9} {'requests':>9} " \
             f"{'sock err':>8}"
    print(header)
    print("  " + "-" * (len(header) - 2))
    for name, run in runs.items():
        w = run.get("wrk") if run else None
        if not w:
            print(f"  {name:<22} {'(not run)':>11}")
            continue
        errors = sum(w.get("socket_errors", {}).values())
        print(f"  {name:<22} {_fmt(w.get('requests_per_s'), ',.0f'):>11} {_fmt(w.get('p50_ms'), '.2f'):>8} "
              f"{_fmt(w.get('p99_ms'), '.2f'):>8} {_fmt(w.get('non_2xx')):>9} {_fmt(w.get('requests')):>9} "
              f"{errors:>8}")
    sell = summary["sell_out"]
    ver = summary["verify"]
    ratios = summary["ratios"]
    print()
    print(f"  sold                       {_fmt(sell.get('sold'))} of {sell['initial_stock']} "
          f"(coupons in PostgreSQL: {_fmt(sell.get('coupons'))}; other 200 answers, limit_reached or "
          f"sold_out: {_fmt(sell.get('other_answers'))})")
    if sell.get("sell_out_s") is not None:
        print(f"  time to sell out           {sell['sell_out_s']:.2f} s after the first claim "
              f"(polled every {int(sell['poll_interval_s'] * 1000)} ms)")
    else:
        print(f"  time to sell out           not sold out during the load ({_fmt(sell.get('remaining'))} left)")
    print(f"  time to all coupons        {_fmt(sell.get('all_coupons_s'), '.2f')} s after the first claim "
          f"({_fmt(sell.get('drain_lag_after_sell_out_s'), '.2f')} s after sell-out)")
    if sell.get("error"):
        print(f"  monitor                    {sell['error']}")
    print(f"  verify_campaign            {'BALANCED' if ver.get('balanced') else 'NOT BALANCED'} "
          f"(exit code {ver.get('exit_code')})")
    print(f"  claim / bare /healthz      {_fmt(ratios.get('claim_over_bare'), '.2f')}")
    print(f"  couponrush / seed-go       {_fmt(ratios.get('couponrush_over_seed_go'), '.2f')}"
          + ("" if summary["config"]["with_seed_go"] else "  (run with --with-seed-go)"))
    print(f"  results                    {summary.get('results_file', '-')}")
    print(flush=True)


def write_results(summary: dict[str, Any]) -> Path:
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    path = RESULTS_DIR / f"claim_storm-{stamp}.json"
    slim = json.loads(json.dumps(summary))
    for run in slim["runs"].values():  # the raw wrk output is in var/bench/logs; keep the JSON small
        if run and run.get("wrk"):
            run["wrk"].pop("raw", None)
    path.write_text(json.dumps(slim, indent=2) + "\n")
    return path


# ---------------------------------------------------------------------------------------------------------
# Main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stock", type=int, default=10_000, help="stock of the bench campaign (10000)")
    parser.add_argument("--duration", type=int, default=10, help="seconds of each wrk run (10)")
    parser.add_argument("--connections", type=int, default=100, help="wrk connections, -c (100)")
    parser.add_argument("--threads", type=int, default=2, help="wrk threads, -t (2)")
    parser.add_argument("--workers", type=int, default=default_workers(),
                        help=f"web server workers ({default_workers()}: the run command's default, CPUs less one)")
    parser.add_argument("--server-args", default="", help="extra options for the web server (config/server.py), "
                        "e.g. --server-args='--threads 32'")
    parser.add_argument("--shoppers", type=int, default=200_000, help="distinct shoppers in the token file (200000)")
    parser.add_argument("--with-seed-go", action="store_true", help="also measure the seed's Go yardstick")
    parser.add_argument("--seed-go-db", type=int, help="Redis db of seed-go (default: the bench's db + 1)")
    parser.add_argument("--no-flush", dest="flush", action="store_false",
                        help="do not FLUSHDB the bench's Redis db(s) at start")
    parser.add_argument("--force-flush", action="store_true",
                        help="flush the bench's Redis db(s) even when they hold keys the bench did not write")
    parser.add_argument("--drain-timeout", type=float, default=120.0,
                        help="seconds to wait after the load for every claim to be a coupon (120)")
    parser.add_argument("--no-results", dest="results", action="store_false",
                        help="do not write bench/results/claim_storm-*.json")
    args = parser.parse_args(argv)
    args.server_extra = shlex.split(args.server_args)
    return args


def bench(args: argparse.Namespace, procs: Processes, stores_box: list[Stores]) -> dict[str, Any]:
    """Every step of a run; returns the summary."""
    for path in (CLAIM_LUA, TOKENS_PY):
        if not path.exists():
            raise BenchError(f"missing {path} (set COUPONRUSH_SHARED_DIR to the shared folder)")
    if DEVSTACK_PROBLEM:
        log(f"devstack is not usable ({DEVSTACK_PROBLEM}): using the bench's own process lines")
    loadavg = [round(x, 2) for x in os.getloadavg()]
    ensure_wrk()

    stores = start_stores()
    stores_box.append(stores)
    force = args.force_flush or stores.own_redis
    flush_redis(stores.redis_url, what="couponrush bench", allowed=args.flush, force=force)
    seed_go = None
    if args.with_seed_go:  # before any measurement: fail early, and no compiler competing for the CPU
        flush_redis(seed_go_redis_url(args, stores), what="seed-go", allowed=args.flush, force=force)
        seed_go = build_seed_go(dict(os.environ))
    from config.settings.base import DEV_TOKEN_SECRET

    secret = os.environ.get("COUPONS_TOKEN_SECRET") or DEV_TOKEN_SECRET
    env = child_env(stores, secret)
    os.environ.update({k: env[k] for k in ("DJANGO_SETTINGS_MODULE", "DATABASE_URL", "REDIS_URL",
                                           "CELERY_BROKER_URL", "COUPONS_TOKEN_SECRET")})
    os.environ["DJANGO_DEBUG"] = "false"
    import django

    django.setup()  # the monitor counts coupons through the ORM

    run_step("migrate", manage("migrate", "--noinput", "-v", "0"), env)
    common.collectstatic_if_missing(env)
    tokens = make_tokens(args.shoppers, secret)

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    procs.start("web", web_argv(port, args.workers, args.server_extra), env)
    worker = procs.start("worker", worker_argv(), env)
    wait_until(f"web on {base}", lambda: http_ok(f"{base}/healthz"), procs)
    wait_worker_ready(worker, procs)
    campaign_id = create_campaign(env, args.stock)

    claim = claim_storm(args, env, base, campaign_id, tokens, stores)
    procs.check_alive()
    ver = verify(env, campaign_id)
    bare = {"wrk": run_wrk("couponrush healthz", f"{base}/healthz", args)}
    seed = seed_go_storm(args, env, stores, procs, seed_go, campaign_id, tokens) if seed_go else None

    return {
        "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
        "git": git_revision(),
        "host": {"cpus": os.cpu_count(), "loadavg_before": loadavg, "python": platform.python_version(),
                 "machine": platform.machine()},
        "config": {"stock": args.stock, "duration": args.duration, "connections": args.connections,
                   "threads": args.threads, "workers": args.workers, "server_args": args.server_extra,
                   "shoppers": args.shoppers, "with_seed_go": args.with_seed_go, "settings": SETTINGS_MODULE,
                   "debug": False, "campaign_id": campaign_id,
                   "web_command": web_argv(port, args.workers, args.server_extra),
                   "worker_command": worker_argv(),
                   "database": redact(stores.database_url), "redis": redact(stores.redis_url)},
        "runs": {"couponrush claim": {"wrk": claim["wrk"]}, "couponrush /healthz": bare,
                 "seed-go claim": seed},
        "sell_out": claim["sell_out"],
        "verify": ver,
        "ratios": {"claim_over_bare": _ratio(claim["wrk"], bare["wrk"]),
                   "couponrush_over_seed_go": _ratio(claim["wrk"], seed["wrk"]) if seed else None},
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    install_signal_handlers()
    procs = Processes()
    stores_box: list[Stores] = []
    exit_code = 0
    summary: dict[str, Any] | None = None
    try:
        summary = bench(args, procs, stores_box)
    except Interrupted as exc:
        log(f"{exc}: stopping ...")
        exit_code = 130
    except BenchError as exc:
        log(f"ERROR: {exc}")
        exit_code = 1
    finally:
        # Cleanup must finish: further Ctrl-C is ignored (children get SIGKILL after at most 10 s each).
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        procs.stop_all()
        for stores in stores_box:
            if stores.embedded:
                log("stopping the embedded servers ...")
            stores.stop()
        log("cleaned up")
    if summary is not None:
        if args.results:
            summary["results_file"] = rel(write_results(summary))
        print_summary(summary)
        if not summary["verify"]["balanced"] or summary["sell_out"].get("error"):
            exit_code = 2
    return exit_code


if __name__ == "__main__":
    sys.exit(main())
