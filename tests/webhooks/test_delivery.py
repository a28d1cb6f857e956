"""Webhooks: events of coupons and campaigns arrive at a real receiver, signed, in order, at least once."""
from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from campaigns.models import Campaign
from coupons.services import Order, coupon_redeem, coupon_release, coupon_reserve
from webhooks.delivery import deliver_due
from webhooks.models import Delivery, DeliveryAttempt, DeliveryState, OutboxEvent

from ..coupons.helpers import claimed_coupon
from .conftest import receiver_down, verify_signature

pytestmark = pytest.mark.django_db


def order(order_id: str = "o-1", amount: str = "350.00"):
    from decimal import Decimal

    return Order(order_id=order_id, amount=Decimal(amount), currency="CNY")


def make_due() -> None:
    """Time passes: every pending delivery's next attempt is now."""
    Delivery.objects.filter(state=DeliveryState.PENDING).update(next_attempt_at=timezone.now() - timedelta(seconds=1))


def deliver_all(rounds: int = 10) -> None:
    for _ in range(rounds):
        make_due()
        report = deliver_due(max_seconds=5)
        if not report.taken:
            return


def test_a_coupons_events_arrive_signed_and_in_order(endpoint, receiver, live_campaign) -> None:
    campaign = live_campaign(total_stock=5, currency="CNY")
    coupon = claimed_coupon(campaign, "alice")
    coupon_reserve(user_id="alice", code=coupon.code, order=order())
    coupon_release(user_id="alice", code=coupon.code, order_id="o-1")
    coupon_redeem(user_id="alice", code=coupon.code, order=order("o-2"))

    deliver_all()

    events = receiver.events()
    assert [e["type"] for e in events] == ["coupon.issued", "coupon.reserved", "coupon.released", "coupon.redeemed"]
    assert all(verify_signature(got) for got in receiver.received)
    assert [e["id"] for e in events] == sorted(e["id"] for e in events)
    redeemed = events[-1]
    assert set(redeemed) == {"id", "type", "created", "data"}
    assert redeemed["data"]["coupon_id"] == coupon.pk and redeemed["data"]["code"] == coupon.code
    assert redeemed["data"]["status"] == "redeemed" and redeemed["data"]["discount"] == "50.00"
    assert redeemed["data"]["order_id"] == "o-2" and redeemed["data"]["order_amount"] == "350.00"
    assert "+" in redeemed["created"] or redeemed["created"].endswith("Z")
    assert Delivery.objects.filter(state=DeliveryState.DELIVERED).count() == 4


def test_a_receiver_answering_500_twice_then_200_gets_the_same_id_three_times(endpoint, receiver,
                                                                              live_campaign) -> None:
    answers = iter([500, 500, 200])
    receiver.answer = lambda got: next(answers)
    claimed_coupon(live_campaign(total_stock=5), "alice")

    deliver_all()

    ids = [e["id"] for e in receiver.events()]
    assert len(ids) == 3 and len(set(ids)) == 1
    assert len({got.body for got in receiver.received}) == 1  # the same bytes each time
    delivery = Delivery.objects.get()
    assert (delivery.state, delivery.attempts, delivery.last_status) == (DeliveryState.DELIVERED, 3, 200)
    assert list(DeliveryAttempt.objects.order_by("number").values_list("number", "status_code")) == [
        (1, 500), (2, 500), (3, 200)]


def test_a_receiver_down_for_a_while_gets_everything_once_it_is_back(endpoint, receiver, live_campaign) -> None:
    campaign = live_campaign(total_stock=20)
    with receiver_down(receiver):
        coupons = [claimed_coupon(campaign, f"user-{i}") for i in range(6)]
        for _ in range(3):
            deliver_all(rounds=1)
        assert Delivery.objects.filter(state=DeliveryState.PENDING).count() == 6
        assert not Delivery.objects.filter(state=DeliveryState.DELIVERED).exists()
    failed = len(receiver.received)
    assert failed == 18  # three rounds of six refusals

    deliver_all()

    back = receiver.events()[failed:]
    assert sorted(e["data"]["coupon_id"] for e in back) == sorted(c.pk for c in coupons)
    assert len({e["id"] for e in back}) == 6
    assert Delivery.objects.filter(state=DeliveryState.DELIVERED).count() == 6


def test_a_delivery_is_dead_after_the_retry_window(endpoint, receiver, live_campaign) -> None:
    receiver.answer = lambda got: 500
    claimed_coupon(live_campaign(total_stock=5), "alice")
    deliver_all(rounds=2)
    delivery = Delivery.objects.get()
    assert delivery.state == DeliveryState.PENDING
    # A day passes.
    Delivery.objects.update(retry_from=timezone.now() - timedelta(hours=24, seconds=1))

    deliver_all(rounds=1)

    delivery.refresh_from_db()
    assert delivery.state == DeliveryState.DEAD and delivery.attempts == 3


def test_a_rolled_back_redemption_sends_nothing_and_a_committed_one_always_sends(endpoint, receiver,
                                                                                 live_campaign) -> None:
    coupon = claimed_coupon(live_campaign(total_stock=5, currency="CNY"), "alice")
    with pytest.raises(RuntimeError), transaction.atomic():
        coupon_redeem(user_id="alice", code=coupon.code, order=order("rolled-back"))
        raise RuntimeError("the order's own write failed after the redemption")
    coupon_redeem(user_id="alice", code=coupon.code, order=order("committed"))

    deliver_all()

    redeemed = [e for e in receiver.events() if e["type"] == "coupon.redeemed"]
    assert [e["data"]["order_id"] for e in redeemed] == ["committed"]
    assert OutboxEvent.objects.filter(type="coupon.redeemed").count() == 1


def test_events_are_written_only_for_types_an_active_endpoint_subscribes_to(allow_private, receiver,
                                                                            live_campaign) -> None:
    from webhooks.services import endpoint_add

    campaign = live_campaign(total_stock=5, currency="CNY")
    coupon = claimed_coupon(campaign, "alice")  # no endpoint yet: nothing written
    assert not OutboxEvent.objects.exists()
    endpoint_add(url=receiver.url, secret="s" * 16, event_types=["coupon.redeemed"])
    endpoint_add(url=receiver.url, secret="t" * 16, active=False)
    coupon_reserve(user_id="alice", code=coupon.code, order=order())
    coupon_redeem(user_id="alice", code=coupon.code, order=order())

    assert list(OutboxEvent.objects.values_list("type", flat=True)) == ["coupon.redeemed"]
    assert Delivery.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_two_workers_delivering_at_once_send_each_event_once_per_attempt(endpoint, receiver, live_campaign) -> None:
    import threading

    from django.db import connections

    from orders.drain import drain_campaign

    from ..orders.test_drain import claim_many

    campaign = live_campaign(total_stock=60)
    claim_many(campaign, [f"user-{i}" for i in range(60)])
    drain_campaign(campaign_id=campaign.pk)
    assert Delivery.objects.count() == 61  # 60 coupon.issued and the campaign.sold_out

    def slow(got):  # every answer takes a moment: the two workers overlap all along
        time.sleep(0.01)
        return 200

    receiver.answer = slow
    barrier = threading.Barrier(2)
    reports = []

    def worker() -> None:
        barrier.wait()
        try:
            reports.append(deliver_due(max_seconds=30, concurrency=4))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    ids = [e["id"] for e in receiver.events()]
    assert len(ids) == 61 and len(set(ids)) == 61
    assert all(r.taken for r in reports)  # both took part
    assert sum(r.taken for r in reports) == 61
    assert DeliveryAttempt.objects.count() == 61
    assert set(Delivery.objects.values_list("state", "attempts")) == {(DeliveryState.DELIVERED, 1)}


def test_a_coupons_later_event_waits_until_its_earlier_one_is_delivered(endpoint, receiver, live_campaign) -> None:
    coupon = claimed_coupon(live_campaign(total_stock=5, currency="CNY"), "alice")
    other = claimed_coupon(Campaign.objects.get(pk=coupon.campaign_id), "bob")
    coupon_redeem(user_id="alice", code=coupon.code, order=order())
    receiver.answer = lambda got: 500 if got.event["data"]["coupon_id"] == coupon.pk else 200

    deliver_all(rounds=3)

    # alice's issued failed three times; her redeemed was never sent; bob's got through
    sent = [(e["data"]["coupon_id"], e["type"]) for e in receiver.events()]
    assert sent.count((coupon.pk, "coupon.issued")) == 3 and (coupon.pk, "coupon.redeemed") not in sent
    assert (other.pk, "coupon.issued") in sent
    receiver.answer = lambda got: 200
    deliver_all()
    assert [t for c, t in ((e["data"]["coupon_id"], e["type"]) for e in receiver.events()) if c == coupon.pk][-2:] \
        == ["coupon.issued", "coupon.redeemed"]


def test_a_dead_earlier_event_lets_the_later_ones_go(endpoint, receiver, live_campaign) -> None:
    coupon = claimed_coupon(live_campaign(total_stock=5, currency="CNY"), "alice")
    receiver.answer = lambda got: 500
    deliver_all(rounds=1)
    Delivery.objects.update(retry_from=timezone.now() - timedelta(days=2))
    deliver_all(rounds=1)
    assert Delivery.objects.get().state == DeliveryState.DEAD
    receiver.answer = lambda got: 200
    coupon_redeem(user_id="alice", code=coupon.code, order=order())

    deliver_all()

    assert [e["type"] for e in receiver.events()][-1] == "coupon.redeemed"
    assert Delivery.objects.filter(state=DeliveryState.DELIVERED).count() == 1


def test_an_operator_retries_a_dead_delivery(endpoint, receiver, live_campaign) -> None:
    from webhooks.delivery import delivery_retry

    claimed_coupon(live_campaign(total_stock=5), "alice")
    receiver.answer = lambda got: 500
    deliver_all(rounds=1)
    Delivery.objects.update(retry_from=timezone.now() - timedelta(days=2))
    deliver_all(rounds=1)
    delivery = Delivery.objects.get()
    assert delivery.state == DeliveryState.DEAD
    receiver.answer = lambda got: 200

    assert delivery_retry(delivery=delivery)
    deliver_all()

    delivery.refresh_from_db()
    assert delivery.state == DeliveryState.DELIVERED and delivery.attempts == 3
    assert len({e["id"] for e in receiver.events()}) == 1
