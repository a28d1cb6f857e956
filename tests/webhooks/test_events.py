"""Which events go out and from where: the drain (coupon.issued in batches, campaign.sold_out once), the expiry
sweep (coupon.expired and lapsed holds in bulk), closing (campaign.ended), cancels (coupon.revoked); and a real
Celery worker delivering through the trigger."""
from __future__ import annotations

import subprocess
import sys
import time
from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.utils import timezone

from campaigns.models import Campaign
from coupons.compensation import expire_and_lapse_due
from coupons.models import Coupon
from coupons.services import Order, coupon_redeem, coupon_reserve
from orders import tasks
from orders.cancel import claim_cancel
from orders.drain import drain_campaign
from webhooks.models import Delivery, OutboxEvent
from webhooks.services import endpoint_add

from ..conftest import ROOT, process_env
from ..coupons.helpers import claimed_coupon
from ..orders.test_drain import claim_many
from .conftest import SECRET

pytestmark = pytest.mark.django_db


def types() -> list[str]:
    return list(OutboxEvent.objects.order_by("id").values_list("type", flat=True))


def test_the_drain_writes_coupon_issued_in_batches_then_campaign_sold_out_once(endpoint, live_campaign,
                                                                             django_assert_max_num_queries) -> None:
    campaign = live_campaign(total_stock=30)
    claim_ids = claim_many(campaign, [f"u{i}" for i in range(30)])

    with django_assert_max_num_queries(16):  # 3 batches of 10: a few statements each, none per coupon
        drain_campaign(campaign_id=campaign.pk, batch_size=10)
    drain_campaign(campaign_id=campaign.pk)

    assert types() == ["coupon.issued"] * 30 + ["campaign.sold_out"]
    issued = OutboxEvent.objects.filter(type="coupon.issued").order_by("id").first()
    coupon = Coupon.objects.get(pk=issued.data["coupon_id"])
    assert issued.key == f"coupon:{coupon.pk}" and issued.data["claim_id"] in claim_ids
    assert issued.data["code"] == coupon.code and issued.data["status"] == "active"
    assert issued.data["user_id"] == coupon.user_id and issued.data["expires_at"]
    sold_out = OutboxEvent.objects.get(type="campaign.sold_out")
    assert sold_out.key == f"campaign:{campaign.pk}" and sold_out.data["total_stock"] == 30


def test_the_expiry_sweep_writes_coupon_expired_and_lapsed_holds_in_bulk(endpoint, live_campaign) -> None:
    campaign = live_campaign(total_stock=10, currency="CNY")
    coupons = [claimed_coupon(campaign, f"u{i}") for i in range(4)]
    order = Order(order_id="o-1", amount=Decimal("350.00"), currency="CNY")
    coupon_reserve(user_id="u0", code=coupons[0].code, order=order, hold_seconds=60)
    past = timezone.now() - timedelta(hours=1)
    Coupon.objects.filter(pk=coupons[0].pk).update(hold_until=past)
    Coupon.objects.filter(pk__in=[c.pk for c in coupons[1:3]]).update(valid_from=past - timedelta(days=1),
                                                                    expires_at=past)
    before = OutboxEvent.objects.count()

    report = expire_and_lapse_due()

    assert (report.lapsed, report.expired) == (1, 2)
    out = list(OutboxEvent.objects.filter(pk__gt=OutboxEvent.objects.order_by("id")[before - 1].pk).order_by("id")
               .values_list("type", "key", "data"))
    assert [(t, k) for t, k, _ in out] == [("coupon.released", f"coupon:{coupons[0].pk}")] + sorted(
        [("coupon.expired", f"coupon:{c.pk}") for c in coupons[1:3]])
    assert out[0][2]["reason"] == "hold_lapsed" and out[0][2]["order_id"] == "o-1"
    assert {d["status"] for _, _, d in out[1:]} == {"expired"}


def test_a_cancelled_claim_sends_coupon_revoked_and_closing_sends_campaign_ended(endpoint, live_campaign) -> None:
    campaign = live_campaign(total_stock=5)
    coupon = claimed_coupon(campaign, "alice")
    assert claim_cancel(user_id="alice", claim_id=coupon.claim_id).code == 0
    Campaign.objects.filter(pk=campaign.pk).update(ends_at=timezone.now() - timedelta(minutes=1))

    assert tasks.housekeeping()["closed"] == [campaign.pk]
    tasks.housekeeping()

    assert types() == ["coupon.issued", "coupon.revoked", "campaign.ended"]
    ended = OutboxEvent.objects.get(type="campaign.ended")
    assert ended.data["figures"]["claims"] == 1 and ended.data["figures"]["given_back"] == 1


def test_an_endpoint_subscribed_to_one_type_gets_only_that_type(allow_private, receiver, live_campaign) -> None:
    only = endpoint_add(url=receiver.url, secret=SECRET, event_types=["coupon.redeemed"])
    every = endpoint_add(url=receiver.url, secret=SECRET)
    coupon = claimed_coupon(live_campaign(total_stock=5, currency="CNY"), "alice")
    coupon_redeem(user_id="alice", code=coupon.code, order=Order("o", Decimal("350.00"), "CNY"))

    assert sorted(Delivery.objects.values_list("endpoint_id", "event__type")) == sorted(
        [(every.pk, "coupon.issued"), (every.pk, "coupon.redeemed"), (only.pk, "coupon.redeemed")])


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_redemption_reaches_the_receiver_through_the_trigger_and_a_real_celery_worker(
        allow_private, receiver, live_campaign) -> None:
    endpoint_add(url=receiver.url, secret=SECRET, event_types=["coupon.redeemed"])
    coupon = claimed_coupon(live_campaign(total_stock=5, currency="CNY"), "alice")
    env = {**process_env(), "COUPONS_WEBHOOK_ALLOW_PRIVATE": "true"}
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "config", "worker", "--concurrency", "1", "--pool", "solo",
         "-l", "warning", "--without-gossip", "--without-mingle", "--without-heartbeat"], cwd=ROOT, env=env)
    try:
        coupon_redeem(user_id="alice", code=coupon.code, order=Order("o-9", Decimal("350.00"), "CNY"))
        deadline = time.monotonic() + 60
        while not receiver.received:
            assert time.monotonic() < deadline, "the worker did not deliver"
            time.sleep(0.1)
    finally:
        worker.terminate()
        worker.wait(30)
    assert [e["data"]["order_id"] for e in receiver.events()] == ["o-9"]
    with connection.cursor() as cursor:
        cursor.execute("SELECT state FROM webhooks_delivery")
        assert cursor.fetchall() == [("delivered",)]
