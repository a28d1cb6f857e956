"""POST /api/v1/carts/validate and GET /api/v1/me/coupons on the event loop (coupons/doors.py) and through Django's
views: the same answers.

Over the run command's real server (the doors: their reads awaited on the loop, core.pg_loop and the loop's Redis
client) and Django's test client (the views, as a WSGI deployment serves them), against the real PostgreSQL and
Redis: every kind of code a cart can carry and of coupon a list shows, each refusal the view decides and each list
the view changes or links (handed on by the door), the guard's count, and the loop's PostgreSQL connections
failing and coming back. Which door answered shows in the headers: Django's answers carry DRF's `Allow`, the
loop's do not.
"""
from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request
from datetime import timedelta
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from django.db import connection

from campaigns.models import Audience
from campaigns.redis_state import redis_client
from core import pg_loop
from core.db import Read
from core.errors import Unavailable, unavailable_of
from coupons.guard import miss_counters
from coupons.models import Coupon, CouponStatus, UniqueCode
from tests.conftest import run_coroutine, shopper_headers

from . import test_my_coupons
from .code_helpers import codes_of
from .helpers import issued_coupon

pytestmark = pytest.mark.django_db(transaction=True)
coupons_of_every_kind = test_my_coupons.coupons_of_every_kind  # its fixture, for this module's tests too

D = Decimal
TEA = {"sku": "TEA-1", "category": "tea", "quantity": 2, "unit_price": "120.00"}
CUP = {"sku": "CUP-9", "category": "kitchen", "quantity": 1, "unit_price": "60.00"}
CART = [TEA, CUP]
RULE = {"min_spend": D("0"), "discount_value": D("50.00")}


def over_http(base: str, body: bytes, user: str | None = "alice", headers: dict[str, str] | None = None,
              query: str = "") -> tuple[int, dict[str, str], bytes]:
    """POST the body to the real server: (status, headers lowercased, body)."""
    sent = {"Content-Type": "application/json"}
    if user is not None:
        sent |= {"X-User-Id": user, "X-Token": shopper_headers(user)["HTTP_X_TOKEN"]}
    request = urllib.request.Request(f"{base}/api/v1/carts/validate{query}", data=body,
                                     headers=sent | (headers or {}), method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, {k.lower(): v for k, v in response.headers.items()}, response.read()
    except urllib.error.HTTPError as error:
        return error.code, {k.lower(): v for k, v in error.headers.items()}, error.read()


def through_django(client: Any, body: bytes, user: str | None = "alice", headers: dict[str, str] | None = None,
                   query: str = "") -> Any:
    meta = shopper_headers(user) if user is not None else {}
    for name, value in (headers or {}).items():
        if name.lower() == "content-type":
            continue
        meta[f"HTTP_{name.upper().replace('-', '_')}"] = value
    content_type = (headers or {}).get("Content-Type", "application/json")
    return client.post(f"/api/v1/carts/validate{query}", data=body, content_type=content_type, **meta)


def cart(codes: list[str] | None = None, lines: list[dict[str, Any]] = CART) -> bytes:
    body: dict[str, Any] = {"currency": "CNY", "lines": lines}
    if codes is not None:
        body["codes"] = codes
    return json.dumps(body).encode()


def test_every_kind_of_code_answers_the_same_bytes_from_the_loop_and_from_djangos_view(
        http_server, client, live_campaign) -> None:
    # given: alice's coupons (one usable, one in another currency, one redeemed), a shared code, a shared code
    # of a new-shopper campaign (she has used a coupon: not_eligible), a unique code and one held already
    fixed = issued_coupon(live_campaign, "alice", **RULE)
    tea = issued_coupon(live_campaign, "alice", discount_type="percent", discount_value=D("10"), min_spend=D("0"),
                        include_categories=["tea"])
    yen = issued_coupon(live_campaign, "alice", currency="JPY", discount_value=D("500"), min_spend=D("0"))
    used = issued_coupon(live_campaign, "alice", **RULE)
    Coupon.objects.filter(pk=used.pk).update(status=CouponStatus.REDEEMED, order_id="A-0", order_amount=D("300"),
                                             discount=D("50"), redeemed_at=used.valid_from)
    live_campaign(kind="codes", code="SAVE50", **RULE)
    live_campaign(kind="codes", code="HELLO-NEW", audience=Audience.NEW, **RULE)
    unique, taken = codes_of(live_campaign(kind="codes", code=None, total_stock=5, per_user_limit=1, **RULE), 1, 2)
    held = client.post(f"/api/v1/coupons/{taken}/reserve", data=json.dumps({  # bob holds it
        "order_id": "B-1", "currency": "CNY", "lines": CART}), content_type="application/json",
        HTTP_IDEMPOTENCY_KEY="b1", **shopper_headers("bob"))
    assert held.json()["status"] == "reserved" and UniqueCode.objects.get(code=taken).holder_id == "bob"
    carts = [
        cart(),
        cart(["save50", unique.lower(), "NOPE-1", fixed.code, yen.code, used.code, "HELLO-NEW", taken, "!!"]),
        cart([tea.code, "SAVE50", "SAVE50"], lines=[TEA]),
    ]

    for body in carts:
        # when
        status, headers, answer = over_http(http_server, body)
        view = through_django(client, body)

        # then: the same answer, byte for byte, private, from the loop
        assert (status, answer) == (view.status_code, view.content), answer
        assert status == 200 and headers["cache-control"] == view["Cache-Control"] == "private, no-store"
        assert "allow" not in headers and view["Allow"]
        assert headers["content-type"] == "application/json"
    answered = json.loads(over_http(http_server, carts[1])[2])
    assert {item["code"]: item["status"] for item in answered["coupons"]} == {
        fixed.code: "ok", tea.code: "ok", "SAVE50": "ok", unique: "ok", "NOPE-1": "not_found",
        yen.code: "not_applicable", used.code: "already_redeemed", "HELLO-NEW": "not_eligible",
        taken: "not_found", "!!": "not_found"}


@pytest.mark.parametrize(("body", "headers", "query", "expected"), [
    (b'{"currency": "CNY", "lines": [', {}, "", 400),  # not JSON
    (b"[]", {}, "", 400),  # not an object
    (cart(lines=[]), {}, "", 400),  # the serializer refuses it
    (cart(["A"] * 21), {}, "", 400),
    (cart(), {"Content-Type": "text/plain"}, "", 415),  # another kind of body
    (cart(), {"Accept": "text/html"}, "", 406),  # an answer DRF can't give
    (cart(), {"X-Token": "1.bad"}, "", 401),  # a bad token
    (cart(), {"Content-Type": "application/json; charset=latin-1"}, "", 200),  # what the view answers
    (cart(), {}, "?format=json", 200),
], ids=["not-json", "array", "no-lines", "too-many-codes", "text-plain", "accept-html", "bad-token", "latin-1",
        "format"])
def test_what_the_door_does_not_answer_djangos_view_does(http_server, client, body, headers, query, expected
                                                          ) -> None:
    status, _, answer = over_http(http_server, body, headers=headers, query=query)
    view = through_django(client, body, headers=headers, query=query)

    assert (status, json.loads(answer)) == (view.status_code, json.loads(view.content))
    assert status == expected


def test_without_a_token_djangos_401(http_server, client) -> None:
    status, _, answer = over_http(http_server, cart(), user=None)
    view = through_django(client, cart(), user=None)

    assert (status, json.loads(answer)) == (view.status_code, json.loads(view.content))
    assert status == 401 and json.loads(answer)["status"] == "unauthenticated"


def test_the_door_counts_unknown_codes_and_gives_the_others_back(http_server, live_campaign) -> None:
    # given: a live shared code (a thread of the server may or may not remember it)
    live_campaign(kind="codes", code="SAVE50", **RULE)

    def counted() -> list[int]:
        return [int(redis_client().get(key) or 0) for key, _ in miss_counters("carol", "127.0.0.1")]

    # when: a cart of one good code and two unknown ones, then one of the good code alone
    first = over_http(http_server, cart(["SAVE50", "GUESS-1", "GUESS-2"]), user="carol")
    second = over_http(http_server, cart(["SAVE50"]), user="carol")

    # then: only the unknown codes stay counted, for the shopper and for the address
    assert first[0] == second[0] == 200
    assert counted() == [2, 2]


def test_the_door_answers_429_past_the_limit_and_counts_nothing(http_server, client) -> None:
    counters = miss_counters("dave", "127.0.0.1")
    redis_client().set(counters[0][0], counters[0][1], ex=120)  # dave is at his limit this minute

    status, headers, answer = over_http(http_server, cart(["GUESS-1"]), user="dave")

    assert status == 429 and json.loads(answer)["status"] == "rate_limited" and int(headers["retry-after"]) >= 1
    assert int(redis_client().get(counters[0][0])) == counters[0][1]
    assert int(redis_client().get(counters[1][0]) or 0) == 0  # the address's count given back


def test_the_loops_connections_answer_many_reads_at_once_with_a_few_connections(db) -> None:
    # given: two connections for ten reads at once
    pool = pg_loop.LoopPostgres(size=2)

    async def reads() -> list[Any]:
        return await asyncio.gather(*[pool.fetch("SELECT %(n)s::int, pg_backend_pid()", {"n": n}) for n in range(10)])

    answers = run_coroutine(reads())

    # then: every read answered in order of its own, over at most two connections
    assert [rows[0][0] for rows in answers] == list(range(10))
    assert len({rows[0][1] for rows in answers}) <= 2 and pool.opened <= 2


def test_a_connection_that_breaks_fails_its_read_and_the_next_read_connects_anew(db) -> None:
    pool = pg_loop.LoopPostgres(size=1)
    other = {k: v for k, v in connection.get_connection_params().items() if k not in ("cursor_factory", "context")}
    read = Read("SELECT pg_backend_pid()", {}, lambda rows: rows[0][0])

    async def scenario() -> tuple[int, type[BaseException], int]:
        pid = await pool.fetch(read.sql, read.params)
        with psycopg.connect(**other, autocommit=True) as admin:  # PostgreSQL ends that backend (a restart)
            admin.execute("SELECT pg_terminate_backend(%s)", [pid[0][0]])
        try:
            await pool.fetch(read.sql, read.params)
        except psycopg.OperationalError as exc:
            failed: type[BaseException] = type(exc)
        again = await pool.fetch(read.sql, read.params)
        return pid[0][0], failed, again[0][0]

    first, failed, second = run_coroutine(scenario())

    assert issubclass(failed, psycopg.OperationalError) and second != first and pool.opened == 1


def test_a_read_past_its_bound_is_a_store_failure_at_once_and_its_connection_closed(db) -> None:
    pool = pg_loop.LoopPostgres(size=1, bound=0.2)

    async def scenario() -> tuple[BaseException | None, float, int]:
        started, failure = time.monotonic(), None
        try:
            await pool.fetch("SELECT pg_sleep(3)", {})
        except Exception as exc:
            failure = exc
        seconds = time.monotonic() - started
        rows = await pool.fetch("SELECT 1", {})
        return failure, seconds, rows[0][0]

    failure, seconds, answer = run_coroutine(scenario())

    # then: the 503's failure within the bound (not the seconds a cancelled statement would wait), then answers
    assert isinstance(unavailable_of(failure), Unavailable) and seconds < 1.0, (failure, seconds)
    assert answer == 1 and pool.opened == 1


def my_coupons(base: str, user: str = "alice", query: str = "", accept: str | None = None
               ) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(f"{base}/api/v1/me/coupons{query}", headers={
        "X-User-Id": user, "X-Token": shopper_headers(user)["HTTP_X_TOKEN"], **({"Accept": accept} if accept else {})})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, {k.lower(): v for k, v in response.headers.items()}, response.read()
    except urllib.error.HTTPError as error:
        return error.code, {k.lower(): v for k, v in error.headers.items()}, error.read()


def test_my_coupons_of_every_kind_are_the_same_bytes_from_the_loop_and_from_djangos_view(
        http_server, client, coupons_of_every_kind) -> None:
    status, headers, answer = my_coupons(http_server)
    view = client.get("/api/v1/me/coupons", **shopper_headers("alice"))

    assert (status, answer) == (view.status_code, view.content)
    assert json.loads(answer)["count"] == coupons_of_every_kind and json.loads(answer)["next"] is None
    assert "allow" not in headers and headers["cache-control"] == "private, no-store"  # the loop's


def test_a_list_the_view_changes_or_links_is_the_views(http_server, client, live_campaign) -> None:
    # given: bob has none; carol has a coupon due to expire; dan has two pages
    campaign = live_campaign(total_stock=100, per_user_limit=30)
    due = issued_coupon(live_campaign, "carol", **RULE)
    Coupon.objects.filter(pk=due.pk).update(valid_from=due.valid_from - timedelta(days=3),
                                            expires_at=due.valid_from - timedelta(days=1))
    for n in range(21):
        Coupon.objects.create(code=f"DAN-{n:04d}-TEST", campaign=campaign, user_id="dan", claim_id=f"dan-{n}",
                              valid_from=due.valid_from, expires_at=due.valid_from + timedelta(days=30))

    # when
    none = my_coupons(http_server, "bob")
    settled = my_coupons(http_server, "carol")
    pages = my_coupons(http_server, "dan")
    filtered = my_coupons(http_server, "dan", "?status=active&page_size=5")

    # then: each is Django's answer (its headers), as the view gives it: the due coupon expired first, the links
    for status, headers, _ in (none, settled, pages, filtered):
        assert status == 200 and headers["allow"]
    assert json.loads(none[2]) == client.get("/api/v1/me/coupons", **shopper_headers("bob")).json()
    assert [c["status"] for c in json.loads(settled[2])["results"]] == ["expired"]
    assert Coupon.objects.get(pk=due.pk).status == CouponStatus.EXPIRED
    assert json.loads(pages[2])["count"] == 21 and json.loads(pages[2])["next"].endswith("/api/v1/me/coupons?page=2")
    assert len(json.loads(filtered[2])["results"]) == 5


@pytest.mark.parametrize(("accept", "door"), [
    (None, "loop"), ("*/*", "loop"), ("application/json", "loop"), ("application/json, text/plain, */*", "loop"),
    ("text/html,application/xhtml+xml,application/*", "loop"), ("application/json; indent=2", "view"),
    ("text/html, application/json;q=0.9", "view"), ("text/html", "view")])
def test_an_accept_that_drf_answers_with_plain_json_is_the_loops_any_other_the_views(
        http_server, client, live_campaign, accept, door) -> None:
    issued_coupon(live_campaign, "alice", **RULE)
    headers = {} if accept is None else {"Accept": accept}

    status, got, answer = over_http(http_server, cart(), headers=headers)
    view = through_django(client, cart(), headers=headers)
    listed = my_coupons(http_server, accept=accept)
    view_list = client.get("/api/v1/me/coupons", **shopper_headers("alice"), **(
        {} if accept is None else {"HTTP_ACCEPT": accept}))

    assert (status, answer) == (view.status_code, view.content)
    assert (listed[0], listed[2]) == (view_list.status_code, view_list.content)
    assert {("allow" in got) == (door == "view"), ("allow" in listed[1]) == (door == "view")} == {True}


def test_my_coupons_without_a_valid_token_is_djangos_401(http_server, client) -> None:
    status, headers, answer = my_coupons(http_server, "eve")
    request = urllib.request.Request(f"{http_server}/api/v1/me/coupons", headers={"X-User-Id": "eve",
                                                                               "X-Token": "1.bad"})
    try:
        urllib.request.urlopen(request, timeout=30)
    except urllib.error.HTTPError as error:
        refused = (error.code, json.loads(error.read()))
    view = client.get("/api/v1/me/coupons", HTTP_X_USER_ID="eve", HTTP_X_TOKEN="1.bad")

    assert refused == (view.status_code, view.json()) and refused[0] == 401
