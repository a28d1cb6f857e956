"""GET /api/v1/claims/{claim_id}: its answers from Redis on the web server's event loop and from Django's view,
the same bytes; exact across the drain, a cancel and a coupon's change; `?wait=S` a long poll woken by the drain.

Over the run command's real server (the door, orders/status_door.py) and Django's test client (the view, as a WSGI
deployment serves it), against the real PostgreSQL and Redis.
"""
from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from decimal import Decimal
from typing import Any

import pytest
from django.test import override_settings

from campaigns.claim_settled import claims_changed, record_keys
from campaigns.models import Campaign
from campaigns.redis_state import redis_client, reset_redis_client, run_claim
from coupons.models import Coupon, CouponStatus
from coupons.services import Order, coupon_reserve
from orders import drain as drain_module
from orders.cancel import claim_cancel
from orders.drain import drain_campaign
from tests.conftest import shopper_headers, unacknowledged

pytestmark = pytest.mark.django_db(transaction=True)
NO_STORE = "private, no-store"


def claim(campaign: Campaign, user_id: str = "alice") -> str:
    result = run_claim(campaign_id=campaign.pk, user_id=user_id, idempotency_key=None)
    assert result.code == 0
    return f"{campaign.pk}-{result.ledger_id}"


def over_http(base: str, claim_id: str, user_id: str = "alice", query: str = "", timeout: float = 30
              ) -> tuple[int, dict[str, str], bytes]:
    """GET the claim from the real server: (status, headers lowercased, body)."""
    headers = {"X-User-Id": user_id, "X-Token": shopper_headers(user_id)["HTTP_X_TOKEN"]}
    request = urllib.request.Request(f"{base}/api/v1/claims/{claim_id}{query}", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, {k.lower(): v for k, v in response.headers.items()}, response.read()
    except urllib.error.HTTPError as error:
        return error.code, {k.lower(): v for k, v in error.headers.items()}, error.read()


def through_django(client: Any, claim_id: str, user_id: str = "alice", query: str = "") -> Any:
    return client.get(f"/api/v1/claims/{claim_id}{query}", **shopper_headers(user_id))


def test_pending_then_issued_after_the_drain_the_same_bytes_from_both_doors(live_campaign, http_server, client
                                                                            ) -> None:
    # Given alice's claim, still only in the ledger
    campaign = live_campaign(total_stock=10, per_user_limit=1)
    claim_id = claim(campaign)

    # When she reads it from the server's door and from Django's view
    status, headers, body = over_http(http_server, claim_id)
    django = through_django(client, claim_id)

    # Then both say pending, byte for byte, never to be kept by a cache
    assert status == 200 and json.loads(body)["status"] == "pending" and json.loads(body)["coupon"] is None
    assert django.status_code == 200 and django.content == body
    assert headers["cache-control"] == NO_STORE and django["Cache-Control"] == NO_STORE

    # When the drain issues her coupon
    drain_campaign(campaign_id=campaign.pk)
    coupon = Coupon.objects.get(claim_id=claim_id)

    # Then the door answers issued with it from the drain's record, the same bytes as Django's view from PostgreSQL
    status, headers, body = over_http(http_server, claim_id)
    answer = json.loads(body)
    assert (status, answer["status"], answer["coupon"]["code"]) == (200, "issued", coupon.code)
    # from a record of what varies per claim (~70 bytes: the shopper, the code and its times), not the answer
    record: Any = redis_client().get(record_keys(campaign.pk, claim_id.split("-", 1)[1])[0])
    assert record.split(b"\n")[:2] == [b"alice", coupon.code.encode()] and len(record) <= 96, record
    assert len(body) > 400
    claims_changed([claim_id])  # "ask PostgreSQL": Django's view then answers from PostgreSQL's rows
    assert through_django(client, claim_id).content == body


def test_a_record_without_its_coupon_template_is_answered_from_postgresql(live_campaign, http_server, client
                                                                           ) -> None:
    # Given alice's issued claim, answered from its record and the bucket's template
    campaign = live_campaign(total_stock=10, per_user_limit=1)
    claim_id = claim(campaign)
    drain_campaign(campaign_id=campaign.pk)
    body = over_http(http_server, claim_id)[2]

    # When the template is gone (evicted), the record alone can't render the answer
    assert redis_client().delete(record_keys(campaign.pk, claim_id.split("-", 1)[1])[2]) == 1

    # Then both doors answer from PostgreSQL, the same bytes
    assert over_http(http_server, claim_id)[2] == body == through_django(client, claim_id).content


def test_someone_elses_claim_is_the_404_of_an_unknown_one(live_campaign, http_server, client) -> None:
    campaign = live_campaign(total_stock=10, per_user_limit=1)
    pending = claim(campaign, "alice")
    issued = claim(campaign, "carol")
    drain_campaign(campaign_id=campaign.pk)
    pending = claim(campaign, "dave")
    unknown = f"{campaign.pk}-1-0"

    for claim_id in (pending, issued, unknown):
        status, headers, body = over_http(http_server, claim_id, "mallory")
        assert (status, json.loads(body)["status"]) == (404, "not_found"), claim_id
        assert headers["cache-control"] == NO_STORE
        assert through_django(client, claim_id, "mallory").status_code == 404


def test_a_cancelled_pending_claim_reads_cancelled_at_once(live_campaign, http_server, client) -> None:
    # Given alice's pending claim, cancelled before any drain
    campaign = live_campaign(total_stock=10, per_user_limit=1)
    claim_id = claim(campaign)
    assert claim_cancel(user_id="alice", claim_id=claim_id).code == 0

    # Then both doors say cancelled, never pending (its entry still waits in the ledger)
    status, _, body = over_http(http_server, claim_id)
    assert (status, json.loads(body)["status"]) == (200, "cancelled")
    assert through_django(client, claim_id).json()["status"] == "cancelled"

    # And after the drain acknowledged the entry too
    drain_campaign(campaign_id=campaign.pk)
    assert json.loads(over_http(http_server, claim_id)[2])["status"] == "cancelled"


def test_a_coupon_changed_after_its_issue_shows_as_changed(live_campaign, http_server) -> None:
    # Given alice's issued coupon, read once from the drain's record
    campaign = live_campaign(total_stock=10, per_user_limit=1)
    claim_id = claim(campaign)
    drain_campaign(campaign_id=campaign.pk)
    coupon = Coupon.objects.get(claim_id=claim_id)
    assert json.loads(over_http(http_server, claim_id)[2])["coupon"]["status"] == "active"

    # When she holds it for an order
    outcome = coupon_reserve(user_id="alice", code=coupon.code,
                             order=Order("A1", Decimal("350.00"), campaign.currency))
    assert outcome.code == 0

    # Then the status shows it held for that order, as PostgreSQL has it
    answer = json.loads(over_http(http_server, claim_id)[2])
    assert (answer["coupon"]["status"], answer["coupon"]["order_id"]) == (CouponStatus.HELD, "A1")


def test_a_long_poll_is_woken_by_the_drain(live_campaign, http_server) -> None:
    # Given alice's pending claim and her long poll of up to 20 s
    campaign = live_campaign(total_stock=10, per_user_limit=1)
    claim_id = claim(campaign)
    answers: list[Any] = []
    started = time.monotonic()
    poll = threading.Thread(target=lambda: answers.append((over_http(http_server, claim_id, query="?wait=20"),
                                                           time.monotonic())))
    poll.start()
    time.sleep(1.0)
    assert poll.is_alive()  # it waits

    # When the drain issues the coupon
    drained_at = time.monotonic()
    drain_campaign(campaign_id=campaign.pk)
    poll.join(25)

    # Then the poll answers issued at once, long before its 20 s
    (status, _, body), answered_at = answers[0]
    assert (status, json.loads(body)["status"]) == (200, "issued")
    assert answered_at - drained_at < 2.0, answered_at - drained_at
    assert answered_at - started < 5.0


def test_a_long_poll_answers_pending_after_its_seconds(live_campaign, http_server, client) -> None:
    campaign = live_campaign(total_stock=10, per_user_limit=1)
    claim_id = claim(campaign)

    started = time.monotonic()
    status, _, body = over_http(http_server, claim_id, query="?wait=1.5")
    door_took = time.monotonic() - started
    started = time.monotonic()
    django = through_django(client, claim_id, query="?wait=1")
    django_took = time.monotonic() - started

    assert (status, json.loads(body)["status"]) == (200, "pending") and 1.5 <= door_took < 3.0
    assert django.json()["status"] == "pending" and 1.0 <= django_took < 2.5


def test_a_wait_that_is_not_0_to_25_seconds_is_a_400(live_campaign, http_server, client) -> None:
    campaign = live_campaign(total_stock=10, per_user_limit=1)
    claim_id = claim(campaign)
    for query in ("?wait=-1", "?wait=26", "?wait=25.5", "?wait=abc", "?wait=", "?wait=3e1", "?wait=1&wait=2",
                  "?wait=%201", "?wait=0x1", "?wait=nan", "?wait=inf", "?wait=1_0", "?wait=%D9%A1"):
        status, headers, body = over_http(http_server, claim_id, query=query)
        assert (status, json.loads(body)["status"]) == (400, "invalid_request"), query
        assert headers["cache-control"] == NO_STORE
        assert through_django(client, claim_id, query=query).status_code == 400, query
    for query in ("?wait=0", "?wait=0.1", "", "?wait=0.2345678901", "?wait=1e-05"):  # the schema's number
        assert json.loads(over_http(http_server, claim_id, query=query)[2])["status"] == "pending", query
    drain_campaign(campaign_id=campaign.pk)  # issued: a long poll answers at once (25 s on a pending claim)
    for query in ("?wait=25", "?wait=24.999"):
        assert json.loads(over_http(http_server, claim_id, query=query)[2])["status"] == "issued", query


def test_without_a_token_it_is_the_same_401_from_both_doors(live_campaign, http_server, client) -> None:
    campaign = live_campaign(total_stock=10, per_user_limit=1)
    claim_id = claim(campaign)
    request = urllib.request.Request(f"{http_server}/api/v1/claims/{claim_id}")
    with pytest.raises(urllib.error.HTTPError) as door:
        urllib.request.urlopen(request, timeout=10)
    django = client.get(f"/api/v1/claims/{claim_id}")
    assert door.value.code == django.status_code == 401
    assert door.value.headers.get("WWW-Authenticate") == django.get("WWW-Authenticate")
    assert door.value.headers["Cache-Control"] == django["Cache-Control"] == NO_STORE
    assert json.loads(door.value.read()) == django.json()


def test_redis_down_is_a_503_unless_postgresql_holds_the_claim(live_campaign, client) -> None:
    campaign = live_campaign(total_stock=10, per_user_limit=1)
    issued = claim(campaign, "carol")
    drain_campaign(campaign_id=campaign.pk)
    pending = claim(campaign, "dave")

    with override_settings(REDIS_URL="redis://127.0.0.1:1/0"):
        reset_redis_client()
        down = through_django(client, pending, "dave")
        up = through_django(client, issued, "carol")
    reset_redis_client()

    assert (down.status_code, down.json()["status"], down["Retry-After"]) == (503, "unavailable", "1")
    assert (up.status_code, up.json()["status"]) == (200, "issued")


def test_the_record_is_written_with_the_ack_never_before_postgresql_nor_left_pending(live_campaign, http_server,
                                                                                     monkeypatch) -> None:
    # Given alice's claim, and a drain that dies after its commit, before it settles the batch in Redis
    campaign = live_campaign(total_stock=10, per_user_limit=1)
    claim_id = claim(campaign)

    def died(campaign: Campaign, entries: list[Any], *created: Any) -> None:
        raise RuntimeError("killed between the commit and the acknowledgement")

    monkeypatch.setattr(drain_module, "settle", died)
    with pytest.raises(RuntimeError):
        drain_campaign(campaign_id=campaign.pk)
    monkeypatch.undo()

    # Then PostgreSQL has the coupon, the entry is unacknowledged and the claim still reads pending (never issued
    # from a record before PostgreSQL had it: the record did not exist)
    assert Coupon.objects.filter(claim_id=claim_id).exists()
    assert unacknowledged(campaign) == 1
    assert json.loads(over_http(http_server, claim_id)[2])["status"] == "pending"

    # When the next drain takes the entry over (persisting again is a no-op)
    drain_campaign(campaign_id=campaign.pk, reclaim_idle_ms=0)

    # Then it is acknowledged and issued with the coupon PostgreSQL holds
    assert unacknowledged(campaign) == 0
    answer = json.loads(over_http(http_server, claim_id)[2])
    assert (answer["status"], answer["coupon"]["code"]) == ("issued", Coupon.objects.get(claim_id=claim_id).code)
