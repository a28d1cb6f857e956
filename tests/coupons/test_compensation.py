"""The expiry sweep and drift repair, against the real PostgreSQL."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from coupons import tasks
from coupons.compensation import expire_and_lapse_due, repair_drift
from coupons.models import Coupon, CouponEvent, CouponStatus
from coupons.replay import disagreements
from coupons.services import Order, coupon_redeem, coupon_reserve

from ..conftest import run_twice_at_once
from ..factories import CampaignFactory
from .helpers import events_of, issued_coupon


def insert_due_coupons(campaign, n: int, *, expired_ago: timedelta = timedelta(minutes=5)) -> None:
    """Insert n active coupons past their validity, each with its 'issued' event, in two statements."""
    expires = timezone.now() - expired_ago
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO coupons_coupon (code, campaign_id, user_id, claim_id, status, valid_from, expires_at, "
            "version, created_at, updated_at) SELECT 'T' || lpad(g::text, 11, '0'), %s, 'u' || g, %s || '-' || g, "
            "'active', %s, %s, 1, now(), now() FROM generate_series(1, %s) g",
            [campaign.pk, f"t{campaign.pk}", expires - timedelta(days=1), expires, n],
        )
        cursor.execute(
            "INSERT INTO coupons_couponevent (coupon_id, campaign_id, type, data, source, created_at) "
            "SELECT id, campaign_id, 'issued', '{}'::jsonb, 'test', now() FROM coupons_coupon WHERE campaign_id = %s",
            [campaign.pk],
        )


def expired_events(campaign) -> int:
    return CouponEvent.objects.filter(campaign=campaign, type="expired").count()


@pytest.mark.slow
@pytest.mark.django_db
def test_10000_due_coupons_expire_with_exactly_10000_events() -> None:
    campaign = CampaignFactory()
    insert_due_coupons(campaign, 10_000)

    report = expire_and_lapse_due()

    assert (report.expired, report.finished) == (10_000, True) and report.batches >= 5
    assert Coupon.objects.filter(campaign=campaign, status=CouponStatus.EXPIRED).count() == 10_000
    assert expired_events(campaign) == 10_000
    assert set(CouponEvent.objects.filter(type="expired").values_list("source", flat=True)) == {"compensation"}
    assert list(disagreements(Coupon.objects.filter(campaign=campaign))) == []
    assert expire_and_lapse_due().expired == 0


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_two_sweeps_at_once_do_exactly_what_one_does() -> None:
    campaign = CampaignFactory()
    insert_due_coupons(campaign, 6_000)
    reports = run_twice_at_once(expire_and_lapse_due)

    assert sum(r.expired for r in reports) == 6_000
    assert expired_events(campaign) == 6_000
    assert Coupon.objects.filter(campaign=campaign, status=CouponStatus.EXPIRED).count() == 6_000


@pytest.mark.django_db
def test_the_sweep_leaves_coupons_valid_to_this_second_and_those_in_use_alone(live_campaign) -> None:
    inclusive = issued_coupon(live_campaign, "ann")
    redeemed = issued_coupon(live_campaign, "bob")
    coupon_redeem(user_id="bob", code=redeemed.code, order=Order("o1", redeemed.campaign.min_spend, "CNY"))
    now = timezone.now().replace(microsecond=0)
    Coupon.objects.filter(pk__in=[inclusive.pk, redeemed.pk]).update(valid_from=now - timedelta(days=1),
                                                                   expires_at=now - timedelta(seconds=5))
    Coupon.objects.filter(pk=inclusive.pk).update(expires_at=now)  # valid through now + 0.999 s

    report = expire_and_lapse_due(now=now + timedelta(microseconds=999_000))

    assert report.expired == 0
    assert Coupon.objects.get(pk=inclusive.pk).status == CouponStatus.ACTIVE
    assert Coupon.objects.get(pk=redeemed.pk).status == CouponStatus.REDEEMED
    assert expire_and_lapse_due(now=now + timedelta(seconds=1)).expired == 1


@pytest.mark.django_db
def test_overdue_holds_lapse_and_expire_if_their_validity_ended_meanwhile(live_campaign) -> None:
    still_valid = issued_coupon(live_campaign, "ann")
    run_out = issued_coupon(live_campaign, "bob")
    for coupon in (still_valid, run_out):
        coupon_reserve(user_id=coupon.user_id, code=coupon.code, order=Order("o-" + coupon.user_id,
                       coupon.campaign.min_spend, "CNY"))
    past = timezone.now() - timedelta(seconds=30)
    Coupon.objects.filter(pk__in=[still_valid.pk, run_out.pk]).update(hold_until=past)
    Coupon.objects.filter(pk=run_out.pk).update(valid_from=past - timedelta(days=1), expires_at=past)

    report = expire_and_lapse_due()

    assert (report.lapsed, report.expired) == (2, 1)
    assert Coupon.objects.get(pk=still_valid.pk).status == CouponStatus.ACTIVE
    assert Coupon.objects.get(pk=run_out.pk).status == CouponStatus.EXPIRED
    assert [t for t, _ in events_of(run_out)] == ["issued", "reserved", "hold_lapsed", "expired"]
    assert events_of(still_valid)[-1] == ("hold_lapsed", "compensation")
    assert list(disagreements(Coupon.objects.all())) == []


@pytest.mark.django_db
def test_lazy_expiry_and_the_sweep_never_write_two_expired_events(live_campaign) -> None:
    coupon = issued_coupon(live_campaign)
    past = timezone.now() - timedelta(seconds=10)
    Coupon.objects.filter(pk=coupon.pk).update(valid_from=past - timedelta(days=1), expires_at=past)
    outcome = coupon_redeem(user_id=coupon.user_id, code=coupon.code, order=Order("o", coupon.campaign.min_spend,
                                                                                   "CNY"))

    report = expire_and_lapse_due()

    assert outcome.code == 10 and report.expired == 0
    assert [t for t, _ in events_of(coupon)] == ["issued", "expired"]


@pytest.mark.django_db
def test_a_row_that_drifted_from_its_events_is_set_to_their_fold_with_a_compensated_event(live_campaign) -> None:
    drifted = issued_coupon(live_campaign, "ann")
    fine = issued_coupon(live_campaign, "bob")
    Coupon.objects.filter(pk=drifted.pk).update(status="redeemed", order_id="ghost", version=2)

    report = repair_drift()

    assert report.repaired == 1
    row = Coupon.objects.get(pk=drifted.pk)
    assert (row.status, row.order_id) == ("active", None)
    compensated = CouponEvent.objects.get(coupon=drifted, type="compensated")
    assert compensated.data["was"] == {"status": "redeemed", "order_id": "ghost", "version": 2}
    assert list(disagreements(Coupon.objects.all())) == []
    assert [t for t, _ in events_of(fine)] == ["issued"]
    assert repair_drift().repaired == 0


@pytest.mark.django_db
def test_the_beat_task_runs_both_and_reports() -> None:
    campaign = CampaignFactory()
    insert_due_coupons(campaign, 3)

    assert tasks.expiry_sweep() == {"lapsed": 0, "expired": 3, "repaired": 0, "finished": True}
