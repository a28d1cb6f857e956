"""Tiers (满减), free shipping and buy N get M through HTTP (issue 38): carts/validate, reserve and redeem answer
each kind with its line shares (or its shipping share), `best` chooses among them, `payable` includes the
shipping; `shipping` is checked as any amount (400 and nothing changed); one order stacks kinds and a release
leaves the others as they were. Real PostgreSQL and Redis; the arithmetic is campaigns.pricing's (its tests)."""
from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from coupons.models import Coupon, CouponEvent, CouponStatus

from .helpers import assert_rows_agree_with_events, issued_coupon, row_of
from .test_carts import entry, post, use, validate

pytestmark = pytest.mark.django_db
D = Decimal

LADDER = {"discount_type": "tiers", "discount_value": D(0), "min_spend": D("100.00"),
          "tiers": [["100.00", "10.00", False], ["200.00", "25.00", False], ["500.00", "80.00", False]]}
FREE_SHIPPING = {"discount_type": "free_shipping", "discount_value": D(0), "min_spend": D(0)}
BUY_2_GET_1 = {"discount_type": "buy_get", "discount_value": D(0), "min_spend": D(0), "buy_quantity": 2,
               "get_quantity": 1}
TEA = {"sku": "TEA-1", "category": "tea", "quantity": 2, "unit_price": "120.00"}  # 240.00
CUP = {"sku": "CUP-9", "category": "kitchen", "quantity": 1, "unit_price": "60.00"}  # 60.00
CART = [TEA, CUP]  # 300.00, 3 items


def lines_sum(answer: dict[str, Any]) -> Decimal:
    return sum((D(line["discount"]) for line in answer.get("lines", [])), D(0)) + D(answer.get("shipping", "0"))


def test_a_tiers_coupon_answers_the_tier_reached_through_validate_reserve_and_redeem(client, live_campaign) -> None:
    tiers = issued_coupon(live_campaign, "alice", **LADDER)

    # validate: 300.00 reaches the 200 tier; 90.00 of cups alone is under the first
    answer = entry(validate(client), tiers.code)
    assert answer == {"code": tiers.code, "applicable": True, "status": "ok", "discount": "25.00",
                      "lines": [{"sku": "TEA-1", "discount": "20.00"}, {"sku": "CUP-9", "discount": "5.00"}]}
    small = [{**CUP, "quantity": 1, "unit_price": "90.00"}]
    assert entry(validate(client, small), tiers.code)["status"] == "min_spend_not_met"
    refused = use(client, tiers, "reserve", order_id="A-0", lines=small).json()
    assert (refused["code"], refused["status"]) == (12, "min_spend_not_met")
    assert row_of(tiers)[0] == CouponStatus.ACTIVE

    # reserve with lines, then redeem the same order: the same discount and shares
    reserved = use(client, tiers, "reserve", order_id="A-1").json()
    assert (reserved["status"], reserved["discount"], reserved["payable"]) == ("reserved", "25.00", "275.00")
    assert lines_sum(reserved) == D("25.00")
    redeemed = use(client, tiers, "redeem", order_id="A-1").json()
    assert (redeemed["code"], redeemed["discount"], redeemed["payable"], redeemed["lines"]) == (
        0, "25.00", "275.00", reserved["lines"])

    # an order known by its amount alone: 600.00 reaches the 500 tier (no scope: the whole amount is eligible)
    other = issued_coupon(live_campaign, "alice", **LADDER)
    answer = use(client, other, "redeem", order_id="A-2", lines=None, order_amount="600.00").json()
    assert (answer["discount"], answer["payable"]) == ("80.00", "520.00")
    assert_rows_agree_with_events()


def test_a_free_shipping_coupon_takes_off_the_shipping_and_payable_includes_it(client, live_campaign) -> None:
    free = issued_coupon(live_campaign, "alice", **FREE_SHIPPING, max_discount=D("8.00"))

    # validate: its share is the shipping's, on no line; best's payable counts the shipping
    answer = post(client, "carts/validate", {"currency": "CNY", "lines": CART, "shipping": "12.00"}).json()
    assert entry(answer, free.code) == {"code": free.code, "applicable": True, "status": "ok", "discount": "8.00",
                                        "lines": [], "shipping": "8.00"}
    assert answer["best"] == {"codes": [free.code], "discount": "8.00", "payable": "304.00"}
    # without shipping (none sent, or 0): 20 not_applicable
    for shipping in ({}, {"shipping": "0"}):
        body = {"currency": "CNY", "lines": CART, **shipping}
        assert entry(post(client, "carts/validate", body).json(), free.code)["status"] == "not_applicable"
    assert use(client, free, "reserve", order_id="B-0").json()["code"] == 20

    # reserve and redeem with shipping
    reserved = use(client, free, "reserve", order_id="B-1", shipping="12.00").json()
    assert (reserved["status"], reserved["discount"], reserved["payable"], reserved["shipping"], reserved["lines"]) \
        == ("reserved", "8.00", "304.00", "8.00", [])
    redeemed = use(client, free, "redeem", order_id="B-1", shipping="12.00").json()
    assert (redeemed["status"], redeemed["discount"], redeemed["payable"], redeemed["shipping"]) == (
        "redeemed", "8.00", "304.00", "8.00")
    event = CouponEvent.objects.filter(coupon_id=free.pk, type="redeemed").get()
    assert event.data["shipping"] == "8.00"

    # an order by its amount alone with shipping: the whole shipping, under the cap
    other = issued_coupon(live_campaign, "alice", **FREE_SHIPPING)
    answer = use(client, other, "redeem", order_id="B-2", lines=None, order_amount="50.00", shipping="6.50").json()
    assert (answer["discount"], answer["payable"], answer["shipping"]) == ("6.50", "50.00", "6.50")
    assert_rows_agree_with_events()


def test_a_buy_two_get_one_coupon_gives_the_cheapest_item_on_its_line(client, live_campaign) -> None:
    b2g1 = issued_coupon(live_campaign, "alice", **BUY_2_GET_1)

    answer = entry(validate(client), b2g1.code)  # 3 items: the cup (60.00) is free
    assert answer == {"code": b2g1.code, "applicable": True, "status": "ok", "discount": "60.00",
                      "lines": [{"sku": "TEA-1", "discount": "0.00"}, {"sku": "CUP-9", "discount": "60.00"}]}
    reserved = use(client, b2g1, "reserve", order_id="C-1").json()
    assert (reserved["discount"], reserved["payable"], reserved["lines"]) == ("60.00", "240.00", answer["lines"])
    redeemed = use(client, b2g1, "redeem", order_id="C-1").json()
    assert (redeemed["status"], redeemed["discount"]) == ("redeemed", "60.00")

    # it needs the cart's lines: an order by its amount alone is 20 not_applicable, nothing changed
    other = issued_coupon(live_campaign, "alice", **BUY_2_GET_1)
    answer = use(client, other, "redeem", order_id="C-2", lines=None, order_amount="300.00").json()
    assert (answer["code"], answer["status"]) == (20, "not_applicable")
    assert row_of(other)[0] == CouponStatus.ACTIVE


def test_one_order_stacks_the_kinds_best_chooses_and_a_release_leaves_the_others(client, live_campaign) -> None:
    tiers = issued_coupon(live_campaign, "alice", **LADDER)
    free = issued_coupon(live_campaign, "alice", **FREE_SHIPPING)
    b2g1 = issued_coupon(live_campaign, "alice", **BUY_2_GET_1, exclusive=True)
    body = {"currency": "CNY", "lines": CART, "shipping": "15.00"}

    # best: buy 2 get 1 alone saves 60.00 (exclusive); tiers + free shipping 25.00 + 15.00 = 40.00
    answer = post(client, "carts/validate", body).json()
    assert answer["best"] == {"codes": [b2g1.code], "discount": "60.00", "payable": "255.00"}

    # the order holds the tiers coupon, then free shipping: both apply, payable counts the shipping
    first = use(client, tiers, "reserve", order_id="D-1", shipping="15.00").json()
    second = use(client, free, "reserve", order_id="D-1", shipping="15.00").json()
    assert (first["discount"], first["payable"]) == ("25.00", "290.00")
    assert (second["discount"], second["payable"], second["shipping"]) == ("15.00", "275.00", "15.00")
    # the exclusive one can't join them
    assert use(client, b2g1, "reserve", order_id="D-1", shipping="15.00").json()["code"] == 19
    # another shipping is another cart: 400, as other lines are
    changed = use(client, b2g1, "reserve", order_id="D-1", shipping="9.00")
    assert changed.status_code == 400 and changed.json()["status"] == "invalid_request"

    # releasing the tiers coupon leaves free shipping's discount as it was
    assert post(client, f"coupons/{tiers.code}/release", {"order_id": "D-1"}).json()["code"] == 0
    again = use(client, free, "reserve", order_id="D-1", shipping="15.00").json()
    assert (again["discount"], again["payable"]) == ("15.00", "275.00")
    assert Coupon.objects.get(pk=free.pk).status == CouponStatus.HELD
    assert_rows_agree_with_events()


@pytest.mark.parametrize("shipping", ["-5.00", "abc", "1.234", 12, None, "1e3", "0012.00", "1" * 13])
def test_a_bad_shipping_is_a_400_and_changes_nothing(client, live_campaign, shipping: Any) -> None:
    free = issued_coupon(live_campaign, "alice", **FREE_SHIPPING)
    for action in ("reserve", "redeem"):
        response = use(client, free, action, order_id="E-1", shipping=shipping)
        assert response.status_code == 400 and response.json()["status"] == "invalid_request", response.content
    response = post(client, "carts/validate", {"currency": "CNY", "lines": CART, "shipping": shipping})
    assert response.status_code == 400 and "shipping" in response.content.decode()
    assert row_of(free) == (CouponStatus.ACTIVE, 1, None)


def test_shipping_in_yen_has_no_decimals_and_the_fingerprint_covers_it(client, live_campaign) -> None:
    yen = issued_coupon(live_campaign, "alice", **FREE_SHIPPING, currency="JPY")
    lines = [{"sku": "A", "quantity": 1, "unit_price": "1000"}]
    body = {"order_id": "F-1", "currency": "JPY", "lines": lines, "shipping": "500.5"}
    assert post(client, f"coupons/{yen.code}/reserve", body, key="k1").status_code == 400
    body["shipping"] = "500"
    first = post(client, f"coupons/{yen.code}/reserve", body, key="k2").json()
    assert (first["discount"], first["payable"], first["shipping"]) == ("500", "1000", "500")
    body["shipping"] = "400"  # the same key with another shipping: another request
    assert post(client, f"coupons/{yen.code}/reserve", body, key="k2").status_code == 422
