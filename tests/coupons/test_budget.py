"""A campaign's budget in money (docs/api.md, "Grants, budgets, groups"): taken atomically by reserve and redeem,
given back by a release and a lapsed hold, never exceeded however many uses run at once; 22 budget_exhausted
changes nothing. Real PostgreSQL and Redis; concurrency by threads with their own connections."""
from __future__ import annotations

from collections import Counter
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.db import OperationalError
from django.utils import timezone

from campaigns.models import Campaign
from campaigns.redis_state import redis_client
from campaigns.redis_state.budget import budget_key, budget_left_many
from campaigns.services import campaign_preheat
from coupons import budget
from coupons.compensation import expire_and_lapse_due
from coupons.models import Coupon, CouponStatus, UniqueCode
from coupons.outcomes import UseOutcome
from coupons.services import Order, coupon_confirm, coupon_redeem, coupon_release, coupon_reserve
from webhooks.models import EventType, OutboxEvent, WebhookEndpoint

from ..factories import CampaignFactory
from .code_helpers import codes_of
from .test_use_concurrency import all_at_once, issue_coupon
from .use_helpers import answer, use

AMOUNT = Decimal("350.00")  # the factory's rule: spend 300.00, get 50.00 off
DISCOUNT = Decimal("50.00")
BUDGET = Decimal("2000.00")  # 40 discounts of 50.00
SHOPPERS = 100
THREADS = 50  # the server's connections are shared with other test runs: two uses a thread, all released at once


def order(order_id: str, amount: Decimal = AMOUNT) -> Order:
    return Order(order_id, amount, "CNY")


def left(campaign: Campaign) -> Decimal | None:
    """What Redis has left of the campaign's budget."""
    units = budget_left_many([campaign.pk])[campaign.pk]
    return None if units is None else Decimal(units) / 100


def held_and_redeemed(campaign: Campaign) -> Decimal:
    return budget.used(campaign)


def grab(**fields: Any) -> Campaign:
    campaign = CampaignFactory(**{"budget": BUDGET, "total_stock": SHOPPERS, **fields})
    campaign_preheat(campaign=campaign)
    campaign.refresh_from_db()
    return campaign


def shared(code: str = "SAVE50", **fields: Any) -> Campaign:
    campaign = CampaignFactory(**{"kind": "codes", "code": code, "budget": BUDGET, "total_stock": 1000, **fields})
    campaign_preheat(campaign=campaign)
    campaign.refresh_from_db()
    return campaign


def uses_in_pairs(uses: list[Any]) -> list[Any]:
    """Run the uses on THREADS threads released together (each thread its two uses back to back)."""
    pairs = [uses[i::THREADS] for i in range(THREADS)]
    results = all_at_once([(lambda pair=pair: [use() for use in pair]) for pair in pairs])
    flat = []
    for result in results:
        assert isinstance(result, list), result
        flat.extend(result)
    return flat


def codes(results: list[Any]) -> Counter[int]:
    assert all(isinstance(r, UseOutcome) for r in results), [r for r in results if not isinstance(r, UseOutcome)]
    return Counter(r.code for r in results)


# --- many uses at once at the budget's edge ------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_100_claimed_coupons_used_at_once_take_exactly_the_budget_and_the_rest_are_refused_unchanged() -> None:
    # Given 100 shoppers' claimed coupons of a campaign whose budget pays 40 discounts
    campaign = grab()
    coupons = [issue_coupon(campaign, f"shopper-{i}") for i in range(SHOPPERS)]

    # When all of them reserve or redeem at once (demand: 100 x 50.00 = 5,000.00)
    uses = [(lambda c=c, i=i: (coupon_reserve if i % 2 else coupon_redeem)(
        user_id=c.user_id, code=c.code, order=order(f"order-{i}"))) for i, c in enumerate(coupons)]
    results = uses_in_pairs(uses)

    # Then exactly 40 were taken (the budget, to the cent) and 60 refused with 22
    assert codes(results) == {0: 40, 22: 60}
    assert held_and_redeemed(campaign) == BUDGET
    assert left(campaign) == 0
    # and a refused coupon is as it was: active, version 1, no order
    rows = Coupon.objects.filter(campaign=campaign)
    assert Counter(rows.values_list("status", flat=True)) == {
        "active": 60, **Counter(rows.exclude(status="active").values_list("status", flat=True))}
    assert set(rows.filter(status="active").values_list("version", "order_id", "discount")) == {(1, None, None)}
    # and campaign.budget_exhausted is written once (no endpoint subscribes here: see the webhook test)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_100_shoppers_typing_a_shared_code_at_once_use_exactly_the_budget_and_refused_uses_leave_nothing() -> None:
    # Given a shared code whose campaign's budget pays 40 discounts (its uses: 1,000)
    campaign = shared()

    # When 100 shoppers redeem it at once
    uses = [(lambda i=i: coupon_redeem(user_id=f"typist-{i}", code="SAVE50", order=order(f"order-{i}")))
            for i in range(SHOPPERS)]
    results = uses_in_pairs(uses)

    # Then 40 are redeemed, the budget to the cent, and 60 refused with 22
    assert codes(results) == {0: 40, 22: 60}
    assert held_and_redeemed(campaign) == BUDGET
    assert left(campaign) == 0
    # and a refused use left no coupon and gave its use of the code back
    assert Coupon.objects.filter(campaign=campaign).count() == 40
    assert int(redis_client().get(f"cpn:{{c{campaign.pk}}}:uses")) == 1000 - 40


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_releases_and_new_uses_at_once_keep_the_money_exact() -> None:
    # Given a budget of 40 discounts, all held or redeemed by 40 shoppers
    campaign = grab()
    coupons = [issue_coupon(campaign, f"shopper-{i}") for i in range(SHOPPERS)]
    for i, c in enumerate(coupons[:40]):
        assert coupon_reserve(user_id=c.user_id, code=c.code, order=order(f"order-{i}")).code == 0
    assert left(campaign) == 0

    # When those 40 release while the 60 others redeem, all at once
    uses = [(lambda c=c, i=i: coupon_release(user_id=c.user_id, code=c.code, order_id=f"order-{i}"))
            for i, c in enumerate(coupons[:40])]
    uses += [(lambda c=c, i=i: coupon_redeem(user_id=c.user_id, code=c.code, order=order(f"order-{i}")))
             for i, c in enumerate(coupons[40:], start=40)]
    results = uses_in_pairs(uses)

    # Then every release went through, the new uses got no more than what was given back, and the money balances
    assert all(isinstance(r, UseOutcome) for r in results)
    taken = sum(1 for r in results if r.status == "redeemed")
    assert sum(1 for r in results if r.status == "released") == 40
    assert taken <= 40 and sum(1 for r in results if r.code == 22) == 60 - taken
    assert held_and_redeemed(campaign) == DISCOUNT * taken <= BUDGET
    assert left(campaign) == BUDGET - held_and_redeemed(campaign)


# --- one use at a time -----------------------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_release_gives_its_discount_back_exactly_and_a_confirm_takes_nothing_more() -> None:
    campaign = grab(budget=Decimal("120.00"))
    alice, bob, carol = (issue_coupon(campaign, user) for user in ("alice", "bob", "carol"))

    assert coupon_reserve(user_id="alice", code=alice.code, order=order("A-1")).code == 0
    assert coupon_redeem(user_id="bob", code=bob.code, order=order("B-1")).code == 0
    assert left(campaign) == Decimal("20.00")
    refused = coupon_redeem(user_id="carol", code=carol.code, order=order("C-1"))
    assert (refused.code, refused.status) == (22, "budget_exhausted")
    assert Coupon.objects.get(pk=carol.pk).status == CouponStatus.ACTIVE

    assert coupon_confirm(user_id="alice", code=alice.code, order_id="A-1").code == 0
    assert left(campaign) == Decimal("20.00")
    assert coupon_release(user_id="bob", code=bob.code, order_id="B-1").code == 0
    assert left(campaign) == Decimal("70.00")
    assert coupon_release(user_id="bob", code=bob.code, order_id="B-1").code == 0  # again: nothing twice
    assert left(campaign) == Decimal("70.00")
    assert coupon_redeem(user_id="carol", code=carol.code, order=order("C-1")).code == 0
    assert left(campaign) == Decimal("20.00") and held_and_redeemed(campaign) == Decimal("100.00")


@pytest.mark.django_db(transaction=True)
def test_a_hold_again_at_another_price_takes_or_gives_back_the_difference() -> None:
    campaign = grab(budget=Decimal("100.00"), discount_type="percent", discount_value=Decimal("10"),
                    min_spend=Decimal("0"))
    coupon = issue_coupon(campaign, "alice")

    assert coupon_reserve(user_id="alice", code=coupon.code, order=order("A-1", Decimal("400.00"))).code == 0
    assert left(campaign) == Decimal("60.00")
    assert coupon_reserve(user_id="alice", code=coupon.code, order=order("A-1", Decimal("900.00"))).code == 0
    assert left(campaign) == Decimal("10.00")
    # 1,200.00 would take 120.00 in all: 30.00 more than the 10.00 left; refused, the hold stays at 90.00
    assert coupon_redeem(user_id="alice", code=coupon.code, order=order("A-1", Decimal("1200.00"))).code == 22
    assert Coupon.objects.get(pk=coupon.pk).discount == Decimal("90.00")
    assert coupon_redeem(user_id="alice", code=coupon.code, order=order("A-1", Decimal("200.00"))).code == 0
    assert left(campaign) == Decimal("80.00") and held_and_redeemed(campaign) == Decimal("20.00")


@pytest.mark.django_db(transaction=True)
def test_a_lapsed_hold_gives_its_discount_back_by_the_sweep_and_on_the_spot() -> None:
    campaign = grab(budget=Decimal("100.00"))
    alice, bob = issue_coupon(campaign, "alice"), issue_coupon(campaign, "bob")
    assert coupon_reserve(user_id="alice", code=alice.code, order=order("A-1"), hold_seconds=1).code == 0
    assert coupon_reserve(user_id="bob", code=bob.code, order=order("B-1"), hold_seconds=1).code == 0
    assert left(campaign) == 0

    # The sweep lapses alice's hold (bob's too): both discounts go back once its batch commits
    report = expire_and_lapse_due(now=timezone.now() + timedelta(seconds=5))
    assert report.lapsed == 2
    assert left(campaign) == Decimal("100.00") and held_and_redeemed(campaign) == 0

    # A hold found lapsed by a use (lazily) gives back too, before its new use takes again
    assert coupon_reserve(user_id="alice", code=alice.code, order=order("A-2"), hold_seconds=1).code == 0
    Coupon.objects.filter(pk=alice.pk).update(hold_until=timezone.now() - timedelta(seconds=1))
    assert coupon_confirm(user_id="alice", code=alice.code, order_id="A-2").code == 17  # hold_lapsed
    assert left(campaign) == Decimal("100.00") and held_and_redeemed(campaign) == 0


@pytest.mark.django_db(transaction=True)
def test_a_postgresql_failure_after_the_take_gives_the_money_back(monkeypatch) -> None:
    campaign = grab(budget=Decimal("100.00"))
    coupon = issue_coupon(campaign, "alice")
    code_campaign = shared(code="SPEND50", budget=Decimal("100.00"))

    def fails(*args: Any, **kwargs: Any) -> bool:
        raise OperationalError("the server closed the connection")

    monkeypatch.setattr("coupons.services.transitions.transition_write", fails)
    with pytest.raises(OperationalError):
        coupon_redeem(user_id="alice", code=coupon.code, order=order("A-1"))
    with pytest.raises(OperationalError):
        coupon_reserve(user_id="bob", code="SPEND50", order=order("B-1"))

    assert left(campaign) == Decimal("100.00") and left(code_campaign) == Decimal("100.00")
    assert Coupon.objects.get(pk=coupon.pk).status == CouponStatus.ACTIVE
    assert not Coupon.objects.filter(campaign=code_campaign).exists()


@pytest.mark.django_db(transaction=True)
def test_a_campaign_without_a_budget_never_asks_redis_for_money(monkeypatch) -> None:
    campaign = grab(budget=None)
    coupon = issue_coupon(campaign, "alice")

    def never(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a budget call for a campaign without a budget")

    for name in ("run_budget_take", "run_budget_give_back", "budget_load"):
        monkeypatch.setattr(f"coupons.budget.{name}", never)
    assert coupon_reserve(user_id="alice", code=coupon.code, order=order("A-1")).code == 0
    assert coupon_release(user_id="alice", code=coupon.code, order_id="A-1").code == 0
    assert coupon_redeem(user_id="alice", code=coupon.code, order=order("A-2")).code == 0
    assert not redis_client().exists(budget_key(campaign.pk))


@pytest.mark.django_db(transaction=True)
def test_a_budget_lost_from_redis_is_loaded_again_from_postgresql() -> None:
    campaign = grab(budget=Decimal("120.00"))
    alice, bob, carol = (issue_coupon(campaign, user) for user in ("alice", "bob", "carol"))
    assert coupon_redeem(user_id="alice", code=alice.code, order=order("A-1")).code == 0
    redis_client().delete(budget_key(campaign.pk))  # lost (a restart without persistence, an eviction)

    assert coupon_redeem(user_id="bob", code=bob.code, order=order("B-1")).code == 0  # 120 - 50 loaded, 50 taken
    assert left(campaign) == Decimal("20.00")
    assert coupon_redeem(user_id="carol", code=carol.code, order=order("C-1")).code == 22


@pytest.mark.django_db(transaction=True)
def test_budget_exhausted_goes_out_once() -> None:
    WebhookEndpoint.objects.create(url="https://shop.example/hooks", secret="s" * 32,
                                   event_types=[EventType.CAMPAIGN_BUDGET_EXHAUSTED])
    budget._announced.clear()
    campaign = grab(budget=Decimal("100.00"))
    coupons = [issue_coupon(campaign, f"shopper-{i}") for i in range(4)]

    answers = [coupon_redeem(user_id=c.user_id, code=c.code, order=order(f"O-{i}")).code
               for i, c in enumerate(coupons)]
    budget._announced.clear()  # another process meets the exhausted budget too
    assert coupon_redeem(user_id="shopper-3", code=coupons[3].code, order=order("O-9")).code == 22

    assert answers == [0, 0, 22, 22]
    sent = OutboxEvent.objects.filter(type=EventType.CAMPAIGN_BUDGET_EXHAUSTED)
    assert [(e.campaign_id, e.data["budget"]) for e in sent] == [(campaign.pk, "100.00")]


@pytest.mark.django_db(transaction=True)
def test_unique_codes_take_from_the_budget_and_a_refused_one_stays_unbound() -> None:
    campaign = CampaignFactory(kind="codes", code=None, budget=Decimal("100.00"), total_stock=10)
    campaign_preheat(campaign=campaign)
    first, second, third = codes_of(campaign, 1, 2, 3)
    uses = f"cpn:{{c{campaign.pk}}}:uses"

    assert coupon_redeem(user_id="alice", code=first, order=order("A-1")).code == 0
    assert coupon_reserve(user_id="bob", code=second, order=order("B-1")).code == 0
    refused = coupon_redeem(user_id="carol", code=third, order=order("C-1"))

    assert (refused.code, refused.status) == (22, "budget_exhausted")
    assert UniqueCode.objects.get(code=third).holder_id is None  # still anyone's: nothing of the use stayed
    assert not Coupon.objects.filter(code=third).exists() and int(redis_client().get(uses)) == 8
    assert left(campaign) == 0
    assert coupon_release(user_id="bob", code=second, order_id="B-1").code == 0
    assert coupon_redeem(user_id="carol", code=third, order=order("C-1")).code == 0
    assert left(campaign) == 0 and held_and_redeemed(campaign) == Decimal("100.00")


@pytest.mark.django_db(transaction=True)
def test_the_api_answers_22_as_a_decided_use_and_a_repeat_replays_it(client) -> None:
    campaign = grab(budget=Decimal("40.00"))  # less than one discount of 50.00
    coupon = issue_coupon(campaign, "alice")

    first = use(client, coupon.code, "redeem", key="pay-A-1")
    again = use(client, coupon.code, "redeem", key="pay-A-1")

    assert answer(first) == (200, 22, "budget_exhausted")
    assert first.json()["detail"] == "The campaign's budget has not enough left for this discount."
    assert again.json() == first.json() and again["Idempotent-Replayed"] == "true"
    assert Coupon.objects.get(pk=coupon.pk).status == CouponStatus.ACTIVE and left(campaign) == Decimal("40.00")
