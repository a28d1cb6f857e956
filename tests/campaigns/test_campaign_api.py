"""The storefront's read API through HTTP: campaigns with live stock, a claim read back, the shopper's coupons."""
from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from django.test import override_settings
from django.utils import timezone

from campaigns.models import Campaign
from campaigns.redis_state import campaign_keys, redis_client, reset_redis_client
from campaigns.services import campaign_pause
from coupons.models import Coupon, CouponStatus
from orders.drain import drain_campaign
from orders.models import Claim, ClaimStatus
from tests.conftest import shopper_headers, unacknowledged
from tests.factories import CampaignFactory

pytestmark = pytest.mark.django_db

CAMPAIGN_FIELDS = {
    "id", "name", "state", "starts_at", "ends_at", "total_stock", "remaining", "per_user_limit",
    "discount_type", "discount_value", "max_discount", "min_spend", "currency", "valid_until",
    "valid_days", "audience", "kind", "tiers", "buy_quantity", "get_quantity",
}
COUPON_FIELDS = {
    "code", "campaign_id", "claim_id", "status", "valid_from", "expires_at",
    "discount_type", "discount_value", "max_discount", "min_spend", "currency", "order_id", "hold_until", "discount",
}
MY_COUPON_FIELDS = COUPON_FIELDS | {"tiers", "buy_quantity", "get_quantity"}  # GET /me/coupons: the rule's too


def claim(client: Any, campaign: Campaign, user: str) -> str:
    """Claim a coupon through the API and return the claim id."""
    response = client.post(
        f"/api/v1/campaigns/{campaign.pk}/claim", data={}, content_type="application/json", **shopper_headers(user)
    )
    body = response.json()
    assert body["status"] == "claimed", body
    return body["claim_id"]


def stock(campaign: Campaign) -> int | None:
    value = redis_client().get(campaign_keys(campaign.pk).stock)
    return None if value is None else int(value)


def ledger_length(campaign: Campaign) -> int:
    return redis_client().xlen(campaign_keys(campaign.pk).ledger)


def assert_contract_error(response: Any, http_status: int, slug: str) -> None:
    assert response.status_code == http_status
    assert response["Content-Type"] == "application/json"
    body = response.json()
    assert body["code"] == http_status and body["status"] == slug


# --- GET /api/v1/campaigns -----------------------------------------------------------------------------


def test_campaign_list_shows_live_and_upcoming_published_campaigns_with_live_remaining_stock(
    client, live_campaign
) -> None:
    # given
    now = timezone.now()
    live = live_campaign(name="live", total_stock=10, starts_at=now - timedelta(hours=1))
    upcoming = live_campaign(name="upcoming", total_stock=7, starts_at=now + timedelta(hours=1))
    never_loaded = CampaignFactory(name="not loaded yet", total_stock=5, starts_at=now + timedelta(hours=2))
    paused = live_campaign(name="paused", total_stock=3, starts_at=now - timedelta(minutes=30))
    campaign_pause(campaign=paused)
    CampaignFactory(name="draft", published_at=None)
    live_campaign(name="ended", starts_at=now - timedelta(hours=3), ends_at=now - timedelta(hours=1))
    claim(client, live, "alice")
    claim(client, live, "bob")
    keys_before = sorted(redis_client().keys())

    # when
    response = client.get("/api/v1/campaigns")

    # then
    assert response.status_code == 200
    body = response.json()
    assert body["code"] == 0 and body["status"] == "ok"
    results = body["results"]
    assert [c["name"] for c in results] == ["live", "paused", "upcoming", "not loaded yet"]  # soonest first
    assert all(set(c) == CAMPAIGN_FIELDS for c in results)
    by_name = {c["name"]: c for c in results}
    assert by_name["live"]["remaining"] == 8 and by_name["live"]["state"] == "live"
    assert by_name["live"]["id"] == live.pk and by_name["live"]["total_stock"] == 10
    assert by_name["upcoming"]["remaining"] == 7 and by_name["upcoming"]["state"] == "scheduled"
    assert by_name["upcoming"]["id"] == upcoming.pk
    assert by_name["not loaded yet"]["remaining"] == 5 and by_name["not loaded yet"]["id"] == never_loaded.pk
    assert by_name["paused"]["remaining"] == 3 and by_name["paused"]["state"] == "paused"
    # and reading loaded nothing, changed nothing
    assert sorted(redis_client().keys()) == keys_before and stock(live) == 8
    never_loaded.refresh_from_db()
    assert never_loaded.preheated_at is None and stock(never_loaded) is None


def test_campaign_list_is_empty_when_nothing_is_live_or_upcoming(client, db) -> None:
    # given
    now = timezone.now()
    CampaignFactory(published_at=None)
    CampaignFactory(starts_at=now - timedelta(days=2), ends_at=now - timedelta(days=1))

    # when
    response = client.get("/api/v1/campaigns")

    # then
    assert response.status_code == 200
    assert response.json() == {"code": 0, "status": "ok", "results": []}


def test_campaign_list_while_redis_is_unreachable_shows_unknown_remaining_rather_than_a_guess(
    client, live_campaign
) -> None:
    # given
    loaded = live_campaign(name="loaded", total_stock=10)
    never_loaded = CampaignFactory(name="not loaded", total_stock=5)

    # when
    with override_settings(REDIS_URL="redis://127.0.0.1:1/0"):
        reset_redis_client()
        try:
            response = client.get("/api/v1/campaigns")
        finally:
            reset_redis_client()

    # then
    assert response.status_code == 200
    remaining = {c["id"]: c["remaining"] for c in response.json()["results"]}
    assert remaining == {loaded.pk: None, never_loaded.pk: 5}
    assert stock(loaded) == 10


# --- GET /api/v1/campaigns/{id} ------------------------------------------------------------------------


def test_campaign_detail_shows_the_live_remaining_stock(client, live_campaign) -> None:
    # given
    campaign = live_campaign(total_stock=4)
    claim(client, campaign, "alice")

    # when
    response = client.get(f"/api/v1/campaigns/{campaign.pk}")

    # then
    assert response.status_code == 200
    body = response.json()
    assert set(body) == CAMPAIGN_FIELDS | {"code", "status"}
    assert body["code"] == 0 and body["status"] == "ok"
    assert body["id"] == campaign.pk and body["remaining"] == 3 and body["total_stock"] == 4
    assert body["state"] == "live" and body["discount_value"] == "50.00" and body["min_spend"] == "300.00"
    assert stock(campaign) == 3


def test_campaign_detail_of_a_published_campaign_never_loaded_shows_its_whole_stock_and_loads_nothing(
    client, db
) -> None:
    # given
    campaign = CampaignFactory(total_stock=6)

    # when
    response = client.get(f"/api/v1/campaigns/{campaign.pk}")

    # then
    assert response.status_code == 200 and response.json()["remaining"] == 6
    campaign.refresh_from_db()
    assert campaign.preheated_at is None and redis_client().dbsize() == 0


def test_campaign_detail_of_a_draft_is_not_found(client, db) -> None:
    # given
    draft = CampaignFactory(published_at=None)

    # when
    response = client.get(f"/api/v1/campaigns/{draft.pk}")

    # then
    assert_contract_error(response, 404, "not_found")
    assert redis_client().dbsize() == 0


def test_campaign_detail_of_an_unknown_campaign_is_not_found(client, db) -> None:
    # when
    response = client.get("/api/v1/campaigns/987654")

    # then
    assert_contract_error(response, 404, "not_found")


@pytest.mark.parametrize(
    "campaign_id",
    ["abc", "-1", "0", "1e3", "01", "9" * 30, "\u0664\u0662"],
    ids=["letters", "negative", "zero", "exponent", "leading-zero", "30-digits", "arabic-indic"],
)
def test_campaign_detail_with_an_id_that_is_not_an_id_is_a_bad_request(client, db, campaign_id) -> None:
    # when
    response = client.get(f"/api/v1/campaigns/{campaign_id}")

    # then
    assert_contract_error(response, 400, "invalid_request")


# --- GET /api/v1/claims/{claim_id} ---------------------------------------------------------------------


def test_a_claim_waiting_in_the_ledger_reads_as_pending_without_a_coupon(client, live_campaign) -> None:
    # given
    campaign = live_campaign()
    claim_id = claim(client, campaign, "alice")

    # when
    response = client.get(f"/api/v1/claims/{claim_id}", **shopper_headers("alice"))

    # then
    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"code", "status", "claim_id", "campaign_id", "claimed_at", "coupon"}
    assert body["code"] == 0 and body["status"] == "pending" and body["coupon"] is None
    assert body["claim_id"] == claim_id and body["campaign_id"] == campaign.pk
    assert abs(datetime.fromisoformat(body["claimed_at"]) - timezone.now()) < timedelta(minutes=1)
    assert ledger_length(campaign) == 1 and Claim.objects.count() == 0 and Coupon.objects.count() == 0


def test_a_drained_claim_reads_as_issued_with_its_coupon(client, live_campaign) -> None:
    # given
    campaign = live_campaign()
    claim_id = claim(client, campaign, "alice")
    drain_campaign(campaign_id=campaign.pk)
    assert unacknowledged(campaign) == 0

    # when
    response = client.get(f"/api/v1/claims/{claim_id}", **shopper_headers("alice"))

    # then
    assert response.status_code == 200
    body = response.json()
    coupon = Coupon.objects.get(claim_id=claim_id)
    assert body["code"] == 0 and body["status"] == "issued"
    assert body["claim_id"] == claim_id and body["campaign_id"] == campaign.pk
    assert set(body["coupon"]) == COUPON_FIELDS
    assert body["coupon"]["code"] == coupon.code and body["coupon"]["claim_id"] == claim_id
    assert body["coupon"]["status"] == "active" and body["coupon"]["campaign_id"] == campaign.pk
    assert body["coupon"]["discount_value"] == "50.00" and body["coupon"]["min_spend"] == "300.00"
    assert Claim.objects.get(claim_id=claim_id).status == ClaimStatus.ISSUED and coupon.user_id == "alice"


@pytest.mark.parametrize("drained", [False, True], ids=["pending", "issued"])
def test_another_shoppers_claim_is_not_found(client, live_campaign, drained) -> None:
    # given
    campaign = live_campaign()
    claim_id = claim(client, campaign, "alice")
    if drained:
        drain_campaign(campaign_id=campaign.pk)

    # when
    response = client.get(f"/api/v1/claims/{claim_id}", **shopper_headers("mallory"))

    # then
    assert_contract_error(response, 404, "not_found")
    assert "coupon" not in response.json()
    assert client.get(f"/api/v1/claims/{claim_id}", **shopper_headers("alice")).status_code == 200


def test_an_unknown_well_formed_claim_id_is_not_found(client, live_campaign) -> None:
    # given
    campaign = live_campaign()

    # when
    response = client.get(f"/api/v1/claims/{campaign.pk}-1700000000000-0", **shopper_headers("alice"))

    # then
    assert_contract_error(response, 404, "not_found")


@pytest.mark.parametrize(
    "claim_id",
    ["abc", "1", "1-2", "1-2-3-4-5", "1-2-3-0", "0-1700000000000-0", "-1-2-3", "1-2-x", "1-" + "9" * 16 + "-0",
     "\u0661-1700000000000-0", "1-1700000000000-0 "],
    ids=["letters", "number", "two-parts", "five-parts", "bucket-zero", "campaign-zero", "negative", "letter-seq",
         "16-digit-ms", "arabic-indic", "trailing-space"],
)
def test_a_malformed_claim_id_is_a_bad_request(client, db, claim_id) -> None:
    # when
    response = client.get(f"/api/v1/claims/{claim_id}", **shopper_headers("alice"))

    # then
    assert_contract_error(response, 400, "invalid_request")


@pytest.mark.parametrize(
    "headers",
    [lambda: {}, lambda: {"HTTP_X_USER_ID": "alice"}, lambda: {"HTTP_X_USER_ID": "alice", "HTTP_X_TOKEN": "1.2"},
     lambda: {"HTTP_X_USER_ID": "alice", "HTTP_X_TOKEN": shopper_headers("bob")["HTTP_X_TOKEN"]}],
    ids=["no-headers", "no-token", "malformed-token", "token-of-another-user"],
)
def test_reading_a_claim_without_a_valid_identity_is_unauthenticated(client, live_campaign, headers) -> None:
    # given
    campaign = live_campaign()
    claim_id = claim(client, campaign, "alice")

    # when
    response = client.get(f"/api/v1/claims/{claim_id}", **headers())

    # then
    assert_contract_error(response, 401, "unauthenticated")
    assert response.json() == {"code": 401, "status": "unauthenticated", "detail": "Missing, invalid or expired token."}


# --- GET /api/v1/me/coupons ----------------------------------------------------------------------------


@pytest.fixture
def coupons_of_alice_and_bob(client, live_campaign) -> dict[str, list[str]]:
    """Alice holds coupons of two campaigns (one expired), Bob one; return each shopper's claim ids."""
    first, second = live_campaign(name="first"), live_campaign(name="second")
    claims = {"alice": [claim(client, first, "alice"), claim(client, second, "alice")],
              "bob": [claim(client, first, "bob")]}
    drain_campaign(campaign_id=first.pk)
    drain_campaign(campaign_id=second.pk)
    Coupon.objects.filter(claim_id=claims["alice"][0]).update(status=CouponStatus.EXPIRED)
    return claims


def test_my_coupons_lists_only_my_own_coupons_newest_first(client, coupons_of_alice_and_bob) -> None:
    # when
    response = client.get("/api/v1/me/coupons", **shopper_headers("alice"))

    # then
    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"code", "status", "count", "next", "previous", "results"}
    assert body["code"] == 0 and body["status"] == "ok" and body["count"] == 2
    assert body["next"] is None and body["previous"] is None
    assert all(set(c) == MY_COUPON_FIELDS for c in body["results"])
    mine = Coupon.objects.filter(user_id="alice").order_by("-created_at", "-id")
    assert [c["code"] for c in body["results"]] == [c.code for c in mine]
    assert {c["claim_id"] for c in body["results"]} == set(coupons_of_alice_and_bob["alice"])


def test_my_coupons_of_another_shopper_are_theirs_only(client, coupons_of_alice_and_bob) -> None:
    # when
    response = client.get("/api/v1/me/coupons", **shopper_headers("bob"))

    # then
    body = response.json()
    assert body["count"] == 1
    assert [c["claim_id"] for c in body["results"]] == coupons_of_alice_and_bob["bob"]


def test_a_shopper_without_coupons_gets_an_empty_page(client, coupons_of_alice_and_bob) -> None:
    # when
    response = client.get("/api/v1/me/coupons", **shopper_headers("carol"))

    # then
    assert response.status_code == 200
    assert response.json() == {"code": 0, "status": "ok", "count": 0, "next": None, "previous": None,
                               "results": []}


@pytest.mark.parametrize(("status", "index"), [("active", 1), ("expired", 0)])
def test_my_coupons_filtered_by_status(client, coupons_of_alice_and_bob, status, index) -> None:
    # when
    response = client.get("/api/v1/me/coupons", {"status": status}, **shopper_headers("alice"))

    # then
    assert response.status_code == 200
    body = response.json()
    assert body["count"] == 1
    [coupon] = body["results"]
    assert coupon["status"] == status and coupon["claim_id"] == coupons_of_alice_and_bob["alice"][index]


def test_my_coupons_are_paginated(client, coupons_of_alice_and_bob) -> None:
    # when
    first = client.get("/api/v1/me/coupons", {"page_size": 1}, **shopper_headers("alice")).json()
    second = client.get("/api/v1/me/coupons", {"page_size": 1, "page": 2}, **shopper_headers("alice")).json()

    # then
    assert first["count"] == second["count"] == 2
    assert len(first["results"]) == len(second["results"]) == 1
    assert first["next"] and "page=2" in first["next"] and first["previous"] is None
    assert second["next"] is None and second["previous"]
    assert {first["results"][0]["claim_id"], second["results"][0]["claim_id"]} == set(
        coupons_of_alice_and_bob["alice"]
    )


@pytest.mark.parametrize("status", ["bogus", "ACTIVE", "active "])
def test_my_coupons_with_an_unknown_status_is_a_bad_request(client, coupons_of_alice_and_bob, status) -> None:
    # when
    response = client.get("/api/v1/me/coupons", {"status": status}, **shopper_headers("alice"))

    # then
    assert_contract_error(response, 400, "invalid_request")


def test_my_coupons_without_a_valid_identity_is_unauthenticated(client, coupons_of_alice_and_bob) -> None:
    # when
    missing = client.get("/api/v1/me/coupons")
    bobs_token = shopper_headers("bob")["HTTP_X_TOKEN"]
    forged = client.get("/api/v1/me/coupons", HTTP_X_USER_ID="alice", HTTP_X_TOKEN=bobs_token)

    # then
    assert_contract_error(missing, 401, "unauthenticated")
    assert forged.status_code == 401 and forged.content == missing.content
