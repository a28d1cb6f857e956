"""A shared code's first use for an order (coupons.services.first_uses, issue 19's performance): the same
coupon, events, webhooks and answers as the general path, in three statements, written together with the other
first uses of the moment (exact limits, one use an order), and a stale cache of the code's
campaign can't let a paused code through (Redis's take checks the pause atomically).

Real PostgreSQL and Redis.
"""
from __future__ import annotations

import json
import threading
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection, connections, transaction
from django.test.utils import CaptureQueriesContext

from campaigns import pricing, redis_state
from campaigns.models import Campaign
from campaigns.redis_state import campaign_keys, redis_client
from core.errors import NotFound
from core.locks import AdvisoryLock
from coupons.models import Coupon, CouponEvent
from coupons.services import Order, coupon_redeem, coupon_reserve, first_uses, resolve
from webhooks.models import OutboxEvent
from webhooks.services import endpoint_add

from . import test_shared_codes
from .test_shared_codes import AMOUNT, assert_balanced, order, statuses, uses_left
from .test_use_concurrency import all_at_once

LINES = (pricing.CartLine(sku="tea", category="drinks", quantity=2, unit_price=Decimal("200.00")),)


shared_code = test_shared_codes.shared_code  # the fixture, by its name


@pytest.fixture
def subscribed(settings: Any, db: Any) -> None:
    """An endpoint that subscribes to every event: the uses' webhooks are written to the outbox."""
    settings.COUPONS_WEBHOOK_ALLOW_PRIVATE = True
    endpoint_add(url="http://127.0.0.1:9/hooks", secret="s" * 20)


def written(user_id: str) -> dict[str, Any]:
    """What a use wrote, without what differs between two uses (ids, codes, claim ids, times)."""
    coupon = Coupon.objects.get(user_id=user_id)
    times = ("valid_from", "expires_at", "hold_until", "redeemed_at")
    events = [(e.type, e.source, {k: v for k, v in e.data.items() if k not in times})
              for e in CouponEvent.objects.filter(coupon=coupon).order_by("pk")]
    mine = ("coupon_id", "code", "user_id", *times)
    out = [(o.type, o.key == f"coupon:{coupon.pk}", o.campaign_id, o.data["coupon_id"] == coupon.pk,
            o.data["code"] == coupon.code, o.data["user_id"] == user_id, sorted(o.data),
            {k: v for k, v in o.data.items() if k not in mine})
           for o in OutboxEvent.objects.filter(key=f"coupon:{coupon.pk}").order_by("pk")]
    row = {f: getattr(coupon, f) for f in ("status", "version", "order_id", "order_amount", "discount", "shares")}
    return {"row": row, "held": coupon.hold_until is not None, "redeemed": coupon.redeemed_at is not None,
            "events": events, "out": out}


def general_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(resolve, "_first_shared_use", lambda *args, **kwargs: None)


@pytest.mark.parametrize("use", ["redeem", "reserve"])
@pytest.mark.parametrize("lines", [None, LINES])
def test_a_first_use_writes_and_answers_what_the_general_path_does(shared_code, subscribed, monkeypatch, use,
                                                                   lines) -> None:
    # Given a live shared code, and an order with or without lines
    campaign = shared_code(total_stock=10)
    amount = AMOUNT if lines is None else Decimal("400.00")
    run = coupon_redeem if use == "redeem" else coupon_reserve

    # When one shopper uses it by the first-use path, another by the general path
    fast = run(user_id="ann", code="SAVE50", order=Order("o-1", amount, "CNY", lines))
    with monkeypatch.context() as patch:
        general_path(patch)
        general = run(user_id="bob", code="SAVE50", order=Order("o-1", amount, "CNY", lines))

    # Then the answers, the coupons, their events and webhooks are the same
    def answer(outcome: Any) -> dict[str, Any]:
        body = dict(outcome.extra)
        body.pop("hold_until", None)
        return {"code": outcome.code, "status": outcome.status, **body}

    assert answer(fast) == answer(general) and fast.code == 0
    assert written("ann") == written("bob")
    used = "coupon.redeemed" if use == "redeem" else "coupon.reserved"
    assert [e[0] for e in written("ann")["out"]] == ["coupon.issued", used]
    assert uses_left(campaign) == 8
    assert_balanced(campaign)


def test_a_first_use_is_three_statements(shared_code, subscribed) -> None:
    # Given a live shared code whose campaign this process already read
    shared_code(total_stock=10)
    coupon_redeem(user_id="ann", code="SAVE50", order=order("o-1"))

    # When another shopper redeems it
    with CaptureQueriesContext(connection) as queries:
        outcome = coupon_redeem(user_id="bob", code="SAVE50", order=order("o-1"))

    # Then it costs the locks, the read after them and one write (and the transaction's own statements)
    statements = [q["sql"] for q in queries.captured_queries if not q["sql"].startswith(("SAVEPOINT", "RELEASE"))]
    assert outcome.status == "redeemed" and len(statements) == 3, statements


def batch_sizes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes of the batches of first uses this process writes from now on (the real writer, counted)."""
    sizes: list[int] = []
    write = first_uses._FIRST_USES._run_batch

    def counted(uses: Any) -> Any:
        sizes.append(len(uses))
        return write(uses)

    monkeypatch.setattr(first_uses._FIRST_USES, "_run_batch", counted)
    return sizes


@pytest.mark.django_db(transaction=True)
def test_first_uses_at_once_are_written_together_and_the_limits_stay_exact(shared_code, subscribed,
                                                                          monkeypatch) -> None:
    # Given a shared code of 25 uses, one per shopper, and a webhook endpoint
    campaign = shared_code(total_stock=25)
    sizes = batch_sizes(monkeypatch)

    # When 40 shoppers redeem it at the same moment, each from its own thread (its own connection), and one of
    # them twice for one order, at once
    jobs = [lambda i=i: coupon_redeem(user_id=f"s-{i}", code="SAVE50", order=order(f"o-{i}")) for i in range(40)]
    jobs.append(lambda: coupon_redeem(user_id="s-0", code="SAVE50", order=order("o-0")))
    results = all_at_once(jobs)

    # Then uses were written in batches of more than one, and exactly 25 were used: one coupon, two events and
    # two webhooks each; the twice-asked order has one use, answered alike both times
    assert max(sizes) > 1 and sum(sizes) >= 41, sizes
    assert statuses(results) == {"redeemed": 26, "sold_out": 15} or statuses(results) == {"redeemed": 25,
                                                                                          "sold_out": 16}
    assert Coupon.objects.filter(campaign=campaign).count() == 25 and uses_left(campaign) == 0
    assert CouponEvent.objects.filter(campaign=campaign).count() == 50
    assert OutboxEvent.objects.filter(campaign_id=campaign.pk).count() == 50
    twice = [r for r in (results[0], results[-1])]
    assert twice[0].status == twice[1].status and (twice[0].status != "redeemed" or twice[0].extra == twice[1].extra)
    assert Coupon.objects.filter(user_id="s-0").count() == (1 if twice[0].status == "redeemed" else 0)
    assert_balanced(campaign)


@pytest.mark.django_db(transaction=True)
def test_a_first_use_whose_order_another_request_holds_is_decided_alone_after_it(shared_code, monkeypatch) -> None:
    # Given a request that holds ann's order o-1 (its lock, in an open transaction of another connection)
    campaign = shared_code(total_stock=10)
    sizes = batch_sizes(monkeypatch)
    held, release = threading.Event(), threading.Event()

    def hold_the_order() -> None:
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))",
                               [AdvisoryLock.ORDER_COUPONS, "ann\no-1"])
                held.set()
                release.wait(10)
        finally:
            connections.close_all()

    holder = threading.Thread(target=hold_the_order)
    holder.start()
    assert held.wait(10)
    threading.Timer(0.3, release.set).start()

    # When ann redeems the code for that order
    outcome = coupon_redeem(user_id="ann", code="SAVE50", order=order("o-1"))
    holder.join(10)

    # Then the batch could not take the order's lock (nothing written, nothing taken by it), and the general
    # path, waiting for it, used the code once
    assert sizes == [1] and outcome.status == "redeemed"
    assert Coupon.objects.filter(campaign=campaign, user_id="ann").count() == 1 and uses_left(campaign) == 9
    assert_balanced(campaign)


def test_asked_again_the_same_use_is_the_same_answer_and_a_second_order_a_new_use(shared_code) -> None:
    campaign = shared_code(total_stock=10, per_user_limit=2)
    first = coupon_redeem(user_id="ann", code="SAVE50", order=order("o-1"))
    again = coupon_redeem(user_id="ann", code="SAVE50", order=order("o-1"))
    other = coupon_redeem(user_id="ann", code="SAVE50", order=order("o-2"))
    third = coupon_redeem(user_id="ann", code="SAVE50", order=order("o-3"))
    assert (first.status, again.status, other.status, third.status) == ("redeemed", "redeemed", "redeemed",
                                                                        "limit_reached")
    assert first.extra == again.extra and Coupon.objects.filter(campaign=campaign).count() == 2
    assert uses_left(campaign) == 8
    assert_balanced(campaign)


def test_a_refused_first_use_writes_nothing_and_takes_nothing(shared_code) -> None:
    campaign = shared_code(total_stock=1)
    assert coupon_redeem(user_id="ann", code="SAVE50", order=order("o-1", Decimal("100.00"))).status == \
        "min_spend_not_met"
    assert coupon_redeem(user_id="ann", code="SAVE50", order=order("o-1")).status == "redeemed"
    assert coupon_redeem(user_id="bob", code="SAVE50", order=order("o-1")).status == "sold_out"
    assert Coupon.objects.filter(campaign=campaign).count() == 1 and uses_left(campaign) == 0
    assert_balanced(campaign)


def test_a_stale_cache_of_the_code_cannot_let_a_paused_code_through(shared_code) -> None:
    # Given a shared code used once: this process remembers its campaign (live) for a second
    campaign = shared_code(total_stock=10)
    assert coupon_redeem(user_id="ann", code="SAVE50", order=order("o-1")).status == "redeemed"

    # When another process pauses it (this process's cache is not told)
    Campaign.objects.filter(pk=campaign.pk).update(paused=True)
    redis_state.set_paused(campaign_id=campaign.pk, paused=True)

    # Then the next use within the cache's second is refused by Redis's take, and nothing is written or taken
    with pytest.raises(NotFound):
        coupon_redeem(user_id="bob", code="SAVE50", order=order("o-1"))
    assert not Coupon.objects.filter(user_id="bob").exists() and uses_left(campaign) == 9
    assert_balanced(campaign)


def test_a_first_use_on_an_order_holding_another_coupon_answers_as_the_general_path(shared_code, monkeypatch
                                                                                    ) -> None:
    # Given two shoppers' orders, each holding one shared code's coupon
    shared_code(total_stock=10)
    shared_code(code="MORE10", total_stock=10)
    for user in ("ann", "bob"):
        assert coupon_reserve(user_id=user, code="SAVE50", order=order("o-1")).status == "reserved"

    # When each types another shared code on it, one by the first-use path, one by the general path
    fast = coupon_redeem(user_id="ann", code="MORE10", order=order("o-1"))
    with monkeypatch.context() as patch:
        general_path(patch)
        general = coupon_redeem(user_id="bob", code="MORE10", order=order("o-1"))

    # Then both are priced after the order's other coupon: the same answer
    assert (fast.code, fast.status, fast.extra) == (general.code, general.status, general.extra)


@pytest.fixture
def refusing_user(db: Any) -> Any:
    """A real fault of PostgreSQL's: a trigger that refuses every coupon of the shopper 'refused'."""
    with connection.cursor() as cursor:
        cursor.execute("""CREATE OR REPLACE FUNCTION test_refuse_coupon() RETURNS trigger AS $$
            BEGIN IF NEW.user_id = 'refused' THEN RAISE EXCEPTION 'refused by the test'; END IF; RETURN NEW; END
            $$ LANGUAGE plpgsql""")
        cursor.execute("CREATE TRIGGER test_refuse_coupon BEFORE INSERT ON coupons_coupon FOR EACH ROW "
                       "EXECUTE FUNCTION test_refuse_coupon()")
    yield
    with connection.cursor() as cursor:
        cursor.execute("DROP TRIGGER IF EXISTS test_refuse_coupon ON coupons_coupon")
        cursor.execute("DROP FUNCTION IF EXISTS test_refuse_coupon()")


@pytest.mark.django_db(transaction=True)
def test_a_batch_that_fails_gives_its_takes_back_and_each_use_is_decided_alone(shared_code, refusing_user,
                                                                               monkeypatch) -> None:
    # Given a shared code of 30 uses, and a shopper whose coupon PostgreSQL refuses
    campaign = shared_code(total_stock=30)
    sizes = batch_sizes(monkeypatch)

    # When 20 shoppers and that one redeem it at the same moment
    users = [f"s-{i}" for i in range(20)] + ["refused"]
    results = all_at_once([lambda u=u: coupon_redeem(user_id=u, code="SAVE50", order=order(f"o-{u}"))
                           for u in users])

    # Then a batch holding the refused shopper failed whole, and each of its uses was decided again alone (its
    # take given back, or adopted by that retry): the 20 got their use, the refused one its error, and exactly
    # 20 units are gone (without the retry alone, every use of that batch failed with it)
    assert max(sizes) > 1, sizes
    assert statuses(results) == {"redeemed": 20, "ProgrammingError": 1} or statuses(results) == {
        "redeemed": 20, "InternalError": 1}, statuses(results)
    assert Coupon.objects.filter(campaign=campaign).count() == 20 and uses_left(campaign) == 10
    assert int(redis_client().hget(campaign_keys(campaign.pk).users, "refused") or 0) == 0
    assert_balanced(campaign)


@pytest.mark.parametrize("action", ["redeem", "reserve"])
def test_a_first_uses_answer_is_stored_by_the_batchs_own_statement_and_replayed(shared_code, client, action) -> None:
    from django.db import reset_queries

    from coupons.models import IdempotencyRecord

    from .use_helpers import use

    # given a live shared code
    shared_code()

    # when alice's order uses it under an Idempotency-Key, then asks again with the same key
    reset_queries()  # as the request's start does: the capture's slice starts at 0
    with CaptureQueriesContext(connection) as queries:
        first = use(client, "SAVE50", action, key="K1")
    statements = [q["sql"] for q in queries.captured_queries]  # read now: the next request's start clears them
    again = use(client, "SAVE50", action, key="K1")

    # then the key's answer was written by the statement that wrote the use (atomic with it: no answer of a use
    # that rolled back, no use without its answer), not by a statement of its own after it, and is replayed
    record = IdempotencyRecord.objects.get(user_id="alice", key="K1")
    assert (record.in_flight, record.response_status, first.status_code) == (False, 200, 200)
    assert json.loads(record.response_body) == first.json()
    assert first.json()["status"] == {"redeem": "redeemed", "reserve": "reserved"}[action]
    answered_apart = [sql for sql in statements if sql.startswith("UPDATE coupons_idempotency")]
    assert answered_apart == []
    assert (again.content, again["Idempotent-Replayed"]) == (first.content, "true")
