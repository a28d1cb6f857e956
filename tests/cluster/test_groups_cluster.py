"""Group limits on a real Redis Cluster (three masters): a group's campaigns share its hash tag, so each claim
counts the group in one script on one master (docs/design.md, "Groups"); their homes stay in their own slots,
on other masters. Storms of claims on the group's campaigns by the same shoppers, from threads (Django's path)
and an event loop (the claim's door), never give a shopper more than the group's limit; cancels and code uses
count; every ledger drains and verify_campaign balances, no CROSSSLOT."""
from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable

import pytest
from redis.cluster import key_slot

from campaigns.models import Campaign
from campaigns.redis_state import (
    ClaimCode,
    TakeCode,
    campaign_keys,
    redis_client,
    run_claim_async,
    run_code_give_back,
    run_code_take,
)
from campaigns.redis_state.keys import forget_groups, home_of
from campaigns.services import campaign_preheat
from orders.cancel import claim_cancel
from orders.claim import forget_campaign_facts
from orders.drain import drain_campaign
from orders.verify import campaign_verify

from ..conftest import run_coroutine
from ..factories import CampaignFactory
from .conftest import Cluster, claim_storm

pytestmark = pytest.mark.django_db(transaction=True)

LIMIT = 3


def master_of(cluster: Cluster, key: str) -> int:
    return cluster.port_of_slot(key_slot(key.encode()))


def a_group_on_another_master_than(cluster: Cluster, homes: list[str]) -> str:
    """A group's name whose slot's master holds none of the campaigns' homes (their own slots)."""
    taken = {master_of(cluster, home) for home in homes}
    return next(f"spring{n}" for n in range(1000) if master_of(cluster, f"cpn:{{gspring{n}}}:held") not in taken)


def test_a_groups_claims_on_the_cluster_never_give_a_shopper_more_than_its_limit(
    on_cluster: Cluster, live_campaign: Callable[..., Campaign]
) -> None:
    one, two = (CampaignFactory(total_stock=500, per_user_limit=5, rate_limit=100_000) for _ in range(2))
    group = a_group_on_another_master_than(on_cluster, [home_of(one.pk), home_of(two.pk)])
    for campaign in (one, two):
        campaign.group, campaign.group_limit = group, LIMIT
        campaign.save()
        campaign_preheat(campaign=campaign)
    master = master_of(on_cluster, campaign_keys(one.pk).group)
    assert {master_of(on_cluster, k) for c in (one, two) for k in (*campaign_keys(c.pk).state, campaign_keys(
        c.pk).group)} == {master}  # the price of a group: its campaigns on one master
    assert master not in {master_of(on_cluster, home_of(c.pk)) for c in (one, two)}  # their homes elsewhere
    forget_groups()
    forget_campaign_facts()
    shoppers = [f"s{n}" for n in range(12)]

    answers = claim_storm(lambda rng: (rng.choice((one.pk, two.pk)), rng.choice(shoppers)), threads=24,
                          claims_per_thread=15)

    claimed = Counter(user for _, user, status, _ in answers if status == "claimed")
    statuses = Counter(status for _, _, status, _ in answers)
    assert set(statuses) <= {"claimed", "group_limit_reached", "unavailable"}, statuses
    assert all(n <= LIMIT for n in claimed.values()) and statuses["group_limit_reached"] > 0
    assert claimed == {user: LIMIT for user in shoppers}  # 360 claims by 12 shoppers: each reaches the limit
    held = {k.decode(): int(v) for k, v in redis_client().hgetall(campaign_keys(one.pk).group).items() if k}
    assert held == dict(claimed)

    # the event loop's claim (the door's path): a process that never met the group learns it (-6) on the cluster
    forget_groups()

    async def late_claims() -> list[ClaimCode]:
        return [(await run_claim_async(campaign_id=c.pk, user_id=user, idempotency_key=None)).code
                for c in (one, two) for user in ("s0", "late")]

    codes = run_coroutine(late_claims())
    assert codes == [ClaimCode.GROUP_LIMIT_REACHED, ClaimCode.CLAIMED, ClaimCode.GROUP_LIMIT_REACHED,
                     ClaimCode.CLAIMED]

    # a cancel gives the group's unit back; a codes campaign of the group counts its uses
    claim_id = next(claim_id for campaign_id, user, status, claim_id in answers
                    if status == "claimed" and user == "s1")
    assert claim_cancel(user_id="s1", claim_id=claim_id).status == "cancelled"
    codes_campaign = live_campaign(group=group, group_limit=LIMIT, total_stock=50, kind="codes", code="SPRING3",
                                   per_user_limit=5)
    assert run_code_take(campaign_id=codes_campaign.pk, user_id="s1", member="u1/s1") == TakeCode.TAKEN
    assert run_code_take(campaign_id=codes_campaign.pk, user_id="s1", member="u2/s1") == (
        TakeCode.GROUP_LIMIT_REACHED)
    run_code_give_back(campaign_id=codes_campaign.pk, user_id="s1", member="u1/s1")
    assert int(redis_client().hget(campaign_keys(one.pk).group, "s1")) == LIMIT - 1

    for campaign in (one, two):
        drain_campaign(campaign_id=campaign.pk)
        balance = campaign_verify(campaign=campaign)
        assert balance.balanced, balance


def test_a_grouped_campaign_learns_its_group_on_the_event_loop_of_a_cluster(
    on_cluster: Cluster, live_campaign: Callable[..., Campaign]
) -> None:
    campaign = live_campaign(group="loop", group_limit=1, total_stock=10)
    forget_groups()

    async def claims() -> list[ClaimCode]:
        return list(await asyncio.gather(*(run_claim_async(campaign_id=campaign.pk, user_id="ann",
                                                           idempotency_key=None) for _ in range(5))))

    outcomes = run_coroutine(claims())
    assert Counter(o.code for o in outcomes) == {ClaimCode.CLAIMED: 1, ClaimCode.GROUP_LIMIT_REACHED: 4}
    assert int(redis_client().get(campaign_keys(campaign.pk).stock)) == 9
