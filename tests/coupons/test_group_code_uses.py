"""Code uses of a grouped codes campaign count in the group (docs/api.md, "Groups"): a shared code's uses and a
unique code's first use through the checkout's services, refused 23 with nothing taken or bound, a release gives the
unit back; real PostgreSQL and Redis."""
from __future__ import annotations

from decimal import Decimal

import pytest

from campaigns.redis_state import ClaimCode, campaign_keys, redis_client, run_claim
from campaigns.redis_state.keys import forget_groups
from campaigns.services import campaign_preheat
from coupons.models import Coupon, UniqueCode
from coupons.services import Order, coupon_redeem, coupon_release, coupon_reserve
from orders.verify import campaign_verify

from ..factories import CampaignFactory
from .code_helpers import codes_of

pytestmark = pytest.mark.django_db(transaction=True)


def order(order_id: str) -> Order:
    return Order(order_id, Decimal("350.00"), "CNY")


def grouped(**fields):  # type: ignore[no-untyped-def]
    campaign = CampaignFactory(group="g", group_limit=2, **fields)
    campaign_preheat(campaign=campaign)
    return campaign


def held(campaign, user: str) -> int:  # type: ignore[no-untyped-def]
    return int(redis_client().hget(campaign_keys(campaign.pk).group, user) or 0)


def test_shared_and_unique_code_uses_count_in_the_group_and_a_release_gives_back() -> None:
    grab = grouped(total_stock=10)
    shared = grouped(kind="codes", code="GROUPED", total_stock=10, per_user_limit=5)
    unique = grouped(kind="codes", code=None, total_stock=10, per_user_limit=5)
    first, second = codes_of(unique, 1, 2)
    forget_groups()  # this process never met the group: the uses learn it

    assert coupon_reserve(user_id="ann", code="GROUPED", order=order("o-1"), hold_seconds=600).status == "reserved"
    assert coupon_redeem(user_id="ann", code=first, order=order("o-2")).status == "redeemed"
    uses = redis_client().get(campaign_keys(shared.pk).uses)

    refused = [coupon_reserve(user_id="ann", code="GROUPED", order=order("o-3"), hold_seconds=600),
               coupon_redeem(user_id="ann", code=second, order=order("o-4"))]

    assert [(r.code, r.status) for r in refused] == [(23, "group_limit_reached")] * 2
    assert redis_client().get(campaign_keys(shared.pk).uses) == uses
    assert UniqueCode.objects.get(code=second).holder_id is None
    assert Coupon.objects.filter(user_id="ann").count() == 2 and held(grab, "ann") == 2
    assert run_claim(campaign_id=grab.pk, user_id="ann", idempotency_key=None).code == ClaimCode.GROUP_LIMIT_REACHED

    assert coupon_release(user_id="ann", code="GROUPED", order_id="o-1").status == "released"
    assert coupon_release(user_id="ann", code="GROUPED", order_id="o-1").status == "released"  # once
    assert held(grab, "ann") == 1
    assert run_claim(campaign_id=grab.pk, user_id="ann", idempotency_key=None).code == ClaimCode.CLAIMED
    for campaign in (shared, unique):
        assert campaign_verify(campaign=campaign).balanced, campaign_verify(campaign=campaign)
