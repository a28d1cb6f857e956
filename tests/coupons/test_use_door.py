"""A coupon's use past Django's handler (coupons/use_door.py) and through Django's view: the same answers, the same
effects.

Over the run command's real server (the door: the use case in a Django thread, no middleware, no DRF view) and
Django's test client (the view, as a WSGI deployment serves it), against the real PostgreSQL and Redis. Which door
answered shows in the headers: Django's answers carry DRF's `Allow`, the door's do not.
"""
from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.parse
import urllib.request
from decimal import Decimal
from typing import Any

import pytest

from coupons.models import Coupon, CouponEvent, CouponStatus, IdempotencyRecord
from tests.conftest import shopper_headers

from .helpers import assert_rows_agree_with_events, issued_coupon

pytestmark = pytest.mark.django_db(transaction=True)

RULE = {"min_spend": Decimal("0"), "discount_value": Decimal("50.00")}
ORDER = {"order_id": "A-1", "order_amount": "350.00", "currency": "CNY"}


def over_http(base: str, path: str, body: dict[str, Any] | bytes, user: str | None = "alice",
              headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    """POST to the real server: (status, headers lowercased, body)."""
    sent = {"Content-Type": "application/json"}
    if user is not None:
        sent |= {"X-User-Id": user, "X-Token": shopper_headers(user)["HTTP_X_TOKEN"]}
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(f"{base}{path}", data=data, headers=sent | (headers or {}), method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, {k.lower(): v for k, v in response.headers.items()}, response.read()
    except urllib.error.HTTPError as error:
        return error.code, {k.lower(): v for k, v in error.headers.items()}, error.read()


def through_django(client: Any, path: str, body: dict[str, Any] | bytes, user: str | None = "alice",
                   headers: dict[str, str] | None = None) -> Any:
    meta = shopper_headers(user) if user is not None else {}
    for name, value in (headers or {}).items():
        if name.lower() != "content-type":
            meta[f"HTTP_{name.upper().replace('-', '_')}"] = value
    data = body if isinstance(body, bytes) else json.dumps(body)
    content_type = (headers or {}).get("Content-Type", "application/json")
    return client.post(path, data=data, content_type=content_type, **meta)


def served_count(base: str, operation: str, outcome: str) -> float:
    """The server's couponrush_coupon_uses_total of this operation and outcome (its /metrics)."""
    with urllib.request.urlopen(f"{base}/metrics", timeout=30) as response:
        text = response.read().decode()
    line = f'couponrush_coupon_uses_total{{operation="{operation}",outcome="{outcome}"}} '
    return sum(float(row[len(line):]) for row in text.splitlines() if row.startswith(line))


def test_each_use_of_a_claimed_coupon_answers_from_the_door_as_the_view_answers_it(
        http_server, client, live_campaign) -> None:
    # given: alice's and bob's coupons of one campaign, the same rule
    campaign_coupons = {user: issued_coupon(live_campaign, user, **RULE) for user in ("alice", "bob")}
    steps = [("reserve", {**ORDER, "hold_seconds": 600}), ("confirm", {"order_id": "A-1"}),
             ("release", {"order_id": "A-1"}), ("redeem", ORDER), ("redeem", ORDER), ("reserve", ORDER)]
    redeemed_before = served_count(http_server, "redeem", "redeemed")

    for number, (action, body) in enumerate(steps):
        key = {"Idempotency-Key": f"k{number}"}
        # when: alice's through the door, bob's through Django's view
        status, headers, door = over_http(
            http_server, f"/api/v1/coupons/{campaign_coupons['alice'].code}/{action}", body, headers=key)
        view = through_django(client, f"/api/v1/coupons/{campaign_coupons['bob'].code}/{action}", body, "bob",
                              headers=key)

        # then: the same answer (but a hold's end, which is now + hold_seconds), from the door, private
        assert status == view.status_code == 200, door
        answered, viewed = json.loads(door), view.json()
        if "hold_until" in answered:
            assert answered.pop("hold_until")[:16] == viewed.pop("hold_until")[:16]
            assert json.dumps(answered) == json.dumps(viewed)
        else:
            assert door == view.content
        assert "allow" not in headers and view["Allow"]
        assert headers["cache-control"] == view["Cache-Control"] == "private, no-store"
        assert headers["content-type"] == "application/json" and headers["x-request-id"]

        # and a repeat of alice's key through Django's view replays the door's answer, byte for byte
        again = through_django(client, f"/api/v1/coupons/{campaign_coupons['alice'].code}/{action}", body,
                               headers=key)
        assert (again.status_code, again.content) == (status, door) and again["Idempotent-Replayed"] == "true"
        # and through the door too
        status_again, headers_again, door_again = over_http(
            http_server, f"/api/v1/coupons/{campaign_coupons['alice'].code}/{action}", body, headers=key)
        assert (status_again, door_again) == (status, door) and headers_again["idempotent-replayed"] == "true"
        assert "allow" not in headers_again

    # and both coupons went the same way, their rows agreeing with their events; the door's answers counted
    rows = {user: Coupon.objects.values_list("status", "version", "discount").get(pk=coupon.pk)
            for user, coupon in campaign_coupons.items()}
    assert rows["alice"] == rows["bob"] == (CouponStatus.REDEEMED, 5, Decimal("50.00"))
    assert [e.type for e in CouponEvent.objects.filter(coupon_id=campaign_coupons["alice"].pk).order_by("id")] == [
        e.type for e in CouponEvent.objects.filter(coupon_id=campaign_coupons["bob"].pk).order_by("id")]
    assert_rows_agree_with_events()
    assert served_count(http_server, "redeem", "redeemed") - redeemed_before == 4  # the door's, and its replays


def test_a_shared_codes_use_and_the_refusals_a_use_decides_answer_from_the_door_as_from_the_view(
        http_server, client, live_campaign) -> None:
    # given: a live shared code
    live_campaign(kind="codes", code="SAVE50", total_stock=10, per_user_limit=5, **RULE)
    cases = [
        ("coupons/SAVE50/redeem", ORDER, "r1"),  # a shared code's first use: redeemed
        ("coupons/SAVE50/redeem", {**ORDER, "order_amount": "360.00"}, "r2"),  # another amount: 11
        ("coupons/SAVE50/release", {"order_id": "A-1"}, "r3"),
        ("coupons/SAVE50/confirm", {"order_id": "A-1"}, "r4"),  # the use released: revoked
        ("coupons/NOPE-NOPE/redeem", ORDER, "r5"),  # no such code: 404
        ("coupons/SAVE50/redeem", {**ORDER, "currency": "JPY", "order_amount": "350"}, "r6"),  # 400 currency
    ]
    for path, body, key in cases:
        # when: alice through the door, bob through Django's view, each with the same key
        status, headers, door = over_http(http_server, f"/api/v1/{path}", body, headers={"Idempotency-Key": key})
        view = through_django(client, f"/api/v1/{path}", body, "bob", headers={"Idempotency-Key": key})

        # then: the same answer, the door's
        assert (status, door) == (view.status_code, view.content), (path, door, view.content)
        assert "allow" not in headers and view["Allow"]
        assert headers.get("retry-after") == view.get("Retry-After")
    statuses = [json.loads(over_http(http_server, f"/api/v1/{p}", b, headers={"Idempotency-Key": k})[2])["status"]
                for p, b, k in cases]
    assert statuses == ["redeemed", "already_redeemed", "released", "revoked", "not_found", "invalid_request"]

    # and a key used again with a different request is the 422 from either door
    status, headers, door = over_http(http_server, "/api/v1/coupons/SAVE50/redeem", {**ORDER, "order_id": "Z"},
                                      headers={"Idempotency-Key": "r1"})
    view = through_django(client, "/api/v1/coupons/SAVE50/redeem", {**ORDER, "order_id": "Z"}, "bob",
                          headers={"Idempotency-Key": "r1"})
    assert (status, door) == (view.status_code, view.content) and status == 422 and "allow" not in headers


@pytest.mark.parametrize(("why", "path", "body", "headers", "user"), [
    ("no Idempotency-Key on a redeem", "redeem", ORDER, {}, "alice"),
    ("a bad Idempotency-Key", "redeem", ORDER, {"Idempotency-Key": "\u00e9"}, "alice"),
    ("a body the serializer refuses", "redeem", {**ORDER, "order_amount": "-1"}, {"Idempotency-Key": "k"}, "alice"),
    ("a body that is not JSON", "reserve", b"{", {"Idempotency-Key": "k"}, "alice"),
    ("a JSON list", "confirm", b"[]", {}, "alice"),
    ("no token", "release", {"order_id": "A-1"}, {}, None),
    ("a query string", "release?x=1", {"order_id": "A-1"}, {}, "alice"),
    ("an Accept with a parameter", "release", {"order_id": "A-1"}, {"Accept": "application/json; indent=2"},
     "alice"),
    ("a form", "release", b"order_id=A-1", {"Content-Type": "application/x-www-form-urlencoded"}, "alice"),
])
def test_a_request_the_door_does_not_take_is_djangos_views_before_anything_changes(
        http_server, client, live_campaign, why, path, body, headers, user) -> None:
    # given: alice's coupon, held for order A-1
    coupon = issued_coupon(live_campaign, "alice", **RULE)
    held = through_django(client, f"/api/v1/coupons/{coupon.code}/reserve", ORDER, headers={"Idempotency-Key": "h"})
    assert held.json()["status"] == "reserved"
    before = (list(Coupon.objects.values_list("status", "version")), IdempotencyRecord.objects.count())

    # when: a request the door leaves to the view
    status, answered_headers, answer = over_http(http_server, f"/api/v1/coupons/{coupon.code}/{path}", body,
                                                 user=user, headers=headers)

    # then: Django's view answered it (DRF's Allow), as it answers it through the test client, nothing changed
    assert "allow" in answered_headers, why
    if "?" not in path:
        view = through_django(client, f"/api/v1/coupons/{coupon.code}/{path}", body, user=user, headers=headers)
        assert (status, answer) == (view.status_code, view.content), why
    assert status in (400, 401, 415, 200), (why, answer)
    if status == 200:  # the query string and the Accept ask for the same release, which the view made
        return
    assert (list(Coupon.objects.values_list("status", "version")), IdempotencyRecord.objects.count()) == before


def test_the_door_reads_the_idempotency_key_as_the_view_does(http_server, client, live_campaign) -> None:
    # given: alice's coupon
    coupon = issued_coupon(live_campaign, "alice", **RULE)
    parts = urllib.parse.urlsplit(http_server)

    def door_use(action: str, body: dict[str, Any], *keys: str) -> tuple[int, dict[str, str], bytes]:
        """A use through the door with these Idempotency-Key header lines, as sent (spaces, repeats)."""
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
        try:
            conn.putrequest("POST", f"/api/v1/coupons/{coupon.code}/{action}")
            data = json.dumps(body).encode()
            for name, value in {"Content-Type": "application/json", "Content-Length": str(len(data)),
                                "X-User-Id": "alice", "X-Token": shopper_headers("alice")["HTTP_X_TOKEN"]}.items():
                conn.putheader(name, value)
            for key in keys:
                conn.putheader("Idempotency-Key", key)
            conn.endheaders(data)
            response = conn.getresponse()
            return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
        finally:
            conn.close()

    # when: a reserve whose key has a space after it, and a confirm with the key sent twice, through the door
    reserved = door_use("reserve", ORDER, "k-space ")
    confirmed = door_use("confirm", {"order_id": "A-1"}, "k1", "k2")

    # then: the door answered both, and the view finds each under the key it reads (trimmed; the two joined)
    assert reserved[0] == confirmed[0] == 200 and "allow" not in reserved[1] and "allow" not in confirmed[1]
    again = through_django(client, f"/api/v1/coupons/{coupon.code}/reserve", ORDER,
                           headers={"Idempotency-Key": "k-space"})
    assert (again.content, again["Idempotent-Replayed"]) == (reserved[2], "true")
    again = through_django(client, f"/api/v1/coupons/{coupon.code}/confirm", {"order_id": "A-1"},
                           headers={"Idempotency-Key": "k1,k2"})
    assert (again.content, again["Idempotent-Replayed"]) == (confirmed[2], "true")
