"""The run that `make bench`'s phases share (bench/suite.py orders them; each is a module of bench/phases/): its
stores, servers and campaigns, set up once, and the loads every phase puts on them (wrk with the suite's shape,
seed-go's side of a comparison, a baseline server beside the web server, a bench script of its own).
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import common
from common import (
    BASE_DIR,
    BENCH_VAR,
    BenchError,
    Processes,
    Stores,
    build_seed_go,
    child_env,
    collectstatic_if_missing,
    create_campaign,
    ensure_wrk,
    flush_redis,
    free_port,
    http_ok,
    log,
    manage,
    redact,
    redis_db_of,
    rel,
    run_step,
    start_stores,
    wait_until,
    wait_worker_ready,
    web_argv,
    with_redis_db,
    worker_argv,
    write_tokens,
)

from phases.loadgen import build_loadgen

BENCH_DIR = Path(__file__).resolve().parent.parent
MIX_LUA = BENCH_DIR / "claim_mix.lua"
SEED_CAMPAIGN_BASE = 900_000  # seed-go's campaign ids (its own Redis db): one per run, so shoppers are fresh


def r3(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


def ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a and b else None


def wrk_slim(figures: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in figures.items() if k != "raw"}


def esc(text: str) -> str:
    """Text for the hand-written SVGs (the profile's icicle graph, the report's chart)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


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


class Suite:
    """One run of the suite: set up once, then handed to each phase's `run(suite)`; a phase puts its figures in
    `suite.report["scenarios"][<phase>]` (and `checks`, `notes`)."""

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

    def stop_services(self) -> None:
        """Web, worker and seed-go stopped (the worker resumed first): the phases from `api` on need the CPU."""
        self.pause_worker(False)
        for child in list(self.procs.children):
            log(f"stopping {child.name} (pid {child.proc.pid}): the last phases need the CPU")
            self.procs.stop(child)

    def run_bench_script(self, phase: str, script: str, out: Path, ok_codes: tuple[int, ...] = (0,),
                         options: tuple[str, ...] = ()) -> tuple[int, dict[str, Any]]:
        """Another bench of bench/ (`--quick` when the suite is, and `options`) on the suite's stores, its output
        shown as it runs: its exit code and the JSON it wrote to `out` (this run's, or BenchError)."""
        argv = [sys.executable, str(BENCH_DIR / script), *(["--quick"] if self.args.quick else []), *options]
        log(f"== {phase}: {shlex.join(argv[1:])}")
        env = {**os.environ, "DATABASE_URL": self.stores.database_url, "REDIS_URL": self.stores.redis_url}
        started = time.time()
        rc = subprocess.run(argv, cwd=BASE_DIR, env=env, check=False, start_new_session=True,
                            preexec_fn=common._child_setup).returncode  # noqa: PLW1509
        if rc not in ok_codes or not out.exists() or out.stat().st_mtime < started:
            raise BenchError(f"{script} exited with code {rc} (its output is above)")
        return rc, json.loads(out.read_text())
