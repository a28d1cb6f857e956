"""Validity boundaries: valid_from, valid_until inclusive to the second, relative validity in the operator's zone.

A coupon is moved in time by updating its valid_from / expires_at rows: the services read timezone.now().
"""
from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest
from django.test import override_settings
from django.utils import timezone

from campaigns.models import Campaign
from coupons.models import Coupon, CouponEvent, CouponEventType, CouponStatus
from coupons.services import (
    Order,
    coupon_confirm,
    coupon_redeem,
    coupon_release,
    coupon_reserve,
    coupons_settle_due,
)

from .helpers import assert_rows_agree_with_events, events_of, issued_coupon, row_of

NEW_YORK = ZoneInfo("America/New_York")
ORDER = Order("A-1", Decimal("350.00"), "CNY")


def whole_second_now() -> datetime:
    """Wait for the start of a second and return it, so the next few hundred ms stay inside that second."""
    now = timezone.now()
    time.sleep(1 - now.microsecond / 1_000_000 + 0.01)
    return timezone.now().replace(microsecond=0)


def move(coupon: Coupon, **fields: datetime) -> None:
    """Set the coupon's times; an expiry in the past takes valid_from along (valid_from <= expires_at)."""
    if "expires_at" in fields and "valid_from" not in fields:
        fields["valid_from"] = fields["expires_at"] - timedelta(days=1)
    Coupon.objects.filter(pk=coupon.pk).update(**fields)


# --- Coupon.is_expired_at: inclusive to the second ----------------------------------------------------


@pytest.mark.parametrize(
    ("now", "expired"),
    [
        (datetime(2027, 1, 1, 11, 59, 59, tzinfo=UTC), False),
        (datetime(2027, 1, 1, 12, 0, 0, tzinfo=UTC), False),
        (datetime(2027, 1, 1, 12, 0, 0, 999_999, tzinfo=UTC), False),
        (datetime(2027, 1, 1, 12, 0, 1, tzinfo=UTC), True),
        (datetime(2027, 1, 1, 12, 0, 1, 1, tzinfo=UTC), True),
        (datetime(2027, 1, 1, 20, 0, 0, 500_000, tzinfo=ZoneInfo("Asia/Shanghai")), False),  # = 12:00:00.5 UTC
        (datetime(2027, 1, 1, 20, 0, 1, tzinfo=ZoneInfo("Asia/Shanghai")), True),
    ],
    ids=["second-before", "exact-second", "end-of-the-second", "next-second", "just-past", "same-in-shanghai",
         "next-in-shanghai"],
)
def test_a_coupon_is_valid_through_the_whole_second_of_its_expiry(now, expired) -> None:
    coupon = Coupon(expires_at=datetime(2027, 1, 1, 12, 0, 0, tzinfo=UTC))
    assert coupon.is_expired_at(now) is expired


def test_an_expiry_stored_with_a_fraction_still_ends_with_its_second() -> None:
    coupon = Coupon(expires_at=datetime(2027, 1, 1, 12, 0, 0, 400_000, tzinfo=UTC))
    assert coupon.is_expired_at(datetime(2027, 1, 1, 12, 0, 0, 900_000, tzinfo=UTC)) is False
    assert coupon.is_expired_at(datetime(2027, 1, 1, 12, 0, 1, tzinfo=UTC)) is True


# --- valid_from ------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_coupon_whose_absolute_validity_starts_later_is_not_yet_valid(live_campaign) -> None:
    # given: claimed now, usable from tomorrow
    now = timezone.now()
    starts = (now + timedelta(days=1)).replace(microsecond=0)
    coupon = issued_coupon(live_campaign, "alice", valid_days=None, valid_from=starts,
                           valid_until=starts + timedelta(days=7))
    assert coupon.valid_from == starts

    # when
    redeemed = coupon_redeem(user_id="alice", code=coupon.code, order=ORDER)
    reserved = coupon_reserve(user_id="alice", code=coupon.code, order=ORDER)

    # then
    assert (redeemed.code, redeemed.status) == (13, "not_yet_valid")
    assert (reserved.code, reserved.status) == (13, "not_yet_valid")
    assert row_of(coupon) == (CouponStatus.ACTIVE, 1, None)
    assert events_of(coupon) == [(CouponEventType.ISSUED, "drain")]
    assert_rows_agree_with_events()


@pytest.mark.django_db
def test_one_second_before_valid_from_the_coupon_is_not_yet_valid(live_campaign) -> None:
    # given
    coupon = issued_coupon(live_campaign, "alice")
    move(coupon, valid_from=timezone.now() + timedelta(seconds=1))

    # when
    outcome = coupon_redeem(user_id="alice", code=coupon.code, order=ORDER)

    # then
    assert (outcome.code, outcome.status) == (13, "not_yet_valid")
    assert row_of(coupon) == (CouponStatus.ACTIVE, 1, None)
    assert events_of(coupon) == [(CouponEventType.ISSUED, "drain")]


@pytest.mark.django_db
def test_one_second_after_valid_from_the_coupon_redeems(live_campaign) -> None:
    # given
    coupon = issued_coupon(live_campaign, "alice")
    move(coupon, valid_from=timezone.now() - timedelta(seconds=1))

    # when
    outcome = coupon_redeem(user_id="alice", code=coupon.code, order=ORDER)

    # then
    assert outcome.body() == {"code": 0, "status": "redeemed", "discount": "50.00", "payable": "300.00"}
    assert row_of(coupon) == (CouponStatus.REDEEMED, 2, "A-1")
    assert events_of(coupon) == [(CouponEventType.ISSUED, "drain"), (CouponEventType.REDEEMED, "api")]
    assert_rows_agree_with_events()


# --- valid_until -----------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_during_the_exact_second_of_its_expiry_the_coupon_still_redeems(live_campaign) -> None:
    # given: the coupon's last second is the current one
    coupon = issued_coupon(live_campaign, "alice")
    this_second = whole_second_now()
    move(coupon, expires_at=this_second)

    # when
    outcome = coupon_redeem(user_id="alice", code=coupon.code, order=ORDER)

    # then
    assert timezone.now() < this_second + timedelta(seconds=1), "the test ran past the second: rerun"
    assert (outcome.code, outcome.status) == (0, "redeemed")
    assert row_of(coupon) == (CouponStatus.REDEEMED, 2, "A-1")
    assert_rows_agree_with_events()


@pytest.mark.django_db
def test_during_the_exact_second_of_its_expiry_the_coupon_can_be_reserved(live_campaign) -> None:
    # given
    coupon = issued_coupon(live_campaign, "alice")
    this_second = whole_second_now()
    move(coupon, expires_at=this_second)

    # when
    outcome = coupon_reserve(user_id="alice", code=coupon.code, order=ORDER, hold_seconds=60)

    # then
    assert timezone.now() < this_second + timedelta(seconds=1), "the test ran past the second: rerun"
    assert (outcome.code, outcome.status) == (0, "reserved")
    assert row_of(coupon) == (CouponStatus.HELD, 2, "A-1")


@pytest.mark.django_db
def test_one_second_after_its_expiry_the_coupon_is_expired_on_the_spot_with_its_event(live_campaign) -> None:
    # given: its last second was the previous one
    coupon = issued_coupon(live_campaign, "alice")
    expires_at = timezone.now().replace(microsecond=0) - timedelta(seconds=1)
    move(coupon, expires_at=expires_at)

    # when
    outcome = coupon_redeem(user_id="alice", code=coupon.code, order=ORDER)

    # then
    assert (outcome.code, outcome.status) == (10, "expired")
    assert row_of(coupon) == (CouponStatus.EXPIRED, 2, None)
    assert events_of(coupon) == [(CouponEventType.ISSUED, "drain"), (CouponEventType.EXPIRED, "lazy")]
    expired = CouponEvent.objects.get(coupon_id=coupon.pk, type=CouponEventType.EXPIRED)
    assert datetime.fromisoformat(expired.data["expires_at"]) == expires_at
    assert_rows_agree_with_events()


@pytest.mark.django_db
def test_an_expired_coupon_stays_expired_and_writes_no_second_event(live_campaign) -> None:
    # given
    coupon = issued_coupon(live_campaign, "alice")
    move(coupon, expires_at=timezone.now() - timedelta(seconds=2))
    assert coupon_redeem(user_id="alice", code=coupon.code, order=ORDER).code == 10

    # when
    answers = [
        coupon_redeem(user_id="alice", code=coupon.code, order=ORDER),
        coupon_reserve(user_id="alice", code=coupon.code, order=ORDER),
        coupon_confirm(user_id="alice", code=coupon.code, order_id="A-1"),
        coupon_release(user_id="alice", code=coupon.code, order_id="A-1"),
    ]

    # then
    assert [(a.code, a.status) for a in answers] == [(10, "expired"), (10, "expired"), (10, "expired"),
                                                      (0, "released")]
    assert answers[3].extra == {"coupon_status": "expired"}
    assert row_of(coupon) == (CouponStatus.EXPIRED, 2, None)
    assert events_of(coupon) == [(CouponEventType.ISSUED, "drain"), (CouponEventType.EXPIRED, "lazy")]
    assert_rows_agree_with_events()


@pytest.mark.django_db
def test_settling_due_coupons_agrees_with_the_inclusive_second(live_campaign) -> None:
    # given: one coupon in its last second, one a second past it
    this_second = whole_second_now()
    last_second = issued_coupon(live_campaign, "alice")
    past = issued_coupon(live_campaign, "alice")
    move(last_second, expires_at=this_second)
    move(past, expires_at=this_second - timedelta(seconds=1))

    # when
    changed = coupons_settle_due(user_id="alice")

    # then
    assert timezone.now() < this_second + timedelta(seconds=1), "the test ran past the second: rerun"
    assert changed == 1
    assert row_of(last_second) == (CouponStatus.ACTIVE, 1, None)
    assert row_of(past) == (CouponStatus.EXPIRED, 2, None)
    assert events_of(past)[-1] == (CouponEventType.EXPIRED, "lazy")
    assert_rows_agree_with_events()


@pytest.mark.django_db
@override_settings(TIME_ZONE="Asia/Shanghai")
def test_absolute_validity_is_stored_in_utc_to_the_second(live_campaign) -> None:
    # given: an operator in Shanghai set "until 2099-01-31 23:59:59" local time
    until_local = datetime(2099, 1, 31, 23, 59, 59, 750_000, tzinfo=ZoneInfo("Asia/Shanghai"))

    # when
    coupon = issued_coupon(live_campaign, "alice", valid_days=None, valid_until=until_local)

    # then
    assert coupon.expires_at == datetime(2099, 1, 31, 15, 59, 59, tzinfo=UTC)
    assert coupon.expires_at.utcoffset() == timedelta(0)
    assert timezone.localtime(coupon.expires_at).isoformat() == "2099-01-31T23:59:59+08:00"


# --- relative validity in the operator's zone -----------------------------------------------------------


def _relative(valid_days: int) -> Campaign:
    return Campaign(valid_days=valid_days, valid_until=None)


@override_settings(TIME_ZONE="America/New_York")
@pytest.mark.parametrize(
    ("claimed_local", "valid_days", "expires_utc", "real_hours"),
    [
        pytest.param(datetime(2027, 3, 13, 10, 0), 1, datetime(2027, 3, 14, 14, 0), 23, id="spring-forward"),
        pytest.param(datetime(2027, 11, 6, 10, 0), 1, datetime(2027, 11, 7, 15, 0), 25, id="fall-back"),
        pytest.param(datetime(2027, 3, 12, 10, 0), 3, datetime(2027, 3, 15, 14, 0), 71, id="spring-3-days"),
        pytest.param(datetime(2027, 6, 30, 23, 30), 1, datetime(2027, 7, 2, 3, 30), 24, id="across-midnight"),
        pytest.param(datetime(2027, 12, 31, 23, 30), 1, datetime(2028, 1, 2, 4, 30), 24, id="across-new-year"),
        pytest.param(datetime(2028, 2, 28, 12, 0), 1, datetime(2028, 2, 29, 17, 0), 24, id="leap-day"),
    ],
)
def test_relative_validity_counts_calendar_days_in_the_operators_zone(
    claimed_local, valid_days, expires_utc, real_hours
) -> None:
    # given
    claimed_at = claimed_local.replace(tzinfo=NEW_YORK)

    # when
    valid_from, expires_at = _relative(valid_days).coupon_validity(claimed_at)

    # then: the same wall-clock time N days later, stored in UTC
    assert valid_from == claimed_at
    assert expires_at == expires_utc.replace(tzinfo=UTC)
    assert expires_at.utcoffset() == timedelta(0)
    assert expires_at - claimed_at == timedelta(hours=real_hours)
    local = timezone.localtime(expires_at)
    assert (local.date(), local.time()) == ((claimed_local + timedelta(days=valid_days)).date(), claimed_local.time())


@override_settings(TIME_ZONE="America/New_York")
def test_relative_validity_of_a_claim_given_in_utc_uses_the_operators_calendar() -> None:
    # given: 2027-03-14 03:30 UTC is still 2027-03-13 22:30 in New York (EST)
    claimed_at = datetime(2027, 3, 14, 3, 30, 15, 123_456, tzinfo=UTC)

    # when
    _, expires_at = _relative(1).coupon_validity(claimed_at)

    # then: 22:30:15 EDT on the 14th, in whole seconds
    assert expires_at == datetime(2027, 3, 15, 2, 30, 15, tzinfo=UTC)
    assert timezone.localtime(expires_at).isoformat() == "2027-03-14T22:30:15-04:00"


@override_settings(TIME_ZONE="Asia/Shanghai")
def test_relative_validity_across_midnight_in_a_zone_without_dst() -> None:
    # given: 23:30 in Shanghai is 15:30 UTC
    claimed_at = datetime(2027, 3, 13, 15, 30, tzinfo=UTC)

    # when
    _, expires_at = _relative(1).coupon_validity(claimed_at)

    # then
    assert expires_at == datetime(2027, 3, 14, 15, 30, tzinfo=UTC)
    assert timezone.localtime(expires_at).isoformat() == "2027-03-14T23:30:00+08:00"


@pytest.mark.django_db
def test_a_drained_coupon_of_relative_validity_ends_on_the_second_of_its_claim_n_days_later(live_campaign) -> None:
    # given / when
    coupon = issued_coupon(live_campaign, "alice", valid_days=2)

    # then
    claimed_at = coupon.valid_from
    assert coupon.expires_at == coupon.campaign.coupon_validity(claimed_at)[1]
    assert coupon.expires_at.microsecond == 0 and coupon.expires_at.utcoffset() == timedelta(0)
    assert not coupon.is_expired_at(claimed_at + timedelta(days=2))
    assert coupon.is_expired_at(claimed_at.replace(microsecond=0) + timedelta(days=2, seconds=1))


# --- a hold and validity --------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_held_coupon_released_after_its_validity_is_expired_at_once_with_both_events(live_campaign) -> None:
    # given: held for A-1, then its validity ended
    coupon = issued_coupon(live_campaign, "alice")
    assert coupon_reserve(user_id="alice", code=coupon.code, order=ORDER, hold_seconds=3600).code == 0
    move(coupon, expires_at=timezone.now() - timedelta(seconds=2))

    # when
    outcome = coupon_release(user_id="alice", code=coupon.code, order_id="A-1")

    # then
    assert outcome.body() == {"code": 0, "status": "released", "coupon_status": "expired"}
    assert row_of(coupon) == (CouponStatus.EXPIRED, 4, None)
    assert events_of(coupon) == [
        (CouponEventType.ISSUED, "drain"), (CouponEventType.RESERVED, "api"),
        (CouponEventType.RELEASED, "api"), (CouponEventType.EXPIRED, "lazy"),
    ]
    assert_rows_agree_with_events()
