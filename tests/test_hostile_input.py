"""Hostile requests across every endpoint: each gets its contract answer (never a 500) and changes nothing."""
from __future__ import annotations

import hashlib
from typing import Any

import pytest

from campaigns.redis_state import redis_client
from coupons.models import Coupon, CouponEvent, IdempotencyRecord
from orders.models import Claim

from .conftest import shopper_headers
from .coupons.helpers import claimed_coupon

pytestmark = pytest.mark.django_db

INJECTIONS = ["1' OR '1'='1", "1;DROP TABLE orders_claim;--", "*\r\nFLUSHALL\r\n", "$(reboot)", "{c1}:stock",
              "../../etc/passwd", "%00", "1e3", "٤٢", "9" * 10_000]


def world() -> tuple[Any, ...]:
    """A fingerprint of everything a request could change: PostgreSQL rows and every Redis key and value."""
    client = redis_client()
    redis_state = []
    for key in sorted(client.scan_iter(count=1000)):
        kind = client.type(key)
        if kind == b"string":
            value: Any = client.get(key)
        elif kind == b"hash":
            value = sorted(client.hgetall(key).items())
        elif kind == b"set":
            value = sorted(client.smembers(key))
        elif kind == b"stream":
            value = client.xlen(key)
        else:
            value = kind
        if b":s:" not in key and b"code-misses" not in key:  # rate counters (a second's) count attempts by design
            redis_state.append((key, value))
    digest = hashlib.sha256(repr(redis_state).encode()).hexdigest()
    return (digest, Claim.objects.count(), list(Coupon.objects.values_list("status", "version", "order_id")),
            CouponEvent.objects.count(), IdempotencyRecord.objects.count())


@pytest.fixture
def setting(live_campaign):
    campaign = live_campaign(total_stock=10, per_user_limit=2)
    coupon = claimed_coupon(campaign, "alice")
    return campaign, coupon


def cases() -> list[Any]:
    order = '{"order_id": "A1", "order_amount": "350.00", "currency": "CNY"}'
    c: list[Any] = []
    # claim: ids, headers, bodies
    for bad in INJECTIONS:
        c.append(pytest.param("post", "/api/v1/campaigns/{bad}/claim".replace("{bad}", bad.replace("/", "%2F")),
                              {}, "", "application/json", (400, 404), id=f"claim-id-{bad[:12]!r}"))
    c += [
        pytest.param("post", "/api/v1/campaigns/{cid}/claim", {"HTTP_X_USER_ID": "alice\x00"}, "", "application/json",
                     (401,), id="claim-nul-user"),
        pytest.param("post", "/api/v1/campaigns/{cid}/claim", {"HTTP_X_USER_ID": "al\r\nice"}, "", "application/json",
                     (401,), id="claim-crlf-user"),
        pytest.param("post", "/api/v1/campaigns/{cid}/claim", {"HTTP_X_TOKEN": "9" * 10_000 + ".ab"}, "",
                     "application/json", (401,), id="claim-10000-digit-expiry"),
        pytest.param("post", "/api/v1/campaigns/{cid}/claim", {"HTTP_IDEMPOTENCY_KEY": "k\x00"}, "", "application/json",
                     (400,), id="claim-nul-key"),
        pytest.param("post", "/api/v1/campaigns/{cid}/claim", {}, '{"a": 1, "a": 2}', "application/json", (200,),
                     id="claim-duplicate-keys-body-ignored"),
        pytest.param("post", "/api/v1/campaigns/{cid}/claim", {}, "[]", "application/json", (400,), id="claim-array"),
        pytest.param("post", "/api/v1/campaigns/{cid}/claim", {}, "NaN", "application/json", (400,), id="claim-nan"),
        pytest.param("post", "/api/v1/campaigns/{cid}/claim", {}, "x=1", "application/x-www-form-urlencoded", (415,),
                     id="claim-form"),
        pytest.param("post", "/api/v1/campaigns/{cid}/claim", {}, "{" + '"a":1,' * 5000 + '"b":1}',
                     "application/json", (413,), id="claim-too-large"),
        pytest.param("put", "/api/v1/campaigns/{cid}/claim", {}, "", "application/json", (405,), id="claim-put"),
        pytest.param("post", "/api/v1/campaigns/{cid}/claim", {"CONTENT_LENGTH": "1" + "0" * 12}, "{}",
                     "application/json", (413,), id="claim-13-digit-length"),
        pytest.param("post", "/api/v1/carts/validate", {"CONTENT_LENGTH": "9" * 4400}, "{}", "application/json",
                     (413,), id="validate-4400-digit-length"),
    ]
    # coupons: codes, bodies
    for bad in INJECTIONS[:6]:
        c.append(pytest.param("post", f"/api/v1/coupons/{bad.replace('/', '%2F')}/redeem",
                              {"HTTP_IDEMPOTENCY_KEY": "k"}, order, "application/json", (404,),
                              id=f"redeem-code-{bad[:12]!r}"))
    bodies = {
        "nan-amount": '{"order_id": "A1", "order_amount": "NaN", "currency": "CNY"}',
        "infinity": '{"order_id": "A1", "order_amount": "Infinity", "currency": "CNY"}',
        "number-amount": '{"order_id": "A1", "order_amount": 350.0, "currency": "CNY"}',
        "huge-amount": '{"order_id": "A1", "order_amount": "' + "9" * 10_000 + '", "currency": "CNY"}',
        "negative": '{"order_id": "A1", "order_amount": "-1", "currency": "CNY"}',
        "sql-order": '{"order_id": "1\' OR 1=1--", "order_amount": "350.00", "currency": "CNY"}',
        "object-order": '{"order_id": {"$gt": ""}, "order_amount": "350.00", "currency": "CNY"}',
        "lower-currency": '{"order_id": "A1", "order_amount": "350.00", "currency": "cny"}',
        "array-body": "[1, 2]",
        "duplicate-keys": '{"order_id": "A1", "order_id": "A2", "order_amount": "0", "currency": "CNY"}',
    }
    for name, body in bodies.items():
        c.append(pytest.param("post", "/api/v1/coupons/{code}/redeem", {"HTTP_IDEMPOTENCY_KEY": name}, body,
                              "application/json", (400,), id=f"redeem-{name}"))
    c += [
        pytest.param("post", "/api/v1/coupons/{code}/reserve", {"HTTP_IDEMPOTENCY_KEY": "h"},
                     '{"order_id": "A1", "order_amount": "350.00", "currency": "CNY", "hold_seconds": 1e9}',
                     "application/json", (400,), id="reserve-hold-1e9"),
        pytest.param("post", "/api/v1/coupons/{code}/confirm", {}, '{"order_id": null}', "application/json", (400,),
                     id="confirm-null-order"),
        pytest.param("post", "/api/v1/coupons/{code}/release", {}, "<xml/>", "text/xml", (415,), id="release-xml"),
        pytest.param("post", "/api/v1/coupons/{code}/redeem", {"HTTP_X_USER_ID": "mallory",
                     "HTTP_X_TOKEN": "{mallory}", "HTTP_IDEMPOTENCY_KEY": "m"}, order, "application/json", (404,),
                     id="redeem-someone-elses-coupon"),
        pytest.param("get", "/api/v1/claims/{claim}", {"HTTP_X_USER_ID": "mallory", "HTTP_X_TOKEN": "{mallory}"}, "",
                     "application/json", (404,), id="claim-of-someone-else"),
        pytest.param("post", "/api/v1/claims/{claim}/cancel", {"HTTP_X_USER_ID": "mallory",
                     "HTTP_X_TOKEN": "{mallory}"}, "", "application/json", (404,), id="cancel-someone-elses"),
        pytest.param("get", "/api/v1/claims/1-1-1;DROP", {}, "", "application/json", (400,), id="claim-id-sql"),
        pytest.param("get", "/api/v1/claims/code:{cid}:" + "0" * 24 + ":0", {}, "", "application/json", (404,),
                     id="claim-id-of-a-shared-codes-use"),
        pytest.param("post", "/api/v1/claims/unique:5/cancel", {}, "", "application/json", (404,),
                     id="cancel-of-a-unique-codes-use"),
        pytest.param("get", "/api/v1/claims/code:{cid}:" + "0" * 23 + ":0", {}, "", "application/json", (400,),
                     id="claim-id-of-no-form"),
        pytest.param("get", "/api/v1/me/coupons?status=active' OR '1'='1", {}, "", "application/json", (400,),
                     id="my-coupons-status-sql"),
        pytest.param("get", "/api/v1/me/coupons?page_size=" + "9" * 10_000, {}, "", "application/json", (400,),
                     id="my-coupons-huge-page-size"),
        pytest.param("get", "/api/v1/me/coupons?page=-1", {}, "", "application/json", (400,), id="my-coupons-page"),
        pytest.param("get", "/api/v1/me/coupons?page=abc", {}, "", "application/json", (400,),
                     id="my-coupons-page-text"),
        pytest.param("get", "/api/v1/me/coupons?page=0", {}, "", "application/json", (400,), id="my-coupons-page-0"),
        pytest.param("get", "/api/v1/me/coupons?page=" + "9" * 10_000, {}, "", "application/json", (404,),
                     id="my-coupons-huge-page"),
        pytest.param("get", "/api/v1/campaigns/" + "9" * 30, {}, "", "application/json", (400,), id="campaign-30"),
        pytest.param("delete", "/api/v1/campaigns/{cid}", {}, "", "application/json", (405,), id="campaign-delete"),
    ]
    return c


@pytest.mark.parametrize(("method", "path", "headers", "body", "content_type", "expected"), cases())
def test_a_hostile_request_gets_its_contract_answer_and_changes_nothing(client, setting, method, path, headers, body,
                                                                       content_type, expected) -> None:
    campaign, coupon = setting
    path = path.replace("{cid}", str(campaign.pk)).replace("{code}", coupon.code).replace("{claim}", coupon.claim_id)
    sent = {**shopper_headers("alice"), **headers}
    if sent.get("HTTP_X_TOKEN") == "{mallory}":
        sent = {**sent, **shopper_headers("mallory")}
    before = world()
    client.raise_request_exception = False

    response = getattr(client, method)(path, data=body, content_type=content_type, **sent)

    assert response.status_code in expected, (response.status_code, response.content[:300])
    document = response.json()
    assert isinstance(document.get("code"), int) and isinstance(document.get("status"), str)
    assert "Traceback" not in response.content.decode() and "SELECT" not in response.content.decode()
    if response.status_code != 200:
        assert world() == before
