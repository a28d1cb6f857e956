"""A sale as shoppers live it (issue 35, goal 4): shopper journeys arriving at a fixed rate through the whole
stack, each step's latency counted from when the shopper meant to send it.

    .venv/bin/python bench/sale.py [--rates 10,30] [--duration 20] [--modes poll,longpoll] [--quick]

The stack as in production: nginx in front (deploy/'s config, rendered as bench/api_routes.py --proxy renders it:
TLS, keep-alive, the limits raised out of the way), the run command's web server with 1 worker (the issue's
measure), a Celery worker (devstack.worker_command) draining the claims into PostgreSQL, on DATABASE_URL /
REDIS_URL or embedded servers under var/bench/. Set-up, server start, nginx, tokens and campaigns are
bench/api_routes.py's (imported, not copied).

A shopper (a fresh one each arrival, a TLS connection of their own kept alive):
  --page-views times GET /campaigns then GET /campaigns/{id}; POST /campaigns/{id}/claim (an Idempotency-Key, as
  the storefront sends); GET /claims/{id} until `issued`: `poll` asks every 400 ms as the demo storefront did
  before the long poll, `longpoll` asks ?wait=5 and asks again at once while pending; GET /me/coupons (the coupon
  must be listed); POST /carts/validate (two lines; the coupon must be in the answer); POST /coupons/{code}/reserve
  then /confirm of a new order. A step whose answer is not the one meant ends that shopper's journey (counted by
  step and reason).

Open loop: shopper i arrives at start + i / rate whatever the server does; each step is meant to be sent when the
previous one answered (plus --think), and its latency counts from then, so a queue anywhere (the server, nginx,
this client's own loop) shows in the figures. The long poll is detected first (the worker paused, a fresh claim's
?wait=1 must take about a second and answer pending): without it only `poll` runs, and the report says so.

Per rate and mode: shoppers arrived and served (every step answered as meant), served/s, the web server's CPU
(master and worker, from /proc) and so shoppers served per second per web core, nginx's, the Celery worker's and
PostgreSQL's CPU, each step's p50/p90/p99 from the intended send, status requests per claimed shopper until the
coupon showed, claim -> coupon seen, errors. Beside each rate, the claim alone at the same rate with
bench/loadgen (fixed rate, from the intended send): on couponrush's web server directly and on the seed's Go
service (../shared/reference/seed-go, built by its build.sh; skipped with a note when not there).

Writes bench/results/sale.json (bench/README.md documents the fields). Exit 0: ran, and the campaign balanced;
2: ran, but verify_campaign did not balance; 1: could not run (or the first journey was not the one meant).
"""
from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import math
import os
import resource
import secrets
import signal
import ssl
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import orjson

BENCH_DIR = Path(__file__).resolve().parent
if str(BENCH_DIR) not in sys.path:
    sys.path.insert(0, str(BENCH_DIR))

import common  # noqa: E402 - bench/ is on sys.path when this runs as a script
from api_routes import CART_LINES, ApiBench, campaign_create  # noqa: E402
from common import (  # noqa: E402
    BENCH_VAR,
    RESULTS_DIR,
    BenchError,
    Interrupted,
    Processes,
    child_env,
    flush_redis,
    log,
    manage,
    rel,
    run_step,
    shopper_token,
)

OUT = RESULTS_DIR / "sale.json"
TOKEN_TTL = 3000  # seconds: under COUPONS_TOKEN_MAX_TTL (3600), longer than a run
POLL_SECONDS = 0.4  # the demo storefront's poll before the long poll (static/storefront/app.js, CLAIM_POLL_MS)
RETRY_SECONDS = 1.0  # the storefront's pause after an answer that did not wait (CLAIM_RETRY_MS)
GIVE_UP_SECONDS = 60.0  # the storefront gives a claim up after a minute (CLAIM_POLL_GIVE_UP_MS)
ORDER_AMOUNT = "300.00"  # CART_LINES' sum
STEPS = ["connect", "campaigns", "campaign", "claim", "status", "my_coupons", "validate", "reserve", "confirm"]
STEP_LABELS = {"connect": "TCP + TLS connect (nginx)", "campaigns": "GET /campaigns", "campaign": "GET /campaigns/{id}",
               "claim": "POST /campaigns/{id}/claim", "status": "GET /claims/{id}", "my_coupons": "GET /me/coupons",
               "validate": "POST /carts/validate", "reserve": "POST /coupons/{code}/reserve",
               "confirm": "POST /coupons/{code}/confirm"}


# ---------------------------------------------------------------------------------------------------------
# The client: HTTP/1.1 on asyncio streams (uvloop), one keep-alive connection a shopper


class StepFailed(Exception):
    def __init__(self, step: str, reason: str) -> None:
        super().__init__(f"{step}: {reason}")
        self.step, self.reason = step, reason


class Connection:
    """A shopper's connection: requests one after another, as a browser tab's fetches on one connection."""

    def __init__(self, host: str, port: int, tls: ssl.SSLContext | None) -> None:
        self.host, self.port, self.tls = host, port, tls
        self.host_header = f"Host: {host}:{port}\r\n".encode()
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def open(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(
            self.host, self.port, ssl=self.tls, server_hostname="localhost" if self.tls else None)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None

    async def request(self, method: str, path: str, headers: bytes = b"",
                      body: bytes | None = None) -> tuple[int, dict[bytes, bytes], bytes]:
        if self.writer is None:
            await self.open()
        assert self.reader is not None and self.writer is not None
        head = b"%s %s HTTP/1.1\r\n" % (method.encode(), path.encode()) + self.host_header + headers
        if body is not None:
            head += b"Content-Type: application/json\r\nContent-Length: %d\r\n" % len(body)
        self.writer.write(head + b"\r\n" + (body or b""))
        raw = await self.reader.readuntil(b"\r\n\r\n")
        status = int(raw[9:12])
        answer_headers: dict[bytes, bytes] = {}
        for line in raw.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name:
                answer_headers[name.strip().lower()] = value.strip()
        if b"content-length" in answer_headers:
            data = await self.reader.readexactly(int(answer_headers[b"content-length"]))
        elif answer_headers.get(b"transfer-encoding", b"").lower() == b"chunked":
            parts = []
            while True:
                size = int((await self.reader.readuntil(b"\r\n")).split(b";")[0], 16)
                parts.append(await self.reader.readexactly(size + 2))
                if size == 0:
                    break
            data = b"".join(p[:-2] for p in parts)
        else:
            data = b""
        if answer_headers.get(b"connection", b"").lower() == b"close":
            self.close()
        return status, answer_headers, data


def percentiles(values: list[float]) -> dict[str, float | None]:
    """Nearest-rank percentiles (bench/loadgen's) in ms, rounded."""
    if not values:
        return {"p50_ms": None, "p90_ms": None, "p99_ms": None, "max_ms": None}
    xs = sorted(values)

    def at(q: float) -> float:
        return round(xs[max(0, math.ceil(q * len(xs)) - 1)], 2)

    return {"p50_ms": at(0.5), "p90_ms": at(0.9), "p99_ms": at(0.99), "max_ms": round(xs[-1], 2)}


@dataclass
class Step:
    latencies: list[float] = field(default_factory=list)  # ms from the intended send, answered requests
    statuses: collections.Counter[str] = field(default_factory=collections.Counter)
    codes: collections.Counter[str] = field(default_factory=collections.Counter)
    errors: collections.Counter[str] = field(default_factory=collections.Counter)  # no answer: the reason
    cache: collections.Counter[str] = field(default_factory=collections.Counter)  # nginx's X-Cache-Status


@dataclass
class Run:
    """One fixed-rate run: what each shopper's steps took and how their journeys ended."""

    label: str
    rate: float
    mode: str
    duration: float
    prefix: str
    recorded: bool = True
    steps: dict[str, Step] = field(default_factory=lambda: {s: Step() for s in STEPS})
    arrived: int = 0
    served: int = 0
    in_flight: int = 0
    late_arrivals: int = 0  # shoppers whose journey began more than 5 ms after their arrival time
    failures: collections.Counter[str] = field(default_factory=collections.Counter)  # "step: reason"
    status_requests: list[int] = field(default_factory=list)  # per claimed shopper, until the coupon showed
    claim_to_coupon: list[float] = field(default_factory=list)  # ms, the claim's answer -> the issued answer
    journeys: list[float] = field(default_factory=list)  # ms, arrival -> confirm answered
    requests: list[int] = field(default_factory=list)  # per served shopper, in all


class Sale(ApiBench):
    """api_routes' bench (stores, web server, nginx, its `get`) with a worker, seed-go and the journeys."""

    def __init__(self, args: argparse.Namespace, procs: Processes) -> None:
        super().__init__(args, procs)
        self.worker: common.Child | None = None
        self.seed: common.Child | None = None
        self.no_seed: dict[str, Any] = {}
        self.longpoll: dict[str, Any] = {}

    # --- set-up ------------------------------------------------------------------------------------------

    def setup(self) -> None:
        a = self.args
        self.stores = stores = common.start_stores()
        force = a.force_flush or stores.own_redis
        flush_redis(stores.redis_url, what="sale bench", allowed=True, force=force)
        self.secret = secrets.token_hex(16)
        env = self.env = child_env(stores, self.secret)
        run_step("migrate", manage("migrate", "--noinput", "-v", "0"), env)
        common.collectstatic_if_missing(env)
        os.environ.update({k: env[k] for k in ("DJANGO_SETTINGS_MODULE", "DJANGO_DEBUG", "DATABASE_URL", "REDIS_URL",
                                                "CELERY_BROKER_URL", "COUPONS_TOKEN_SECRET")})
        import django

        django.setup()
        self.tag = secrets.token_hex(3).upper()
        self.campaign = campaign_create("--name", "sale bench", "--stock", "100000000", "--per-user-limit", "1")
        self.ids = {"claim": self.campaign}
        self.port = common.free_port()
        self.urls = {False: f"http://127.0.0.1:{self.port}"}
        self.web_cmd = common.web_argv(self.port, a.workers, a.server_args.split())
        self.web = self.procs.start("sale-web", self.web_cmd, env)
        self.worker = self.procs.start("sale-worker", common.worker_argv(), env)
        common.wait_until("web", lambda: common.http_ok(f"{self.urls[False]}/healthz"), self.procs)
        common.wait_worker_ready(self.worker, self.procs)
        self.start_nginx()
        self.nginx = next(c for c in self.procs.children if c.name == "api-nginx")
        https = urlsplit(self.urls[True])
        self.front = (https.hostname or "127.0.0.1", https.port or 443)
        self.start_seed_go(force)
        from phases.loadgen import build_loadgen

        self.loadgen = build_loadgen()
        self.report["setup"] = {
            "web_command": self.web_cmd, "worker_command": common.worker_argv(), "campaign": self.campaign,
            "proxy": self.urls[True], "seed_go": rel(self.seed_go) if self.seed else self.no_seed["skipped"],
            "database": common.redact(stores.database_url), "redis": common.redact(stores.redis_url),
            "embedded_servers": [type(s).__name__ for s in stores.embedded],
            "live_campaigns_listed": self.live_campaigns()}

    def start_seed_go(self, force: bool) -> None:
        """The seed's Go service on its own Redis db, as the suite runs it; skipped (with the reason) without it."""
        assert self.stores is not None
        try:
            self.seed_go = common.build_seed_go(dict(os.environ))
        except BenchError as exc:
            reason = f"seed-go skipped: {exc}"
            self.no_seed = {"skipped": reason}
            self.report["notes"].append(reason)
            log(f"WARNING: {reason}")
            return
        db = common.redis_db_of(self.stores.redis_url)
        self.seed_redis_url = common.with_redis_db(
            self.stores.redis_url, self.args.seed_go_db if self.args.seed_go_db is not None else
            (db + 1 if db < 15 else db - 1))
        flush_redis(self.seed_redis_url, what="seed-go", allowed=True, force=force)
        parts = urlsplit(self.seed_redis_url)
        self.seed_port = common.free_port()
        self.seed = self.procs.start("sale-seed-go", [
            str(self.seed_go), "-addr", f"127.0.0.1:{self.seed_port}", "-redis",
            f"{parts.hostname or '127.0.0.1'}:{parts.port or 6379}", "-db",
            str(common.redis_db_of(self.seed_redis_url))], self.env)
        common.wait_until("seed-go", lambda: common.http_ok(f"http://127.0.0.1:{self.seed_port}/ping"), self.procs,
                          timeout=30)

    def pause_worker(self, paused: bool) -> None:
        if self.worker is not None and self.worker.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.worker.proc.pid, signal.SIGSTOP if paused else signal.SIGCONT)

    def auth(self, user: str) -> bytes:
        token = shopper_token(user, int(time.time()) + TOKEN_TTL, self.secret)
        return f"X-User-Id: {user}\r\nX-Token: {token}\r\n".encode()

    def connection(self) -> Connection:
        return Connection(self.front[0], self.front[1], self.tls)

    # --- the long poll: is it there? ------------------------------------------------------------------

    async def detect_longpoll(self) -> dict[str, Any]:
        """With the worker paused (SIGSTOP), a fresh claim stays pending: a server that long-polls holds
        ?wait=1 about a second and answers pending; one that does not answers at once. Then, the worker
        resumed, ?wait=5 of another fresh claim should answer `issued` as soon as the drain has issued it."""
        conn = self.connection()
        out: dict[str, Any] = {}
        try:
            self.pause_worker(True)
            try:
                claim_id = await self.probe_claim(conn, f"lp{self.tag}a")
                t0 = time.monotonic()
                status, _, body = await conn.request("GET", f"/api/v1/claims/{claim_id}?wait=1",
                                                     self.auth(f"lp{self.tag}a"))
                held = time.monotonic() - t0
            finally:
                self.pause_worker(False)
            answer = orjson.loads(body) if body else {}
            out["paused_worker"] = {"http": status, "status": answer.get("status"), "answered_after_s": round(held, 3)}
            out["supported"] = status == 200 and answer.get("status") == "pending" and held >= 0.8
            if out["supported"]:
                claim_id = await self.probe_claim(conn, f"lp{self.tag}b")
                t0 = time.monotonic()
                status, _, body = await conn.request("GET", f"/api/v1/claims/{claim_id}?wait=5",
                                                     self.auth(f"lp{self.tag}b"))
                answer = orjson.loads(body) if body else {}
                out["worker_running"] = {"http": status, "status": answer.get("status"),
                                         "answered_after_s": round(time.monotonic() - t0, 3)}
        finally:
            conn.close()
        log(f"long poll: {'supported' if out['supported'] else 'NOT supported (the poll mode alone runs)'}: {out}")
        return out

    async def probe_claim(self, conn: Connection, user: str) -> str:
        status, _, body = await conn.request("POST", f"/api/v1/campaigns/{self.campaign}/claim",
                                             self.auth(user) + f"Idempotency-Key: {user}\r\n".encode(), b"{}")
        answer = orjson.loads(body) if body else {}
        if status != 200 or answer.get("code") != 0:
            raise BenchError(f"the probe's claim answered {status} {body[:200]!r}")
        return str(answer["claim_id"])

    # --- a shopper ---------------------------------------------------------------------------------------

    async def step(self, run: Run, conn: Connection, name: str, intended: float, method: str, path: str,
                   headers: bytes = b"", body: bytes | None = None, *, timeout: float = 15.0
                   ) -> tuple[dict[str, Any], float]:
        """Send one request at its intended time (or at once if that is past); its latency counts from then.
        The answer must be a 200 with code 0, else the journey ends here."""
        wait = intended - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        st = run.steps[name]
        try:
            status, answer_headers, raw = await asyncio.wait_for(conn.request(method, path, headers, body), timeout)
        except TimeoutError:
            conn.close()
            st.errors["timeout"] += 1
            raise StepFailed(name, "timeout") from None
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as exc:
            conn.close()
            st.errors[type(exc).__name__] += 1
            raise StepFailed(name, type(exc).__name__) from None
        done = time.monotonic()
        st.latencies.append((done - intended) * 1000)
        st.statuses[str(status)] += 1
        if cache := answer_headers.get(b"x-cache-status"):
            st.cache[cache.decode()] += 1
        try:
            answer = orjson.loads(raw)
        except orjson.JSONDecodeError:
            answer = {}
        code = answer.get("code") if isinstance(answer, dict) else None
        st.codes[str(code)] += 1
        if status != 200 or code != 0:
            raise StepFailed(name, f"{status} code {code}")
        return answer, done

    async def shopper(self, run: Run, i: int, arrive: float) -> None:
        a = self.args
        user = f"{run.prefix}{i:06d}"
        auth = self.auth(user)
        conn = self.connection()
        run.arrived += 1
        run.in_flight += 1
        if time.monotonic() - arrive > 0.005:
            run.late_arrivals += 1
        requests = 0
        try:
            try:
                await asyncio.wait_for(conn.open(), 15)
            except (OSError, TimeoutError) as exc:
                run.steps["connect"].errors[type(exc).__name__] += 1
                raise StepFailed("connect", type(exc).__name__) from None
            done = time.monotonic()
            run.steps["connect"].latencies.append((done - arrive) * 1000)
            for _ in range(a.page_views):
                _, done = await self.step(run, conn, "campaigns", done + a.think, "GET", "/api/v1/campaigns")
                _, done = await self.step(run, conn, "campaign", done + a.think, "GET",
                                          f"/api/v1/campaigns/{self.campaign}")
                requests += 2
            claim, claimed_at = await self.step(run, conn, "claim", done + a.think, "POST",
                                                f"/api/v1/campaigns/{self.campaign}/claim",
                                                auth + f"Idempotency-Key: grab-{user}\r\n".encode(), b"{}")
            requests += 1
            coupon, done, asked = await self.follow(run, conn, auth, str(claim["claim_id"]), claimed_at)
            requests += asked
            run.status_requests.append(asked)
            run.claim_to_coupon.append((done - claimed_at) * 1000)
            code = coupon["code"]
            mine, done = await self.step(run, conn, "my_coupons", done + a.think, "GET", "/api/v1/me/coupons", auth)
            if not any(c.get("code") == code for c in mine.get("results") or []):
                raise StepFailed("my_coupons", "coupon not listed")
            cart = orjson.dumps({"currency": "CNY", "lines": CART_LINES})
            valid, done = await self.step(run, conn, "validate", done + a.think, "POST", "/api/v1/carts/validate",
                                          auth, cart)
            if not any(c.get("code") == code and c.get("applicable") for c in valid.get("coupons") or []):
                raise StepFailed("validate", "coupon not applicable")
            order = f"o-{user}"
            held, done = await self.step(
                run, conn, "reserve", done + a.think, "POST", f"/api/v1/coupons/{code}/reserve",
                auth + f"Idempotency-Key: r-{order}\r\n".encode(),
                orjson.dumps({"order_id": order, "order_amount": ORDER_AMOUNT, "currency": "CNY",
                              "lines": CART_LINES, "hold_seconds": 900}))
            if held.get("status") != "reserved":
                raise StepFailed("reserve", f"status {held.get('status')}")
            paid, done = await self.step(run, conn, "confirm", done + a.think, "POST",
                                         f"/api/v1/coupons/{code}/confirm", auth, orjson.dumps({"order_id": order}))
            if paid.get("status") != "redeemed":
                raise StepFailed("confirm", f"status {paid.get('status')}")
            requests += 5
            run.served += 1
            run.journeys.append((done - arrive) * 1000)
            run.requests.append(requests)
        except StepFailed as exc:
            run.failures[f"{exc.step}: {exc.reason}"] += 1
        finally:
            run.in_flight -= 1
            conn.close()

    async def follow(self, run: Run, conn: Connection, auth: bytes, claim_id: str, claimed_at: float
                     ) -> tuple[dict[str, Any], float, int]:
        """GET /claims/{id} until issued: every 400 ms after the previous answer (the storefront's poll, the
        first 400 ms after the claim), or ?wait=S at once and again at once while pending (the storefront's long
        poll; a pending answer that did not wait is asked again after a second, as the storefront does)."""
        a = self.args
        longpoll = run.mode == "longpoll"
        path = f"/api/v1/claims/{claim_id}" + (f"?wait={a.wait:g}" if longpoll else "")
        intended = claimed_at if longpoll else claimed_at + POLL_SECONDS
        asked = 0
        while True:
            if intended - claimed_at > GIVE_UP_SECONDS:
                raise StepFailed("status", "still pending after 60 s")
            answer, done = await self.step(run, conn, "status", intended, "GET", path, auth,
                                           timeout=(a.wait if longpoll else 0) + 15)
            asked += 1
            state = answer.get("status")
            if state == "issued" and answer.get("coupon"):
                return answer["coupon"], done, asked
            if state != "pending":
                raise StepFailed("status", f"status {state}")
            if longpoll:
                intended = done if done - intended >= a.wait / 2 else done + RETRY_SECONDS
            else:
                intended = done + POLL_SECONDS

    # --- a run -------------------------------------------------------------------------------------------

    async def arrivals(self, run: Run) -> float:
        """Shopper i at start + i / rate for `duration` s, whatever the answers; then every journey's end.
        The wall time from the first arrival to the last journey's end."""
        start = time.monotonic() + 0.1
        tasks = []
        n = max(1, int(run.rate * run.duration))
        for i in range(n):
            arrive = start + i / run.rate
            if (wait := arrive - time.monotonic()) > 0:
                await asyncio.sleep(wait)
            tasks.append(asyncio.create_task(self.shopper(run, i, arrive)))
        await asyncio.gather(*tasks)
        return time.monotonic() - start

    def cpu(self) -> dict[str, float]:
        out = {"web": common.session_cpu(self.web.proc.pid), "nginx": common.session_cpu(self.nginx.proc.pid)}
        if self.worker is not None:
            out["worker"] = common.session_cpu(self.worker.proc.pid)
        usage = resource.getrusage(resource.RUSAGE_SELF)
        out["client"] = usage.ru_utime + usage.ru_stime
        return out

    def journey_run(self, rate: float, mode: str, duration: float, recorded: bool = True) -> dict[str, Any]:
        label = f"{mode} {rate:g}/s" + ("" if recorded else " (warm-up)")
        run = Run(label, rate, mode, duration, prefix=f"s{self.tag}{secrets.token_hex(2)}", recorded=recorded)
        how = f"GET ?wait={self.args.wait:g}" if mode == "longpoll" else "polls every 400 ms"
        log(f"== {label}: {int(rate * duration):,} shoppers over {duration:g}s, {self.args.page_views} page views "
            f"each, status by {how}")
        assert self.stores is not None
        before = self.cpu()
        stop = threading.Event()

        def ticker() -> None:
            while not stop.wait(2.0):
                log(f"{label}: {run.arrived:,} arrived, {run.served:,} served, {run.in_flight:,} in their journey, "
                    f"{sum(run.failures.values()):,} failed")

        tick = threading.Thread(target=ticker, daemon=True)
        tick.start()
        with common.BackendCPU(self.stores.database_url) as backends:
            try:
                wall = run_async(self.arrivals(run))
            finally:
                stop.set()
        after = self.cpu()
        self.procs.check_alive()
        used = {k: round(after[k] - before[k], 3) for k in after}
        if backends.seconds is not None:
            used["postgres"] = backends.seconds
        result = summarize(run, wall, used)
        log(f"{label}: {run.served:,} of {run.arrived:,} served ({result['served_per_s']:g}/s), web "
            f"{result['web_cores']:g} cores -> {result['shoppers_per_web_core_s'] or 0:,.1f} shoppers/s per web core; "
            f"status requests per shopper {result['status_requests_per_shopper']['mean']}; failures "
            f"{dict(run.failures) or 'none'}")
        return result

    def claim_alone(self, rate: float, duration: float) -> dict[str, Any]:
        """The claim alone at `rate`, bench/loadgen from the intended send: couponrush's web server directly (no
        nginx: loadgen speaks plain HTTP) and the seed's Go service, the same fresh-shopper load."""
        from phases.loadgen import run_loadgen, run_summary

        n = int(rate * duration) + 100
        tokens = common.write_tokens(BENCH_VAR / "sale-claims.txt", 2 * n, self.secret, prefix=f"c{self.tag}")
        conns = max(1, min(50, int(rate // 2)))
        out: dict[str, Any] = {"rate": rate, "connections": conns}
        cpu = common.session_cpu(self.web.proc.pid)
        cr = run_loadgen(self.loadgen, f"sale claim {rate:g} a second, couponrush", port=self.port,
                         path=f"/api/v1/campaigns/{self.campaign}/claim", rate=rate, duration=duration,
                         connections=conns, tokens=tokens, offset=0, repeat=0.0)
        out["couponrush"] = {**run_summary(cr), "status": cr.get("status"), "errors": cr.get("errors"),
                             "server_cpu_us_per_request": round((common.session_cpu(self.web.proc.pid) - cpu)
                                                                / max(cr.get("completed") or 1, 1) * 1e6, 1)}
        if self.seed is None:
            out["seed_go"] = self.no_seed
        else:
            cpu = common.session_cpu(self.seed.proc.pid)
            sg = run_loadgen(self.loadgen, f"sale claim {rate:g} a second, seed-go", port=self.seed_port,
                             path=f"/api/v1/campaigns/{900_000 + int(rate)}/claim", rate=rate, duration=duration,
                             connections=conns, tokens=tokens, offset=n, repeat=0.0)
            out["seed_go"] = {**run_summary(sg), "status": sg.get("status"), "errors": sg.get("errors"),
                              "server_cpu_us_per_request": round((common.session_cpu(self.seed.proc.pid) - cpu)
                                                                 / max(sg.get("completed") or 1, 1) * 1e6, 1)}
        self.procs.check_alive()
        return out

    def run(self) -> None:
        a = self.args
        self.longpoll = run_async(self.detect_longpoll())
        self.report["longpoll"] = self.longpoll
        modes = [m for m in a.modes if m != "longpoll" or self.longpoll["supported"]]
        if "longpoll" in a.modes and "longpoll" not in modes:
            self.report["notes"].append("GET /claims/{id}?wait= did not wait (the long poll is not in this server): "
                                        "only the poll mode ran")
        self.report["modes"] = modes
        self.report["idle"] = self.idle()
        first = self.journey_run(a.rates[0], modes[0], 1.0, recorded=False)  # every route once before the load
        if first["served"] < 1:
            raise BenchError(f"the first journeys were not served: {first['failures']}")
        if a.warmup > 0:
            self.journey_run(a.rates[0], modes[0], a.warmup, recorded=False)
        for i, rate in enumerate(a.rates):
            for mode in modes if i % 2 == 0 else modes[::-1]:
                self.report["runs"].append(self.journey_run(rate, mode, a.duration))
            self.report["claim_alone"].append(self.claim_alone(rate, a.claim_duration))
        self.report["checks"] = {"verify_campaign": self.verify()}

    def idle(self, seconds: float = 3.0) -> dict[str, float]:
        """The cores each process uses with no load at all (their timers and background threads): at a few
        shoppers a second this is part of the CPU a run measures."""
        before = self.cpu()
        time.sleep(seconds)
        after = self.cpu()
        out = {f"{k}_cores": round((after[k] - before[k]) / seconds, 4) for k in after if k != "client"}
        log(f"idle for {seconds:g}s: {out}")
        return out

    def verify(self) -> dict[str, Any]:
        """verify_campaign of the sale's campaign once the worker has drained it (3 tries, 3 s apart)."""
        result: dict[str, Any] = {}
        for _ in range(3):
            time.sleep(3)
            result = common.verify(self.env, self.campaign)
            if result["balanced"]:
                break
        return {"campaign": self.campaign, "balanced": result["balanced"], "exit_code": result["exit_code"],
                "output": result["output"]}

    def close(self) -> None:
        super().close()
        if self.seed is not None and not self.args.keep_redis:
            with contextlib.suppress(Exception):
                flush_redis(self.seed_redis_url, what="seed-go, at the end", allowed=True, force=True)


def run_async(coro: Any) -> Any:
    """On uvloop when it is there (the web server's loop): the client's own cost per request is then smaller."""
    try:
        import uvloop
    except ImportError:
        factory = None
    else:
        factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(coro)


def summarize(run: Run, wall: float, cpu: dict[str, float]) -> dict[str, Any]:
    served_per_s = run.served / run.duration
    web_cores = cpu["web"] / wall if wall else 0.0
    steps = {}
    for name, st in run.steps.items():
        if not (st.latencies or st.errors):
            continue
        steps[name] = {"requests": len(st.latencies) + sum(st.errors.values()), **percentiles(st.latencies),
                       "statuses": dict(st.statuses), "codes": dict(st.codes), "errors": dict(st.errors)}
        if st.cache:
            steps[name]["x_cache_status"] = dict(st.cache)
    sr = run.status_requests
    return {
        "label": run.label, "rate": run.rate, "mode": run.mode, "duration_s": run.duration, "wall_s": round(wall, 2),
        "arrived": run.arrived, "served": run.served, "failed": sum(run.failures.values()),
        "failures": dict(run.failures), "served_per_s": round(served_per_s, 2),
        "late_arrival_share": round(run.late_arrivals / run.arrived, 4) if run.arrived else None,
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "cpu_seconds": cpu, "web_cores": round(web_cores, 3),
        "shoppers_per_web_core_s": round(run.served / cpu["web"], 1) if cpu["web"] else None,
        "web_cpu_ms_per_shopper": round(cpu["web"] / run.served * 1000, 2) if run.served else None,
        "nginx_cpu_ms_per_shopper": round(cpu["nginx"] / run.served * 1000, 2) if run.served else None,
        "worker_cpu_ms_per_shopper": round(cpu["worker"] / run.served * 1000, 2) if run.served and "worker" in cpu
        else None,
        "postgres_cpu_ms_per_shopper": round(cpu["postgres"] / run.served * 1000, 2) if run.served and "postgres" in cpu
        else None,
        "status_requests_per_shopper": {"mean": round(sum(sr) / len(sr), 2) if sr else None,
                                        "p50": sorted(sr)[len(sr) // 2] if sr else None,
                                        "max": max(sr) if sr else None},
        "requests_per_served_shopper": round(sum(run.requests) / len(run.requests), 2) if run.requests else None,
        "claim_to_coupon": percentiles(run.claim_to_coupon), "journey": percentiles(run.journeys),
        "steps": steps,
    }


# ---------------------------------------------------------------------------------------------------------
# The table


def fmt(value: Any, spec: str = ",.1f") -> str:
    return "-" if value is None else format(value, spec)


def print_table(report: dict[str, Any]) -> None:
    runs = report["runs"]
    host = report["host"]
    print(f"\nsale  {report['timestamp']}  {report['git']}  {host['cpus']} CPUs, load average before "
          f"{host['loadavg_before']}, after {host.get('loadavg_after')}; 1 web worker, nginx in front, Celery worker; "
          f"{report['config']['page_views']} page views a shopper; latencies from the intended send; idle cores "
          f"{report.get('idle')}")
    cols = [r["label"] for r in runs]
    print("| figure | " + " | ".join(cols) + " |")
    print("| --- |" + " ---: |" * len(cols))
    rows: list[tuple[str, Any]] = [
        ("shoppers arrived / served", lambda r: f"{r['arrived']:,} / {r['served']:,}"),
        ("served/s", lambda r: fmt(r["served_per_s"])),
        ("web server cores used", lambda r: fmt(r["web_cores"], ".2f")),
        ("**shoppers/s per web core**", lambda r: fmt(r["shoppers_per_web_core_s"])),
        ("web CPU ms / shopper", lambda r: fmt(r["web_cpu_ms_per_shopper"], ".2f")),
        ("nginx / worker / PostgreSQL CPU ms / shopper", lambda r: " / ".join(
            fmt(r[k], ".2f") for k in ("nginx_cpu_ms_per_shopper", "worker_cpu_ms_per_shopper",
                                       "postgres_cpu_ms_per_shopper"))),
        ("status requests / claimed shopper (mean, max)", lambda r: ", ".join(
            (fmt(r["status_requests_per_shopper"]["mean"], ".2f"), fmt(r["status_requests_per_shopper"]["max"], "d")))),
        ("requests / served shopper", lambda r: fmt(r["requests_per_served_shopper"], ".2f")),
        ("claim -> coupon seen p50 / p99 ms", lambda r: (
            f"{fmt(r['claim_to_coupon']['p50_ms'])} / {fmt(r['claim_to_coupon']['p99_ms'])}")),
        ("journey p50 / p99 ms", lambda r: f"{fmt(r['journey']['p50_ms'])} / {fmt(r['journey']['p99_ms'])}"),
    ]
    for name in STEPS:
        rows.append((f"p99 ms {STEP_LABELS[name]}", lambda r, n=name: fmt((r["steps"].get(n) or {}).get("p99_ms"))))
    rows.append(("load average after (1, 5, 15 min)", lambda r: ", ".join(f"{x:g}" for x in r["loadavg_after"])))
    rows.append(("client: arrivals started > 5 ms late", lambda r: fmt(r["late_arrival_share"], ".1%")))
    rows.append(("failed (by step)", lambda r: ", ".join(f"{k}: {v}" for k, v in r["failures"].items()) or "0"))
    for name, cell in rows:
        print(f"| {name} | " + " | ".join(cell(r) for r in runs) + " |")
    print("\nthe claim alone at the same rate (bench/loadgen, plain HTTP, p99 from the intended send):")
    print("| rate/s | couponrush p99 ms | couponrush CPU us/claim | seed-go p99 ms | seed-go CPU us/claim |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    for c in report["claim_alone"]:
        cr, sg = c["couponrush"], c["seed_go"]
        seed = ("skipped", "-") if "skipped" in sg else (fmt(sg["p99_ms_from_intent"], ".2f"),
                                                        fmt(sg["server_cpu_us_per_request"]))
        print(f"| {c['rate']:g} | {fmt(cr['p99_ms_from_intent'], '.2f')} | {fmt(cr['server_cpu_us_per_request'])} | "
              f"{seed[0]} | {seed[1]} |")
    for note in report["notes"]:
        print(f"NOTE: {note}")
    print(f"json: {rel(Path(report['file']))}", flush=True)


# ---------------------------------------------------------------------------------------------------------
# Main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--rates", default="10,30", help="shoppers arriving per second, one run each (10,30)")
    p.add_argument("--duration", type=float, default=20.0, help="seconds of arrivals a run (20; --quick: 8)")
    p.add_argument("--warmup", type=float, default=None, help="seconds of unrecorded arrivals first (3; --quick: 2)")
    p.add_argument("--claim-duration", type=float, default=None,
                   help="seconds of the claim alone at each rate (10; --quick: 5)")
    p.add_argument("--modes", default="poll,longpoll",
                   help="how the status is followed: poll (400 ms), longpoll (?wait); longpoll runs only if served")
    p.add_argument("--wait", type=float, default=5.0, help="the long poll's ?wait= seconds (5)")
    p.add_argument("--page-views", type=int, default=3,
                   help="page views before the claim, each GET /campaigns + GET /campaigns/{id} (3)")
    p.add_argument("--think", type=float, default=0.0, help="seconds between a step's answer and the next (0)")
    p.add_argument("--workers", type=int, default=1, help="web server workers (1: the issue's measure)")
    p.add_argument("--server-args", default="", help="extra options for the web server (config/server.py)")
    p.add_argument("--seed-go-db", type=int, default=None, help="seed-go's Redis db (REDIS_URL's db + 1)")
    p.add_argument("--quick", action="store_true", help="8 s runs, 2 s warm-up, 5 s claim-alone runs")
    p.add_argument("--force-flush", action="store_true", help="flush REDIS_URL's db even if not a bench's")
    p.add_argument("--keep-redis", action="store_true", help="don't flush the Redis dbs at the end")
    p.add_argument("--output", type=Path, default=OUT, help=f"the JSON ({rel(OUT)})")
    args = p.parse_args(argv)
    try:
        args.rates = [float(r) for r in args.rates.split(",") if r.strip()]
    except ValueError:
        p.error("--rates: numbers separated by commas")
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not args.rates or any(r <= 0 for r in args.rates) or not args.modes or set(args.modes) - {"poll", "longpoll"}:
        p.error("--rates must be positive numbers and --modes poll and/or longpoll")
    if not 0 <= args.wait <= 25:
        p.error("--wait: 0 to 25 (docs/api.md)")
    if args.quick and args.duration == 20.0:
        args.duration = 8.0
    args.warmup = (2.0 if args.quick else 3.0) if args.warmup is None else args.warmup
    args.claim_duration = (5.0 if args.quick else 10.0) if args.claim_duration is None else args.claim_duration
    args.proxy = True  # ApiBench's nginx
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    common.set_name("sale")
    common.install_signal_handlers()
    procs = Processes()
    bench = Sale(args, procs)
    report = bench.report
    report.update(timestamp=datetime.now(UTC).isoformat(timespec="seconds"), git=common.git_revision(),
                  host={"cpus": os.cpu_count(), "loadavg_before": [round(x, 2) for x in os.getloadavg()]},
                  config={k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
                  runs=[], claim_alone=[])
    try:
        bench.setup()
        bench.run()
    except Interrupted as exc:
        log(f"{exc}: stopping ...")
        return 130
    except BenchError as exc:
        log(f"ERROR: {exc}")
        return 1
    finally:
        bench.pause_worker(False)
        procs.stop_all()
        bench.close()
    report["host"]["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
    args.output.parent.mkdir(parents=True, exist_ok=True)
    report["file"] = str(args.output)
    args.output.write_text(orjson.dumps(report, option=orjson.OPT_INDENT_2, default=str).decode() + "\n")
    print_table(report)
    return 0 if report["checks"]["verify_campaign"]["balanced"] else 2


if __name__ == "__main__":
    sys.exit(main())
