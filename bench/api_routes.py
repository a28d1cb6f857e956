"""Every shopper route beside the claim, in the same run (issue 35): what a sale's page asks of the server around
the button, as a multiple of what the button itself gets.

    .venv/bin/python bench/api_routes.py [--duration 8] [--rounds 2] [--quick] [--proxy] [--paced] [--only KEYS]

One web server (the run command's, `python -m config.server`, 1 worker: the issue's measure) on DATABASE_URL /
REDIS_URL (or embedded servers under var/bench/), no Celery worker, so that nothing drains what the bench keeps
pending. Set-up, before any load:

  - a grab campaign the claim load never exhausts (stock 100,000,000, 1,000 a shopper: every request claims);
  - --holders shoppers who each claimed one coupon of two other campaigns, drained into PostgreSQL in this
    process (orders.drain.drain_campaign): they hold coupons for GET /me/coupons and POST /carts/validate, and
    their claims are the issued ones of GET /claims/{id}; the same shoppers claimed a third campaign whose ledger
    is never drained: the pending claims;
  - a codes campaign with a shared code (SAVE50-<run>, uses and uses per shopper unbounded in practice) for
    redeem, reserve, confirm and release;
  - a grab campaign that --claimed new shoppers claim once each, drained as the holders' are: claimed coupons
    for redeem, reserve, confirm and release of a coupon a shopper holds. A claimed coupon is used once: each
    run of a route that uses one is dealt coupons of its own, never dealt before, that wrk takes in order
    (more are claimed and drained before a round, or a paced pass, as the rates seen say it will need);
  - one request of each route, whose answer must be the one meant (a 200 with code 0 and the status meant,
    a claim pending or issued, Django's JSON 404): a bench that measures an error page measures nothing.

Then a warm-up (--warmup s of each route, not recorded) and --rounds rounds, each route once a round for
--duration s with wrk -t2 -c50 (bench/api_routes.lua: each request a random shopper of the route's pool, tokens
signed here by bench.common.shopper_token; redeem and reserve a new order and Idempotency-Key each), the
order of the routes reversed every other round. A round's confirm finishes the orders its reserve held, in the
order they were held; its release the orders of another reserve run just before it (not recorded); when the
orders held are fewer than the confirm or release is expected to finish, more reserve runs (not recorded)
hold more first, so that no order is finished twice. With --proxy, the public reads also through nginx on
loopback, the compose proxy's config (bench/proxy_bench.py renders it as the image does; TLS, keep-alive) in
front of the same server.

--paced: after each round, each route with a goal of issue 35 (Route.goal: 0.05 the uses and validate, 0.08
GET /me/coupons, 0.1 the public reads at the origin, 0.5 the claim's status, 0.2 the 404) again for
--duration s at a fixed rate, its goal times the claim's requests/s of that round, with the same 50
connections (api_routes.lua's delay(): each wrk thread on a schedule of its own), once the server is idle:
its p99 (wrk's, from the actual send: not free of coordinated omission; bench/sale.py counts from the
intended send) and whether the rate was held (at least 95% of it served).

Each route's requests/s, p99 and ratio to the claim's requests/s of the same round, the server's CPU per
request, HTTP statuses and the answers' business codes (with --paced, the paced rate and p99, and whether the
goal was met): a table, and bench/results/api_routes.json.
bench/README.md documents the fields. Exit 0: ran; 1: could not run (or a route's first answer was wrong).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import secrets
import shutil
import statistics
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterable

BENCH_DIR = Path(__file__).resolve().parent
if str(BENCH_DIR) not in sys.path:
    sys.path.insert(0, str(BENCH_DIR))

import common  # noqa: E402 - bench/ is on sys.path when this runs as a script
from common import (  # noqa: E402
    BENCH_VAR,
    RESULTS_DIR,
    BenchError,
    Interrupted,
    Processes,
    Stores,
    child_env,
    flush_redis,
    log,
    manage,
    rel,
    run_step,
    shopper_token,
)

LUA = BENCH_DIR / "api_routes.lua"
OUT = RESULTS_DIR / "api_routes.json"
DATA = BENCH_VAR / "api"  # token files and the orders a reserve run held, under a folder a run (its pid)
CART_LINES = [{"sku": "TEA-1", "category": "tea", "quantity": 2, "unit_price": "120.00"},
              {"sku": "CUP-9", "quantity": 1, "unit_price": "60.00"}]
TOKEN_TTL = 3000  # seconds: under COUPONS_TOKEN_MAX_TTL (3600), longer than a default run
HELD = 0.95  # a paced run held its rate if it served at least this share of it
RETENTION_SECONDS = 7200  # the ledger's retention for the run (COUPONS_LEDGER_RETENTION_SECONDS): longer than a run


@dataclass
class Route:
    """One wrk load: `label` as the table shows it; `pool` the token file's key (None: no shopper headers)."""

    key: str
    label: str
    method: str
    path: str
    pool: str | None = None
    body: str | None = None
    pick: str = "random"
    orders: bool = False  # a new order id and Idempotency-Key each request
    record: str | None = None  # the orders held go to this pool (for a later confirm or release)
    proxy: bool = False  # through nginx
    recorded: bool = True  # False: a run that only prepares the next one's orders
    expect_status: int = 200
    lua_args: list[str] = field(default_factory=list)
    fresh: bool = False  # each request a claimed coupon of its own (ApiBench.deal), never used before
    goal: float | None = None  # issue 35's goal, a multiple of the claim's requests/s: the paced run's rate
    like: str | None = None  # the route whose requests/s to expect before this one has run (SAVE50's)
    expect: dict[str, str] = field(default_factory=dict)  # fields the first answer must have


def compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def routes(ids: dict[str, Any], proxy: bool) -> list[list[Route]]:
    """The routes in their order, in units run back to back (a confirm right after the reserve that held its
    orders)."""
    code = ids["code"]
    use = {"order_id": "{order}", "order_amount": "350.00", "currency": "CNY"}
    reserve = compact({**use, "hold_seconds": 900})
    redeemed, reserved, released = {"status": "redeemed"}, {"status": "reserved"}, {"status": "released"}
    claimed = "/api/v1/coupons/{x}"  # the line's coupon; a held line's {y} (api_routes.lua's record)
    units = [
        [Route("claim", "POST /campaigns/{id}/claim", "POST", f"/api/v1/campaigns/{ids['claim']}/claim",
               pool="buyers", body="{}")],
        [Route("healthz", "GET /healthz", "GET", "/healthz")],
        [Route("campaigns", "GET /campaigns", "GET", "/api/v1/campaigns", goal=0.1)],
        [Route("campaign", "GET /campaigns/{id}", "GET", f"/api/v1/campaigns/{ids['claim']}", goal=0.1)],
        [Route("claim_pending", "GET /claims/{id} (pending)", "GET", "/api/v1/claims/{x}", pool="pending",
               goal=0.5)],
        [Route("claim_issued", "GET /claims/{id} (issued)", "GET", "/api/v1/claims/{x}", pool="issued", goal=0.5)],
        [Route("my_coupons", "GET /me/coupons", "GET", "/api/v1/me/coupons", pool="holders", goal=0.08)],
        [Route("validate", "POST /carts/validate (2 lines, SAVE50 + own coupons)", "POST",
               "/api/v1/carts/validate", pool="holders",
               body=compact({"currency": "CNY", "codes": [code], "lines": CART_LINES}), goal=0.05)],
        [Route("redeem", "POST /coupons/SAVE50/redeem", "POST", f"/api/v1/coupons/{code}/redeem", pool="buyers",
               body=compact(use), orders=True, goal=0.05, expect=redeemed)],
        [Route("reserve", "POST /coupons/SAVE50/reserve", "POST", f"/api/v1/coupons/{code}/reserve", pool="buyers",
               body=reserve, orders=True, record="held", goal=0.05, expect=reserved),
         Route("confirm", "POST /coupons/SAVE50/confirm", "POST", f"/api/v1/coupons/{code}/confirm", pool="held",
               body=compact({"order_id": "{x}"}), pick="next", goal=0.05, expect=redeemed)],
        [Route("reserve_for_release", "POST /coupons/SAVE50/reserve (orders for release)", "POST",
               f"/api/v1/coupons/{code}/reserve", pool="buyers", body=reserve,
               orders=True, record="held_r", recorded=False, expect=reserved),
         Route("release", "POST /coupons/SAVE50/release", "POST", f"/api/v1/coupons/{code}/release", pool="held_r",
               body=compact({"order_id": "{x}"}), pick="next", goal=0.05, expect=released)],
        [Route("redeem_claimed", "POST /coupons/{code}/redeem (a claimed coupon)", "POST", f"{claimed}/redeem",
               pool="claimed", body=compact(use), orders=True, pick="next", fresh=True, goal=0.05, like="redeem",
               expect=redeemed)],
        [Route("reserve_claimed", "POST /coupons/{code}/reserve (a claimed coupon)", "POST", f"{claimed}/reserve",
               pool="claimed", body=reserve, orders=True, pick="next", fresh=True, record="held_c", goal=0.05,
               like="reserve", expect=reserved),
         Route("confirm_claimed", "POST /coupons/{code}/confirm (a claimed coupon)", "POST",
               "/api/v1/coupons/{y}/confirm", pool="held_c", body=compact({"order_id": "{x}"}), pick="next",
               goal=0.05, like="confirm", expect=redeemed)],
        [Route("reserve_claimed_for_release", "POST /coupons/{code}/reserve (a claimed coupon, for release)", "POST",
               f"{claimed}/reserve", pool="claimed", body=reserve, orders=True, pick="next", fresh=True,
               record="held_cr", recorded=False, like="reserve_for_release", expect=reserved),
         Route("release_claimed", "POST /coupons/{code}/release (a claimed coupon)", "POST",
               "/api/v1/coupons/{y}/release", pool="held_cr", body=compact({"order_id": "{x}"}), pick="next",
               goal=0.05, like="release", expect={**released, "coupon_status": "active"})],
        [Route("nope", "GET /api/v1/nope (Django's JSON 404)", "GET", "/api/v1/nope", expect_status=404, goal=0.2)],
    ]
    if proxy:
        units += [
            [Route("campaigns_nginx", "GET /campaigns through nginx", "GET", "/api/v1/campaigns", proxy=True)],
            [Route("campaign_nginx", "GET /campaigns/{id} through nginx", "GET", f"/api/v1/campaigns/{ids['claim']}",
                   proxy=True)],
        ]
    return units


# ---------------------------------------------------------------------------------------------------------
# Set-up


def campaign_create(*args: str) -> int:
    """`manage.py campaign_create --publish ARGS`, run in this process (a new interpreter a campaign took 5 s
    on a busy machine); the new campaign's id."""
    import io

    from django.core.management import call_command

    out = io.StringIO()
    call_command("campaign_create", "--publish", *args, stdout=out)
    lines = [line for line in out.getvalue().splitlines() if line.strip().startswith("{")]
    if not lines:
        raise BenchError(f"campaign_create printed no JSON line: {out.getvalue()!r}")
    campaign = json.loads(lines[-1])
    log(f"campaign {campaign['id']}: {' '.join(args)}")
    return int(campaign["id"])


def claim_all(campaign_id: int, users: list[str], pipeline: int = 500) -> dict[str, str]:
    """Each shopper's claim of the campaign through the real claim script (claim_call + claim.lua, pipelined, as
    bench/drain_bench.py fills a ledger); their claim ids. A claim Redis ran past its deadline (TOO_LATE on a
    busy machine) or past the campaign's rate limit changed nothing and is sent again."""
    from campaigns.redis_state import ClaimCode, claim_call, claim_reply, redis_now_ms, scripts
    from orders.ledger import claim_id_of

    script = scripts().claim
    todo, ids = list(users), {}
    while todo:
        batch, todo = todo[:pipeline], todo[pipeline:]
        now_ms = redis_now_ms()
        calls = [claim_call(campaign_id=campaign_id, user_id=user, idempotency_key=None, client_ip=None,
                            now_ms=now_ms) for user in batch]
        for user, raw in zip(batch, script.each([(call.keys, call.args) for call in calls]), strict=True):
            code, ledger_id, _ = claim_reply(raw)
            if code == ClaimCode.CLAIMED:
                ids[user] = claim_id_of(campaign_id, ledger_id)
            elif code in (ClaimCode.TOO_LATE, ClaimCode.RATE_LIMITED):
                todo.append(user)
            else:
                raise BenchError(f"the claim of {user} on campaign {campaign_id} answered {code}")
    return ids


def drain_all(campaign_id: int) -> None:
    """The worker's drain, in this process, until the ledger is in PostgreSQL."""
    from orders import drain

    t0 = time.monotonic()
    while not drain.drain_campaign(campaign_id=campaign_id, max_seconds=5.0).caught_up:
        if time.monotonic() - t0 > 300:
            raise BenchError(f"campaign {campaign_id}: the drain did not catch up in 300 s")
    log(f"campaign {campaign_id}: drained in {time.monotonic() - t0:.1f}s")


def write_pool(path: Path, rows: list[tuple[str, str]], secret: str, threads: int) -> Path:
    """"user token [x]" lines, tokens signed as the contract says (bench.common.shopper_token), dealt into one
    file a wrk thread (`path`.<t>, api_routes.lua): each thread reads only its own before its load starts."""
    expires = int(time.time()) + TOKEN_TTL
    path.parent.mkdir(parents=True, exist_ok=True)
    outs = [open(f"{path}.{t}", "w") for t in range(threads)]  # noqa: SIM115 - closed below
    try:
        for i, (user, x) in enumerate(rows):
            outs[i % threads].write(f"{user} {shopper_token(user, expires, secret)}{' ' + x if x else ''}\n")
    finally:
        for out in outs:
            out.close()
    return path


# ---------------------------------------------------------------------------------------------------------
# The run


class ApiBench:
    def __init__(self, args: argparse.Namespace, procs: Processes) -> None:
        self.args, self.procs = args, procs
        self.pools: dict[str, Path] = {}
        self.stores: Stores | None = None
        self.folder: Path | None = None  # nginx's
        self.report: dict[str, Any] = {"rounds": [], "notes": []}
        self.coupons: list[tuple[str, str]] = []  # claimed coupons (user, code) drained, never dealt
        self.coupons_made, self.coupon_last_pk = 0, 0
        self.dealt: dict[str, int] = {}  # claimed coupons dealt to each route's runs
        self.rates: dict[str, float] = {}  # each route's latest saturating requests/s: what a run will need
        self.feeds: list[dict[str, Any]] = []  # reserve runs that topped up a confirm's or release's orders
        self.held_pools: set[str] = set()  # the pools a reserve run writes (Route.record)
        self.data: Path | None = None  # this run's token files: two runs at once must not share them

    def setup(self) -> None:
        a = self.args
        common.ensure_wrk()
        self.stores = stores = common.start_stores()
        flush_redis(stores.redis_url, what="api routes bench", allowed=True, force=a.force_flush or stores.own_redis)
        self.secret = secrets.token_hex(16)
        env = self.env = child_env(stores, self.secret)
        # Redis answers GET /claims/{id} for claims younger than the ledger's retention (campaigns.claim_settled:
        # 600 s by default), PostgreSQL through Django after: a run's later rounds would read the set-up's claims
        # there. A run's claims are kept in Redis for its whole length (a sale's shoppers ask within seconds).
        env["COUPONS_LEDGER_RETENTION_SECONDS"] = str(RETENTION_SECONDS)
        run_step("migrate", manage("migrate", "--noinput", "-v", "0"), env)
        common.collectstatic_if_missing(env)
        os.environ.update({k: env[k] for k in ("DJANGO_SETTINGS_MODULE", "DJANGO_DEBUG", "DATABASE_URL", "REDIS_URL",
                                                "CELERY_BROKER_URL", "COUPONS_TOKEN_SECRET",
                                                "COUPONS_LEDGER_RETENTION_SECONDS")})
        import django

        django.setup()
        tag = self.tag = secrets.token_hex(3).upper()
        self.ids: dict[str, Any] = {
            "claim": campaign_create("--name", "api bench: claims", "--stock", "100000000", "--per-user-limit",
                                     "1000"),
            "held_a": campaign_create("--name", "api bench: held A", "--stock", str(a.holders)),
            "held_b": campaign_create("--name", "api bench: held B", "--stock", str(a.holders), "--discount", "5%"),
            "pending": campaign_create("--name", "api bench: pending", "--stock", str(a.holders)),
            "shared": campaign_create("--name", "api bench: shared code", "--kind", "codes", "--code",
                                      f"SAVE50-{tag}", "--stock", "100000000", "--per-user-limit", "1000000",
                                      "--discount", "50.00"),
            "code": f"SAVE50-{tag}",
            "claimed": campaign_create("--name", "api bench: claimed coupons", "--stock", "100000000"),
        }
        data = self.data = DATA / str(os.getpid())
        shutil.rmtree(data, ignore_errors=True)
        holders = [f"h{tag}{i:07d}" for i in range(a.holders)]
        t0 = time.monotonic()
        issued = claim_all(self.ids["held_a"], holders)
        claim_all(self.ids["held_b"], holders)
        pending = claim_all(self.ids["pending"], holders)
        log(f"{len(holders):,} shoppers claimed 3 campaigns in {time.monotonic() - t0:.1f}s")
        drain_all(self.ids["held_a"])
        drain_all(self.ids["held_b"])
        self.make_coupons(a.claimed)
        self.pools = {
            "buyers": write_pool(data / "buyers", [(f"b{tag}{i:07d}", "") for i in range(a.shoppers)], self.secret,
                                 a.threads),
            "holders": write_pool(data / "holders", [(u, "") for u in holders], self.secret, a.threads),
            "issued": write_pool(data / "issued", list(issued.items()), self.secret, a.threads),
            "pending": write_pool(data / "pending", list(pending.items()), self.secret, a.threads),
            # written by the reserve runs (Route.record)
            "held": data / "held", "held_r": data / "held_r", "held_c": data / "held_c", "held_cr": data / "held_cr",
        }
        self.port = common.free_port()
        self.urls = {False: f"http://127.0.0.1:{self.port}"}
        self.web_cmd = common.web_argv(self.port, a.workers, a.server_args.split())
        self.web = self.procs.start("api-web", self.web_cmd, env)
        common.wait_until("web", lambda: common.http_ok(f"{self.urls[False]}/healthz"), self.procs)
        if a.proxy:
            self.start_nginx()
        self.report["setup"] = {
            "web_command": self.web_cmd, "campaigns": self.ids, "holders": a.holders, "buyers": a.shoppers,
            "database": common.redact(stores.database_url), "redis": common.redact(stores.redis_url),
            "embedded_servers": [type(s).__name__ for s in stores.embedded],
            "live_campaigns_listed": self.live_campaigns()}

    # --- claimed coupons: each used once -----------------------------------------------------------------

    def make_coupons(self, n: int) -> None:
        """n new shoppers each claim a coupon of the claimed campaign (the claim script, as the holders' are),
        drained into PostgreSQL in this process; their codes read back in the order they were issued."""
        from coupons.models import Coupon

        t0 = time.monotonic()
        users = [f"c{self.tag}{self.coupons_made + i:07d}" for i in range(n)]
        self.coupons_made += n
        claim_all(self.ids["claimed"], users)
        drain_all(self.ids["claimed"])
        rows = list(Coupon.objects.filter(campaign_id=self.ids["claimed"], pk__gt=self.coupon_last_pk)
                    .order_by("pk").values_list("pk", "user_id", "code"))
        if len(rows) != n:
            raise BenchError(f"{n:,} claims of campaign {self.ids['claimed']} drained into {len(rows):,} coupons")
        self.coupon_last_pk = rows[-1][0]
        self.coupons += [(user, code) for _, user, code in rows]
        log(f"{n:,} claimed coupons (one a shopper) in {time.monotonic() - t0:.1f}s; {len(self.coupons):,} unused")

    def take(self, n: int) -> list[tuple[str, str]]:
        """n claimed coupons never dealt before (more claimed and drained first if short)."""
        if len(self.coupons) < n:
            self.make_coupons(max(n - len(self.coupons), 1000))
        rows, self.coupons = self.coupons[:n], self.coupons[n:]
        return rows

    def deal(self, route: Route, n: int) -> Path:
        """Route's token files for one run: n claimed coupons of their own (route.fresh), none dealt before."""
        self.dealt[route.key] = self.dealt.get(route.key, 0) + n
        assert self.data is not None
        return write_pool(self.data / f"claimed_{route.key}", self.take(n), self.secret, self.args.threads)

    def expected(self, route: Route, duration: float, rate: float | None = None) -> int:
        """The requests a run of `route` may send: at `rate` (paced) times 1.1, else at the higher of its latest
        saturating rate and its SAVE50 twin's (or a quarter of the claim's) times 1.3, twice that for a claimed
        coupon route's (coupons are cheap); plus one a connection. A 1 s warm-up's rate is a cold server's, and a
        run that outruns its list uses coupons or orders again."""
        if rate is not None:
            return int(rate * duration * 1.1) + self.args.connections
        seen = max(self.rates.get(route.key, 0.0), self.rates.get(route.like or "", 0.0))
        seen = seen or 0.25 * self.rates.get("claim", 4000)
        return int(seen * duration * (2.6 if route.fresh else 1.3)) + self.args.connections

    def start_nginx(self) -> None:
        from proxy_bench import nginx_conf

        nginx = shutil.which("nginx") or "/usr/sbin/nginx"
        if not Path(nginx).exists():
            raise BenchError("--proxy needs nginx: apt-get install -y nginx")
        self.folder = Path(tempfile.mkdtemp(prefix="couponrush-api-bench-"))
        self.folder.chmod(0o755)  # nginx's workers (nobody, under a root master) read and write under it
        https_port, http_port = common.free_port(), common.free_port()
        conf = nginx_conf(self.folder, https_port, http_port, self.port)
        self.procs.start("api-nginx", [nginx, "-c", str(conf), "-p", f"{self.folder}/", "-e",
                                   str(self.folder / "error.log"), "-g", "daemon off;"], self.env)
        self.urls[True] = f"https://127.0.0.1:{https_port}"
        import ssl

        self.tls = ssl.create_default_context(cafile=str(self.folder / "c.pem"))
        self.tls.check_hostname = False  # the certificate is for localhost, the URL says 127.0.0.1
        common.wait_until("nginx", lambda: self.get("/healthz", proxy=True)[0] == 200, self.procs, timeout=20)
        self.report["notes"].append(f"nginx: {subprocess_text([nginx, '-v'])}")

    def live_campaigns(self) -> int | None:
        """How many campaigns GET /campaigns lists: the list's size is part of its cost."""
        status, body, _ = self.get("/api/v1/campaigns")
        if status != 200:
            return None
        data = json.loads(body)
        items = data if isinstance(data, list) else next(
            (v for k in ("campaigns", "results", "items") if isinstance(v := data.get(k), list)), [])
        return int(data.get("count", len(items))) if isinstance(data, dict) else len(items)

    def get(self, path: str, *, proxy: bool = False, method: str = "GET", headers: dict[str, str] | None = None,
            body: str | None = None) -> tuple[int, bytes, dict[str, str]]:
        req = urllib.request.Request(self.urls[proxy] + path, method=method, headers=headers or {},
                                     data=body.encode() if body is not None else None)
        try:
            with urllib.request.urlopen(req, timeout=10, context=self.tls if proxy else None) as resp:  # noqa: S310
                return resp.status, resp.read(), dict(resp.headers)
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read(), dict(exc.headers)
        except (urllib.error.URLError, OSError):
            return 0, b"", {}

    # --- the first answer of each route ----------------------------------------------------------------

    def first_line(self, pool: str) -> list[str]:
        with open(f"{self.pools[pool]}.0") as f:
            return f.readline().split()

    def one(self, route: Route, order: str | None = None, line: list[str] | None = None) -> tuple[int, Any, dict]:
        """One request of `route` as its Lua script would send it."""
        headers: dict[str, str] = {}
        x = y = ""
        if route.pool:
            user, token, *rest = line or self.first_line(route.pool)
            headers.update({"X-User-Id": user, "X-Token": token})
            x, y = (rest + ["", ""])[:2]
        if route.orders:
            headers["Idempotency-Key"] = f"k{order}"
        body = route.body
        if body is not None:
            headers["Content-Type"] = "application/json"
            body = body.replace("{x}", x).replace("{y}", y).replace("{order}", order or "")
        status, raw, answer_headers = self.get(route.path.replace("{x}", x).replace("{y}", y), proxy=route.proxy,
                                               method=route.method, headers=headers, body=body)
        try:
            data = json.loads(raw)
        except ValueError:
            data = raw[:200].decode(errors="replace")
        return status, data, answer_headers

    def probe(self, units: list[list[Route]]) -> dict[str, Any]:
        """Each route once: the answer must be the one meant, else the figures would be of an error path."""
        seen: dict[str, Any] = {}
        for unit in units:
            held: list[str] | None = None
            for route in unit:
                if route.pool in self.held_pools:  # the order the unit's reserve just held
                    status, data, headers = self.one(route, line=held)
                else:
                    order = f"probe-{route.key}"
                    line: list[str] | None = self.first_line(route.pool) if route.pool and not route.fresh else None
                    if route.fresh:  # a claimed coupon of its own, not one of the runs'
                        (user, code), = self.take(1)
                        line = [user, shopper_token(user, int(time.time()) + TOKEN_TTL, self.secret), code]
                    status, data, headers = self.one(route, order=order, line=line)
                    if route.record and line:
                        held = [*line[:2], order, *line[2:3]]  # as api_routes.lua records it
                want = route.expect_status
                ok = status == want and (not isinstance(data, dict) or data.get("code", 0) in (0, want))
                ok = ok and all(isinstance(data, dict) and data.get(k) == v for k, v in route.expect.items())
                if route.key == "claim_pending":
                    ok = ok and data.get("status") == "pending"
                if route.key == "claim_issued":
                    ok = ok and data.get("status") == "issued"
                if route.key == "validate":
                    ok = ok and len(data.get("coupons") or []) >= 3  # SAVE50 and the two held coupons
                text = json.dumps(data)[:160] if not isinstance(data, str) else data[:160]
                log(f"probe {route.label}: {status} {text}; Cache-Control {headers.get('Cache-Control')!r}")
                seen[route.key] = {"status": status, "answer": data if len(json.dumps(data)) < 2000 else text,
                                   "cache_control": headers.get("Cache-Control"), "etag": headers.get("ETag"),
                                   "ok": ok}
                if not ok:
                    raise BenchError(f"{route.label}: the first answer is not the one meant ({status} {text}); "
                                     "the bench would measure another path")
        return seen

    # --- loads -------------------------------------------------------------------------------------------

    def wrk(self, route: Route, label: str, duration: float, *, rate: float | None = None,
            record: Path | None = None) -> dict[str, Any]:
        """One route's load (paced at `rate` requests/s, else as fast as 50 connections go); its figures, the
        server's CPU per request, statuses and business codes. `record`: the held orders go there instead."""
        a = self.args
        script = [f"method={route.method}", f"path={route.path}", f"pick={route.pick}"]
        if route.fresh:
            script.append(f"shoppers={self.deal(route, self.expected(route, duration, rate))}")
        elif route.pool:
            script.append(f"shoppers={self.pools[route.pool]}")
        if route.body is not None:
            script.append(f"body={route.body}")
        if route.orders:
            script.append(f"orders={label}-{route.key}-")
        if route.record:
            script.append(f"record={record or self.pools[route.record]}")
        if rate is not None:
            script += [f"rate={rate:g}", f"threads={a.threads}", f"connections={a.connections}"]
        cpu_before = common.session_cpu(self.web.proc.pid)
        figures = common.run_wrk(f"api {label} {route.key}", self.urls[route.proxy], threads=a.threads,
                                 connections=a.connections, duration=duration, script=LUA, script_args=script)
        requests = figures.get("requests") or 0
        if requests:
            figures["server_cpu_us_per_request"] = round(
                (common.session_cpu(self.web.proc.pid) - cpu_before) / requests * 1e6, 1)
        if m := re.search(r"^api_routes: (.*)$", figures.pop("raw", ""), re.M):
            words = m.group(1).split()
            pairs = dict(zip(words[::2], words[1::2], strict=False))
            figures["wrapped"] = int(pairs.get("wrapped", 0))
            figures["reused"] = int(pairs.get("reused", 0))
            figures["statuses"] = dict(sorted(w.split(":") for w in re.findall(r"status (\S+)", m.group(1))))
            figures["codes"] = dict(sorted(w.split(":") for w in re.findall(r"code (\S+)", m.group(1))))
            if rate is not None:
                figures.update(late=int(pairs.get("late", 0)), late_max_ms=float(pairs.get("latemax", 0)),
                               pacing=pairs.get("pacing"))
        self.procs.check_alive()
        if rate is None and figures.get("requests_per_s"):
            self.rates[route.key] = figures["requests_per_s"]
        keys = ["requests_per_s", "requests", "p50_ms", "p90_ms", "p99_ms", "latency_max_ms", "non_2xx",
                "socket_errors", "server_cpu_us_per_request", "statuses", "codes", "wrapped", "reused"]
        return {k: figures.get(k) for k in keys + (["late", "late_max_ms", "pacing"] if rate is not None else [])}

    def settle(self, timeout: float = 5.0) -> float:
        """Wait until the web server is idle (under 12% of a core over 0.25 s): a run just before it may have
        left requests queued (wrk closes its connections, the server still answers what it read), which would
        be counted in a paced run's first moments. The seconds waited."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            before = common.session_cpu(self.web.proc.pid)
            time.sleep(0.25)
            if common.session_cpu(self.web.proc.pid) - before < 0.03:
                break
        return round(time.monotonic() - t0, 2)

    # --- the held orders a confirm or release finishes ------------------------------------------------------

    def held_lines(self, path: Path) -> int:
        """The orders a consumer's threads can each finish once: the fewest of a thread's file, times threads."""
        counts = []
        for t in range(self.args.threads):
            try:
                with open(f"{path}.{t}", "rb") as f:
                    counts.append(sum(1 for _ in f))
            except FileNotFoundError:
                counts.append(0)
        return min(counts) * self.args.threads

    def clear_pool(self, path: Path) -> None:
        for t in range(self.args.threads):
            Path(f"{path}.{t}").write_text("")

    def top_up(self, unit: list[Route], route: Route, label: str, duration: float, rate: float | None = None) -> None:
        """Before a confirm or release: enough held orders for its run (its rate times the duration, with a
        margin), else reserve runs of the unit (not recorded) hold more, appended to the orders it will finish."""
        feeder = next(r for r in unit if r.record == route.pool)
        path = self.pools[feeder.record or ""]
        need = self.expected(route, duration, rate)
        for _ in range(3):
            have = self.held_lines(path)
            if have >= need:
                return
            feed_rate = self.rates.get(feeder.key) or self.rates.get(feeder.like or "") or 100.0
            seconds = min(math.ceil((need - have) / feed_rate * 1.15), math.ceil(3 * duration))  # wrk: whole seconds
            more = path.with_name(f"{path.name}_more")
            tag = f"{label}-feed{len(self.feeds) + 1}"
            log(f"{route.key}: {have:,} held orders for {need:,} requests: {feeder.key} for {seconds:g}s more")
            figures = self.wrk(feeder, tag, seconds, record=more)
            added = 0
            for t in range(self.args.threads):
                extra = Path(f"{more}.{t}")
                text = extra.read_text() if extra.exists() else ""
                with open(f"{path}.{t}", "a") as out:
                    out.write(text)
                added += text.count("\n")
                extra.unlink(missing_ok=True)
            self.feeds.append({"label": label, "route": route.key, "feeder": feeder.key, "had": have, "need": need,
                               "seconds": seconds, "added": added, "requests_per_s": figures["requests_per_s"],
                               "codes": figures["codes"]})

    def provision(self, runs: Iterable[tuple[Route, float | None]], duration: float) -> None:
        """The claimed coupons a phase's runs will be dealt, made before it (not between its loads); twice for
        a reserve whose orders a confirm or release finishes (top_up may run it again)."""
        need = sum(self.expected(route, duration, rate) * (2 if route.record else 1) for route, rate in runs
                   if route.fresh)
        if need > len(self.coupons):
            self.make_coupons(need - len(self.coupons))

    def run(self) -> None:
        a = self.args
        units = routes(self.ids, a.proxy)
        if a.only:  # the claim always (the ratio's base); a unit whole if any of its routes is asked for
            units = [u for u in units if any(r.key == "claim" or r.key in a.only for r in u)]
        self.held_pools = {r.record for u in units for r in u if r.record}
        self.report["probe"] = self.probe(units)
        if a.warmup > 0:
            log(f"== warm-up: every route for {a.warmup:g}s, not recorded")
            for unit in units:
                for route in unit:
                    self.wrk(route, "warmup", a.warmup)
        for i in range(a.rounds):
            order = units if i % 2 == 0 else units[::-1]
            label = f"r{i + 1}"
            log(f"== round {i + 1} of {a.rounds}: {a.duration:g}s a route, wrk -t{a.threads} -c{a.connections}")
            self.provision([(r, None) for u in order for r in u], a.duration)
            figures: dict[str, Any] = {}
            for unit in order:
                for route in unit:
                    if route.pool in self.held_pools:
                        self.top_up(unit, route, label, a.duration)
                    figures[route.key] = self.wrk(route, label, a.duration)
            claim = figures["claim"]["requests_per_s"] or 0
            for f in figures.values():
                f["x_claim"] = round(f["requests_per_s"] / claim, 4) if claim and f["requests_per_s"] else None
            this = {"round": i + 1, "order": [r.key for u in order for r in u],
                    "loadavg": [round(x, 2) for x in os.getloadavg()], "routes": figures}
            self.report["rounds"].append(this)
            if a.paced:
                if claim:
                    this["paced"] = self.paced(order, claim, f"{label}p")
                    this["loadavg_paced"] = [round(x, 2) for x in os.getloadavg()]
                else:
                    self.report["notes"].append(f"round {i + 1}: the claim served nothing, no paced runs")
        if a.floor:
            import use_floor

            self.report["floor"] = use_floor.measure(self.ids["code"], self.take, a.floor,
                                                     {r.key for u in units for r in u})
        self.report["claimed_coupons"] = {"made": self.coupons_made, "dealt": self.dealt,
                                          "left_unused": len(self.coupons), "feeds": self.feeds}
        self.report["checks"] = self.checks()

    def paced(self, order: list[list[Route]], claim: float, label: str) -> dict[str, Any]:
        """Each route with a goal once at its goal's rate (the goal times this round's claim requests/s),
        a.connections connections, a.duration s; the reserve runs that only hold orders for a release run as
        fast as they go, as long as the release's rate needs (ApiBench.top_up)."""
        a = self.args
        plan = [(r, max(round(r.goal * claim, 1), 1.0)) for u in order for r in u if r.goal is not None]
        log(f"== paced: each route at its goal x the claim's {claim:,.0f} req/s, {a.duration:g}s, "
            f"wrk -t{a.threads} -c{a.connections}")
        self.provision(plan, a.duration)
        rates = {r.key: rate for r, rate in plan}
        out: dict[str, Any] = {}
        for unit in order:
            for route in unit:
                if not route.recorded and route.record:  # its orders: held afresh before the release (top_up)
                    self.clear_pool(self.pools[route.record])
                if route.key not in rates:
                    continue
                rate = rates[route.key]
                if route.pool in self.held_pools:
                    self.top_up(unit, route, label, a.duration, rate)
                settled = self.settle()
                f = self.wrk(route, label, a.duration, rate=rate)
                f["settle_s"] = settled
                achieved = f["requests_per_s"] or 0
                f.update(goal_x_claim=route.goal, target_rps=rate, rate_ratio=round(achieved / rate, 3),
                         held=achieved >= HELD * rate)
                out[route.key] = f
        return out

    def checks(self) -> dict[str, Any]:
        """After the load: a pending claim is still pending (nothing drained it), an issued one issued; how
        many claimed coupons each status has (redeemed by a redeem or confirm, held, active again)."""
        from django.db.models import Count

        from coupons.models import Coupon

        out: dict[str, Any] = {"claimed_coupons_by_status": dict(
            Coupon.objects.filter(campaign_id=self.ids["claimed"]).values_list("status").annotate(n=Count("id"))
            .order_by("status"))}
        for key, want in (("pending", "pending"), ("issued", "issued")):
            user, token, claim_id = self.first_line(key)
            status, body, _ = self.get(f"/api/v1/claims/{claim_id}", headers={"X-User-Id": user, "X-Token": token})
            got = json.loads(body).get("status") if status == 200 else status
            out[f"claim_{key}_after"] = {"status": got, "ok": got == want}
            if got != want:
                self.report["notes"].append(f"a {key} claim read {got!r} after the load: its figures are not "
                                            f"those of a {want} claim throughout")
        return out

    def close(self) -> None:
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
        if self.data is not None:
            shutil.rmtree(self.data, ignore_errors=True)
        if self.stores is not None:
            if not self.args.keep_redis:  # the claim load leaves ~1M ledger entries in a shared Redis
                with contextlib.suppress(Exception):
                    flush_redis(self.stores.redis_url, what="api routes bench, at the end", allowed=True, force=True)
            self.stores.stop()


def subprocess_text(argv: list[str]) -> str:
    import subprocess

    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    return (proc.stderr or proc.stdout).strip()


# ---------------------------------------------------------------------------------------------------------
# The table


def span(values: list[float | None], fmt: str) -> str:
    vs = [v for v in values if v is not None]
    if not vs:
        return "-"
    lo, hi = min(vs), max(vs)
    return format(lo, fmt) if format(lo, fmt) == format(hi, fmt) else f"{format(lo, fmt)}-{format(hi, fmt)}"


def code_notes(key: str, runs: list[dict[str, Any]], what: str = "") -> list[str]:
    """The table's notes of some runs of a route: requests that used an order or coupon again, answers whose
    business code was not 0."""
    notes = []
    if any(f.get("wrapped") for f in runs):
        reused = sum(f.get("reused") or 0 for f in runs)
        notes.append(f"{what}{'coupons' if key.endswith('_claimed') else 'orders'} reused by {reused:,} requests")
    codes: dict[str, int] = {}
    for f in runs:
        for c, n in (f.get("codes") or {}).items():
            codes[c] = codes.get(c, 0) + int(n)
    if codes and set(codes) != {"0"} and key != "nope":
        notes.append(f"{what}codes " + ", ".join(f"{c}: {n:,}" for c, n in sorted(codes.items())))
    return notes


def summary(report: dict[str, Any], p99_goal: float = 50.0) -> list[dict[str, Any]]:
    """One row per route over the rounds: the lowest and highest of each figure, the median ratio; with the
    paced runs, their rate and p99, and whether the route met its goal (its ratio to the claim at least the goal
    in every round, and each paced run held its rate with a p99 within p99_goal ms)."""
    rows = []
    labels = report["labels"]
    goals = report.get("goals", {})
    for key, label in labels.items():
        runs = [r["routes"][key] for r in report["rounds"] if key in r["routes"]]
        if not runs:
            continue
        paced = [r["paced"][key] for r in report["rounds"] if key in r.get("paced", {})]
        ratios = [f["x_claim"] for f in runs if f.get("x_claim") is not None]
        notes = code_notes(key, runs)
        if paced:
            notes += code_notes(key, paced, "paced: ")
            missed = [f for f in paced if not f["held"]]
            if missed:
                notes.append("paced: rate not held (" + ", ".join(
                    f"{f['requests_per_s'] or 0:,.0f} of {f['target_rps']:,.0f}/s" for f in missed) + ")")
        goal = goals.get(key)
        met = None
        if goal is not None and paced:
            met = (len(ratios) == len(runs) and min(ratios) >= goal and all(f["held"] for f in paced)
                   and all(f["p99_ms"] is not None and f["p99_ms"] <= p99_goal for f in paced))
        rows.append({"key": key, "route": label,
                     "requests_per_s": span([f["requests_per_s"] for f in runs], ",.0f"),
                     "p99_ms": span([f["p99_ms"] for f in runs], ",.1f"),
                     "x_claim": span(ratios, ".3f") if key != "claim" else "1",
                     "x_claim_median": statistics.median(ratios) if ratios else None,
                     "server_cpu_us": span([f.get("server_cpu_us_per_request") for f in runs], ",.0f"),
                     "goal_x_claim": goal,
                     "paced_requests_per_s": span([f["requests_per_s"] for f in paced], ",.0f"),
                     "paced_target_rps": span([f["target_rps"] for f in paced], ",.0f"),
                     "paced_p99_ms": span([f["p99_ms"] for f in paced], ",.1f"),
                     "paced_held": all(f["held"] for f in paced) if paced else None,
                     "goal_met": met,
                     "notes": "; ".join(notes)})
    return rows


def print_table(report: dict[str, Any]) -> None:
    rounds = len(report["rounds"])
    print(f"\napi routes  {report['timestamp']}  {report['git']}  {report['host']['cpus']} CPUs, load average before "
          f"{report['host']['loadavg_before']}, after {report['host'].get('loadavg_after')}; "
          f"{report['config']['workers']} web worker(s), wrk -t{report['config']['threads']} "
          f"-c{report['config']['connections']} {report['config']['duration']:g}s, {rounds} round(s) "
          "(a span is the rounds' lowest-highest)")
    paced = any("paced" in r for r in report["rounds"])
    if not paced:
        print("| route | req/s | p99 ms | x claim | server CPU us/req | notes |")
        print("| --- | ---: | ---: | ---: | ---: | --- |")
    else:
        print(f"paced: each route with a goal at goal x the claim's req/s of its round, "
              f"-c{report['config']['connections']}; p99 from the actual send (wrk); goal met: x claim >= goal "
              f"and paced p99 <= {report['config']['p99_goal']:g} ms at a rate held")
        print("| route | req/s | p99 ms | x claim | goal x | paced req/s (target) | paced p99 ms | goal met "
              "| server CPU us/req | notes |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | --- |")
    for r in report["table"]:
        if not paced:
            print(f"| {r['route']} | {r['requests_per_s']} | {r['p99_ms']} | {r['x_claim']} | {r['server_cpu_us']} | "
                  f"{r['notes']} |")
            continue
        goal = "-" if r["goal_x_claim"] is None else f"{r['goal_x_claim']:g}"
        rate = "-" if r["paced_target_rps"] == "-" else f"{r['paced_requests_per_s']} ({r['paced_target_rps']})"
        met = {True: "yes", False: "no", None: "-"}[r["goal_met"]]
        print(f"| {r['route']} | {r['requests_per_s']} | {r['p99_ms']} | {r['x_claim']} | {goal} | {rate} | "
              f"{r['paced_p99_ms']} | {met} | {r['server_cpu_us']} | {r['notes']} |")
    floor = report.get("floor")
    if floor:
        claim_cpu = report["rounds"][-1]["routes"]["claim"].get("server_cpu_us_per_request")
        print("\nthe uses with no server (bench/use_floor.py): CPU a use in one thread of this process, and the "
              "claim's server CPU a request (last round) over it: the most x claim a use could reach")
        print("| route | CPU us a use, no server | server CPU us/req | ceiling x claim |")
        print("| --- | ---: | ---: | ---: |")
        for r in report["table"]:
            if r["key"] in floor:
                us = floor[r["key"]]["cpu_us_per_use"]
                ceiling = f"{claim_cpu / us:.3f}" if claim_cpu else "-"
                print(f"| {r['route']} | {us:,.0f} | {r['server_cpu_us']} | {ceiling} |")
    for note in report["notes"]:
        print(f"NOTE: {note}")
    print(f"json: {rel(Path(report['file']))}", flush=True)


# ---------------------------------------------------------------------------------------------------------
# Main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--duration", type=float, default=8.0, help="seconds of each route's load (8; --quick: 3)")
    p.add_argument("--warmup", type=float, default=None, help="seconds of each route's warm-up (2; --quick: 1)")
    p.add_argument("--rounds", type=int, default=None, help="rounds of every route (2; --quick: 1)")
    p.add_argument("--connections", type=int, default=50, help="wrk -c (50)")
    p.add_argument("--threads", type=int, default=2, help="wrk -t (2)")
    p.add_argument("--workers", type=int, default=1, help="web server workers (1: the issue's measure)")
    p.add_argument("--server-args", default="", help="extra options for the web server (config/server.py)")
    p.add_argument("--shoppers", type=int, default=50_000,
                   help="the claim's and the uses' shoppers (50000: 10 a second each would be 500,000 claims/s)")
    p.add_argument("--holders", type=int, default=20_000,
                   help="shoppers holding coupons and a pending claim (20000; --quick: 5000)")
    p.add_argument("--proxy", action="store_true", help="also the public reads through nginx (deploy/nginx)")
    p.add_argument("--only", type=lambda v: set(v.split(",")), default=set(),
                   help="these routes only (keys, comma-separated: my_coupons,validate,...), beside the claim")
    p.add_argument("--claimed", type=int, default=2_000,
                   help="claimed coupons made at the set-up (2000); more are made before each round as needed")
    p.add_argument("--paced", action="store_true",
                   help="after each round, each route with a goal at goal x that round's claim req/s: its p99")
    p.add_argument("--floor", type=int, default=0, metavar="N",
                   help="after the rounds, N of each use in this process, no server: its CPU (bench/use_floor.py)")
    p.add_argument("--p99-goal", type=float, default=50.0, help="the paced p99 a goal allows, ms (50)")
    p.add_argument("--quick", action="store_true", help="3 s loads, 1 s warm-up, 1 round, 5,000 holders")
    p.add_argument("--force-flush", action="store_true", help="flush REDIS_URL's db even if not a bench's")
    p.add_argument("--keep-redis", action="store_true", help="don't flush the Redis db at the end")
    p.add_argument("--output", type=Path, default=OUT, help=f"the JSON ({rel(OUT)})")
    args = p.parse_args(argv)
    if args.quick:
        args.duration = 3.0 if args.duration == 8.0 else args.duration
        args.holders = 5_000 if args.holders == 20_000 else args.holders
    args.warmup = (1.0 if args.quick else 2.0) if args.warmup is None else args.warmup
    args.rounds = (1 if args.quick else 2) if args.rounds is None else args.rounds
    if args.rounds < 1 or args.holders < 1 or args.claimed < 1:
        p.error("--rounds, --holders and --claimed must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    common.set_name("api")
    common.install_signal_handlers()
    procs = Processes()
    bench = ApiBench(args, procs)
    report = bench.report
    report.update(timestamp=datetime.now(UTC).isoformat(timespec="seconds"), git=common.git_revision(),
                  host={"cpus": os.cpu_count(), "loadavg_before": [round(x, 2) for x in os.getloadavg()]},
                  config={k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()})
    try:
        bench.setup()
        report["labels"] = {r.key: r.label for u in routes(bench.ids, args.proxy) for r in u if r.recorded}
        report["goals"] = {r.key: r.goal for u in routes(bench.ids, args.proxy) for r in u if r.goal is not None}
        bench.run()
    except Interrupted as exc:
        log(f"{exc}: stopping ...")
        return 130
    except BenchError as exc:
        log(f"ERROR: {exc}")
        return 1
    finally:
        procs.stop_all()
        bench.close()
    report["host"]["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
    report["table"] = summary(report, args.p99_goal)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    report["file"] = str(args.output)
    args.output.write_text(json.dumps(report, indent=2, default=str) + "\n")
    print_table(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
