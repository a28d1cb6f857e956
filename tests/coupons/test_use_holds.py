"""POST /api/v1/coupons/{code}/reserve, confirm and release through HTTP, refusals of a coupon in another state,
and idempotency: every outcome and the state behind it (helpers: use_helpers.py)."""
from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from django.conf import settings
from django.db import connections, transaction
from django.test import Client
from django.utils import timezone

from coupons.models import CouponEvent, CouponEventType, CouponStatus, IdempotencyRecord
from coupons.services import coupon_revoke

from .helpers import assert_rows_agree_with_events, events_of, issued_coupon, row_of
from .use_helpers import (
    ISSUED,
    ORDER,
    REDEEMED,
    RELEASED,
    RESERVED,
    answer,
    answers_not_exceptions,  # noqa: F401  (an autouse fixture)
    assert_contract_error,
    move,
    reserved,
    state,
    use,
)

pytestmark = pytest.mark.django_db


# --- reserve, confirm ------------------------------------------------------------------------------------


@pytest.mark.parametrize("hold_seconds", [1, 900, 86400, None], ids=["one-second", "900", "a-day", "default"])
def test_reserve_holds_the_coupon_until_now_plus_hold_seconds(client, live_campaign, hold_seconds) -> None:
    # given
    coupon = issued_coupon(live_campaign, "alice")
    body = dict(ORDER) if hold_seconds is None else {**ORDER, "hold_seconds": hold_seconds}
    seconds = hold_seconds or 900

    # when
    before = timezone.now()
    response = use(client, coupon.code, "reserve", body=body)
    after = timezone.now()

    # then
    payload = response.json()
    assert set(payload) == {"code", "status", "discount", "payable", "hold_until"}
    assert (payload["code"], payload["status"], payload["discount"], payload["payable"]) == (
        0, "reserved", "50.00", "300.00")
    hold_until = datetime.fromisoformat(payload["hold_until"])
    assert hold_until.utcoffset() is not None
    hold = timedelta(seconds=seconds)
    assert before.replace(microsecond=0) + hold <= hold_until <= after + hold
    coupon.refresh_from_db()
    assert (coupon.status, coupon.version, coupon.order_id, coupon.hold_until) == (
        CouponStatus.HELD, 2, "A-1", hold_until)
    assert (coupon.discount, coupon.order_amount, coupon.redeemed_at) == (Decimal("50.00"), Decimal("350.00"), None)
    assert events_of(coupon) == [ISSUED, RESERVED]
    assert_rows_agree_with_events()


@pytest.mark.parametrize("action", ["reserve", "redeem"])
def test_another_order_gets_on_hold_while_the_coupon_is_held(client, live_campaign, action) -> None:
    # given: held for A-1
    coupon = issued_coupon(live_campaign, "alice")
    reserved(client, coupon, "A-1")
    before = state()

    # when
    response = use(client, coupon.code, action, body={**ORDER, "order_id": "B-2"})

    # then
    assert answer(response) == (200, 16, "on_hold")
    assert state()[:2] == before[:2] and row_of(coupon) == (CouponStatus.HELD, 2, "A-1")


def test_reserving_again_for_the_holding_order_answers_the_same_hold(client, live_campaign) -> None:
    # given
    coupon = issued_coupon(live_campaign, "alice")
    first = reserved(client, coupon, "A-1")

    # when
    again = use(client, coupon.code, "reserve", body={**ORDER, "hold_seconds": 900})

    # then
    assert again.json() == first.json() and "Idempotent-Replayed" not in again
    assert row_of(coupon) == (CouponStatus.HELD, 2, "A-1") and events_of(coupon) == [ISSUED, RESERVED]


def test_confirm_by_the_holding_order_redeems_the_coupon(client, live_campaign) -> None:
    # given
    coupon = issued_coupon(live_campaign, "alice")
    reserved(client, coupon, "A-1")

    # when
    response = use(client, coupon.code, "confirm", body={"order_id": "A-1"}, key=None)

    # then
    assert response.json() == {"code": 0, "status": "redeemed", "discount": "50.00", "payable": "300.00"}
    coupon.refresh_from_db()
    assert (coupon.status, coupon.version, coupon.order_id, coupon.hold_until) == (
        CouponStatus.REDEEMED, 3, "A-1", None)
    assert coupon.redeemed_at is not None
    assert events_of(coupon) == [ISSUED, RESERVED, REDEEMED]
    assert CouponEvent.objects.get(coupon=coupon, type=CouponEventType.REDEEMED).data["confirmed"] is True
    assert_rows_agree_with_events()


def test_confirm_by_another_order_while_held_is_on_hold(client, live_campaign) -> None:
    # given
    coupon = issued_coupon(live_campaign, "alice")
    reserved(client, coupon, "A-1")

    # when
    response = use(client, coupon.code, "confirm", body={"order_id": "B-2"})

    # then
    assert answer(response) == (200, 16, "on_hold")
    assert row_of(coupon) == (CouponStatus.HELD, 2, "A-1") and events_of(coupon) == [ISSUED, RESERVED]


def test_confirm_after_the_hold_lapsed_is_refused_and_frees_the_coupon_for_another_order(
    client, live_campaign
) -> None:
    # given: held for A-1, and the hold ran out a second ago
    coupon = issued_coupon(live_campaign, "alice")
    reserved(client, coupon, "A-1")
    move(coupon, hold_until=timezone.now() - timedelta(seconds=1))

    # when
    response = use(client, coupon.code, "confirm", body={"order_id": "A-1"})

    # then
    assert answer(response) == (200, 17, "hold_lapsed")
    coupon.refresh_from_db()
    assert (coupon.status, coupon.version, coupon.order_id, coupon.hold_until, coupon.discount) == (
        CouponStatus.ACTIVE, 3, None, None, None)
    assert events_of(coupon) == [ISSUED, RESERVED, (CouponEventType.HOLD_LAPSED, "lazy")]
    assert CouponEvent.objects.get(coupon=coupon, type=CouponEventType.HOLD_LAPSED).data["order_id"] == "A-1"
    assert_rows_agree_with_events()

    # and another order can now reserve it, after which A-1's confirm meets B-2's hold
    assert answer(reserved(client, coupon, "B-2")) == (200, 0, "reserved")
    assert answer(use(client, coupon.code, "confirm", body={"order_id": "A-1"})) == (200, 16, "on_hold")
    assert row_of(coupon) == (CouponStatus.HELD, 4, "B-2")
    assert_rows_agree_with_events()


def test_another_orders_redeem_after_the_hold_lapsed_wins(client, live_campaign) -> None:
    # given
    coupon = issued_coupon(live_campaign, "alice")
    reserved(client, coupon, "A-1")
    move(coupon, hold_until=timezone.now() - timedelta(seconds=1))

    # when
    response = use(client, coupon.code, "redeem", body={**ORDER, "order_id": "B-2"})

    # then
    assert answer(response) == (200, 0, "redeemed")
    assert row_of(coupon) == (CouponStatus.REDEEMED, 4, "B-2")
    assert events_of(coupon) == [ISSUED, RESERVED, (CouponEventType.HOLD_LAPSED, "lazy"), REDEEMED]
    assert answer(use(client, coupon.code, "confirm", body={"order_id": "A-1"})) == (200, 11, "already_redeemed")
    assert_rows_agree_with_events()


def test_confirm_without_any_hold_is_not_held_and_changes_nothing(client, live_campaign) -> None:
    # given
    coupon = issued_coupon(live_campaign, "alice")
    before = state()

    # when
    response = use(client, coupon.code, "confirm", body={"order_id": "A-1"}, key=None)

    # then
    assert answer(response) == (200, 18, "not_held")
    assert state() == before


# --- release ---------------------------------------------------------------------------------------------


def test_release_of_a_held_coupon_by_its_order_makes_it_active_again(client, live_campaign) -> None:
    # given
    coupon = issued_coupon(live_campaign, "alice")
    reserved(client, coupon, "A-1")

    # when
    response = use(client, coupon.code, "release", body={"order_id": "A-1"}, key=None)

    # then
    assert response.json() == {"code": 0, "status": "released", "coupon_status": "active"}
    coupon.refresh_from_db()
    assert (coupon.status, coupon.version, coupon.order_id, coupon.hold_until, coupon.discount) == (
        CouponStatus.ACTIVE, 3, None, None, None)
    assert events_of(coupon) == [ISSUED, RESERVED, RELEASED]
    assert_rows_agree_with_events()


def test_release_of_a_redeemed_coupon_by_its_order_makes_it_usable_by_another_order(client, live_campaign) -> None:
    # given
    coupon = issued_coupon(live_campaign, "alice")
    assert answer(use(client, coupon.code, "redeem")) == (200, 0, "redeemed")

    # when
    response = use(client, coupon.code, "release", body={"order_id": "A-1"})

    # then
    assert response.json() == {"code": 0, "status": "released", "coupon_status": "active"}
    coupon.refresh_from_db()
    assert (coupon.status, coupon.version, coupon.order_id, coupon.redeemed_at, coupon.order_amount) == (
        CouponStatus.ACTIVE, 3, None, None, None)
    assert events_of(coupon) == [ISSUED, REDEEMED, RELEASED]
    assert CouponEvent.objects.get(coupon=coupon, type=CouponEventType.RELEASED).data == {
        "order_id": "A-1", "was": "redeemed"}
    assert_rows_agree_with_events()

    # and another order may use it now
    assert answer(use(client, coupon.code, "redeem", body={**ORDER, "order_id": "B-2"})) == (200, 0, "redeemed")
    assert row_of(coupon) == (CouponStatus.REDEEMED, 4, "B-2")
    assert_rows_agree_with_events()


def test_release_of_a_redeemed_coupon_past_its_validity_leaves_it_expired_with_both_events(
    client, live_campaign
) -> None:
    # given: redeemed by A-1, and its validity has ended since
    coupon = issued_coupon(live_campaign, "alice")
    assert answer(use(client, coupon.code, "redeem")) == (200, 0, "redeemed")
    past = timezone.now().replace(microsecond=0) - timedelta(seconds=2)
    move(coupon, valid_from=past - timedelta(days=1), expires_at=past)

    # when
    response = use(client, coupon.code, "release", body={"order_id": "A-1"})

    # then
    assert response.json() == {"code": 0, "status": "released", "coupon_status": "expired"}
    assert row_of(coupon) == (CouponStatus.EXPIRED, 4, None)
    assert events_of(coupon) == [ISSUED, REDEEMED, RELEASED, (CouponEventType.EXPIRED, "lazy")]
    assert_rows_agree_with_events()


@pytest.mark.parametrize("first", ["reserve", "redeem"])
def test_release_by_another_order_changes_nothing(client, live_campaign, first) -> None:
    # given: held or redeemed by A-1
    coupon = issued_coupon(live_campaign, "alice")
    assert answer(use(client, coupon.code, first)) == (200, 0, "reserved" if first == "reserve" else "redeemed")
    before = state()
    status_before = row_of(coupon)[0]

    # when
    response = use(client, coupon.code, "release", body={"order_id": "B-2"}, key=None)

    # then
    assert response.json() == {"code": 0, "status": "released", "coupon_status": status_before}
    assert state() == before and row_of(coupon) == (status_before, 2, "A-1")
    assert_rows_agree_with_events()


def test_release_of_a_coupon_never_used_changes_nothing(client, live_campaign) -> None:
    # given
    coupon = issued_coupon(live_campaign, "alice")
    before = state()

    # when
    response = use(client, coupon.code, "release", body={"order_id": "A-1"}, key=None)

    # then
    assert response.json() == {"code": 0, "status": "released", "coupon_status": "active"}
    assert state() == before


def test_release_twice_is_idempotent(client, live_campaign) -> None:
    # given: held for A-1, released once
    coupon = issued_coupon(live_campaign, "alice")
    reserved(client, coupon, "A-1")
    first = use(client, coupon.code, "release", body={"order_id": "A-1"})

    # when: released again, with another key and with none
    again = use(client, coupon.code, "release", body={"order_id": "A-1"})
    keyless = use(client, coupon.code, "release", body={"order_id": "A-1"}, key=None)

    # then
    assert first.json() == again.json() == keyless.json() == {
        "code": 0, "status": "released", "coupon_status": "active"}
    assert row_of(coupon) == (CouponStatus.ACTIVE, 3, None)
    assert events_of(coupon) == [ISSUED, RESERVED, RELEASED]
    assert_rows_agree_with_events()


# --- refusals of a coupon in another state -----------------------------------------------------------------


def test_a_coupon_redeemed_by_another_order_is_already_redeemed(client, live_campaign) -> None:
    # given
    coupon = issued_coupon(live_campaign, "alice")
    assert answer(use(client, coupon.code, "redeem")) == (200, 0, "redeemed")
    before = state()

    # when
    redeem = use(client, coupon.code, "redeem", body={**ORDER, "order_id": "B-2"})
    reserve = use(client, coupon.code, "reserve", body={**ORDER, "order_id": "B-2"})
    confirm = use(client, coupon.code, "confirm", body={"order_id": "B-2"})

    # then
    assert [answer(r) for r in (redeem, reserve, confirm)] == [(200, 11, "already_redeemed")] * 3
    assert state()[:2] == before[:2] and row_of(coupon) == (CouponStatus.REDEEMED, 2, "A-1")


def test_redeeming_again_for_the_same_order_answers_the_same_redemption_without_a_second_event(
    client, live_campaign
) -> None:
    # given
    coupon = issued_coupon(live_campaign, "alice")
    first = use(client, coupon.code, "redeem")

    # when: a retry with a new key
    again = use(client, coupon.code, "redeem")

    # then
    assert again.json() == first.json() == {"code": 0, "status": "redeemed", "discount": "50.00", "payable": "300.00"}
    assert row_of(coupon) == (CouponStatus.REDEEMED, 2, "A-1") and events_of(coupon) == [ISSUED, REDEEMED]


def test_a_revoked_coupon_is_refused_as_revoked(client, live_campaign) -> None:
    # given
    coupon = issued_coupon(live_campaign, "alice")
    with transaction.atomic():
        assert coupon_revoke(coupon=coupon, source="admin", reason="test").status == "revoked"
    before = state()

    # when
    answers = [use(client, coupon.code, action) for action in ("redeem", "reserve", "confirm")]

    # then
    assert [answer(r) for r in answers] == [(200, 14, "revoked")] * 3
    assert state()[:2] == before[:2] and row_of(coupon) == (CouponStatus.REVOKED, 2, None)
    assert_rows_agree_with_events()


@pytest.mark.parametrize("action", ["redeem", "reserve"])
def test_an_expired_coupon_is_refused_and_expired_on_the_spot_with_its_event(client, live_campaign, action) -> None:
    # given
    coupon = issued_coupon(live_campaign, "alice")
    past = timezone.now().replace(microsecond=0) - timedelta(seconds=1)
    move(coupon, valid_from=past - timedelta(days=1), expires_at=past)

    # when
    response = use(client, coupon.code, action)

    # then
    assert answer(response) == (200, 10, "expired")
    assert row_of(coupon) == (CouponStatus.EXPIRED, 2, None)
    assert events_of(coupon) == [ISSUED, (CouponEventType.EXPIRED, "lazy")]
    assert_rows_agree_with_events()


def test_a_coupon_not_yet_valid_is_refused_and_changes_nothing(client, live_campaign) -> None:
    # given
    coupon = issued_coupon(live_campaign, "alice")
    move(coupon, valid_from=timezone.now() + timedelta(minutes=5))
    before = state()

    # when
    response = use(client, coupon.code, "redeem")

    # then
    assert answer(response) == (200, 13, "not_yet_valid")
    assert state()[:2] == before[:2]


@pytest.mark.parametrize("action", ["redeem", "reserve"])
def test_a_new_shoppers_coupon_is_refused_to_a_shopper_who_redeemed_before(client, live_campaign, action) -> None:
    # given: carol redeemed a coupon of another campaign
    earlier = issued_coupon(live_campaign, "carol")
    assert answer(use(client, earlier.code, "redeem", "carol", body={**ORDER, "order_id": "C-0"})) == (
        200, 0, "redeemed")
    coupon = issued_coupon(live_campaign, "carol", audience="new")
    before = state()

    # when
    response = use(client, coupon.code, action, "carol")

    # then
    assert answer(response) == (200, 15, "not_eligible")
    assert state()[:2] == before[:2] and row_of(coupon) == (CouponStatus.ACTIVE, 1, None)


@pytest.mark.parametrize("action", ["redeem", "reserve"])
def test_a_new_shoppers_coupon_is_accepted_for_a_new_shopper(client, live_campaign, action) -> None:
    # given: dave holds an unused coupon elsewhere but never redeemed one
    issued_coupon(live_campaign, "dave")
    coupon = issued_coupon(live_campaign, "dave", audience="new")

    # when
    response = use(client, coupon.code, action, "dave")

    # then
    assert answer(response) == (200, 0, "redeemed" if action == "redeem" else "reserved")
    assert row_of(coupon)[:2] == (CouponStatus.REDEEMED if action == "redeem" else CouponStatus.HELD, 2)
    assert_rows_agree_with_events()


# --- idempotency -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("action", ["redeem", "reserve"])
def test_the_same_key_and_request_replay_the_first_answer_byte_for_byte(client, live_campaign, action) -> None:
    # given
    coupon = issued_coupon(live_campaign, "alice")
    first = use(client, coupon.code, action, key="k")
    after_first = state()

    # when
    again = use(client, coupon.code, action, key="k")

    # then
    assert again.status_code == 200 and again.content == first.content
    assert again["Idempotent-Replayed"] == "true" and "Idempotent-Replayed" not in first
    assert state() == after_first
    assert len(events_of(coupon)) == 2
    assert_rows_agree_with_events()


def test_a_replay_is_the_first_answer_even_after_the_coupon_changed(client, live_campaign) -> None:
    # given: a refusal under the minimum spend, then a redemption with another key
    coupon = issued_coupon(live_campaign, "alice")
    small = {**ORDER, "order_amount": "10.00"}
    refused = use(client, coupon.code, "redeem", body=small, key="k-small")
    assert answer(use(client, coupon.code, "redeem", key="k-full")) == (200, 0, "redeemed")

    # when
    again = use(client, coupon.code, "redeem", body=small, key="k-small")

    # then
    assert answer(refused) == (200, 12, "min_spend_not_met")
    assert again.content == refused.content and again["Idempotent-Replayed"] == "true"
    assert row_of(coupon) == (CouponStatus.REDEEMED, 2, "A-1")


def test_the_same_request_formatted_differently_is_a_replay(client, live_campaign) -> None:
    # given
    coupon = issued_coupon(live_campaign, "alice")
    first = use(client, coupon.code, "redeem", key="k")

    # when: other key order and whitespace
    raw = '{ "currency" : "CNY",\n "order_amount": "350.00", "order_id": "A-1" }'
    again = use(client, coupon.code, "redeem", body=raw, key="k")

    # then
    assert again.content == first.content and again["Idempotent-Replayed"] == "true"


@pytest.mark.parametrize(
    "other",
    [{**ORDER, "order_id": "B-2"}, {**ORDER, "order_amount": "400.00"}],
    ids=["other-order", "other-amount"],
)
def test_the_same_key_with_a_different_request_is_a_mismatch_and_changes_nothing(client, live_campaign, other) -> None:
    # given
    coupon = issued_coupon(live_campaign, "alice")
    use(client, coupon.code, "redeem", key="k")
    before = state()

    # when
    response = use(client, coupon.code, "redeem", body=other, key="k")

    # then
    assert_contract_error(response, 422, "idempotency_mismatch")
    assert state() == before and row_of(coupon) == (CouponStatus.REDEEMED, 2, "A-1")


def test_a_reserve_with_the_same_key_and_another_hold_is_a_mismatch(client, live_campaign) -> None:
    # given
    coupon = issued_coupon(live_campaign, "alice")
    use(client, coupon.code, "reserve", body={**ORDER, "hold_seconds": 900}, key="k")
    before = state()

    # when
    response = use(client, coupon.code, "reserve", body={**ORDER, "hold_seconds": 60}, key="k")

    # then
    assert_contract_error(response, 422, "idempotency_mismatch")
    assert state() == before


def test_keys_are_scoped_per_shopper(client, live_campaign) -> None:
    # given: alice redeemed her coupon with key "k"
    alices = issued_coupon(live_campaign, "alice")
    bobs = issued_coupon(live_campaign, "bob")
    alice_first = use(client, alices.code, "redeem", "alice", key="k")

    # when: bob uses the same key on alice's code, then on his own
    bob_on_alices = use(client, alices.code, "redeem", "bob", key="k")
    bob_on_his = use(client, bobs.code, "redeem", "bob", body={**ORDER, "order_id": "B-1"}, key="k")

    # then: bob never sees alice's stored answer, and his own key is his
    assert_contract_error(bob_on_alices, 404, "not_found")
    assert "Idempotent-Replayed" not in bob_on_alices
    assert answer(bob_on_his) == (200, 0, "redeemed") and "Idempotent-Replayed" not in bob_on_his
    assert answer(alice_first) == (200, 0, "redeemed")
    assert row_of(alices) == (CouponStatus.REDEEMED, 2, "A-1") and row_of(bobs) == (CouponStatus.REDEEMED, 2, "B-1")
    assert sorted(IdempotencyRecord.objects.values_list("user_id", "key")) == [("alice", "k"), ("bob", "k")]
    assert_rows_agree_with_events()


def test_keys_are_scoped_per_endpoint(client, live_campaign) -> None:
    # given: alice reserved coupon one with key "k"
    one = issued_coupon(live_campaign, "alice")
    two = issued_coupon(live_campaign, "alice")
    use(client, one.code, "reserve", key="k")

    # when: the same key and body on redeem of the same coupon, and on redeem of another coupon
    redeem_one = use(client, one.code, "redeem", key="k")
    redeem_two = use(client, two.code, "redeem", body={**ORDER, "order_id": "A-2"}, key="k")

    # then: neither is a replay nor a mismatch
    assert answer(redeem_one) == (200, 0, "redeemed") and "Idempotent-Replayed" not in redeem_one
    assert answer(redeem_two) == (200, 0, "redeemed") and "Idempotent-Replayed" not in redeem_two
    assert events_of(one) == [ISSUED, RESERVED, REDEEMED] and events_of(two) == [ISSUED, REDEEMED]
    assert row_of(one) == (CouponStatus.REDEEMED, 3, "A-1") and row_of(two) == (CouponStatus.REDEEMED, 2, "A-2")
    assert IdempotencyRecord.objects.filter(user_id="alice", key="k").count() == 3
    assert_rows_agree_with_events()


@pytest.mark.parametrize(
    "bad",
    [{**ORDER, "currency": "USD"}, {**ORDER, "order_amount": "1e3"}, {**ORDER, "order_id": ""}],
    ids=["currency-of-another-coupon", "bad-amount", "bad-order-id"],
)
def test_a_400_is_not_stored_and_the_same_key_then_works(client, live_campaign, bad) -> None:
    # given
    coupon = issued_coupon(live_campaign, "alice")
    assert_contract_error(use(client, coupon.code, "redeem", body=bad, key="k"), 400, "invalid_request")
    assert IdempotencyRecord.objects.count() == 0

    # when
    response = use(client, coupon.code, "redeem", key="k")

    # then
    assert answer(response) == (200, 0, "redeemed") and "Idempotent-Replayed" not in response
    assert row_of(coupon) == (CouponStatus.REDEEMED, 2, "A-1")
    assert_rows_agree_with_events()


def test_a_404_is_not_stored_and_the_same_key_then_works(client, live_campaign) -> None:
    # given: bob used key "k" on a code that is not his
    alices = issued_coupon(live_campaign, "alice")
    bobs = issued_coupon(live_campaign, "bob")
    assert_contract_error(use(client, alices.code, "redeem", "bob", key="k"), 404, "not_found")

    # when: on his own code's endpoint
    response = use(client, bobs.code, "redeem", "bob", key="k")

    # then
    assert answer(response) == (200, 0, "redeemed")
    assert list(IdempotencyRecord.objects.values_list("user_id", "endpoint")) == [
        ("bob", f"POST /api/v1/coupons/{bobs.code}/redeem")]


def _db_connect(*, autocommit: bool = False) -> psycopg.Connection:
    """A connection of its own to the test database, outside Django."""
    db = settings.DATABASES["default"]
    return psycopg.connect(
        dbname=db["NAME"], user=db.get("USER") or None, password=db.get("PASSWORD") or None,
        host=db.get("HOST") or None, port=db.get("PORT") or None, autocommit=autocommit,
    )


def _wait_for(condition: Any, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


@pytest.mark.django_db(transaction=True)
def test_a_second_request_with_a_key_still_in_flight_is_409_then_the_first_answer_is_replayed(live_campaign) -> None:
    # given: another transaction holds the coupon's row lock, so the first redeem blocks inside its update
    coupon = issued_coupon(live_campaign, "alice")
    locker = _db_connect()
    locker.execute("SELECT id FROM coupons_coupon WHERE id = %s FOR UPDATE", [coupon.pk])
    answers: dict[str, Any] = {}

    def first() -> None:
        try:
            answers["first"] = use(Client(raise_request_exception=False), coupon.code, "redeem", key="k")
        except BaseException as exc:  # noqa: BLE001 (reported by the main thread)
            answers["error"] = exc
        finally:
            connections.close_all()

    thread = threading.Thread(target=first)
    thread.start()
    try:
        _wait_for(lambda: IdempotencyRecord.objects.filter(user_id="alice", key="k", in_flight=True).exists())
        with _db_connect(autocommit=True) as probe:  # the first redeem is waiting for the row lock
            _wait_for(lambda: probe.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND query LIKE '%UPDATE %coupons_coupon%'").fetchone()[0] == 1)
        client = Client(raise_request_exception=False)

        # when: the same request, and a different one, with the same key
        twin = use(client, coupon.code, "redeem", key="k")
        other = use(client, coupon.code, "redeem", body={**ORDER, "order_id": "B-2"}, key="k")
    finally:
        locker.rollback()
        locker.close()
        thread.join(30)

    # then
    assert_contract_error(twin, 409, "idempotency_in_flight")
    assert twin["Retry-After"] == "1"
    assert_contract_error(other, 422, "idempotency_mismatch")
    assert "error" not in answers and not thread.is_alive()
    assert answers["first"].json() == {"code": 0, "status": "redeemed", "discount": "50.00", "payable": "300.00"}
    replay = use(client, coupon.code, "redeem", key="k")
    assert replay.content == answers["first"].content and replay["Idempotent-Replayed"] == "true"
    assert row_of(coupon) == (CouponStatus.REDEEMED, 2, "A-1")
    assert events_of(coupon) == [ISSUED, REDEEMED]
    assert list(IdempotencyRecord.objects.values_list("in_flight", "response_status")) == [(False, 200)]
    assert_rows_agree_with_events()


@pytest.mark.parametrize(("first", "done_status"), [("redeem", "redeemed"), ("reserve", "reserved")])
def test_a_repeat_for_the_same_order_with_another_amount_never_answers_a_payable_of_another_amount(
    client, live_campaign, first, done_status
) -> None:
    # given: A-1 used the coupon for 350.00
    coupon = issued_coupon(live_campaign, "alice")
    assert answer(use(client, coupon.code, first)) == (200, 0, done_status)

    # when: the same order, now 400.00, with a new key
    response = use(client, coupon.code, first, body={**ORDER, "order_amount": "400.00"})

    # then: a redemption is not redone at another price (11); a hold is taken again at the new price
    body = response.json()
    coupon.refresh_from_db()
    if first == "redeem":
        assert (body["code"], body["status"]) == (11, "already_redeemed")
        assert (coupon.order_amount, coupon.version) == (Decimal("350.00"), 2)
    else:
        assert (body["code"], body["status"], body["payable"]) == (0, "reserved", "350.00")
        assert (coupon.order_amount, coupon.version) == (Decimal("400.00"), 3)
        assert [t for t, _ in events_of(coupon)] == ["issued", "reserved", "reserved"]

