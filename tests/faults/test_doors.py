"""Every door gives the contract's answers (issue 33): a store down is the 503 `unavailable` with Retry-After and
the JSON body on the event loop's claim door as on Django's routes, whatever PostgreSQL does (hung, refused,
killed); a Host not ours is the JSON 400 on the event loop's doors too. The run command's own web server on a
private PostgreSQL and Valkey, over real sockets; the module's tests share them and put them back as they were.
"""
from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from core.auth import mint_token

from ..conftest import ROOT, process_env
from .harness import CampaignInfo, PrivatePostgres, Stack, stack_on, wait_until

pytestmark = [pytest.mark.slow]

OUR_HOST = "127.0.0.1"
FILTERED = "/api/v1/me/coupons?status=active"  # Django's view: the event loop's door answers the plain list only
HUNG_ANSWER_SECONDS = 2.0  # a claim on a hung PostgreSQL is answered within this (the lookup's bound is 1 s)


@pytest.fixture(scope="module")
def doors(tmp_path_factory) -> Iterator[tuple[Stack, PrivatePostgres, CampaignInfo]]:
    """The web server alone (no worker: nothing here drains) on a private, migrated PostgreSQL and Valkey, that
    serves DJANGO_ALLOWED_HOSTS=127.0.0.1 only, and one live campaign."""
    postgres = PrivatePostgres(ROOT / "var" / "faults" / f"pg-doors-{os.getpid()}", "doors")
    try:
        url = postgres.start()
        env = {**process_env(), "DATABASE_URL": url, "COUPONRUSH_TEST_DB_NAME": "doors",
               "TEST_ALLOWED_HOSTS": OUR_HOST}
        subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=ROOT, env=env,
                       check=True, timeout=300)
        with stack_on(tmp_path_factory.mktemp("doors"), postgres.conninfo(), env) as stack:
            stack.start_web()
            campaign = stack.create_campaign(stock=100, per_user_limit=5)
            stack.wait_web()
            yield stack, postgres, campaign
    finally:
        postgres.close()


def request(url: str, method: str, path: str, *, host: str | None = None, shopper: str | None = None,
            timeout: float = 10.0) -> tuple[int, dict[str, str], dict[str, object], float]:
    """(status, headers, JSON body, seconds) of one request on a new connection."""
    parts = urllib.parse.urlsplit(url)
    headers = {"Host": host or f"{parts.hostname}:{parts.port}"}
    if shopper is not None:
        headers |= {"X-User-Id": shopper, "X-Token": mint_token(shopper, ttl=600)}
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    started = time.monotonic()
    try:
        conn.request(method, path, body=b"" if method == "POST" else None, headers=headers)
        response = conn.getresponse()
        body = response.read()
        seconds = time.monotonic() - started
        return response.status, {k.lower(): v for k, v in response.getheaders()}, json.loads(body), seconds
    finally:
        conn.close()


def claim(stack: Stack, campaign_id: int, shopper: str = "ann") -> tuple[int, dict[str, str], dict[str, object],
                                                                         float]:
    return request(stack.url, "POST", f"/api/v1/campaigns/{campaign_id}/claim", shopper=shopper)


def assert_unavailable(answer: tuple[int, dict[str, str], dict[str, object], float]) -> None:
    status, headers, body, _ = answer
    assert (status, body.get("code"), body.get("status")) == (503, 503, "unavailable"), answer
    assert headers.get("retry-after") == "1" and headers.get("content-type") == "application/json", headers


def postgres_processes(postgres: PrivatePostgres) -> list[psutil.Process]:
    postmaster = psutil.Process(int((Path(postgres.pgdata) / "postmaster.pid").read_text().split()[0]))
    return [postmaster, *postmaster.children(recursive=True)]


def test_a_host_not_ours_is_the_json_400_on_every_door(doors) -> None:
    stack, _, campaign = doors
    bad = "evil.example"

    # The event loop's doors (/healthz, the claim) answer as Django's routes do
    on_django = request(stack.url, "GET", f"/api/v1/campaigns/{campaign.id}", host=bad)
    on_health = request(stack.url, "GET", "/healthz", host=bad)
    on_claim = request(stack.url, "POST", f"/api/v1/campaigns/{campaign.id}/claim", host=bad, shopper="ann")
    for status, headers, body, _ in (on_django, on_health, on_claim):
        assert (status, body["code"], body["status"]) == (400, 400, "invalid_request"), (status, body)
        assert body["detail"] == "The Host header names no host this service serves."
        assert headers["content-type"] == "application/json" and headers["x-request-id"]
    assert stack.remaining(campaign) == campaign.total_stock  # the claim never ran

    # A host of ours (with or without its port) passes everywhere
    assert request(stack.url, "GET", "/healthz", host=OUR_HOST)[0] == 200
    assert claim(stack, campaign.id)[2]["status"] == "claimed"
    assert request(stack.url, "GET", f"/api/v1/campaigns/{campaign.id}", host=OUR_HOST)[0] == 200


def test_a_claim_on_a_hung_postgresql_is_the_503_within_two_seconds(doors) -> None:
    # Given a campaign whose Redis state is gone (the claim asks PostgreSQL about it) and PostgreSQL hung,
    # the server and every session of it stopped mid-flight
    stack, postgres, campaign = doors
    assert request(stack.url, "GET", f"/api/v1/campaigns/{campaign.id}")[0] == 200  # sessions are open
    stack.redis.admin().flushall()
    hung = postgres_processes(postgres)
    for process in hung:
        process.send_signal(signal.SIGSTOP)
    try:
        # When shoppers claim (the lost campaign, and one PostgreSQL never named, which it would have to look up)
        answers = [claim(stack, campaign.id, "bob"), claim(stack, campaign.id + 1000, "cid"),
                   claim(stack, campaign.id, "dan")]
    finally:
        for process in hung:
            process.send_signal(signal.SIGCONT)

    # Then each is the contract's 503, soon, and nothing was claimed
    for answer in answers:
        assert_unavailable(answer)
        assert answer[3] < HUNG_ANSWER_SECONDS, answer
    print(f"claims while PostgreSQL hung: {[(a[0], round(a[3], 2)) for a in answers]}")
    assert stack.remaining(campaign) is None

    # And once PostgreSQL answers again, the claim is the lost state's 503 of the contract, never a 500
    assert wait_until(lambda: claim(stack, campaign.id + 1000, "eve")[0] == 404, 10)
    assert_unavailable(claim(stack, campaign.id, "eve"))


@pytest.mark.parametrize("how", ["fast", "immediate"])
def test_a_claim_on_a_postgresql_stopped_or_killed_is_the_503_django_gives(doors, how) -> None:
    # Given a campaign whose Redis state is gone and PostgreSQL stopped (fast: sessions ended, then refused) or
    # killed (immediate: its processes gone at once)
    stack, postgres, campaign = doors
    unknown = campaign.id + (2000 if how == "fast" else 3000)  # never looked up yet: the claim asks PostgreSQL
    stack.redis.admin().flushall()
    postgres._pg_ctl("-w", "-m", how, "stop")
    try:
        # When a shopper claims, and reads a campaign through Django
        answers = [claim(stack, campaign.id, "fay"), claim(stack, unknown, "gus")]
        django = request(stack.url, "GET", f"/api/v1/campaigns/{unknown}")
    finally:
        postgres.restart()

    # Then every door gives the same answer: the contract's 503
    for answer in [*answers, django]:
        assert_unavailable(answer)
    assert answers[1][2] == django[2]
    print(f"claims with PostgreSQL stopped ({how}): {[(a[0], round(a[3], 3)) for a in answers]}")
    assert wait_until(lambda: claim(stack, unknown, "gus")[0] == 404, 15)


def test_a_claim_with_redis_down_is_the_503(doors) -> None:
    stack, _, campaign = doors
    stack.redis.kill()
    try:
        answer = claim(stack, campaign.id, "hal")
    finally:
        stack.redis.start()
    assert_unavailable(answer)
    assert answer[3] < HUNG_ANSWER_SECONDS


def test_a_django_route_on_a_hung_postgresql_is_the_503_within_seconds(doors) -> None:
    """A kept connection's health check (core/postgresql) waits 1 s, then Django connects anew within its
    connect_timeout: a Django route gets the 503 in a few seconds, where Django's own check waited forever. (A list
    filtered by status is Django's view's: the event loop's door answers only the plain list.)"""
    stack, postgres, _ = doors
    for _ in range(20):  # the Django threads that answer keep their connections (CONN_MAX_AGE)
        assert request(stack.url, "GET", FILTERED, shopper="ivy")[0] == 200
    hung = postgres_processes(postgres)
    for process in hung:
        process.send_signal(signal.SIGSTOP)
    try:
        answers = [request(stack.url, "GET", FILTERED, shopper="ivy", timeout=30) for _ in range(2)]
    finally:
        for process in hung:
            process.send_signal(signal.SIGCONT)
    for answer in answers:
        assert_unavailable(answer)
        assert answer[3] < 6, answer  # 1 s of health check, 3 s of connect_timeout, then the answer
    print(f"Django's route while PostgreSQL hung: {[(a[0], round(a[3], 2)) for a in answers]}")
    assert wait_until(lambda: request(stack.url, "GET", FILTERED, shopper="ivy")[0] == 200, 15)


def validate(stack: Stack, codes: list[str], shopper: str = "joy", timeout: float = 30.0
             ) -> tuple[int, dict[str, str], dict[str, object], float]:
    """(status, headers, JSON body, seconds) of a cart's validation (the event loop's door: coupons/doors.py)."""
    return post_json(stack, "/api/v1/carts/validate", {"currency": "CNY", "codes": codes, "lines": [
        {"sku": "TEA-1", "quantity": 1, "unit_price": "100.00"}]}, shopper, timeout=timeout)


def post_json(stack: Stack, path: str, body: dict[str, object], shopper: str, headers: dict[str, str] | None = None,
              timeout: float = 30.0) -> tuple[int, dict[str, str], dict[str, object], float]:
    """(status, headers, JSON body, seconds) of a shopper's POST of JSON on a new connection."""
    parts = urllib.parse.urlsplit(stack.url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    started = time.monotonic()
    try:
        conn.request("POST", path, body=json.dumps(body).encode(), headers={
            "Content-Type": "application/json", "X-User-Id": shopper, "X-Token": mint_token(shopper, ttl=600),
            **(headers or {})})
        response = conn.getresponse()
        answer = json.loads(response.read())
        return (response.status, {k.lower(): v for k, v in response.getheaders()}, answer,
                time.monotonic() - started)
    finally:
        conn.close()


def test_a_cart_on_a_hung_postgresql_is_the_503_within_the_statements_bound_then_answers_again(doors) -> None:
    # Given the loop's connections open (a cart answered), then PostgreSQL hung mid-flight
    stack, postgres, _ = doors
    assert validate(stack, [])[0] == 200
    hung = postgres_processes(postgres)
    for process in hung:
        process.send_signal(signal.SIGSTOP)
    try:
        answers = [validate(stack, []) for _ in range(2)]  # a kept connection's read, then a new connection's
    finally:
        for process in hung:
            process.send_signal(signal.SIGCONT)

    # Then each is the contract's 503 within the API's statement bound (3 s), and carts answer again after
    for answer in answers:
        assert_unavailable(answer)
        assert answer[3] < 5, answer
    print(f"carts while PostgreSQL hung: {[(a[0], round(a[3], 2)) for a in answers]}")
    assert wait_until(lambda: validate(stack, [])[0] == 200, 15)


def test_a_cart_needs_no_redis_but_for_its_codes_uses_and_the_guard_fails_open(doors) -> None:
    stack, _, _ = doors
    stack.redis.kill()
    try:
        without_codes = validate(stack, [])
        unknown_code = validate(stack, ["NOPE-1"])
    finally:
        stack.redis.start()

    # Without codes the cart reads PostgreSQL alone; an unknown code is counted by the guard, which fails open
    # with Redis down (coupons.guard), and looked up in PostgreSQL: not_found. Redis is asked nothing else.
    assert without_codes[0] == 200 and without_codes[3] < HUNG_ANSWER_SECONDS
    assert unknown_code[0] == 200 and unknown_code[2]["coupons"][0]["status"] == "not_found"  # type: ignore[index]


def use(stack: Stack, code: str, key: str, shopper: str = "kim", timeout: float = 30.0
        ) -> tuple[int, dict[str, str], dict[str, object], float]:
    """(status, headers, JSON body, seconds) of a redeem (the use door's: coupons/use_door.py)."""
    return post_json(stack, f"/api/v1/coupons/{code}/redeem", {
        "order_id": "K-1", "order_amount": "100.00", "currency": "CNY"}, shopper, {"Idempotency-Key": key}, timeout)


def test_a_use_on_a_hung_postgresql_is_the_503_within_the_statements_bound_its_key_left_free(doors) -> None:
    # Given the use door's loop connections open (a use answered: no such code), then PostgreSQL hung
    stack, postgres, _ = doors
    assert use(stack, "NOPE-NOPE-1", "k-before")[:3:2] == (404, {
        "code": 404, "status": "not_found", "detail": "No such coupon."})
    hung = postgres_processes(postgres)
    for process in hung:
        process.send_signal(signal.SIGSTOP)
    try:
        answers = [use(stack, "NOPE-NOPE-2", f"k-hung-{n}") for n in range(2)]
    finally:
        for process in hung:
            process.send_signal(signal.SIGCONT)

    # Then each is the contract's 503 within the API's statement bound (3 s), without DRF's Allow (the door's
    # answer); and once PostgreSQL answers, uses are decided again (the unknown code, or past the guard's limit).
    # A key whose claim PostgreSQL took when it woke stays in flight (409, Retry-After) until it is stale: its
    # outcome was unknown to the request (coupons.idempotency).
    for answer in answers:
        assert_unavailable(answer)
        assert answer[3] < 5 and "allow" not in answer[1], answer
    print(f"uses while PostgreSQL hung: {[(a[0], round(a[3], 2)) for a in answers]}")
    assert wait_until(lambda: use(stack, "NOPE-NOPE-2", "k-after")[0] in (404, 429), 15)
    assert {use(stack, "NOPE-NOPE-2", f"k-hung-{n}")[0] for n in range(2)} <= {404, 409, 429}
