"""Faults of a replicated Redis (issue 22): with COUPONS_REDIS_REPLICA_ACKS a claim is answered claimed only
once WAIT confirmed a replica holds it, so a failover loses no claim a shopper was told of; a replica that stops
acknowledging turns claims into fast 503s (taken back), never into claims a failover may lose."""
from __future__ import annotations

import asyncio
import copy
import io
import json
import os
import signal
import time
from typing import Any

import pytest
from celery import Celery
from django.conf import settings
from django.core.cache import caches
from django.core.management import call_command
from django.test import override_settings

from campaigns.redis_state import campaign_keys, key_digest, redis_client, reset_redis_client
from campaigns.services import campaign_preheat
from config.settings.base import follow_sentinels
from core.errors import Unavailable
from core.metrics import CeleryQueueCollector
from coupons.models import Coupon
from devstack import resolve, worker_command
from orders.claim import claim_create, claim_create_async
from orders.drain import drain_campaign
from orders.models import Claim, ParkedLedgerEntry

from ..conftest import claims_in_threads, process_env, run_coroutine
from ..factories import CampaignFactory
from .harness import Proc, Valkey, Window, run_fault, wait_until
from .replicas import MASTER_NAME, Sentinel, start_replica

pytestmark = [pytest.mark.slow]


def test_a_replica_that_stops_acknowledging_makes_claims_fast_503s_and_none_is_lost(transactional_db, tmp_path,
                                                                                     private_redis) -> None:
    replica = start_replica(private_redis, tmp_path / "replica")  # type: ignore[arg-type]
    try:
        with override_settings(COUPONS_REDIS_REPLICA_ACKS=1, COUPONS_REDIS_REPLICA_ACK_TIMEOUT_MS=100):
            reset_redis_client()
            _claims_503_while_the_replica_is_stopped(replica)
    finally:
        replica.stop()
        reset_redis_client()


def _claims_503_while_the_replica_is_stopped(replica: Valkey) -> None:
    campaign = CampaignFactory(total_stock=30, per_user_limit=5)
    campaign_preheat(campaign=campaign)
    keys = campaign_keys(campaign.pk)
    told = [claim_create(campaign_id=campaign.pk, user_id="warm", idempotency_key=None),
            run_coroutine(claim_create_async(campaign_id=campaign.pk, user_id="warm-async", idempotency_key="w"))]
    assert [o.status for o in told] == ["claimed", "claimed"]
    answers: list[Any] = []

    async def shoppers_on_a_loop() -> list[Any]:  # one pipelined batch: one WAIT for all of them
        return await asyncio.gather(*(claim_create_async(campaign_id=campaign.pk, user_id=f"a{n}",
                                                         idempotency_key=None if n % 2 else f"ak{n}")
                                      for n in range(8)), return_exceptions=True)

    os.kill(replica.pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        threads = claims_in_threads(campaign.pk, 6, answers)
        answers += run_coroutine(shoppers_on_a_loop())
        for t in threads:
            t.join()
        elapsed = time.monotonic() - started
        # Every one ran on the master, and the voider takes it back only once a replica confirmed the void: a
        # failover now could lose an unconfirmed void and keep the claim's answer, which would tell a repeat of
        # its key 'claimed' for a claim PostgreSQL holds cancelled. So nothing is cancelled yet.
        time.sleep(1.0)
        assert int(redis_client().get(keys.stock)) == 14
        assert not Claim.objects.filter(campaign=campaign, status="cancelled").exists()
    finally:
        os.kill(replica.pid, signal.SIGCONT)

    assert len(answers) == 14 and all(isinstance(a, Unavailable) for a in answers), answers
    assert elapsed < 1.0
    # The claims ran on the master: the voider takes every one back (void.lua, then the cancel) once the
    # replica acknowledges again; the two told 'claimed' stand.
    assert wait_until(lambda: int(redis_client().get(keys.stock)) == 28, 15), redis_client().get(keys.stock)
    drain_campaign(campaign_id=campaign.pk)
    claims = {c.claim_id: c.status for c in Claim.objects.filter(campaign=campaign)}
    assert {told[0].claim_id, told[1].claim_id} <= {cid for cid, s in claims.items() if s != "cancelled"}
    assert sum(1 for s in claims.values() if s != "cancelled") == 2
    out = io.StringIO()
    call_command("verify_campaign", str(campaign.pk), "--json", stdout=out)  # exits 1 when it does not balance
    assert json.loads(out.getvalue().strip().splitlines()[-1])


def failover(stack: Any, replica: Valkey, sentinel: Sentinel, window: Window) -> None:
    """SIGKILL the master while its replica is cut off (SIGSTOP, then CLIENT KILL TYPE replica on the master: the
    master goes on answering, what it writes is in its backlog only, and the stopped replica can't reconnect),
    then let Sentinel promote the replica. (DEBUG SLEEP on the replica, or CLIENT KILL alone, lost nothing: the
    stream waited in the replica's socket, or it resynchronised at once.)"""
    window.open()
    os.kill(replica.pid, signal.SIGSTOP)
    try:
        stack.redis.admin().execute_command("CLIENT", "KILL", "TYPE", "replica")
        time.sleep(0.5)
        stack.redis.kill()
    finally:
        os.kill(replica.pid, signal.SIGCONT)
    promoted = wait_until(lambda: sentinel.master_port() == replica.port
                          and replica.admin().info("replication")["role"] == "master", 30)
    window.notes["promoted_after_s"] = None if promoted is None else round(promoted - window.start, 1)
    stack.redis = replica  # the harness reads the stock and the ledger from the new master
    # With one replica required, the promoted master confirms nothing until it has a replica of its own: an
    # operator (or the platform) starts one; meanwhile claims are 503s, never unconfirmed 'claimed'.
    stack.spare = start_replica(replica, stack.log_dir / "replica-2")
    time.sleep(1.0)
    window.close()


def _explain(stack: Any, campaign: Any, load: Any, window: Window) -> None:
    """Print, for each coupon nobody was told of (I4) and each 'claimed' without a coupon (I3), its claim in
    PostgreSQL, its ledger entry on the (new) master, the drain's pending entries, a parked entry, and every
    request of its shopper and Idempotency-Key; then wait a minute more for the missing ones (a slow drain, or
    a loss?)."""
    told = {a.claim_id for a in load.answers if a.outcome == "claimed"}
    coupons = dict(stack.sql(f"SELECT claim_id, user_id FROM {Coupon._meta.db_table} WHERE campaign_id = %s "
                             "AND status <> 'revoked'", (campaign.id,)))
    lost = [c for c in told if c not in coupons]
    for cid in [c for c in coupons if c not in told] + lost:
        rows = stack.sql(f"SELECT user_id, key_digest, status, claimed_at FROM {Claim._meta.db_table} "
                         "WHERE claim_id = %s", (cid,))
        ledger_id = cid.split("-", 1)[1]
        keys = campaign_keys(campaign.id)
        admin = stack.redis.admin()
        print("WHERE", cid, "coupon" if cid in coupons else "NO coupon", "pg:", rows,
              "ledger:", admin.xrange(keys.ledger, ledger_id, ledger_id),
              "pending:", admin.xpending(keys.ledger, "drain"),
              "parked:", stack.sql(f"SELECT entry_id, error FROM {ParkedLedgerEntry._meta.db_table} "
                                   "WHERE entry_id = %s", (ledger_id,)))
        for a in load.answers:
            if (rows and a.shopper == rows[0][0] and a.key is not None and key_digest(a.key) == rows[0][1]) \
                    or a.claim_id == cid:
                print("   ", a.shopper, a.key, a.status, a.outcome, a.claim_id, "replayed" if a.replayed else "",
                      round(a.sent - window.start, 3), round(a.answered - window.start, 3))
    if lost:
        arrived = wait_until(lambda: not [c for c in lost if c not in {r[0] for r in stack.sql(
            f"SELECT claim_id FROM {Coupon._meta.db_table} WHERE campaign_id = %s", (campaign.id,))}], 60, 1.0)
        print("WHERE lost ones arrived", None if arrived is None else round(arrived - window.end, 1),
              "s after the fault")


# acks=1 was flaky under CPU load (two busy loops on the 2 cores): "I3: 1 claims answered 'claimed' have no coupon"
# was a real loss, not a slow drain: the claim was cancelled in PostgreSQL by the voider after a void.lua the
# replica never got, and a repeat of its key on the promoted replica was told 'claimed' (now: a void is confirmed
# before the cancel, orders.claim.void_claim). _explain prints where such a claim is when one shows up again.
@pytest.mark.parametrize("acks", [
    1,
    pytest.param(0, marks=pytest.mark.skipif(
        not os.environ.get("COUPONRUSH_SHOW_FAILOVER_LOSS"), reason="shows the loss WAIT prevents: run on demand"))])
def test_a_sentinel_failover_loses_no_claim_answered_claimed(fault_stack, tmp_path, acks) -> None:
    """With acks=1 I1-I7 hold; acks=0 (COUPONRUSH_SHOW_FAILOVER_LOSS=1) is the check that the test can fail:
    claims answered while the replica was held are lost with the master."""
    replica = start_replica(fault_stack.redis, tmp_path / "replica")
    sentinel = Sentinel(fault_stack.redis, tmp_path / "sentinel")
    try:
        fault_stack.env.update(REDIS_SENTINELS=sentinel.address, REDIS_SENTINEL_MASTER=MASTER_NAME,
                               COUPONS_REDIS_REPLICA_ACKS=str(acks), COUPONS_REDIS_REPLICA_ACK_TIMEOUT_MS="100")
        with override_settings(REDIS_SENTINELS=[("127.0.0.1", sentinel.port)], REDIS_SENTINEL_MASTER=MASTER_NAME,
                               COUPONS_REDIS_REPLICA_ACKS=acks, COUPONS_REDIS_REPLICA_ACK_TIMEOUT_MS=100):
            reset_redis_client()
            campaign = fault_stack.boot(stock=450)
            window = Window()
            load, problems = run_fault(fault_stack, campaign, window,
                                       lambda load: failover(fault_stack, replica, sentinel, window),
                                       fault=f"Redis master SIGKILL, Sentinel failover, replica acks {acks}")
            _explain(fault_stack, campaign, load, window)
    finally:
        sentinel.stop()
        replica.stop()
        if getattr(fault_stack, "spare", None) is not None:
            fault_stack.spare.stop()
        reset_redis_client()
    if acks:
        assert not problems
    else:
        assert problems, "no claim was lost without WAIT this time"


def test_the_cache_and_a_celery_worker_follow_a_sentinel_failover(transactional_db, tmp_path) -> None:
    """REDIS_SENTINELS points the Django cache and Celery's broker at the master as well
    (config.settings.base.follow_sentinels): a real worker of the project answers through it, and after the
    master is killed and the replica promoted, the cache and the worker reach the new master."""
    master = Valkey(tmp_path / "master")
    master.start()
    replica, sentinel, worker = None, None, None
    try:
        replica = start_replica(master, tmp_path / "replica")
        sentinel = Sentinel(master, tmp_path / "sentinel")
        # What config/settings/test.py makes of it (the broker on REDIS_URL's server, database 14).
        conf: dict[str, Any] = {
            "REDIS_SENTINELS": [("127.0.0.1", sentinel.port)], "REDIS_SENTINEL_MASTER": MASTER_NAME,
            "REDIS_URL": master.url, "CACHES": copy.deepcopy(settings.CACHES),
            "CELERY_BROKER_URL": f"redis://127.0.0.1:{master.port}/14", "CELERY_BROKER_TRANSPORT_OPTIONS": {}}
        conf["CACHES"]["default"]["LOCATION"] = master.url
        follow_sentinels(conf)
        assert conf["CELERY_BROKER_URL"] == f"sentinel://127.0.0.1:{sentinel.port}/14"
        assert conf["CACHES"]["default"]["LOCATION"] == f"redis://{MASTER_NAME}/0"
        env = {**process_env(), "TEST_REDIS_URL": master.url, "TEST_CELERY_BROKER_URL": "",
               "REDIS_SENTINELS": sentinel.address, "REDIS_SENTINEL_MASTER": MASTER_NAME}
        worker = Proc("worker", resolve([*worker_command(), "-n", "sentinel@%h"]), env, tmp_path)
        worker.wait_for_line(" ready.", 60)
        app = Celery("sentinel-probe", broker=conf["CELERY_BROKER_URL"], set_as_current=False)  # not the tests' app
        app.conf.broker_transport_options = conf["CELERY_BROKER_TRANSPORT_OPTIONS"]
        with override_settings(CACHES=conf["CACHES"]):
            cache = caches.create_connection("default")

            def works(server: Valkey, n: int) -> bool:
                cache.set("probe", n)
                return bool(cache.get("probe") == n and server.admin().exists("cache:1:probe")
                            and app.control.ping(timeout=1.0) and broker_up())

            def broker_up() -> bool:  # the broker's metrics read the master through the sentinels too
                with override_settings(CELERY_BROKER_URL=conf["CELERY_BROKER_URL"], REDIS_SENTINELS=conf[
                        "REDIS_SENTINELS"], CELERY_BROKER_TRANSPORT_OPTIONS=conf["CELERY_BROKER_TRANSPORT_OPTIONS"]):
                    up = next(f for f in CeleryQueueCollector().collect() if f.name == "couponrush_celery_broker_up")
                return up.samples[0].value == 1

            assert works(master, 1)
            assert master.admin().info("clients")["connected_clients"] >= 3  # the cache's, the worker's, ours
            master.kill()
            assert wait_until(lambda: sentinel.master_port() == replica.port
                              and replica.admin().info("replication")["role"] == "master", 30)
            # The first command on a connection to the dead master fails (no retries, as the campaign clients);
            # the next connection asks the sentinels and reaches the promoted replica.
            assert wait_until(lambda: works(replica, 2), 30), worker.log()[-2000:]
            assert replica.admin().get("cache:1:probe") == b"2"  # django-redis stores an int as it is
    finally:
        if worker is not None:
            worker.kill_all()
        for server in (sentinel, replica, master):
            if server is not None:
                server.stop()
