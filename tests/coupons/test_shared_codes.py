"""A codes campaign's shared code typed at checkout (issue 19): its limits under real concurrency, its coupons
and events, release giving the use back once, and every way a code that isn't live is the same 404.

Real PostgreSQL and Redis; races are threads released together by a barrier, or shoppers on the real server.
"""
from __future__ import annotations

import threading
import time
from collections import Counter
from decimal import Decimal
from typing import Any

import pytest
from django.test import override_settings
from django.utils import timezone

from campaigns.models import Campaign
from campaigns.redis_state import campaign_keys, redis_client, reset_redis_client
from campaigns.services import campaign_pause, campaign_preheat, forget_live_codes
from core.errors import NotFound, Unavailable
from coupons.models import Coupon, CouponEvent, CouponStatus
from coupons.outcomes import UseOutcome
from coupons.replay import disagreements
from coupons.services import Order, coupon_confirm, coupon_redeem, coupon_release, coupon_reserve, first_uses, shared
from orders.rebuild import campaign_rebuild
from orders.verify import campaign_verify

from ..conftest import free_port, shopper_headers
from ..factories import CampaignFactory
from .test_use_concurrency import Storefront, all_at_once

AMOUNT = Decimal("350.00")  # the factory's rule: spend 300.00, get 50.00 off


def order(order_id: str, amount: Decimal = AMOUNT) -> Order:
    return Order(order_id, amount, "CNY")


@pytest.fixture
def shared_code(db: Any):  # type: ignore[no-untyped-def]
    """Make a live codes campaign with a shared code, loaded into Redis."""

    def make(code: str = "SAVE50", **fields: Any) -> Campaign:
        campaign = CampaignFactory(kind="codes", code=code, **fields)
        campaign_preheat(campaign=campaign)
        campaign.refresh_from_db()
        return campaign

    return make


def uses_left(campaign: Campaign) -> int:
    return int(redis_client().get(campaign_keys(campaign.pk).uses))


def assert_balanced(campaign: Campaign) -> None:
    balance = campaign_verify(campaign=campaign)
    assert balance.balanced, balance
    assert list(disagreements(Coupon.objects.filter(campaign=campaign))) == []


def statuses(results: list[Any]) -> Counter[str]:
    return Counter(r.status if isinstance(r, UseOutcome) else type(r).__name__ for r in results)


# --- the limits under concurrency ----------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_200_shoppers_using_one_shared_code_of_stock_50_at_once_get_exactly_50_uses(http_server, shared_code
                                                                                     ) -> None:
    # Given a shared code of 50 uses, one per shopper, and 200 shoppers at checkout on the real server
    campaign = shared_code(total_stock=50)
    barrier = threading.Barrier(200)
    results: list[Any] = [None] * 200

    # When they all type it at the same moment (each on its own connection, opened before the barrier)
    def use(i: int) -> None:
        shop = Storefront(http_server, f"shopper-{i}")
        try:
            shop.conn.connect()
            barrier.wait(timeout=60)
            results[i] = shop.post("/api/v1/coupons/save50/redeem", {
                "order_id": f"order-{i}", "order_amount": "350.00", "currency": "CNY"}, key=f"k-{i}")
        except BaseException as exc:  # noqa: B036 (asserted on below)
            results[i] = exc
        finally:
            shop.close()

    threads = [threading.Thread(target=use, args=(i,)) for i in range(200)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)

    # Then exactly 50 are redeemed, the other 150 sold out (business code 2), and the books balance
    assert all(isinstance(r, tuple) and r[0] == 200 for r in results), [r for r in results if not isinstance(r, tuple)]
    answers = Counter((body["code"], body["status"]) for _, body in results)
    assert answers == {(0, "redeemed"): 50, (2, "sold_out"): 150}
    assert Coupon.objects.filter(campaign=campaign, status=CouponStatus.REDEEMED).count() == 50
    assert Coupon.objects.filter(campaign=campaign).count() == 50
    assert uses_left(campaign) == 0
    assert CouponEvent.objects.filter(campaign=campaign, type="issued").count() == 50
    assert CouponEvent.objects.filter(campaign=campaign, type="redeemed").count() == 50
    assert_balanced(campaign)


@pytest.mark.django_db(transaction=True)
def test_one_shopper_typing_the_code_at_once_for_many_orders_gets_the_per_user_limit_exactly(shared_code) -> None:
    campaign = shared_code(total_stock=50, per_user_limit=2)

    results = all_at_once([lambda i=i: coupon_redeem(user_id="ann", code="SAVE50", order=order(f"o-{i}"))
                           for i in range(10)])

    assert statuses(results) == {"redeemed": 2, "limit_reached": 8}
    assert uses_left(campaign) == 48
    assert_balanced(campaign)


@pytest.mark.django_db(transaction=True)
def test_a_release_lets_exactly_one_more_shopper_in(shared_code) -> None:
    # Given a shared code used up by two shoppers
    campaign = shared_code(total_stock=2)
    assert coupon_redeem(user_id="ann", code="SAVE50", order=order("a-1")).status == "redeemed"
    assert coupon_redeem(user_id="bob", code="SAVE50", order=order("b-1")).status == "redeemed"
    assert coupon_redeem(user_id="cid", code="SAVE50", order=order("c-1")).code == 2

    # When ann's order is cancelled (twice: the second changes nothing) and ten shoppers try at once
    first = coupon_release(user_id="ann", code="SAVE50", order_id="a-1")
    again = coupon_release(user_id="ann", code="save50", order_id="a-1")
    results = all_at_once([lambda i=i: coupon_redeem(user_id=f"late-{i}", code="SAVE50", order=order(f"l-{i}"))
                           for i in range(10)])

    # Then the use came back once: exactly one of them is in, and ann's coupon for that order is revoked
    assert (first.status, first.extra["coupon_status"]) == ("released", "revoked")
    assert (again.status, again.extra["coupon_status"]) == ("released", "revoked")
    assert statuses(results) == {"redeemed": 1, "sold_out": 9}
    anns = Coupon.objects.get(campaign=campaign, user_id="ann")
    assert anns.status == CouponStatus.REVOKED
    assert [e.type for e in anns.events.order_by("id")] == ["issued", "redeemed", "released", "revoked", "restocked"]
    assert uses_left(campaign) == 0
    assert_balanced(campaign)


# --- one shopper's uses --------------------------------------------------------------------------------


def test_a_shopper_typing_it_twice_gets_limit_reached_and_the_same_order_its_own_use_again(shared_code) -> None:
    campaign = shared_code(total_stock=10)

    used = coupon_redeem(user_id="ann", code="save50", order=order("o-1"))
    same_order = coupon_redeem(user_id="ann", code="SAVE50", order=order("o-1"))
    other_order = coupon_redeem(user_id="ann", code="SAVE50", order=order("o-2"))

    assert used.body() == {"code": 0, "status": "redeemed", "discount": "50.00", "payable": "300.00"}
    assert same_order.body() == used.body()
    assert (other_order.code, other_order.status) == (1, "limit_reached")
    coupon = Coupon.objects.get(campaign=campaign)
    assert (coupon.user_id, coupon.order_id, coupon.status) == ("ann", "o-1", CouponStatus.REDEEMED)
    assert coupon.claim_id.startswith(f"code:{campaign.pk}:") and len(coupon.claim_id) <= 48
    assert uses_left(campaign) == 9
    assert_balanced(campaign)


def test_reserve_confirm_and_release_of_a_shared_code_find_the_orders_coupon(shared_code) -> None:
    campaign = shared_code(total_stock=10)

    held = coupon_reserve(user_id="ann", code="SAVE50", order=order("o-1"), hold_seconds=600)
    held_again = coupon_reserve(user_id="ann", code="SAVE50", order=order("o-1"), hold_seconds=600)
    not_held = coupon_confirm(user_id="ann", code="SAVE50", order_id="o-2")
    confirmed = coupon_confirm(user_id="ann", code="SAVE50", order_id="o-1")

    assert held.status == "reserved" and held_again.body() == held.body()
    assert (not_held.code, not_held.status) == (18, "not_held")
    assert confirmed.body() == {"code": 0, "status": "redeemed", "discount": "50.00", "payable": "300.00"}
    coupon = Coupon.objects.get(campaign=campaign)
    assert [e.type for e in coupon.events.order_by("id")] == ["issued", "reserved", "redeemed"]
    assert uses_left(campaign) == 9
    # The order is cancelled: the use goes back; reserving the code again for it is a new use
    assert coupon_release(user_id="ann", code="SAVE50", order_id="o-1").extra["coupon_status"] == "revoked"
    assert uses_left(campaign) == 10
    assert coupon_reserve(user_id="ann", code="SAVE50", order=order("o-1")).status == "reserved"
    assert Coupon.objects.filter(campaign=campaign).exclude(status=CouponStatus.REVOKED).count() == 1
    assert uses_left(campaign) == 9
    assert_balanced(campaign)


def test_a_refused_use_takes_nothing(shared_code) -> None:
    campaign = shared_code(total_stock=10)

    refused = coupon_redeem(user_id="ann", code="SAVE50", order=order("o-1", Decimal("100.00")))

    assert (refused.code, refused.status) == (12, "min_spend_not_met")
    assert uses_left(campaign) == 10 and not Coupon.objects.filter(campaign=campaign).exists()


def test_a_use_whose_coupon_could_not_be_written_is_given_back(shared_code, monkeypatch) -> None:
    # Given a claimed coupon's code that the next new coupon will collide with (a real unique violation)
    campaign = shared_code(total_stock=10)
    coupon_redeem(user_id="ann", code="SAVE50", order=order("o-1"))
    taken = Coupon.objects.get(campaign=campaign).code
    monkeypatch.setattr(first_uses, "new_codes", lambda n: [taken])  # the first use's coupon, and the general
    monkeypatch.setattr(shared, "new_codes", lambda n: [taken])  # path's it then falls back on

    with pytest.raises(Exception, match="unique"):
        coupon_redeem(user_id="bob", code="SAVE50", order=order("o-2"))

    assert uses_left(campaign) == 9
    assert int(redis_client().hget(campaign_keys(campaign.pk).users, "bob") or 0) == 0
    assert_balanced(campaign)


def test_redis_down_is_a_503_and_takes_nothing(shared_code) -> None:
    campaign = shared_code(total_stock=10)

    with override_settings(REDIS_URL=f"redis://127.0.0.1:{free_port()}/0"):
        reset_redis_client()
        try:
            with pytest.raises(Unavailable):
                coupon_redeem(user_id="ann", code="SAVE50", order=order("o-1"))
        finally:
            reset_redis_client()

    assert not Coupon.objects.filter(campaign=campaign).exists() and uses_left(campaign) == 10


# --- codes that aren't live: the same 404 ----------------------------------------------------------------


@pytest.mark.parametrize("state", ["unknown", "paused", "ended", "draft", "another kind"])
def test_an_unknown_code_and_a_code_of_a_campaign_not_live_are_the_same_404(client, shared_code, state) -> None:
    if state == "paused":
        campaign_pause(campaign=shared_code())
    elif state == "ended":
        CampaignFactory(kind="codes", code="SAVE50", ends_at=__import__("django.utils.timezone").utils.timezone.now())
    elif state == "draft":
        CampaignFactory(kind="codes", code="SAVE50", published_at=None)
    elif state == "another kind":
        shared_code(code="OTHER1")
    with pytest.raises(NotFound):
        coupon_redeem(user_id="ann", code="SAVE50", order=order("o-1"))

    answer = client.post("/api/v1/coupons/SAVE50/redeem", {"order_id": "o-1", "order_amount": "350.00",
                                                           "currency": "CNY"}, content_type="application/json",
                         **shopper_headers("ann", HTTP_IDEMPOTENCY_KEY="k1"))
    unknown = client.post("/api/v1/coupons/NOPE-NOPE/redeem", {"order_id": "o-1", "order_amount": "350.00",
                                                               "currency": "CNY"}, content_type="application/json",
                          **shopper_headers("ann", HTTP_IDEMPOTENCY_KEY="k2"))
    assert answer.status_code == unknown.status_code == 404 and answer.json() == unknown.json()


@pytest.mark.parametrize("then", ["paused", "ended"])
def test_a_checkout_begun_with_a_shared_code_is_finished_after_its_campaign_is_paused_or_ended(
        shared_code, then) -> None:
    # given: ann holds the code for o-1, bob redeemed it for o-2; then the campaign is paused, or it ends
    campaign = shared_code(total_stock=10)
    assert coupon_reserve(user_id="ann", code="SAVE50", order=order("o-1")).status == "reserved"
    assert coupon_redeem(user_id="bob", code="SAVE50", order=order("o-2")).status == "redeemed"
    if then == "paused":
        campaign_pause(campaign=campaign)
    else:
        Campaign.objects.filter(pk=campaign.pk).update(ends_at=timezone.now())
        forget_live_codes()

    # when / then: a new use is the 404 of a code not live; the uses made find their coupons
    with pytest.raises(NotFound):
        coupon_reserve(user_id="carl", code="SAVE50", order=order("o-3"))
    with pytest.raises(NotFound):
        coupon_confirm(user_id="dan", code="SAVE50", order_id="o-4")  # no use of it for that order
    confirmed = coupon_confirm(user_id="ann", code="save50", order_id="o-1")
    assert confirmed.body() == {"code": 0, "status": "redeemed", "discount": "50.00", "payable": "300.00"}
    assert coupon_release(user_id="bob", code="SAVE50", order_id="o-2").extra["coupon_status"] == "revoked"
    assert coupon_release(user_id="bob", code="SAVE50", order_id="o-2").extra["coupon_status"] == "revoked"
    assert uses_left(campaign) == 9  # bob's use given back, once
    assert_balanced(campaign)


@override_settings(COUPONS_CODE_MISSES_PER_MINUTE=100, COUPONS_CODE_MISSES_PER_IP_PER_MINUTE=3)
def test_unknown_codes_count_against_the_client_address_whatever_shoppers_it_sends(client, shared_code) -> None:
    shared_code()
    body = {"order_id": "o-1", "order_amount": "350.00", "currency": "CNY"}

    def redeem(user: str, code: str) -> int:
        return client.post(f"/api/v1/coupons/{code}/redeem", body, content_type="application/json",
                           **shopper_headers(user, HTTP_IDEMPOTENCY_KEY=f"{user}-{code}")).status_code

    misses = [redeem(f"guesser-{i}", f"GUESS{i}") for i in range(3)]
    after = [redeem("guesser-9", "SAVE50"), redeem("guesser-9", "GUESS9")]

    assert misses == [404, 404, 404]
    assert after == [429, 429]  # the address is refused, even for a good code, until the minute is over
    refused = client.post("/api/v1/coupons/SAVE50/redeem", body, content_type="application/json",
                          **shopper_headers("guesser-8", HTTP_IDEMPOTENCY_KEY="g8"))
    until_the_minute_is_over = 60 - int(time.time()) % 60
    assert refused.status_code == 429
    assert int(refused["Retry-After"]) in (until_the_minute_is_over, until_the_minute_is_over % 60 + 1)


def test_the_api_answers_a_shared_code_on_all_four_endpoints(client, shared_code) -> None:
    campaign = shared_code(total_stock=5)
    headers = shopper_headers("ann")

    def post(action: str, body: dict[str, Any], key: str) -> Any:
        return client.post(f"/api/v1/coupons/Save50/{action}", body, content_type="application/json",
                           **headers, HTTP_IDEMPOTENCY_KEY=key)

    reserved = post("reserve", {"order_id": "o-1", "order_amount": "350.00", "currency": "CNY"}, "r1")
    replayed = post("reserve", {"order_id": "o-1", "order_amount": "350.00", "currency": "CNY"}, "r1")
    confirmed = post("confirm", {"order_id": "o-1"}, "c1")
    released = post("release", {"order_id": "o-1"}, "l1")
    redeemed = post("redeem", {"order_id": "o-2", "order_amount": "350.00", "currency": "CNY"}, "d1")

    assert reserved.json()["status"] == "reserved" and replayed.headers["Idempotent-Replayed"] == "true"
    assert confirmed.json() == {"code": 0, "status": "redeemed", "discount": "50.00", "payable": "300.00"}
    assert released.json() == {"code": 0, "status": "released", "coupon_status": "revoked"}
    assert redeemed.json()["status"] == "redeemed"
    assert uses_left(campaign) == 4
    assert_balanced(campaign)


# --- rebuild and reconciliation ------------------------------------------------------------------------


def test_a_codes_campaigns_lost_redis_state_is_rebuilt_from_its_coupons(shared_code) -> None:
    campaign = shared_code(total_stock=10, per_user_limit=2)
    coupon_redeem(user_id="ann", code="SAVE50", order=order("o-1"))
    coupon_reserve(user_id="ann", code="SAVE50", order=order("o-2"))
    coupon_redeem(user_id="bob", code="SAVE50", order=order("o-3"))
    coupon_release(user_id="bob", code="SAVE50", order_id="o-3")
    keys = campaign_keys(campaign.pk)
    redis_client().delete(*keys.state_of(codes=True))

    left = campaign_rebuild(campaign=campaign)

    assert left == uses_left(campaign) == 8
    assert int(redis_client().hget(keys.users, "ann")) == 2
    assert coupon_redeem(user_id="ann", code="SAVE50", order=order("o-4")).status == "limit_reached"
    assert coupon_release(user_id="ann", code="SAVE50", order_id="o-2").extra["coupon_status"] == "revoked"
    assert uses_left(campaign) == 9
    assert_balanced(campaign)


def test_a_use_taken_in_redis_whose_request_died_is_given_back_by_reconciliation(shared_code) -> None:
    from orders.reconciliation import campaign_reconcile

    campaign = shared_code(total_stock=10)
    coupon_redeem(user_id="ann", code="SAVE50", order=order("o-1"))
    # a request that took its use and died before writing its coupon
    from campaigns.redis_state import run_code_take

    run_code_take(campaign_id=campaign.pk, user_id="bob", member=f"code:{campaign.pk}:{'0' * 24}:0/bob")
    assert campaign_verify(campaign=campaign).ledger_only_claims == 1

    record = campaign_reconcile(campaign=campaign, repair=True, source="test")

    assert record is not None and record.balanced and "gave back 1 uses" in record.repairs[0]
    assert uses_left(campaign) == 9
