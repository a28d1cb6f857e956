"""config.asgi.sold_out_response: the sold-out claim decided from the raw request, without its environ.

Where it answers, its answer is claim_response()'s own (status, headers, body) and it is counted the same way;
for every other request it steps aside (None), and claim_response() gives that request its answer, a refusal
included. The web server over sockets is in tests/test_server.py."""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from prometheus_client import REGISTRY

from config.asgi import claim_response, headers_environ, sold_out_response
from config.auth import mint_token, token_signature
from orders import services
from orders.metrics import CLAIM_TALLY

from .conftest import run_coroutine

JSON = (b"content-type", b"application/json")


def token_of(user: str, ttl: int = 600) -> bytes:
    return mint_token(user, ttl=ttl).encode()


def plain(user: str = "ann", *extra: tuple[bytes, bytes]) -> list[tuple[bytes, bytes]]:
    """A storefront's claim: Host, the shopper's identity, the JSON body "{}"."""
    return [(b"host", b"shop"), (b"x-user-id", user.encode()), (b"x-token", token_of(user)), JSON,
            (b"content-length", b"2"), *extra]


def without(headers: list[tuple[bytes, bytes]], name: bytes) -> list[tuple[bytes, bytes]]:
    return [(k, v) for k, v in headers if k != name]


def replaced(name: bytes, value: bytes) -> list[tuple[bytes, bytes]]:
    """plain() with this header's value instead."""
    return [*without(plain(), name), (name, value)]


def expired_token(user: str) -> bytes:
    expires = int(time.time()) - 5
    return f"{expires}.{token_signature(user, expires)}".encode()


# (what, its headers (made when the test runs: tokens expire), body): requests it answers at once
Headers = list[tuple[bytes, bytes]]
ANSWERED: list[tuple[str, Callable[[], Headers], bytes]] = [
    ("the storefront's claim, body {}", plain, b"{}"),
    ("no body at all", lambda: without(without(plain(), b"content-length"), b"content-type"), b""),
    ("Content-Length: 0", lambda: without(replaced(b"content-length", b"0"), b"content-type"), b""),
    ("{} without a media type", lambda: without(plain(), b"content-type"), b"{}"),
    ("a sane X-Request-ID", lambda: plain("bob", (b"x-request-id", b"req-12345678")), b"{}"),
    ("an X-Request-ID that is not sane", lambda: plain("cy", (b"x-request-id", b"short")), b"{}"),
    ("a 64-character user id", lambda: plain("u" * 64), b"{}"),
    ("a header with an underscore beside the real ones", lambda: plain("dee", (b"x_user_id", b"mallory")), b"{}"),
]

# requests it leaves to claim_response(), and the status that one gives them
STEPPED_ASIDE: list[tuple[str, Callable[[], Headers], bytes, int]] = [
    ("an Idempotency-Key (its repeat must replay the first answer)",
     lambda: plain("ann", (b"idempotency-key", b"k-1")),
     b"{}", 200),
    ("a bad signature", lambda: replaced(b"x-token", token_of("bob")), b"{}", 401),
    ("an expired token", lambda: replaced(b"x-token", expired_token("ann")), b"{}", 401),
    ("no token", lambda: without(plain(), b"x-token"), b"{}", 401),
    ("no user id", lambda: without(plain(), b"x-user-id"), b"{}", 401),
    ("a user id the contract refuses", lambda: replaced(b"x-user-id", b"ann bob"), b"{}", 401),
    ("the user id only with an underscore", lambda: [(b"x_user_id", b"ann"), *without(plain(), b"x-user-id")], b"{}",
     401),
    ("X-User-Id twice", lambda: plain("ann", (b"x-user-id", b"ann")), b"{}", 401),
    ("X-Token twice", lambda: plain("ann", (b"x-token", token_of("ann"))), b"{}", 401),
    ("X-Request-ID twice",
     lambda: plain("ann", (b"x-request-id", b"req-12345678"), (b"x-request-id", b"req-87654321")),
     b"{}", 200),
    ("a JSON array", lambda: replaced(b"content-length", b"2"), b"[]", 400),
    ("another JSON object", lambda: replaced(b"content-length", b"8"), b'{"a": 1}', 200),
    ("a media type with a charset", lambda: replaced(b"content-type", b"application/json; charset=utf-8"), b"{}",
     200),
    ("another media type", lambda: replaced(b"content-type", b"text/plain"), b"{}", 415),
    ("a Content-Length that is not the body's", lambda: replaced(b"content-length", b"02"),
     b"{}", 200),
    ("a chunked body", lambda: [*without(plain(), b"content-length"), (b"transfer-encoding", b"chunked")], b"{}",
     200),
]


@pytest.fixture
def sold_out(live_campaign: Any) -> Any:
    """A campaign sold out for real (its last coupon claimed, then a claim told sold_out by the script), with
    this process's sold-out flag kept up for the test (it lasts half a second)."""
    campaign = live_campaign(total_stock=1)
    target = f"/api/v1/campaigns/{campaign.pk}/claim"
    first = run_coroutine(claim_response(headers_environ(plain("first"), "127.0.0.1"), str(campaign.pk), b"{}"))
    assert orjson_status(first) == "claimed"
    assert sold_out_response(target.encode(), plain("late"), b"{}") is None  # no flag yet: Redis decides
    second = run_coroutine(claim_response(headers_environ(plain("late"), "127.0.0.1"), str(campaign.pk), b"{}"))
    assert orjson_status(second) == "sold_out"
    assert services.known_sold_out(campaign.pk, None) is not None  # the script's answer raised the flag
    services._sold_out_until[campaign.pk] = time.monotonic() + 600
    yield campaign
    services._sold_out_until.pop(campaign.pk, None)


def orjson_status(response: tuple[int, list[tuple[bytes, bytes]], bytes]) -> str:
    return str(orjson.loads(response[2])["status"])


def full_answer(campaign_id: int, headers: list[tuple[bytes, bytes]], body: bytes) -> Any:
    return run_coroutine(claim_response(headers_environ(headers, "127.0.0.1"), str(campaign_id), body))


def counted(campaign_id: int) -> float:
    CLAIM_TALLY.flush()
    return REGISTRY.get_sample_value("couponrush_claims_total",
                                     {"campaign": str(campaign_id), "outcome": "sold_out"}) or 0.0


@pytest.mark.parametrize(("what", "headers", "body"), ANSWERED, ids=[a[0] for a in ANSWERED])
def test_where_it_answers_its_answer_is_claim_responses_and_is_counted(sold_out, what, headers, body) -> None:
    headers = headers()
    target = f"/api/v1/campaigns/{sold_out.pk}/claim".encode()
    before = counted(sold_out.pk)
    at_once = sold_out_response(target, headers, bytearray(body))
    assert at_once is not None, what
    assert counted(sold_out.pk) == before + 1
    full = full_answer(sold_out.pk, headers, body)

    assert (at_once[0], at_once[2]) == (full[0], full[2]) == (
        200, b'{"code":2,"status":"sold_out","claim_id":null,"campaign_id":%d}' % sold_out.pk)
    assert [name for name, _ in at_once[1]] == [name for name, _ in full[1]]
    given = dict(headers).get(b"x-request-id")
    ids = [dict(answer[1])[b"x-request-id"] for answer in (at_once, full)]
    if given == b"req-12345678":
        assert ids == [given, given]
    else:  # a new id each
        assert ids[0] != ids[1] and all(len(i) == 32 for i in ids)


@pytest.mark.parametrize(("what", "headers", "body", "status"), STEPPED_ASIDE, ids=[a[0] for a in STEPPED_ASIDE])
def test_any_other_request_is_left_to_claim_response(sold_out, what, headers, body, status) -> None:
    headers = headers()
    target = f"/api/v1/campaigns/{sold_out.pk}/claim".encode()
    before = counted(sold_out.pk)
    assert sold_out_response(target, headers, bytearray(body)) is None, what
    assert counted(sold_out.pk) == before  # nothing counted by it
    assert full_answer(sold_out.pk, headers, body)[0] == status


@pytest.mark.parametrize("target", [
    "/api/v1/campaigns/{id}/claim?x=1", "/api/v1/campaigns/0{id}/claim", "/api/v1/campaigns/{id}/claim/",
    "/api/v1/campaigns/%3{digit}/claim", "/api/v1/campaigns/{id}/cancel", "/api/v1/campaigns/{other}/claim",
])
def test_other_targets_are_left_to_the_other_ways_in(sold_out, target) -> None:
    raw = target.format(id=sold_out.pk, digit=str(sold_out.pk)[0], other=sold_out.pk + 1).encode()
    assert sold_out_response(raw, plain(), b"{}") is None


def test_once_the_flag_lapses_it_steps_aside_and_the_script_decides_again(sold_out) -> None:
    target = f"/api/v1/campaigns/{sold_out.pk}/claim".encode()
    assert sold_out_response(target, plain("eve"), b"{}") is not None
    services._sold_out_until[sold_out.pk] = time.monotonic() - 1
    assert sold_out_response(target, plain("eve"), b"{}") is None
