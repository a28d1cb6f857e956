"""The unknown-code guard (coupons/guard.py): codes count before they are looked up, in one atomic step.

Real concurrency: requests to the project's own web server over real sockets (or threads on the real Redis),
released together by a barrier; afterwards the totals are exact. And a shopper's own coupons, holds and uses never
pass through the guard: behind an address past its limit (a carrier NAT, a proxy) the shopper still checks out.
"""
from __future__ import annotations

import http.client
import json
import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.test import override_settings

from campaigns.redis_state import redis_client
from core.auth import mint_token
from coupons.guard import MISS_WINDOW_SECONDS, CodeLookups, TooManyMisses, miss_counters
from coupons.models import Coupon, CouponStatus
from devstack import resolve, web_command
from tests.conftest import free_port, serving, shopper_headers
from tests.coupons.helpers import issued_coupon
from tests.factories import CampaignFactory

SHOPPER_LIMIT, ADDRESS_LIMIT = 20, 30
ORDER = {"order_id": "A-1", "order_amount": "350.00", "currency": "CNY"}  # the factory's rule: 50.00 off
CART = [{"sku": "TEA-1", "quantity": 1, "unit_price": "350.00"}]


def away_from_the_minutes_end(margin: float = 8.0) -> None:
    """Wait for the next minute when this one is nearly over: a burst across two minutes meets two counters."""
    left = MISS_WINDOW_SECONDS - time.time() % MISS_WINDOW_SECONDS
    if left < margin:
        time.sleep(left + 0.05)


def counted(user_id: str, ip: str | None = None) -> list[int]:
    """The guard's counters of this minute, as Redis holds them: the shopper's (and the address's)."""
    return [int(redis_client().get(key) or 0) for key, _ in miss_counters(user_id, ip)]


def at_once(jobs: list[Callable[[], Any]]) -> list[Any]:
    """Run every job in its own thread, released together by a barrier; return their results in order."""
    barrier = threading.Barrier(len(jobs))
    results: list[Any] = [None] * len(jobs)

    def run(index: int) -> None:
        barrier.wait()
        try:
            results[index] = jobs[index]()
        except Exception as exc:  # noqa: BLE001 - the test asserts on it
            results[index] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(jobs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return results


class Storefront:
    """A storefront backend of one shopper, on its own keep-alive HTTP connection to the real server."""

    def __init__(self, base_url: str, user_id: str) -> None:
        url = urllib.parse.urlsplit(base_url)
        self.conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
        self.conn.connect()  # before the barrier: the race is the server's, not the connects'
        self.headers = {"X-User-Id": user_id, "X-Token": mint_token(user_id, ttl=600),
                        "Content-Type": "application/json"}

    def post(self, path: str, body: dict[str, Any], key: str | None = None) -> tuple[int, dict[str, Any], str | None]:
        headers = dict(self.headers, **({"Idempotency-Key": key} if key else {}))
        self.conn.request("POST", path, body=json.dumps(body), headers=headers)
        response = self.conn.getresponse()
        return response.status, json.loads(response.read()), response.getheader("Retry-After")


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch, transactional_db: Any) -> Iterator[str]:
    """The project's web server (the run command's) with the limits of these tests: 20 a shopper, 30 an address."""
    monkeypatch.setenv("COUPONS_CODE_MISSES_PER_MINUTE", str(SHOPPER_LIMIT))
    monkeypatch.setenv("COUPONS_CODE_MISSES_PER_IP_PER_MINUTE", str(ADDRESS_LIMIT))
    port = free_port()
    with serving(resolve(web_command(port)), port) as url:
        yield url


def fronts(url: str, users: list[str]) -> list[Storefront]:
    return [Storefront(url, user) for user in users]


def assert_refused_in_the_contracts_form(answers: list[tuple[int, dict[str, Any], str | None]]) -> None:
    for status, body, retry_after in answers:
        if status == 429:
            assert body["code"] == 429 and body["status"] == "rate_limited" and body["detail"]
            assert retry_after is not None and 1 <= int(retry_after) <= MISS_WINDOW_SECONDS


# --- concurrency: at most the limit is looked up ----------------------------------------------------------


@pytest.mark.slow
def test_fifty_guesses_at_once_by_one_shopper_look_up_exactly_the_limit(server) -> None:
    # given: one shopper's 50 connections, 50 codes that stand for nothing
    clients = fronts(server, ["guesser"] * 50)
    away_from_the_minutes_end()

    # when: all 50 redeem at the same moment
    answers = at_once([lambda i=i, c=c: c.post(f"/api/v1/coupons/GUESS{i:03d}/redeem", ORDER, key=f"k{i}")
                       for i, c in enumerate(clients)])

    # then: exactly the limit was looked up (each a 404), the rest refused before any lookup
    assert Counter(status for status, _, _ in answers) == {404: SHOPPER_LIMIT, 429: 50 - SHOPPER_LIMIT}
    assert_refused_in_the_contracts_form(answers)
    assert counted("guesser", "127.0.0.1") == [SHOPPER_LIMIT, SHOPPER_LIMIT]


@pytest.mark.slow
def test_fifty_guesses_at_once_from_one_address_as_many_shoppers_look_up_exactly_its_limit(server) -> None:
    clients = fronts(server, [f"guesser-{i}" for i in range(50)])  # each shopper far under 20
    away_from_the_minutes_end()

    answers = at_once([lambda i=i, c=c: c.post(f"/api/v1/coupons/GUESS{i:03d}/reserve", ORDER, key=f"k{i}")
                       for i, c in enumerate(clients)])

    assert Counter(status for status, _, _ in answers) == {404: ADDRESS_LIMIT, 429: 50 - ADDRESS_LIMIT}
    assert_refused_in_the_contracts_form(answers)
    assert counted("guesser-0", "127.0.0.1")[1] == ADDRESS_LIMIT


@pytest.mark.slow
def test_carts_at_once_count_their_codes_before_they_are_looked_up(server) -> None:
    # given: ten carts of one shopper, five unknown codes each (50 codes against a limit of 20)
    clients = fronts(server, ["guesser"] * 10)
    away_from_the_minutes_end()

    answers = at_once([lambda i=i, c=c: c.post("/api/v1/carts/validate", {
        "currency": "CNY", "lines": CART, "codes": [f"GUESS{i:02d}{j}" for j in range(5)]})
        for i, c in enumerate(clients)])

    # then: four carts answered (their 20 codes not_found), six refused whole
    assert Counter(status for status, _, _ in answers) == {200: 4, 429: 6}
    for status, body, _ in answers:
        if status == 200:
            assert [entry["status"] for entry in body["coupons"]] == ["not_found"] * 5
    assert_refused_in_the_contracts_form(answers)
    assert counted("guesser") == [SHOPPER_LIMIT]


@pytest.mark.slow
def test_a_shopper_behind_an_address_past_its_limit_confirms_their_own_hold_over_http(server, live_campaign) -> None:
    # given: alice holds her coupon for an order; then other shoppers at her address use up its limit
    coupon = issued_coupon(live_campaign, "alice")
    alice = Storefront(server, "alice")
    status, body, _ = alice.post(f"/api/v1/coupons/{coupon.code}/reserve", ORDER, key="r1")
    assert (status, body["status"]) == (200, "reserved")
    away_from_the_minutes_end()
    guesses = [Storefront(server, f"g{i}").post(f"/api/v1/coupons/GUESS{i:03d}/redeem", ORDER, key="k")[0]
               for i in range(ADDRESS_LIMIT + 1)]
    assert guesses == [404] * ADDRESS_LIMIT + [429]

    # when: alice, behind the same address, confirms her hold (the order was paid); and types a code not hers
    confirmed = alice.post(f"/api/v1/coupons/{coupon.code}/confirm", {"order_id": "A-1"})
    guessed = alice.post("/api/v1/coupons/GUESS999/redeem", ORDER, key="g")

    # then: her own hold is confirmed; the unknown code is refused before it is looked up
    assert confirmed[:2] == (200, {"code": 0, "status": "redeemed", "discount": "50.00", "payable": "300.00"})
    assert guessed[0] == 429
    assert Coupon.objects.get(pk=coupon.pk).status == CouponStatus.REDEEMED


def test_fifty_takes_at_once_count_exactly_the_limit(db, settings) -> None:
    settings.COUPONS_CODE_MISSES_PER_MINUTE, settings.COUPONS_CODE_MISSES_PER_IP_PER_MINUTE = 20, 1000
    redis_client().ping()  # the client made before the threads
    away_from_the_minutes_end()

    def take() -> bool:
        try:
            CodeLookups("taker", "198.51.100.7").take(1)
        except TooManyMisses:
            return False
        return True

    taken = at_once([take] * 50)

    assert taken.count(True) == 20 and taken.count(False) == 30
    assert counted("taker", "198.51.100.7") == [20, 20]


# --- what counts, and what is given back ------------------------------------------------------------------


def post(client: Any, path: str, body: dict[str, Any], user: str, key: str | None = None) -> Any:
    headers = shopper_headers(user, **({"HTTP_IDEMPOTENCY_KEY": key} if key else {}))
    return client.post(f"/api/v1/{path}", body, content_type="application/json", **headers)


def shared_code_campaign(code: str = "SAVE50", **fields: Any) -> Any:
    from campaigns.services import campaign_preheat

    campaign = CampaignFactory(kind="codes", code=code, **fields)
    campaign_preheat(campaign=campaign)
    return campaign


@override_settings(COUPONS_CODE_MISSES_PER_MINUTE=5)
def test_a_cart_checked_one_code_under_the_limit_cannot_add_more_than_that_one(client, db) -> None:
    away_from_the_minutes_end()
    four = post(client, "carts/validate", {"currency": "CNY", "lines": CART, "codes": ["G1", "G2", "G3", "G4"]},
                "guesser")

    two_more = post(client, "carts/validate", {"currency": "CNY", "lines": CART, "codes": ["G5X", "G6X"]}, "guesser")
    one_more = post(client, "carts/validate", {"currency": "CNY", "lines": CART, "codes": ["G5X"]}, "guesser")

    assert four.status_code == 200 and two_more.status_code == 429 and one_more.status_code == 200
    assert counted("guesser", "127.0.0.1") == [5, 5]  # before: 4 misses passed the check, and 2 more counted


@override_settings(COUPONS_CODE_MISSES_PER_MINUTE=2)
def test_codes_that_stand_for_something_are_given_back_once_answered(client, db) -> None:
    # given: a shared code of a live campaign, alice's limit 2 unknown codes a minute
    shared_code_campaign(total_stock=10, per_user_limit=10)
    away_from_the_minutes_end()

    # when: alice uses the shared code for five orders (not her own code until used: each a lookup), then a cart
    # with it and an unknown code, then guesses
    uses = [post(client, "coupons/save50/reserve", {**ORDER, "order_id": f"o-{i}"}, "alice", key=f"r{i}")
            for i in range(5)]
    cart = post(client, "carts/validate", {"currency": "CNY", "lines": CART, "codes": ["SAVE50", "NOPE1"]}, "alice")
    guesses = [post(client, f"coupons/GUESS{i}/redeem", ORDER, "alice", key=f"g{i}").status_code for i in range(2)]

    # then: the five uses and the cart's good code were given back; the unknown codes stayed counted
    assert [use.json()["status"] for use in uses] == ["reserved"] * 5
    assert cart.status_code == 200 and [e["status"] for e in cart.json()["coupons"]][-1] == "not_found"
    assert guesses == [404, 429]
    assert counted("alice", "127.0.0.1") == [2, 2]


@override_settings(COUPONS_CODE_MISSES_PER_MINUTE=100, COUPONS_CODE_MISSES_PER_IP_PER_MINUTE=3)
def test_past_the_addresss_limit_a_shopper_still_uses_their_own_coupons_holds_and_uses(client, live_campaign) -> None:
    # given: alice's claimed coupon, and her hold of a shared code for order s-1; then three guesses by others
    # from her address (a carrier NAT) use up its limit
    coupon = issued_coupon(live_campaign, "alice")
    shared_code_campaign(total_stock=10, per_user_limit=5)
    held = post(client, "coupons/SAVE50/reserve", {**ORDER, "order_id": "s-1"}, "alice", key="s1")
    assert held.json()["status"] == "reserved"
    away_from_the_minutes_end()
    guesses = [post(client, f"coupons/GUESS{i}/redeem", ORDER, f"g{i}", key="k").status_code for i in range(4)]
    assert guesses == [404, 404, 404, 429]

    # when: alice reserves, confirms, releases and redeems her coupon, confirms and releases her shared code's
    # hold, and validates a cart naming her coupon's code
    own = [
        post(client, f"coupons/{coupon.code}/reserve", ORDER, "alice", key="r"),
        post(client, f"coupons/{coupon.code}/confirm", {"order_id": "A-1"}, "alice"),
        post(client, f"coupons/{coupon.code}/release", {"order_id": "A-1"}, "alice"),
        post(client, f"coupons/{coupon.code.lower()}/redeem", {**ORDER, "order_id": "A-2"}, "alice", key="d"),
        post(client, "coupons/save50/confirm", {"order_id": "s-1"}, "alice"),
        post(client, "coupons/SAVE50/release", {"order_id": "s-1"}, "alice"),
    ]
    cart = post(client, "carts/validate", {"currency": "CNY", "lines": CART, "codes": [coupon.code]}, "alice")
    # and what is not hers: an unknown code, a new order's first use of the shared code, a cart with an unknown code
    not_own = [
        post(client, "coupons/GUESS9/redeem", ORDER, "alice", key="g9"),
        post(client, "coupons/SAVE50/reserve", {**ORDER, "order_id": "s-2"}, "alice", key="s2"),
        post(client, "carts/validate", {"currency": "CNY", "lines": CART, "codes": [coupon.code, "GUESS9"]}, "alice"),
    ]

    # then: every use of her own answers; only the lookups of codes not hers are refused
    assert [(a.status_code, a.json()["status"]) for a in own] == [
        (200, "reserved"), (200, "redeemed"), (200, "released"), (200, "redeemed"), (200, "redeemed"),
        (200, "released")]
    assert cart.status_code == 200 and cart.json()["coupons"][0]["code"] == coupon.code
    assert [a.status_code for a in not_own] == [429, 429, 429]
    assert counted("alice", "127.0.0.1") == [0, 3]  # nothing of alice's was counted


@override_settings(COUPONS_CODE_MISSES_PER_MINUTE=3)
def test_a_live_shared_code_the_process_remembers_is_checked_in_one_round_trip_and_never_counted(
        client, db, monkeypatch) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    import campaigns.services
    from coupons import guard

    # given: a live shared code this process has looked up once (it remembers it: no query, no count to ask)
    monkeypatch.setattr(campaigns.services, "LIVE_CODE_SECONDS", 60.0)
    shared_code_campaign(total_stock=100, per_user_limit=100)
    away_from_the_minutes_end()
    assert post(client, "coupons/SAVE50/reserve", {**ORDER, "order_id": "o-0"}, "bob", key="k0").status_code == 200
    runs: list[str] = []
    real_run = guard._run
    monkeypatch.setattr(guard, "_run", lambda name, calls: runs.append(name) or real_run(name, calls))

    # when: bob redeems it for more orders than his limit of unknown codes, and validates carts with it
    with CaptureQueriesContext(connection) as queries:
        uses = [post(client, "coupons/SAVE50/redeem", {**ORDER, "order_id": f"o-{i}"}, "bob", key=f"k{i}")
                for i in range(1, 6)]
        carts = [post(client, "carts/validate", {"currency": "CNY", "lines": CART, "codes": ["save50"]}, "bob")
                 for _ in range(5)]

    # then: every one answered, each checked against the limits in one script run (before: a take, a query
    # whether the code was bob's own, a give-back), and nothing counted
    assert [use.json()["status"] for use in uses] == ["redeemed"] * 5
    assert [cart.json()["coupons"][0]["status"] for cart in carts] == ["ok"] * 5
    assert runs == ["code_lookups_take"] * 10
    assert not [q for q in queries if "FROM (SELECT 1) AS one LEFT JOIN" in q["sql"]]  # code_is_own's
    assert counted("bob", "127.0.0.1") == [0, 0]

    # and past the limit (three guesses), the same code is refused as before, for a new order and a cart alike
    guesses = [post(client, f"coupons/GUESS{i}/redeem", ORDER, "bob", key=f"g{i}").status_code for i in range(3)]
    late = post(client, "coupons/SAVE50/redeem", {**ORDER, "order_id": "o-9"}, "bob", key="k9")
    cart = post(client, "carts/validate", {"currency": "CNY", "lines": CART, "codes": ["SAVE50"]}, "bob")
    assert guesses == [404, 404, 404] and late.status_code == 429 and cart.status_code == 429
    assert counted("bob", "127.0.0.1") == [3, 3]
