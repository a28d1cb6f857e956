"""POST /api/v1/coupons/{code}/reserve|confirm|redeem|release through HTTP: every outcome and the state behind it.

Each test asserts the answer and what PostgreSQL holds afterwards (the coupon row, its events, the stored
idempotent answers), and that every row still equals the fold of its events.
"""
from __future__ import annotations

import json
from decimal import Decimal

import pytest
from django.utils import timezone

from coupons.codes import new_codes
from coupons.models import CouponEvent, CouponEventType, CouponStatus, IdempotencyRecord

from .helpers import assert_rows_agree_with_events, events_of, issued_coupon, row_of
from .use_helpers import (
    ISSUED,
    ORDER,
    REDEEMED,
    answer,
    answers_not_exceptions,  # noqa: F401  (an autouse fixture)
    assert_contract_error,
    reserved,
    state,
    use,
)

pytestmark = pytest.mark.django_db


# --- redeem ---------------------------------------------------------------------------------------------


def test_redeem_answers_the_discount_and_marks_the_coupon_redeemed_with_one_event(client, live_campaign) -> None:
    # given: spend 300.00, get 50.00 off
    coupon = issued_coupon(live_campaign, "alice")

    # when
    before = timezone.now()
    response = use(client, coupon.code, "redeem", key="k1")

    # then
    assert response.status_code == 200
    assert response.json() == {"code": 0, "status": "redeemed", "discount": "50.00", "payable": "300.00"}
    assert "Idempotent-Replayed" not in response
    coupon.refresh_from_db()
    assert (coupon.status, coupon.version, coupon.order_id) == (CouponStatus.REDEEMED, 2, "A-1")
    assert (coupon.order_amount, coupon.discount, coupon.hold_until) == (Decimal("350.00"), Decimal("50.00"), None)
    assert coupon.redeemed_at is not None and coupon.redeemed_at >= before
    assert events_of(coupon) == [ISSUED, REDEEMED]
    event = CouponEvent.objects.get(coupon=coupon, type=CouponEventType.REDEEMED)
    assert event.data == {"order_id": "A-1", "order_amount": "350.00", "currency": "CNY", "discount": "50.00",
                          "payable": "300.00"}
    record = IdempotencyRecord.objects.get(user_id="alice", key="k1")
    assert (record.endpoint, record.in_flight, record.response_status) == (
        f"POST /api/v1/coupons/{coupon.code}/redeem", False, 200)
    assert json.loads(record.response_body) == response.json()
    assert_rows_agree_with_events()


def test_an_order_of_the_largest_amount_redeems_without_overflow(client, live_campaign) -> None:
    # given
    coupon = issued_coupon(live_campaign, "alice")

    # when
    response = use(client, coupon.code, "redeem", body={**ORDER, "order_amount": "999999999999.99"})

    # then
    assert response.json() == {"code": 0, "status": "redeemed", "discount": "50.00", "payable": "999999999949.99"}
    assert row_of(coupon) == (CouponStatus.REDEEMED, 2, "A-1")
    assert_rows_agree_with_events()


def test_an_order_smaller_than_the_discount_pays_nothing_and_never_a_negative_amount(client, live_campaign) -> None:
    # given: 50.00 off, no minimum spend
    coupon = issued_coupon(live_campaign, "alice", min_spend=Decimal("0"))

    # when
    response = use(client, coupon.code, "redeem", body={**ORDER, "order_amount": "30.00"})

    # then
    assert response.json() == {"code": 0, "status": "redeemed", "discount": "30.00", "payable": "0.00"}
    coupon.refresh_from_db()
    assert (coupon.discount, coupon.order_amount) == (Decimal("30.00"), Decimal("30.00"))


def test_a_jpy_coupon_redeems_in_whole_yen_and_refuses_decimals(client, live_campaign) -> None:
    # given: 15 % off in JPY
    coupon = issued_coupon(live_campaign, "alice", currency="JPY", discount_type="percent",
                           discount_value=Decimal("15"), min_spend=Decimal("0"))
    jpy = {"order_id": "J-1", "currency": "JPY"}

    # when
    with_decimals = use(client, coupon.code, "redeem", body={**jpy, "order_amount": "999.00"})
    whole = use(client, coupon.code, "redeem", body={**jpy, "order_amount": "999"})

    # then
    assert_contract_error(with_decimals, 400, "invalid_request")
    assert whole.json() == {"code": 0, "status": "redeemed", "discount": "150", "payable": "849"}
    assert row_of(coupon) == (CouponStatus.REDEEMED, 2, "J-1")


def test_an_order_one_cent_under_the_minimum_spend_is_refused_through_http(client, live_campaign) -> None:
    # given
    coupon = issued_coupon(live_campaign, "alice")

    # when
    under = use(client, coupon.code, "redeem", body={**ORDER, "order_amount": "299.99"})
    exact = use(client, coupon.code, "redeem", body={**ORDER, "order_amount": "300.00"})

    # then
    assert answer(under) == (200, 12, "min_spend_not_met")
    assert exact.json() == {"code": 0, "status": "redeemed", "discount": "50.00", "payable": "250.00"}
    assert events_of(coupon) == [ISSUED, REDEEMED]
    assert_rows_agree_with_events()


# --- whose coupon, which code ----------------------------------------------------------------------------


@pytest.mark.parametrize("action", ["redeem", "reserve", "confirm", "release"])
def test_someone_elses_code_and_an_unknown_code_get_the_identical_404(client, live_campaign, action) -> None:
    # given
    coupon = issued_coupon(live_campaign, "alice")
    before = state()

    # when
    someone_elses = use(client, coupon.code, action, "bob", key="k")
    unknown = use(client, new_codes(1)[0], action, "bob", key="k")
    not_a_code = use(client, "NOPE", action, "bob", key="k")

    # then
    assert_contract_error(someone_elses, 404, "not_found")
    assert someone_elses.content == unknown.content == not_a_code.content
    assert state() == before


@pytest.mark.parametrize(
    "typed",
    [str.lower, lambda code: code.replace("-", ""), lambda code: code.lower().replace("-", "")],
    ids=["lower-case", "without-dashes", "lower-case-without-dashes"],
)
def test_a_code_typed_in_lower_case_or_without_dashes_still_works(client, live_campaign, typed) -> None:
    # given
    coupon = issued_coupon(live_campaign, "alice")

    # when
    response = use(client, typed(coupon.code), "redeem")

    # then
    assert answer(response) == (200, 0, "redeemed")
    assert row_of(coupon) == (CouponStatus.REDEEMED, 2, "A-1")
    assert_rows_agree_with_events()


def test_the_same_key_with_the_code_typed_differently_is_the_same_request(client, live_campaign) -> None:
    # given
    coupon = issued_coupon(live_campaign, "alice")
    first = use(client, coupon.code, "redeem", key="k")

    # when
    again = use(client, coupon.code.lower().replace("-", ""), "redeem", key="k")

    # then
    assert again.content == first.content and again["Idempotent-Replayed"] == "true"
    assert events_of(coupon) == [ISSUED, REDEEMED]


# --- malformed requests: 400 and nothing changed ---------------------------------------------------------


@pytest.mark.parametrize("action", ["redeem", "reserve"])
def test_redeem_and_reserve_without_an_idempotency_key_are_refused_and_change_nothing(
    client, live_campaign, action
) -> None:
    # given
    coupon = issued_coupon(live_campaign, "alice")
    before = state()

    # when
    response = use(client, coupon.code, action, key=None)

    # then
    assert_contract_error(response, 400, "invalid_request")
    assert state() == before and row_of(coupon) == (CouponStatus.ACTIVE, 1, None)


@pytest.mark.parametrize("action", ["redeem", "reserve", "confirm", "release"])
@pytest.mark.parametrize("key", ["", "k" * 256, "cl\u00e9", "tab\tkey", "\x7f"],
                         ids=["empty", "256-chars", "non-ascii", "tab", "del"])
def test_a_malformed_idempotency_key_is_refused_and_changes_nothing(client, live_campaign, action, key) -> None:
    # given
    coupon = issued_coupon(live_campaign, "alice")
    if action in ("confirm", "release"):
        reserved(client, coupon)
    before = state()

    # when
    response = use(client, coupon.code, action, key=key)

    # then
    assert_contract_error(response, 400, "invalid_request")
    assert state() == before


def test_an_idempotency_key_of_255_printable_characters_is_accepted(client, live_campaign) -> None:
    coupon = issued_coupon(live_campaign, "alice")
    assert answer(use(client, coupon.code, "redeem", key="~ " + "k" * 253)) == (200, 0, "redeemed")


BAD_ORDER_BODIES = [
    pytest.param({k: v for k, v in ORDER.items() if k != "order_id"}, id="order_id-missing"),
    *[pytest.param({**ORDER, "order_id": v}, id=f"order_id-{name}") for name, v in [
        ("empty", ""), ("space", "A 1"), ("65-chars", "x" * 65), ("zero", 0), ("negative", -1), ("bool", True),
        ("float", 1.5), ("null", None), ("list", ["A-1"]), ("object", {"id": 1}), ("19-digits", 10**18),
        ("non-ascii", "A-\u00e91"), ("slash", "A/1"), ("newline", "A-1\n"),
    ]],
    pytest.param({k: v for k, v in ORDER.items() if k != "order_amount"}, id="amount-missing"),
    *[pytest.param({**ORDER, "order_amount": v}, id=f"amount-{name}") for name, v in [
        ("negative", "-1"), ("exponent", "1e3"), ("three-decimals", "0.001"), ("nan", "NaN"), ("empty", ""),
        ("leading-space", " 1.00"), ("comma", "1,00"), ("zero", "0"), ("zero-cents", "0.00"),
        ("huge", "1" + "0" * 13), ("int", 350), ("float", 350.0), ("null", None), ("bool", True),
        ("infinity", "Infinity"),
    ]],
    pytest.param({k: v for k, v in ORDER.items() if k != "currency"}, id="currency-missing"),
    *[pytest.param({**ORDER, "currency": v}, id=f"currency-{name}") for name, v in [
        ("lowercase", "cny"), ("unknown", "XXX"), ("null", None), ("number", 156), ("padded", " CNY"),
        ("other-than-the-coupons", "USD"), ("another-zero-decimal", "JPY"),
    ]],
]


@pytest.mark.parametrize("action", ["redeem", "reserve"])
@pytest.mark.parametrize("body", BAD_ORDER_BODIES)
def test_a_malformed_order_is_refused_and_changes_nothing(client, live_campaign, action, body) -> None:
    # given
    coupon = issued_coupon(live_campaign, "alice")
    before = state()

    # when
    response = use(client, coupon.code, action, body=body, key="k")

    # then
    assert_contract_error(response, 400, "invalid_request")
    assert state() == before


@pytest.mark.parametrize("action", ["redeem", "reserve", "confirm", "release"])
@pytest.mark.parametrize(
    "raw", ["", "{", "[]", '"A-1"', "null", "1", '{"order_id": "A-1",}'],
    ids=["empty", "truncated", "array", "string", "null", "number", "trailing-comma"],
)
def test_a_body_that_is_not_a_json_object_is_refused_and_changes_nothing(client, live_campaign, action, raw) -> None:
    # given
    coupon = issued_coupon(live_campaign, "alice")
    before = state()

    # when
    response = use(client, coupon.code, action, body=raw, key="k")

    # then
    assert_contract_error(response, 400, "invalid_request")
    assert state() == before


@pytest.mark.parametrize("action", ["confirm", "release"])
@pytest.mark.parametrize("order_id", ["", "x" * 65, 0, True, None, 1.5, "A 1"],
                         ids=["empty", "65-chars", "zero", "bool", "null", "float", "space"])
def test_confirm_and_release_with_a_bad_order_id_are_refused_and_change_nothing(
    client, live_campaign, action, order_id
) -> None:
    # given: held for A-1
    coupon = issued_coupon(live_campaign, "alice")
    reserved(client, coupon)
    before = state()

    # when
    response = use(client, coupon.code, action, body={"order_id": order_id})

    # then
    assert_contract_error(response, 400, "invalid_request")
    assert state() == before and row_of(coupon) == (CouponStatus.HELD, 2, "A-1")


@pytest.mark.parametrize("hold_seconds", [0, -1, 86401, "900", True, False, 1.5, 900.0, None, [900]],
                         ids=["zero", "negative", "over-a-day", "string", "true", "false", "fraction", "float",
                              "null", "list"])
def test_a_hold_outside_1_to_86400_whole_seconds_is_refused_and_changes_nothing(
    client, live_campaign, hold_seconds
) -> None:
    # given
    coupon = issued_coupon(live_campaign, "alice")
    before = state()

    # when
    response = use(client, coupon.code, "reserve", body={**ORDER, "hold_seconds": hold_seconds})

    # then
    assert_contract_error(response, 400, "invalid_request")
    assert state() == before


