"""Races on one coupon: many orders redeem, reserve, confirm and release it at the same moment.

Real concurrency only: threads with their own PostgreSQL connection, or requests to the real granian
server, released together by a barrier. Afterwards the totals are exact: one winner, every other answer a
clean refusal, one event per state change, and the coupon row equal to the fold of its events.
"""
from __future__ import annotations

import http.client
import json
import threading
import urllib.parse
from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection, connections
from django.utils import timezone

from campaigns.models import Campaign
from campaigns.redis_state import run_claim
from core.auth import mint_token
from coupons.models import Coupon, CouponEvent, CouponEventType, CouponStatus
from coupons.outcomes import UseOutcome
from coupons.replay import disagreements, fold
from coupons.services import Order, coupon_confirm, coupon_redeem, coupon_release, coupon_reserve
from orders.drain import drain_campaign

RACERS = 20
AMOUNT = Decimal("350.00")  # the factory's rule: spend 300.00, get 50.00 off
DISCOUNT = Decimal("50.00")
# Events that change a coupon's state (each one is version + 1); 'issued' is version 1 itself.
STATE_CHANGES = {
    CouponEventType.RESERVED, CouponEventType.REDEEMED, CouponEventType.RELEASED, CouponEventType.HOLD_LAPSED,
    CouponEventType.EXPIRED, CouponEventType.REVOKED,
}


# --- helpers -------------------------------------------------------------------------------------------


def issue_coupon(campaign: Campaign, user_id: str) -> Coupon:
    """Claim one coupon for the shopper and drain the ledger: the coupon is issued, version 1."""
    result = run_claim(campaign_id=campaign.pk, user_id=user_id, idempotency_key=None)
    assert result.code == 0
    drain_campaign(campaign_id=campaign.pk)
    return Coupon.objects.get(claim_id=f"{campaign.pk}-{result.ledger_id}")


def all_at_once(jobs: list[Callable[[], Any]]) -> list[Any]:
    """Run every job in its own thread, released together by a barrier; return results or exceptions."""
    barrier = threading.Barrier(len(jobs))
    results: list[Any] = [None] * len(jobs)

    def run(index: int, job: Callable[[], Any]) -> None:
        try:
            connection.ensure_connection()  # connect before the barrier, so the race is the service's
            barrier.wait(timeout=60)
            results[index] = job()
        except BaseException as exc:  # noqa: B036 (reported to the test, which asserts on it)
            results[index] = exc
        finally:
            connections.close_all()  # this thread's own connection

    threads = [threading.Thread(target=run, args=(i, job)) for i, job in enumerate(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads), "a racer hung"
    return results


def outcomes_of(results: list[Any]) -> list[UseOutcome]:
    errors = [r for r in results if not isinstance(r, UseOutcome)]
    assert not errors, f"racers raised: {errors!r}"
    return results


def events_of(coupon: Coupon) -> list[CouponEvent]:
    return list(CouponEvent.objects.filter(coupon=coupon).order_by("created_at", "id"))


def event_types(coupon: Coupon) -> list[str]:
    return [e.type for e in events_of(coupon)]


def assert_row_is_the_fold_of_its_events(coupon: Coupon) -> None:
    coupon.refresh_from_db()
    folded = fold(events_of(coupon))
    assert folded is not None
    assert (coupon.status, coupon.order_id, coupon.version) == (folded.status, folded.order_id, folded.version)
    changes = [e for e in events_of(coupon) if e.type in STATE_CHANGES]
    assert len(changes) == coupon.version - 1
    assert list(disagreements(Coupon.objects.filter(pk=coupon.pk))) == []


def order(order_id: str, amount: Decimal = AMOUNT) -> Order:
    return Order(order_id, amount, "CNY")


class Storefront:
    """A storefront backend talking to the real server over its own keep-alive HTTP connection."""

    def __init__(self, base_url: str, user_id: str) -> None:
        url = urllib.parse.urlsplit(base_url)
        self.conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
        self.headers = {"X-User-Id": user_id, "X-Token": mint_token(user_id, ttl=600),
                        "Content-Type": "application/json"}

    def post(self, path: str, body: dict[str, Any], key: str | None = None) -> tuple[int, dict[str, Any]]:
        headers = dict(self.headers, **({"Idempotency-Key": key} if key else {}))
        self.conn.request("POST", path, body=json.dumps(body), headers=headers)
        response = self.conn.getresponse()
        return response.status, json.loads(response.read())

    def close(self) -> None:
        self.conn.close()


# --- redeem --------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_twenty_orders_redeeming_one_coupon_at_once_give_exactly_one_redemption(live_campaign) -> None:
    # Given an issued coupon
    campaign = live_campaign(total_stock=5)
    coupon = issue_coupon(campaign, "alice")

    # When 20 orders redeem it at the same moment
    results = outcomes_of(all_at_once([
        (lambda i=i: coupon_redeem(user_id="alice", code=coupon.code, order=order(f"order-{i}")))
        for i in range(RACERS)
    ]))

    # Then exactly one wins and 19 are told it is already redeemed
    codes = Counter(r.code for r in results)
    assert codes == {0: 1, 11: RACERS - 1}
    assert {r.status for r in results if r.code == 11} == {"already_redeemed"}
    [winner] = [f"order-{i}" for i, r in enumerate(results) if r.code == 0]
    assert results[int(winner.split("-")[1])].extra == {"discount": "50.00", "payable": "300.00"}
    # And the coupon is redeemed for the winner's order, with one 'redeemed' event
    coupon.refresh_from_db()
    assert (coupon.status, coupon.order_id, coupon.version) == (CouponStatus.REDEEMED, winner, 2)
    assert (coupon.discount, coupon.order_amount) == (DISCOUNT, AMOUNT)
    assert event_types(coupon) == [CouponEventType.ISSUED, CouponEventType.REDEEMED]
    assert CouponEvent.objects.get(coupon=coupon, type=CouponEventType.REDEEMED).data["order_id"] == winner
    assert_row_is_the_fold_of_its_events(coupon)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_twenty_redeems_of_one_coupon_through_http_give_exactly_one_redemption(http_server, live_campaign) -> None:
    # Given an issued coupon and 20 storefront connections to the real server
    campaign = live_campaign(total_stock=5)
    coupon = issue_coupon(campaign, "alice")
    fronts = [Storefront(http_server, "alice") for _ in range(RACERS)]
    for front in fronts:
        front.conn.connect()

    # When they redeem it for 20 different orders, each with its own Idempotency-Key, at the same moment
    def redeem(i: int) -> tuple[int, dict[str, Any]]:
        return fronts[i].post(f"/api/v1/coupons/{coupon.code}/redeem",
                              {"order_id": f"order-{i}", "order_amount": "350.00", "currency": "CNY"},
                              key=f"redeem-{i}")

    try:
        results = all_at_once([(lambda i=i: redeem(i)) for i in range(RACERS)])
    finally:
        for front in fronts:
            front.close()

    # Then every answer is a 200 (no 5xx), one redemption and 19 already_redeemed
    assert not [r for r in results if isinstance(r, BaseException)], results
    assert Counter(status for status, _ in results) == {200: RACERS}
    bodies = [body for _, body in results]
    assert Counter((b["code"], b["status"]) for b in bodies) == {(0, "redeemed"): 1,
                                                                 (11, "already_redeemed"): RACERS - 1}
    [winner] = [f"order-{i}" for i, b in enumerate(bodies) if b["code"] == 0]
    assert bodies[int(winner.split("-")[1])] == {
        "code": 0, "status": "redeemed", "discount": "50.00", "payable": "300.00"}
    coupon.refresh_from_db()
    assert (coupon.status, coupon.order_id, coupon.version) == (CouponStatus.REDEEMED, winner, 2)
    assert event_types(coupon) == [CouponEventType.ISSUED, CouponEventType.REDEEMED]
    assert_row_is_the_fold_of_its_events(coupon)


# --- reserve -------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_twenty_orders_reserving_one_coupon_at_once_give_exactly_one_hold(live_campaign) -> None:
    # Given an issued coupon
    campaign = live_campaign(total_stock=5)
    coupon = issue_coupon(campaign, "alice")

    # When 20 orders reserve it at the same moment
    results = outcomes_of(all_at_once([
        (lambda i=i: coupon_reserve(user_id="alice", code=coupon.code, order=order(f"order-{i}"), hold_seconds=600))
        for i in range(RACERS)
    ]))

    # Then exactly one holds it and 19 are told it is on hold for another order
    assert Counter((r.code, r.status) for r in results) == {(0, "reserved"): 1, (16, "on_hold"): RACERS - 1}
    [winner] = [f"order-{i}" for i, r in enumerate(results) if r.code == 0]
    coupon.refresh_from_db()
    assert (coupon.status, coupon.order_id, coupon.version) == (CouponStatus.HELD, winner, 2)
    assert coupon.hold_until is not None and coupon.hold_until > timezone.now() + timedelta(seconds=500)
    assert event_types(coupon) == [CouponEventType.ISSUED, CouponEventType.RESERVED]
    assert CouponEvent.objects.get(coupon=coupon, type=CouponEventType.RESERVED).data["order_id"] == winner
    assert_row_is_the_fold_of_its_events(coupon)


def lapse_the_hold(coupon: Coupon) -> None:
    """Move the hold's end into the past, as if its time had run out (a direct UPDATE of the row)."""
    updated = Coupon.objects.filter(pk=coupon.pk, status=CouponStatus.HELD).update(
        hold_until=timezone.now() - timedelta(seconds=1))
    assert updated == 1


@pytest.mark.django_db
def test_a_lapsed_hold_frees_the_coupon_for_another_order_and_the_first_order_then_finds_it_on_hold(
    live_campaign,
) -> None:
    # Given a coupon held for order A whose hold has lapsed
    campaign = live_campaign(total_stock=5)
    coupon = issue_coupon(campaign, "alice")
    assert coupon_reserve(user_id="alice", code=coupon.code, order=order("A")).code == 0
    lapse_the_hold(coupon)

    # When order B reserves it
    reserved = coupon_reserve(user_id="alice", code=coupon.code, order=order("B"))

    # Then B holds it: the hold of A lapsed (its event) and B's 'reserved' follows
    assert (reserved.code, reserved.status) == (0, "reserved")
    assert event_types(coupon) == [CouponEventType.ISSUED, CouponEventType.RESERVED,
                                   CouponEventType.HOLD_LAPSED, CouponEventType.RESERVED]
    lapsed = CouponEvent.objects.get(coupon=coupon, type=CouponEventType.HOLD_LAPSED)
    assert lapsed.data["order_id"] == "A"
    # And A's late confirm is refused: the coupon is held for B
    confirm = coupon_confirm(user_id="alice", code=coupon.code, order_id="A")
    assert (confirm.code, confirm.status) == (16, "on_hold")
    coupon.refresh_from_db()
    assert (coupon.status, coupon.order_id, coupon.version) == (CouponStatus.HELD, "B", 4)
    assert_row_is_the_fold_of_its_events(coupon)


@pytest.mark.django_db
def test_confirm_after_the_hold_lapsed_is_refused_as_hold_lapsed(live_campaign) -> None:
    # Given a coupon held for order A whose hold has lapsed, and nobody reserved it since
    campaign = live_campaign(total_stock=5)
    coupon = issue_coupon(campaign, "alice")
    assert coupon_reserve(user_id="alice", code=coupon.code, order=order("A")).code == 0
    lapse_the_hold(coupon)

    # When A confirms (paid too late)
    confirm = coupon_confirm(user_id="alice", code=coupon.code, order_id="A")

    # Then the answer says the hold lapsed, and the coupon is active again with the lapse recorded
    assert (confirm.code, confirm.status) == (17, "hold_lapsed")
    coupon.refresh_from_db()
    assert (coupon.status, coupon.order_id, coupon.hold_until, coupon.version) == (CouponStatus.ACTIVE, None, None, 3)
    assert event_types(coupon) == [CouponEventType.ISSUED, CouponEventType.RESERVED, CouponEventType.HOLD_LAPSED]
    assert_row_is_the_fold_of_its_events(coupon)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_twenty_orders_racing_for_a_lapsed_hold_lapse_it_once_and_one_of_them_holds_it(live_campaign) -> None:
    # Given a coupon held for order A whose hold has lapsed
    campaign = live_campaign(total_stock=5)
    coupon = issue_coupon(campaign, "alice")
    assert coupon_reserve(user_id="alice", code=coupon.code, order=order("A")).code == 0
    lapse_the_hold(coupon)

    # When 20 other orders reserve it at the same moment
    results = outcomes_of(all_at_once([
        (lambda i=i: coupon_reserve(user_id="alice", code=coupon.code, order=order(f"order-{i}")))
        for i in range(RACERS)
    ]))

    # Then the lapse is recorded once, one order holds it and 19 find it on hold
    assert Counter((r.code, r.status) for r in results) == {(0, "reserved"): 1, (16, "on_hold"): RACERS - 1}
    [winner] = [f"order-{i}" for i, r in enumerate(results) if r.code == 0]
    assert event_types(coupon) == [CouponEventType.ISSUED, CouponEventType.RESERVED,
                                   CouponEventType.HOLD_LAPSED, CouponEventType.RESERVED]
    coupon.refresh_from_db()
    assert (coupon.status, coupon.order_id, coupon.version) == (CouponStatus.HELD, winner, 4)
    assert_row_is_the_fold_of_its_events(coupon)


# --- confirm, redeem and release mixed -----------------------------------------------------------------

@pytest.mark.django_db
def test_a_release_writes_one_released_event(live_campaign) -> None:
    # Given a coupon held for order A
    campaign = live_campaign(total_stock=5)
    coupon = issue_coupon(campaign, "alice")
    assert coupon_reserve(user_id="alice", code=coupon.code, order=order("A")).code == 0

    # When A is released
    released = coupon_release(user_id="alice", code=coupon.code, order_id="A")

    # Then the coupon is active again, version 3, and the release is in the event log
    assert (released.code, released.status, released.extra) == (0, "released", {"coupon_status": "active"})
    coupon.refresh_from_db()
    assert (coupon.status, coupon.order_id, coupon.version) == (CouponStatus.ACTIVE, None, 3)
    assert event_types(coupon) == [CouponEventType.ISSUED, CouponEventType.RESERVED, CouponEventType.RELEASED]
    assert_row_is_the_fold_of_its_events(coupon)


# At least one release always takes effect here (the coupon leaves A's hold only through A: by a confirm or
# redeem of A, or a release of A), so a release that skipped its event would fail this test on every run.
@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("round_", range(3))
def test_confirm_redeem_and_release_mixed_on_one_held_coupon_leave_the_row_equal_to_its_events(
    live_campaign, round_: int,
) -> None:
    # Given a coupon held for order A
    campaign = live_campaign(total_stock=5)
    coupon = issue_coupon(campaign, "alice")
    assert coupon_reserve(user_id="alice", code=coupon.code, order=order("A")).code == 0

    # When 20 requests hit it at once: A is confirmed, redeemed and released, other orders redeem it
    jobs: list[tuple[str, Callable[[], UseOutcome]]] = []
    for i in range(5):
        jobs.append(("confirm A", lambda: coupon_confirm(user_id="alice", code=coupon.code, order_id="A")))
        jobs.append(("redeem A", lambda: coupon_redeem(user_id="alice", code=coupon.code, order=order("A"))))
        jobs.append(("release A", lambda: coupon_release(user_id="alice", code=coupon.code, order_id="A")))
        jobs.append((f"redeem B{i}", lambda i=i: coupon_redeem(user_id="alice", code=coupon.code,
                                                               order=order(f"B{i}"))))
    results = outcomes_of(all_at_once([job for _, job in jobs]))

    # Then every answer is a decision of the contract (no contention error, nothing raised) ...
    answers = Counter((name.rstrip("0123456789"), r.code, r.status) for (name, _), r in zip(jobs, results, strict=True))
    allowed = {
        ("confirm A", 0, "redeemed"), ("confirm A", 11, "already_redeemed"), ("confirm A", 17, "hold_lapsed"),
        ("confirm A", 18, "not_held"),
        ("redeem A", 0, "redeemed"), ("redeem A", 11, "already_redeemed"),
        ("release A", 0, "released"),
        ("redeem B", 0, "redeemed"), ("redeem B", 11, "already_redeemed"), ("redeem B", 16, "on_hold"),
    }
    assert set(answers) <= allowed, answers
    assert sum(answers.values()) == RACERS
    # ... each 'redeemed' event of another order answers exactly that order's one success ...
    events = events_of(coupon)
    for i in range(5):
        won = [r for (name, _), r in zip(jobs, results, strict=True) if name == f"redeem B{i}" and r.code == 0]
        assert len(won) == len([e for e in events if e.type == CouponEventType.REDEEMED
                                and e.data["order_id"] == f"B{i}"])
    # ... the releases never outnumber the release requests, and the row is the fold of the events
    assert len([e for e in events if e.type == CouponEventType.RELEASED]) <= answers[("release A", 0, "released")]
    assert events[0].type == CouponEventType.ISSUED and events[1].type == CouponEventType.RESERVED
    assert_row_is_the_fold_of_its_events(coupon)
    coupon.refresh_from_db()
    print(f"mixed round {round_}: version {coupon.version}, final {coupon.status} {coupon.order_id}, "
          f"events {Counter(e.type for e in events)}, answers {dict(answers)}")


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_new_shopper_redeeming_two_new_shopper_coupons_at_once_gets_only_one(live_campaign) -> None:
    import threading as _threading
    from decimal import Decimal as _Decimal

    from django.db import connections as _connections

    from coupons.services import Order as _Order
    from coupons.services import coupon_redeem as _redeem
    from tests.coupons.helpers import claimed_coupon

    first = claimed_coupon(live_campaign(audience="new", min_spend=_Decimal("0")), "newbie")
    second = claimed_coupon(live_campaign(audience="new", min_spend=_Decimal("0")), "newbie")
    barrier = _threading.Barrier(2)
    answers: list = []

    def use(code: str, order: str) -> None:
        barrier.wait()
        try:
            answers.append(_redeem(user_id="newbie", code=code, order=_Order(order, _Decimal("100.00"), "CNY")).code)
        finally:
            _connections.close_all()

    threads = [_threading.Thread(target=use, args=(c.code, f"o{i}")) for i, c in enumerate((first, second))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert sorted(answers) == [0, 15]
