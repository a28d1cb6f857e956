"""What a storefront needs to show a richer rule (issue 38 goal 3; docs/api.md, Richer rules): GET /campaigns,
GET /campaigns/{id} and GET /me/coupons carry `tiers` (objects) and buy N get M's `buy_quantity`/`get_quantity`
beside the rule's other fields (new keys only); free shipping's cap is `max_discount`."""
from __future__ import annotations

from decimal import Decimal

import pytest

from core.public_cache import forget_public_answers
from orders.drain import drain_campaign
from tests.conftest import shopper_headers

pytestmark = pytest.mark.django_db

TIERS = [["100.00", "10.00", False], ["200.00", "25.00", False], ["500.00", "10", True]]
SHOWN = [{"threshold": "100.00", "off": "10.00", "percent": False},
         {"threshold": "200.00", "off": "25.00", "percent": False},
         {"threshold": "500.00", "off": "10.00", "percent": True}]


@pytest.fixture
def three(live_campaign) -> dict:
    forget_public_answers()
    return {
        "tiers": live_campaign(discount_type="tiers", discount_value=Decimal(0), tiers=TIERS,
                               min_spend=Decimal("100.00"), max_discount=Decimal("60.00")),
        "free_shipping": live_campaign(discount_type="free_shipping", discount_value=Decimal(0),
                                       min_spend=Decimal(0), max_discount=Decimal("15.00")),
        "buy_get": live_campaign(discount_type="buy_get", discount_value=Decimal(0), min_spend=Decimal(0),
                                 buy_quantity=2, get_quantity=1),
        "fixed": live_campaign(),
    }


EXPECTED = {
    "tiers": {"discount_type": "tiers", "discount_value": "0.00", "tiers": SHOWN, "buy_quantity": 0,
              "get_quantity": 0, "min_spend": "100.00", "max_discount": "60.00"},
    "free_shipping": {"discount_type": "free_shipping", "tiers": [], "buy_quantity": 0, "get_quantity": 0,
                      "max_discount": "15.00"},
    "buy_get": {"discount_type": "buy_get", "tiers": [], "buy_quantity": 2, "get_quantity": 1,
                "max_discount": None},
    "fixed": {"discount_type": "fixed", "discount_value": "50.00", "tiers": [], "buy_quantity": 0,
              "get_quantity": 0},
}


def test_the_public_reads_show_each_rule(client, three) -> None:
    listed = {c["id"]: c for c in client.get("/api/v1/campaigns").json()["results"]}
    for kind, campaign in three.items():
        one = client.get(f"/api/v1/campaigns/{campaign.pk}").json()
        for shown in (listed[campaign.pk], one):
            assert {k: shown[k] for k in EXPECTED[kind]} == EXPECTED[kind], kind
            assert {"remaining", "per_user_limit", "min_spend", "currency", "kind"} <= shown.keys()  # as before


def test_my_coupons_show_their_campaigns_rule_and_claim_status_is_unchanged(client, three) -> None:
    for campaign in three.values():
        answer = client.post(f"/api/v1/campaigns/{campaign.pk}/claim", data={}, content_type="application/json",
                             **shopper_headers("alice"))
        assert answer.json()["status"] == "claimed"
        drain_campaign(campaign_id=campaign.pk)
    mine = {c["campaign_id"]: c for c in client.get("/api/v1/me/coupons", **shopper_headers("alice")).json()["results"]}
    for kind, campaign in three.items():
        assert {k: mine[campaign.pk][k] for k in EXPECTED[kind]} == EXPECTED[kind], kind
    # GET /claims/{id}'s coupon keeps its fields (its bytes come from templates kept in Redis too)
    claim_id = mine[three["tiers"].pk]["claim_id"]
    coupon = client.get(f"/api/v1/claims/{claim_id}", **shopper_headers("alice")).json()["coupon"]
    assert "tiers" not in coupon and coupon["discount_type"] == "tiers"
