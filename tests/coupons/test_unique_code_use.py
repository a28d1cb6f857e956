"""A unique code typed at checkout (issue 19): the first shopper to use it holds it; to everyone else it is the
same 404 as an unknown code; the campaign's per-user limit caps how many of its codes one shopper holds."""
from __future__ import annotations

from collections import Counter
from decimal import Decimal
from typing import Any

import pytest

from campaigns.models import Campaign
from campaigns.redis_state import campaign_keys, redis_client, remaining_many, run_code_take
from campaigns.services import campaign_preheat
from core.errors import NotFound
from coupons.models import Coupon, CouponStatus, UniqueCode
from coupons.outcomes import UseOutcome
from coupons.services import Order, coupon_redeem, coupon_release, coupon_reserve
from coupons.unique_codes import unique_code
from orders.rebuild import campaign_rebuild
from orders.reconciliation import campaign_reconcile
from orders.verify import campaign_verify

from ..factories import CampaignFactory
from .code_helpers import codes_of
from .helpers import assert_rows_agree_with_events
from .test_use_concurrency import all_at_once


def order(order_id: str) -> Order:
    return Order(order_id, Decimal("350.00"), "CNY")


@pytest.fixture
def unique_codes_campaign(db: Any):  # type: ignore[no-untyped-def]
    def make(**fields: Any) -> Campaign:
        campaign = CampaignFactory(kind="codes", code=None, **fields)
        campaign_preheat(campaign=campaign)
        return campaign

    return make


@pytest.mark.django_db(transaction=True)
def test_twenty_shoppers_racing_for_one_unique_code_one_holds_it_nineteen_get_404(unique_codes_campaign) -> None:
    campaign = unique_codes_campaign(total_stock=100)
    [code] = codes_of(campaign, 7)

    results = all_at_once([lambda i=i: coupon_redeem(user_id=f"racer-{i}", code=code.lower(), order=order(f"o-{i}"))
                           for i in range(20)])

    outcomes = Counter(r.status if isinstance(r, UseOutcome) else type(r).__name__ for r in results)
    assert outcomes == {"redeemed": 1, "NotFound": 19}
    row = UniqueCode.objects.get(code=code)
    winner = next(f"racer-{i}" for i, r in enumerate(results) if isinstance(r, UseOutcome))
    assert row.holder_id == winner and row.coupon is not None and row.coupon.code == code
    assert Coupon.objects.filter(campaign=campaign).count() == 1
    assert_rows_agree_with_events()


def test_the_holder_uses_it_as_their_coupon_and_another_shopper_gets_404(unique_codes_campaign) -> None:
    campaign = unique_codes_campaign(per_user_limit=2)
    [code] = codes_of(campaign, 11)

    held = coupon_reserve(user_id="ann", code=code.replace("-", " "), order=order("o-1"))
    released = coupon_release(user_id="ann", code=code, order_id="o-1")
    redeemed = coupon_redeem(user_id="ann", code=code, order=order("o-2"))
    with pytest.raises(NotFound):
        coupon_redeem(user_id="bob", code=code, order=order("o-3"))

    assert (held.status, released.extra["coupon_status"], redeemed.status) == ("reserved", "active", "redeemed")
    coupon = Coupon.objects.get(code=code)
    assert (coupon.user_id, coupon.status, coupon.order_id) == ("ann", CouponStatus.REDEEMED, "o-2")
    assert [e.type for e in coupon.events.order_by("id")] == ["issued", "reserved", "released", "redeemed"]


def test_the_per_user_limit_caps_the_unique_codes_one_shopper_holds(unique_codes_campaign) -> None:
    campaign = unique_codes_campaign(per_user_limit=1)
    first, second = codes_of(campaign, 21, 22)

    assert coupon_redeem(user_id="ann", code=first, order=order("o-1")).status == "redeemed"
    refused = coupon_redeem(user_id="ann", code=second, order=order("o-2"))

    assert (refused.code, refused.status) == (1, "limit_reached")
    assert UniqueCode.objects.get(code=second).holder_id is None


@pytest.mark.django_db(transaction=True)
def test_one_shopper_typing_many_unique_codes_at_once_holds_no_more_than_the_limit(unique_codes_campaign) -> None:
    campaign = unique_codes_campaign(per_user_limit=2)
    codes = codes_of(campaign, *range(30, 40))

    results = all_at_once([lambda c=c, i=i: coupon_redeem(user_id="ann", code=c, order=order(f"o-{i}"))
                           for i, c in enumerate(codes)])

    assert Counter(r.status for r in results) == {"redeemed": 2, "limit_reached": 8}
    assert UniqueCode.objects.filter(campaign=campaign, holder_id="ann").count() == 2


@pytest.mark.django_db(transaction=True)
def test_the_campaigns_stock_caps_its_unique_codes_uses_however_many_codes_it_has(unique_codes_campaign) -> None:
    # given: twelve codes, a stock of ten uses
    campaign = unique_codes_campaign(total_stock=10)
    codes = codes_of(campaign, *range(50, 62))

    # when: twelve shoppers use them at once
    results = all_at_once([lambda c=c, i=i: coupon_redeem(user_id=f"s-{i}", code=c, order=order(f"o-{i}"))
                           for i, c in enumerate(codes)])

    # then: ten uses, two sold_out holding nothing; the live remaining says so, and the balance holds
    assert Counter(r.status for r in results) == {"redeemed": 10, "sold_out": 2}
    assert UniqueCode.objects.filter(campaign=campaign, holder_id__isnull=False).count() == 10
    assert Coupon.objects.filter(campaign=campaign).count() == 10
    assert remaining_many([campaign.pk], codes={campaign.pk}) == {campaign.pk: 0}
    balance = campaign_verify(campaign=campaign)
    assert balance.balanced and (balance.remaining, balance.persisted_claims) == (0, 10), balance
    # a rebuilt Redis holds the same uses
    redis_client().delete(*campaign_keys(campaign.pk).state_of(codes=True))
    campaign_rebuild(campaign=campaign)
    assert campaign_verify(campaign=campaign).balanced
    assert remaining_many([campaign.pk], codes={campaign.pk}) == {campaign.pk: 0}


def test_a_unique_codes_use_taken_whose_commit_never_came_is_given_back_by_reconciliation(
        unique_codes_campaign) -> None:
    # given: ann's use committed; bob's request took its unit and died before its commit
    campaign = unique_codes_campaign(total_stock=10)
    first, second = codes_of(campaign, 70, 71)
    assert coupon_redeem(user_id="ann", code=first, order=order("o-1")).status == "redeemed"
    row = UniqueCode.objects.get(code=second)
    run_code_take(campaign_id=campaign.pk, user_id="bob", member=f"unique:{row.pk}/bob")
    assert campaign_verify(campaign=campaign).ledger_only_claims == 1

    # when
    record = campaign_reconcile(campaign=campaign, repair=True, source="test")

    # then: bob's unit is back, ann's stays taken
    assert record is not None and record.balanced and "gave back 1 uses" in record.repairs[0]
    assert remaining_many([campaign.pk], codes={campaign.pk}) == {campaign.pk: 9}


@pytest.mark.parametrize("case", ["bad mac", "paused", "not ours"])
def test_a_code_not_usable_is_the_same_404(unique_codes_campaign, case) -> None:
    campaign = unique_codes_campaign(paused=(case == "paused"))
    [code] = codes_of(campaign, 5)
    typed = {"bad mac": code[:-1] + ("2" if code[-1] != "2" else "3"), "paused": code,
             "not ours": unique_code("OTHER", 5)}[case]

    with pytest.raises(NotFound):
        coupon_redeem(user_id="ann", code=typed, order=order("o-1"))
    assert UniqueCode.objects.get(code=code).holder_id is None
