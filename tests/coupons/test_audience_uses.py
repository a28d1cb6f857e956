"""Audience tags and channels at use (docs/api.md, Richer rules): a campaign with audience tags or channels is used
only by a shopper whose token carries one of its tags and was signed by a storefront of one of its channels;
others get 15 not_eligible on reserve and redeem and nothing changes; carts/validate answers not_eligible."""
from __future__ import annotations

import json
import uuid
from decimal import Decimal as D

import pytest
from django.utils import timezone

from core.auth import mint_token
from coupons.models import Coupon, CouponStatus
from coupons.services import Order, coupon_redeem

pytestmark = pytest.mark.django_db

RULE = {"min_spend": D("0"), "discount_value": D("50.00")}
ORDER = {"order_id": "A-1", "order_amount": "300.00", "currency": "CNY"}


def headers(user: str, tags: str | None = None) -> dict[str, str]:
    extra = {"HTTP_X_USER_ID": user, "HTTP_X_TOKEN": mint_token(user, ttl=600, tags=tags), "HTTP_HOST": "localhost"}
    if tags is not None:
        extra["HTTP_X_SHOPPER_TAGS"] = tags
    return extra


def redeem(client, code: str, user: str, tags: str | None = None, order_id: str = "A-1") -> dict:
    response = client.post(f"/api/v1/coupons/{code}/redeem", data=json.dumps({**ORDER, "order_id": order_id}),
                           content_type="application/json", HTTP_IDEMPOTENCY_KEY=uuid.uuid4().hex,
                           **headers(user, tags))
    assert response.status_code == 200, response.content
    return response.json()


def test_a_shared_code_of_a_tagged_campaign_is_used_only_by_shoppers_carrying_a_tag(client, live_campaign) -> None:
    live_campaign(kind="codes", code="VIP-ONLY", total_stock=10, audience_tags=["vip", "gold"], **RULE)

    plain = redeem(client, "VIP-ONLY", "alice")
    silver = redeem(client, "vip-only", "bob", tags="silver")
    gold = redeem(client, "VIP-ONLY", "carol", tags="silver,gold")

    assert (plain["code"], plain["status"]) == (15, "not_eligible")
    assert (silver["code"], silver["status"]) == (15, "not_eligible")
    assert (gold["code"], gold["status"], gold["discount"]) == (0, "redeemed", "50.00")
    assert list(Coupon.objects.values_list("user_id", "status")) == [("carol", CouponStatus.REDEEMED)]


def test_a_claimed_coupon_of_a_tagged_campaign_needs_the_tag_when_used_too(client, live_campaign) -> None:
    campaign = live_campaign(audience_tags=["vip"], **RULE)
    now = timezone.now()
    coupon = Coupon.objects.create(code="ABCD-EFGH-JKLM", campaign=campaign, user_id="alice", claim_id="1-1-0",
                                   valid_from=now, expires_at=now + timezone.timedelta(days=1))

    refused = redeem(client, coupon.code, "alice")
    coupon.refresh_from_db()
    assert (refused["code"], refused["status"], coupon.status, coupon.version) == (15, "not_eligible", "active", 1)
    assert redeem(client, coupon.code, "alice", tags="vip")["status"] == "redeemed"


def test_validate_answers_not_eligible_for_a_code_whose_tag_the_shopper_lacks(client, live_campaign) -> None:
    live_campaign(kind="codes", code="VIP-ONLY", total_stock=10, audience_tags=["vip"], **RULE)
    body = {"currency": "CNY", "lines": [{"sku": "TEA", "quantity": 1, "unit_price": "300.00"}],
            "codes": ["VIP-ONLY"]}

    def validate(tags: str | None) -> dict:
        response = client.post("/api/v1/carts/validate", data=json.dumps(body), content_type="application/json",
                               **headers("alice", tags))
        return response.json()

    without, with_tag = validate(None), validate("vip")
    assert [(c["code"], c["applicable"], c["status"]) for c in without["coupons"]] == [
        ("VIP-ONLY", False, "not_eligible")]
    assert without["best"]["codes"] == []
    assert [(c["code"], c["applicable"], c["status"]) for c in with_tag["coupons"]] == [("VIP-ONLY", True, "ok")]
    assert with_tag["best"] == {"codes": ["VIP-ONLY"], "discount": "50.00", "payable": "250.00"}


def test_a_campaign_of_channels_is_used_only_by_shoppers_of_its_storefronts(live_campaign) -> None:
    live_campaign(kind="codes", code="APP-ONLY", total_stock=10, channels=["app"], **RULE)

    def order(*channels: str) -> Order:
        return Order(order_id=f"O-{len(channels)}-{uuid.uuid4().hex[:6]}", amount=D("300.00"), currency="CNY",
                     channels=frozenset(channels))

    assert coupon_redeem(user_id="alice", code="APP-ONLY", order=order()).body()["status"] == "not_eligible"
    assert coupon_redeem(user_id="alice", code="APP-ONLY", order=order("web")).body()["status"] == "not_eligible"
    assert coupon_redeem(user_id="alice", code="APP-ONLY", order=order("web", "app")).body()["status"] == "redeemed"
    assert Coupon.objects.count() == 1
