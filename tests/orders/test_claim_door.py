"""The claim's door on the event loop (orders/door.py) answers exactly as Django's view does: one
implementation of the claim, one way in per kind of server. What it can decide without Redis (a refusal, a
campaign this process knows is sold out) it answers at once, through the same checks."""
from __future__ import annotations

import time
from collections.abc import Awaitable
from typing import Any

import orjson
import pytest
from prometheus_client import REGISTRY

from config.asgi import make_application
from config.wsgi import application as django_application
from core.auth import mint_token, token_signature
from orders.claim import known_sold_out
from orders.metrics import CLAIM_TALLY
from orders.sold_out import sold_out_until
from webserver.interface import Request, Response

from ..conftest import run_coroutine, shopper_headers
from .claim_cases import CASES, call, campaign_id_of, codes_campaign_for

pytestmark = pytest.mark.django_db

Headers = list[tuple[bytes, bytes]]


@pytest.fixture(scope="module")
def door() -> Any:
    app = make_application(threads=2)
    yield app
    app.close()


def raw_headers(meta: dict[str, str], body: bytes) -> Headers:
    headers = [(b"host", b"shop"), (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    for key, value in meta.items():
        headers.append((key[5:].lower().replace("_", "-").encode(), value.encode("latin-1")))
    return headers


def claim(app: Any, campaign_id: Any, headers: Headers, body: bytes = b"{}", path: str | None = None
          ) -> tuple[Response | Awaitable[Response], Response]:
    """(what the door answered at first, the whole answer)."""
    request = Request("POST", path or f"/api/v1/campaigns/{campaign_id}/claim", b"", headers, body, "127.0.0.1",
                      ("shop", 80))
    first = app.answer(request)
    return first, (first if isinstance(first, tuple) else run_coroutine(_awaited(first)))


async def _awaited(pending: Awaitable[Response]) -> Response:
    return await pending


def decoded(response: Response) -> tuple[int, dict[bytes, bytes], Any]:
    return response[0], dict(response[1]), orjson.loads(response[2])


@pytest.mark.parametrize(("case", "campaign_id", "headers", "body"), CASES, ids=[c[0] for c in CASES])
def test_the_door_and_the_django_view_give_the_same_answer(door, live_campaign, case, campaign_id, headers,
                                                          body) -> None:
    door_campaign, view_campaign = live_campaign(total_stock=5), live_campaign(total_stock=5)
    codes = codes_campaign_for(campaign_id, live_campaign)  # one for both: the door's lookup is remembered
    meta = headers()

    _, answer = claim(door, campaign_id_of(campaign_id, door_campaign, codes), raw_headers(meta, body), body)
    view = call(django_application, f"/api/v1/campaigns/{campaign_id_of(campaign_id, view_campaign, codes)}/claim",
                headers=meta, body=body)

    status, door_headers, door_body = decoded(answer)
    assert str(status) == view[0]
    strip = {"claim_id", "campaign_id"}  # different campaigns, different ids
    assert {k: v for k, v in door_body.items() if k not in strip} == {
        k: v for k, v in view[2].items() if k not in strip}
    for header in ("content-type", "idempotent-replayed", "retry-after"):
        assert (door_headers.get(header.encode()) or b"").decode() == (view[1].get(header) or ""), header


def test_everything_else_and_other_methods_are_djangos(live_campaign) -> None:
    campaign = live_campaign()
    assert call(django_application, "/healthz", method="GET")[2] == {"code": 0, "status": "ok"}
    status, headers, body = call(django_application, f"/api/v1/campaigns/{campaign.pk}/claim", method="GET")
    assert (status, body["status"], headers.get("allow")) == ("405", "method_not_allowed", "POST")


def plain(user: str = "ann", *extra: tuple[bytes, bytes]) -> Headers:
    """A storefront's claim: Host, the shopper's identity, the JSON body "{}"."""
    return [(b"host", b"shop"), (b"x-user-id", user.encode()), (b"x-token", mint_token(user, ttl=600).encode()),
            (b"content-type", b"application/json"), (b"content-length", b"2"), *extra]


def without(headers: Headers, name: bytes) -> Headers:
    return [(k, v) for k, v in headers if k != name]


def replaced(name: bytes, value: bytes) -> Headers:
    return [*without(plain(), name), (name, value)]


def expired_token(user: str) -> bytes:
    expires = int(time.time()) - 5
    return f"{expires}.{token_signature(user, expires)}".encode()


@pytest.fixture
def sold_out(door, live_campaign: Any) -> Any:
    """A campaign sold out for real (its last coupon claimed, then a claim told sold_out by the script), with
    this process's sold-out flag kept up for the test (it lasts half a second)."""
    campaign = live_campaign(total_stock=1)
    assert decoded(claim(door, campaign.pk, plain("first"))[1])[2]["status"] == "claimed"
    first, late = claim(door, campaign.pk, plain("late"))
    assert not isinstance(first, tuple)  # no flag yet: Redis decides
    assert decoded(late)[2]["status"] == "sold_out"
    assert known_sold_out(campaign.pk, None) is not None  # the script's answer raised the flag
    sold_out_until[campaign.pk] = time.monotonic() + 600
    yield campaign
    sold_out_until.pop(campaign.pk, None)


def counted(campaign_id: int, outcome: str = "sold_out") -> float:
    CLAIM_TALLY.flush()
    return REGISTRY.get_sample_value("couponrush_claims_total", {"campaign": str(campaign_id), "outcome": outcome,
                                                               "storefront": "default"}
                                     ) or 0.0


SOLD_OUT_AT_ONCE = [
    ("the storefront's claim, body {}", plain, b"{}"),
    ("no body at all", lambda: without(without(plain(), b"content-length"), b"content-type"), b""),
    ("{} without a media type", lambda: without(plain(), b"content-type"), b"{}"),
    ("another JSON object", lambda: replaced(b"content-length", b"8"), b'{"a": 1}'),
    ("a media type with a charset", lambda: replaced(b"content-type", b"application/json; charset=utf-8"), b"{}"),
    ("a sane X-Request-ID", lambda: plain("bob", (b"x-request-id", b"req-12345678")), b"{}"),
    ("a 64-character user id", lambda: plain("u" * 64), b"{}"),
    ("a header with an underscore beside the real ones", lambda: plain("dee", (b"x_user_id", b"mallory")), b"{}"),
]


@pytest.mark.parametrize(("what", "headers", "body"), SOLD_OUT_AT_ONCE, ids=[a[0] for a in SOLD_OUT_AT_ONCE])
def test_a_claim_on_a_campaign_known_sold_out_is_answered_at_once_and_counted(door, sold_out, what, headers,
                                                                             body) -> None:
    headers = headers()
    before = counted(sold_out.pk)
    first, answer = claim(door, sold_out.pk, headers, body)
    assert isinstance(first, tuple), what
    assert counted(sold_out.pk) == before + 1
    assert (answer[0], answer[2]) == (200, b'{"code":2,"status":"sold_out","claim_id":null,"campaign_id":%d}'
                                      % sold_out.pk)
    if dict(headers).get(b"x-request-id") == b"req-12345678":
        assert dict(answer[1])[b"x-request-id"] == b"req-12345678"


REFUSED_AT_ONCE = [
    ("a bad signature", lambda: replaced(b"x-token", mint_token("bob", ttl=600).encode()), b"{}", 401),
    ("an expired token", lambda: replaced(b"x-token", expired_token("ann")), b"{}", 401),
    ("no token", lambda: without(plain(), b"x-token"), b"{}", 401),
    ("the user id only with an underscore", lambda: [(b"x_user_id", b"ann"), *without(plain(), b"x-user-id")],
     b"{}", 401),
    ("X-User-Id twice", lambda: plain("ann", (b"x-user-id", b"ann")), b"{}", 401),
    ("a JSON array", plain, b"[]", 400),
    ("another media type", lambda: replaced(b"content-type", b"text/plain"), b"{}", 415),
]


@pytest.mark.parametrize(("what", "headers", "body", "status"), REFUSED_AT_ONCE, ids=[a[0] for a in REFUSED_AT_ONCE])
def test_a_refusal_is_answered_at_once_through_the_same_checks(door, sold_out, what, headers, body, status) -> None:
    first, answer = claim(door, sold_out.pk, headers(), body)
    assert isinstance(first, tuple) and answer[0] == status, what


def test_a_claim_with_an_idempotency_key_always_asks_redis(door, sold_out) -> None:
    first, answer = claim(door, sold_out.pk, plain("ann", (b"idempotency-key", b"k-1")))
    assert not isinstance(first, tuple)
    assert decoded(answer)[2]["status"] == "sold_out"


def test_once_the_flag_lapses_the_script_decides_again(door, sold_out) -> None:
    assert isinstance(claim(door, sold_out.pk, plain("eve"))[0], tuple)
    sold_out_until[sold_out.pk] = time.monotonic() - 1
    assert not isinstance(claim(door, sold_out.pk, plain("eve"))[0], tuple)


@pytest.mark.parametrize("path", ["/api/v1/campaigns/{id}/claim/", "/api/v1/campaigns/{id}/cancel"])
def test_other_paths_are_handed_on(door, sold_out, path) -> None:
    first, answer = claim(door, sold_out.pk, plain(), path=path.format(id=sold_out.pk))
    assert not isinstance(first, tuple) and answer[0] == 404


class Recording(dict):
    """An environ that remembers every key read from it."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.read: set[str] = set()

    def get(self, key: Any, default: Any = None) -> Any:
        self.read.add(key)
        return super().get(key, default)

    def __getitem__(self, key: Any) -> Any:
        self.read.add(key)
        return super().__getitem__(key)

    def __contains__(self, key: Any) -> bool:
        self.read.add(key)
        return super().__contains__(key)


@pytest.mark.parametrize("body", [b"", b"{}"])
def test_both_doors_read_the_same_headers(settings, body) -> None:
    """Django's view reads from its environ the headers the door reads from the request (orders.door's
    CLAIM_HEADER_NAMES; the Host and the request id are Django's middleware's there), and the peer's address."""
    from orders.apis import claim_answer
    from orders.door import CLAIM_HEADER_NAMES

    settings.COUPONS_RATE_LIMIT_IP_PER_SECOND, settings.COUPONS_TRUSTED_PROXY_HOPS = 5, 1  # every check on
    meta = Recording({"HTTP_X_USER_ID": "ann", "HTTP_X_TOKEN": mint_token("ann", ttl=600),
                      "CONTENT_LENGTH": str(len(body)), "CONTENT_TYPE": "application/json",
                      "HTTP_X_FORWARDED_FOR": "198.51.100.7", "REMOTE_ADDR": "127.0.0.1"})

    claim_answer(meta, "987654321", lambda: body)  # no such campaign: the whole claim, to its 404

    door_keys = {name.decode().upper().replace("-", "_") for name in CLAIM_HEADER_NAMES}
    door_keys = {key if key.startswith("CONTENT_") else f"HTTP_{key}" for key in door_keys}
    assert meta.read == door_keys - {"HTTP_HOST", "HTTP_X_REQUEST_ID"} | {"REMOTE_ADDR"}


def test_each_claim_asks_this_processs_sold_out_flag_once_on_either_door(door, live_campaign, monkeypatch) -> None:
    """The flag is asked where a claim is decided without Redis (orders.apis), not again before the script."""
    import orders.apis
    import orders.claim

    asked: list[int] = []

    def counting(campaign_id: int, key: str | None) -> Any:
        asked.append(campaign_id)
        return known_sold_out(campaign_id, key)

    monkeypatch.setattr(orders.apis, "known_sold_out", counting)
    monkeypatch.setattr(orders.claim, "known_sold_out", counting)
    campaign = live_campaign(total_stock=5)
    assert decoded(claim(door, campaign.pk, plain("ann"))[1])[2]["status"] == "claimed"
    assert asked == [campaign.pk]
    view = call(django_application, f"/api/v1/campaigns/{campaign.pk}/claim", headers=shopper_headers("bob"),
                body=b"{}")
    assert view[2]["status"] == "claimed"
    assert asked == [campaign.pk, campaign.pk]
