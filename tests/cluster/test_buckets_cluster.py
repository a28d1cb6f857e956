"""One hot campaign split into 9 buckets over the 3 masters of the cluster: storms of claims by shoppers of every
bucket, then of one bucket only, with stock smaller than the demand; exactly the stock issued, nobody above the
limit, no CROSSSLOT, every bucket's ledger drained and verify_campaign balanced."""
from __future__ import annotations

import contextlib
import threading
from collections import Counter
from collections.abc import Callable

import pytest
from django.db import connections
from redis.cluster import key_slot

from campaigns.models import Campaign
from campaigns.redis_state import StoreUnavailable, bucket_of, campaign_keys, redis_client, remaining_many
from orders import ledger
from orders.cancel import claim_cancel
from orders.claim import forget_campaign_facts
from orders.drain import drain_campaign
from orders.models import Claim
from orders.verify import campaign_verify

from .conftest import Cluster, claim_storm

BUCKETS, STOCK, LIMIT = 9, 120, 2


def storm(campaign: Campaign, users: list[str], *, threads: int, claims_per_thread: int
          ) -> list[tuple[str, str, str | None]]:
    """Claims from many threads at once by random shoppers of `users`: (user, status, claim id)."""
    answers = claim_storm(lambda rng: (campaign.pk, rng.choice(users)), threads=threads,
                          claims_per_thread=claims_per_thread)
    return [(user, status, claim_id) for _, user, status, claim_id in answers]


def drained_and_balanced(campaign: Campaign) -> None:
    drain_campaign(campaign_id=campaign.pk)
    assert ledger.backlog_sizes([campaign.pk]) == {campaign.pk: 0}
    for bucket in range(BUCKETS):
        groups = redis_client().xinfo_groups(campaign_keys(campaign.pk, bucket).ledger)
        assert [int(g["pending"]) for g in groups] == [0]
    balance = campaign_verify(campaign=campaign)
    assert balance.balanced and balance.in_transit == 0, balance
    assert balance.claims - balance.restocked == campaign.total_stock - balance.remaining


def run_storm(campaign: Campaign, users: list[str]) -> Counter[str]:
    """The storm, with a drain and verify_campaign running beside it: every verify balances exactly (each
    bucket's cut, the shares plus the stock in transit between the cuts)."""
    forget_campaign_facts()
    draining = threading.Event()
    verified: list[tuple[bool, int, list[str]]] = []

    def drain_meanwhile() -> None:
        try:
            while not draining.is_set():
                with contextlib.suppress(StoreUnavailable):
                    drain_campaign(campaign_id=campaign.pk, max_seconds=1)
        finally:
            connections.close_all()

    def verify_meanwhile() -> None:
        try:
            while not draining.is_set():
                with contextlib.suppress(StoreUnavailable):
                    balance = campaign_verify(campaign=campaign)
                    verified.append((balance.balanced, balance.in_transit, balance.problems))
        finally:
            connections.close_all()

    helpers = [threading.Thread(target=drain_meanwhile), threading.Thread(target=verify_meanwhile)]
    for helper in helpers:
        helper.start()
    try:
        answers = storm(campaign, users, threads=8, claims_per_thread=STOCK // 2)
    finally:
        draining.set()
        for helper in helpers:
            helper.join()
    assert verified and all(ok for ok, _, _ in verified), [p for ok, _, p in verified if not ok][:3]
    print(f"verify during the storm: {len(verified)} runs, all balanced, "
          f"in transit seen: {sorted({t for _, t, _ in verified})}")
    assert {status for _, status, _ in answers} <= {"claimed", "sold_out", "limit_reached", "unavailable"}
    claimed = Counter(user for user, status, _ in answers if status == "claimed")
    assert sum(claimed.values()) == STOCK  # exactly the stock: never more, and never sold_out while some remained
    assert max(claimed.values()) <= LIMIT
    ids = [claim_id for _, status, claim_id in answers if status == "claimed"]
    assert len(set(ids)) == STOCK  # claim ids unique across the buckets' ledgers
    assert remaining_many([campaign.pk]) == {campaign.pk: 0}
    return claimed


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_storm_on_nine_buckets_over_three_masters_sells_exactly_the_stock(
    on_cluster: Cluster, live_campaign: Callable[..., Campaign]
) -> None:
    campaign = live_campaign(total_stock=STOCK, per_user_limit=LIMIT, buckets=BUCKETS)
    masters = Counter(on_cluster.port_of_slot(key_slot(campaign_keys(campaign.pk, b).stock.encode()))
                      for b in range(BUCKETS))
    assert len(masters) == 3, masters  # its buckets live on every master
    users = [f"s{i:03d}" for i in range(150)]  # 300 claims allowed by the limit, 120 in stock
    assert {bucket_of(u, BUCKETS) for u in users} == set(range(BUCKETS))

    claimed = run_storm(campaign, users)

    drained_and_balanced(campaign)
    # And a cancel gives one back to its shopper's bucket, the balance still exact
    user = next(iter(claimed))
    claim = Claim.objects.filter(campaign=campaign, user_id=user).first()
    assert claim is not None and claim_cancel(user_id=user, claim_id=claim.claim_id).status == "cancelled"
    assert remaining_many([campaign.pk]) == {campaign.pk: 1}
    assert int(redis_client().get(campaign_keys(campaign.pk, bucket_of(user, BUCKETS)).stock)) == 1
    drained_and_balanced(campaign)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_shoppers_of_one_bucket_only_still_get_every_buckets_stock(
    on_cluster: Cluster, live_campaign: Callable[..., Campaign]
) -> None:
    # (the campaign's rate limit is split over its buckets: one bucket's storm is far above its part of 1,200/s)
    campaign = live_campaign(total_stock=STOCK, per_user_limit=LIMIT, buckets=BUCKETS, rate_limit=100_000)
    users = [u for u in (f"h{i:04d}" for i in range(5000)) if bucket_of(u, BUCKETS) == 4][:100]

    claimed = run_storm(campaign, users)  # their bucket held 14: the rest came from the other eight

    assert set(claimed) <= set(users)
    drained_and_balanced(campaign)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_the_event_loop_claims_of_one_buckets_shoppers_on_the_cluster_sell_exactly_the_stock(
    on_cluster: Cluster, live_campaign: Callable[..., Campaign]
) -> None:
    import asyncio

    from orders.claim import claim_create_async
    from tests.conftest import run_coroutine

    campaign = live_campaign(total_stock=40, per_user_limit=1, buckets=BUCKETS, rate_limit=100_000)
    users = [u for u in (f"e{i:04d}" for i in range(3000)) if bucket_of(u, BUCKETS) == 7][:60]
    forget_campaign_facts()

    async def claims() -> list[str]:  # all at once on one loop: its pipelined client, one connection per master
        outcomes = await asyncio.gather(*[claim_create_async(campaign_id=campaign.pk, user_id=u, idempotency_key=None)
                                          for u in users], return_exceptions=True)
        return [o.status if not isinstance(o, BaseException) else repr(o) for o in outcomes]

    statuses = Counter(run_coroutine(claims()))

    assert statuses["claimed"] == 40 and set(statuses) <= {"claimed", "sold_out"}, statuses
    assert remaining_many([campaign.pk]) == {campaign.pk: 0}
    drained_and_balanced(campaign)
