"""A shared code's first use for an order (coupons.services._first_shared_use, issue 19's performance): the same
coupon, events, webhooks and answers as the general path, in two statements, and a stale cache of the code's
campaign can't let a paused code through (Redis's take checks the pause atomically).

Real PostgreSQL and Redis.
"""
from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from campaigns import pricing, redis_state
from campaigns.models import Campaign
from core.errors import NotFound
from coupons import services
from coupons.models import Coupon, CouponEvent
from coupons.services import Order, coupon_redeem, coupon_reserve
from webhooks.models import OutboxEvent
from webhooks.services import endpoint_add

from . import test_shared_codes
from .test_shared_codes import AMOUNT, assert_balanced, order, uses_left

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
    monkeypatch.setattr(services, "_first_shared_use", lambda *args, **kwargs: None)


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


def test_a_first_use_is_two_statements(shared_code, subscribed) -> None:
    # Given a live shared code whose campaign this process already read
    shared_code(total_stock=10)
    coupon_redeem(user_id="ann", code="SAVE50", order=order("o-1"))

    # When another shopper redeems it
    with CaptureQueriesContext(connection) as queries:
        outcome = coupon_redeem(user_id="bob", code="SAVE50", order=order("o-1"))

    # Then it costs the locks and one write (and the transaction's own statements)
    statements = [q["sql"] for q in queries.captured_queries if not q["sql"].startswith(("SAVEPOINT", "RELEASE"))]
    assert outcome.status == "redeemed" and len(statements) == 2, statements


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
