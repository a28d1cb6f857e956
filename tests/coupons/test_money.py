"""Discount arithmetic: Decimal, half-up to the currency's minor unit, capped, never above the order.

The table goes through campaigns.money.compute_discount and through Campaign.discount_for; the minimum spend
goes through the redeem service, since that is where the threshold is decided.
"""
from __future__ import annotations

from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError

from campaigns.models import Campaign
from campaigns.money import InvalidAmount, compute_discount, money_text, parse_amount, parse_currency
from coupons.models import CouponEventType, CouponStatus
from coupons.services import Order, coupon_redeem
from tests.conftest import shopper_headers
from tests.factories import CampaignFactory

from .helpers import assert_rows_agree_with_events, events_of, issued_coupon, row_of

D = Decimal

# (discount_type, value, cap, order_amount, currency, expected discount, expected payable)
DISCOUNT_TABLE = [
    pytest.param("fixed", "50.00", None, "350.00", "CNY", "50.00", "300.00", id="fixed-50-off-350"),
    pytest.param("fixed", "50.00", None, "50.00", "CNY", "50.00", "0.00", id="fixed-equal-to-order"),
    pytest.param("fixed", "50.00", None, "30.00", "CNY", "30.00", "0.00", id="fixed-above-order-is-the-order"),
    pytest.param("fixed", "50.00", None, "0.01", "CNY", "0.01", "0.00", id="fixed-on-one-cent"),
    pytest.param("percent", "15", None, "33.33", "CNY", "5.00", "28.33", id="15pct-of-33.33-is-4.9995-up"),
    pytest.param("percent", "15", None, "0.10", "CNY", "0.02", "0.08", id="15pct-of-0.10-is-0.015-up"),
    pytest.param("percent", "5", None, "0.50", "USD", "0.03", "0.47", id="half-cent-rounds-up-not-to-even"),
    pytest.param("percent", "15", None, "0.03", "EUR", "0.00", "0.03", id="under-half-a-cent-is-nothing"),
    pytest.param("percent", "12.5", None, "10.00", "CNY", "1.25", "8.75", id="fractional-percentage"),
    pytest.param("percent", "15", "10.00", "100.00", "CNY", "10.00", "90.00", id="cap-applied"),
    pytest.param("percent", "15", "10.00", "50.00", "CNY", "7.50", "42.50", id="cap-not-reached"),
    pytest.param("percent", "15", "15.00", "100.00", "CNY", "15.00", "85.00", id="cap-exactly-reached"),
    pytest.param("percent", "100", None, "12.34", "CNY", "12.34", "0.00", id="100pct-is-the-order"),
    pytest.param("percent", "15", None, "999", "JPY", "150", "849", id="jpy-15pct-of-999-is-149.85-up"),
    pytest.param("percent", "50", None, "5", "JPY", "3", "2", id="jpy-half-yen-rounds-up"),
    pytest.param("percent", "15", "100", "999", "JPY", "100", "899", id="jpy-cap"),
    pytest.param("fixed", "500", None, "300", "JPY", "300", "0", id="jpy-fixed-above-order"),
    pytest.param("fixed", "50.00", None, "999999999999.99", "CNY", "50.00", "999999999949.99", id="largest-order"),
]


def _check(result, discount: str, payable: str) -> None:
    # str() shows the exponent: "5.00" for CNY, "150" for JPY, never "5" or "150.00"
    assert (str(result.amount), str(result.payable)) == (discount, payable)
    assert result.amount >= 0 and result.payable >= 0
    assert isinstance(result.amount, Decimal) and isinstance(result.payable, Decimal)


@pytest.mark.parametrize(("kind", "value", "cap", "amount", "currency", "discount", "payable"), DISCOUNT_TABLE)
def test_compute_discount_gives_the_table_figure(kind, value, cap, amount, currency, discount, payable) -> None:
    # given
    order_amount = parse_amount(amount, currency)

    # when
    result = compute_discount(
        discount_type=kind, value=D(value), cap=None if cap is None else D(cap), order_amount=order_amount,
        currency=currency,
    )

    # then
    _check(result, discount, payable)
    assert result.amount + result.payable == order_amount


@pytest.mark.parametrize(("kind", "value", "cap", "amount", "currency", "discount", "payable"), DISCOUNT_TABLE)
def test_a_campaign_rule_gives_the_table_figure(kind, value, cap, amount, currency, discount, payable) -> None:
    # given: the rule as an operator stores it (DecimalField with 2 places)
    campaign = Campaign(
        discount_type=kind, discount_value=D(value).quantize(D("0.01")),
        max_discount=None if cap is None else D(cap).quantize(D("0.01")), currency=currency,
    )

    # when
    result = campaign.discount_for(parse_amount(amount, currency))

    # then
    _check(result, discount, payable)


def test_money_text_rounds_half_up_to_the_minor_unit() -> None:
    assert money_text(D("4.9995"), "CNY") == "5.00"
    assert money_text(D("0.015"), "CNY") == "0.02"
    assert money_text(D("149.85"), "JPY") == "150"
    assert money_text(D("2.5"), "JPY") == "3"


# --- the minimum spend, through the service -------------------------------------------------------------


@pytest.mark.django_db
def test_an_order_of_exactly_the_minimum_spend_redeems(live_campaign) -> None:
    # given: spend 300.00, get 50.00 off
    coupon = issued_coupon(live_campaign, "alice", min_spend=D("300.00"), discount_value=D("50.00"))

    # when
    outcome = coupon_redeem(user_id="alice", code=coupon.code, order=Order("A-1", D("300.00"), "CNY"))

    # then
    assert outcome.body() == {"code": 0, "status": "redeemed", "discount": "50.00", "payable": "250.00"}
    assert row_of(coupon) == (CouponStatus.REDEEMED, 2, "A-1")
    assert events_of(coupon) == [(CouponEventType.ISSUED, "drain"), (CouponEventType.REDEEMED, "api")]
    assert_rows_agree_with_events()


@pytest.mark.django_db
def test_an_order_one_cent_under_the_minimum_spend_is_refused_and_changes_nothing(live_campaign) -> None:
    # given
    coupon = issued_coupon(live_campaign, "alice", min_spend=D("300.00"), discount_value=D("50.00"))

    # when
    outcome = coupon_redeem(user_id="alice", code=coupon.code, order=Order("A-1", D("299.99"), "CNY"))

    # then
    assert (outcome.code, outcome.status) == (12, "min_spend_not_met")
    assert row_of(coupon) == (CouponStatus.ACTIVE, 1, None)
    assert events_of(coupon) == [(CouponEventType.ISSUED, "drain")]
    assert_rows_agree_with_events()


@pytest.mark.django_db
def test_a_jpy_coupon_redeems_in_whole_yen(live_campaign) -> None:
    # given: 15 % off, JPY, no minimum
    coupon = issued_coupon(
        live_campaign, "alice", currency="JPY", discount_type="percent", discount_value=D("15"), min_spend=D("0"),
    )

    # when
    outcome = coupon_redeem(user_id="alice", code=coupon.code, order=Order("J-1", parse_amount("999", "JPY"), "JPY"))

    # then
    assert outcome.body() == {"code": 0, "status": "redeemed", "discount": "150", "payable": "849"}
    coupon.refresh_from_db()
    assert (coupon.status, coupon.discount, coupon.order_amount) == (CouponStatus.REDEEMED, D("150"), D("999"))
    assert_rows_agree_with_events()


# --- what a client may send ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "currency", "expected"),
    [
        ("350.00", "CNY", "350.00"), ("350", "CNY", "350.00"), ("0.5", "USD", "0.50"), ("0.01", "EUR", "0.01"),
        ("999999999999.99", "CNY", "999999999999.99"), ("1" + "0" * 11, "CNY", "100000000000.00"),
        ("999", "JPY", "999"), ("1", "JPY", "1"),
    ],
)
def test_a_plain_positive_decimal_string_is_an_amount_in_the_minor_unit(text, currency, expected) -> None:
    assert str(parse_amount(text, currency)) == expected


@pytest.mark.parametrize(
    ("value", "currency"),
    [
        pytest.param("-1", "CNY", id="negative"),
        pytest.param("-0.01", "CNY", id="negative-cent"),
        pytest.param("+1", "CNY", id="plus-sign"),
        pytest.param("1e3", "CNY", id="exponent"),
        pytest.param("1E3", "CNY", id="exponent-capital"),
        pytest.param("0.001", "CNY", id="three-decimals"),
        pytest.param("NaN", "CNY", id="nan"),
        pytest.param("Infinity", "CNY", id="infinity"),
        pytest.param("", "CNY", id="empty"),
        pytest.param(" 1.00", "CNY", id="leading-space"),
        pytest.param("1.00 ", "CNY", id="trailing-space"),
        pytest.param("1.00\n", "CNY", id="trailing-newline"),
        pytest.param("1,00", "CNY", id="decimal-comma"),
        pytest.param("1,000.00", "CNY", id="thousands-separator"),
        pytest.param("0", "CNY", id="zero"),
        pytest.param("0.00", "CNY", id="zero-cents"),
        pytest.param("01", "CNY", id="leading-zero"),
        pytest.param(".5", "CNY", id="no-integer-part"),
        pytest.param("1.", "CNY", id="no-decimals-after-point"),
        pytest.param("1" + "0" * 12, "CNY", id="13-digits"),
        pytest.param("1" + "0" * 13, "CNY", id="huge"),
        pytest.param("\u0661\u0660", "CNY", id="arabic-indic-digits"),
        pytest.param("\uff11", "CNY", id="fullwidth-digit"),
        pytest.param("999.5", "JPY", id="jpy-with-decimals"),
        pytest.param("999.00", "JPY", id="jpy-with-zero-decimals"),
        pytest.param(350, "CNY", id="int"),
        pytest.param(350.0, "CNY", id="float"),
        pytest.param(None, "CNY", id="none"),
        pytest.param(True, "CNY", id="bool"),
        pytest.param(D("350.00"), "CNY", id="decimal-object"),
        pytest.param(["350.00"], "CNY", id="list"),
    ],
)
def test_a_malformed_amount_is_refused(value, currency) -> None:
    with pytest.raises(InvalidAmount):
        parse_amount(value, currency)


@pytest.mark.parametrize("currency", ["CNY", "USD", "EUR", "JPY", "GBP", "KRW"])
def test_a_known_currency_in_capitals_is_accepted(currency) -> None:
    assert parse_currency(currency) == currency


@pytest.mark.parametrize(
    "value",
    ["XXX", "cny", "Cny", "CNY ", " CNY", "", "CN", "CNYY", "\uff23NY", None, 156, True, ["CNY"]],
    ids=["unknown", "lowercase", "mixed-case", "trailing-space", "leading-space", "empty", "two-letters",
         "four-letters", "fullwidth", "none", "number", "bool", "list"],
)
def test_an_unknown_or_malformed_currency_is_refused(value) -> None:
    with pytest.raises(InvalidAmount):
        parse_currency(value)


# --- what an operator may define --------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("fields", "field_in_error"),
    [
        pytest.param({"discount_type": "percent", "discount_value": D("100.01")}, "discount_value",
                     id="percent-over-100"),
        pytest.param({"discount_type": "percent", "discount_value": D("150")}, "discount_value", id="percent-150"),
        pytest.param({"discount_type": "fixed", "max_discount": D("10.00")}, "max_discount", id="cap-on-fixed"),
        pytest.param({"currency": "XXX"}, "currency", id="unknown-currency"),
        pytest.param({"currency": "cny"}, "currency", id="lowercase-currency"),
        pytest.param({"currency": "JPY", "discount_value": D("500"), "min_spend": D("100.50")}, "min_spend",
                     id="jpy-min-spend-with-decimals"),
        pytest.param({"currency": "JPY", "discount_value": D("500.50"), "min_spend": D("1000")}, "discount_value",
                     id="jpy-fixed-discount-with-decimals"),
        pytest.param({"currency": "JPY", "discount_type": "percent", "discount_value": D("15"),
                      "max_discount": D("100.50"), "min_spend": D("0")}, "max_discount", id="jpy-cap-with-decimals"),
    ],
)
def test_full_clean_refuses_a_rule_that_cannot_be_applied(fields, field_in_error) -> None:
    # given
    campaign = CampaignFactory.build(**fields)

    # when
    with pytest.raises(ValidationError) as refused:
        campaign.full_clean()

    # then
    assert field_in_error in refused.value.message_dict


@pytest.mark.django_db
@pytest.mark.parametrize(
    "fields",
    [
        pytest.param({}, id="fixed-cny"),
        pytest.param({"discount_type": "percent", "discount_value": D("100"), "max_discount": D("20.00")},
                     id="percent-100-with-cap"),
        pytest.param({"currency": "JPY", "discount_value": D("500"), "min_spend": D("3000")}, id="jpy-whole-yen"),
    ],
)
def test_full_clean_accepts_a_sound_rule(fields) -> None:
    CampaignFactory.build(**fields).full_clean()


@pytest.mark.parametrize("value", ["1" + "0" * 12, "1" + "0" * 12 + ".00", "9" * 30])
def test_an_amount_of_more_than_12_whole_digits_is_refused_as_too_long(value) -> None:
    # (it was refused as malformed: "a decimal string such as 350.00")
    with pytest.raises(InvalidAmount, match="at most 12 digits before the decimal point"):
        parse_amount(value, "CNY")


@pytest.mark.django_db
@pytest.mark.parametrize("kind, value, shown", [("fixed", D("500"), "500"), ("percent", D("15"), "15.00")])
def test_a_jpy_coupon_and_its_campaign_show_their_amounts_in_whole_yen(client, live_campaign, kind, value,
                                                                        shown) -> None:
    # Given a JPY coupon (500 yen off, or 15 %, from 1,000 yen), redeemed for a 1,200-yen order
    coupon = issued_coupon(live_campaign, "alice", currency="JPY", discount_type=kind, discount_value=value,
                           min_spend=D("1000"))
    redeemed = coupon_redeem(user_id="alice", code=coupon.code, order=Order("J-1", parse_amount("1200", "JPY"), "JPY"))

    # When the shopper lists her coupons and the storefront reads the campaign
    mine = client.get("/api/v1/me/coupons", **shopper_headers("alice")).json()["results"][0]
    campaign = client.get(f"/api/v1/campaigns/{coupon.campaign_id}").json()

    # Then every amount is in whole yen, as the redemption answered it (they showed "500.00", "1000.00");
    # a percentage stays a percentage
    assert (mine["discount_value"], mine["min_spend"], mine["discount"]) == (shown, "1000",
                                                                           redeemed.body()["discount"])
    assert (campaign["discount_value"], campaign["min_spend"]) == (shown, "1000")
    assert "." not in redeemed.body()["discount"]
