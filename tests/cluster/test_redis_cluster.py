"""docs/design.md's hash tags proved on a real Redis Cluster: claims, drain, cancel, reconciliation and rebuild on
campaigns whose slots live on different masters; no CROSSSLOT error, and every balance exact."""
from __future__ import annotations

import contextlib
import http.client
import json
import random
import socket
import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
import redis
from django.core.management import call_command
from django.db import connections
from django.test import override_settings
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster, key_slot
from redis.exceptions import RedisClusterException
from redis.retry import Retry

from campaigns.models import Campaign
from campaigns.redis_cluster import _Cluster
from campaigns.redis_state import (
    StoreUnavailable,
    campaign_keys,
    redis_client,
    remaining_many,
    reset_redis_client,
    scripts,
)
from core.auth import mint_token
from core.errors import Unavailable
from coupons.models import Coupon, CouponStatus
from orders import ledger, tasks
from orders.cancel import claim_cancel
from orders.claim import claim_create
from orders.drain import drain_campaign
from orders.models import Claim, ClaimStatus
from orders.reconciliation import campaign_reconcile
from orders.verify import campaign_verify

from ..config.test_settings import GOOD, run_with_production_settings
from ..orders.test_reconciliation import lose_from_postgres
from .conftest import Cluster, claim_storm

STOCK, LIMIT, SHOPPERS = 30, 2, 40


def campaigns_on_every_master(cluster: Cluster, make: Callable[..., Campaign]) -> list[Campaign]:
    """Live campaigns until every master owns at least one of their slots (ids are sequential, slots are not)."""
    made: list[Campaign] = []
    masters: set[int] = set()
    while len(masters) < 3:
        assert len(made) < 40, "40 campaigns and still a master without one: the slots are not spread"
        campaign = make(total_stock=STOCK, per_user_limit=LIMIT)
        made.append(campaign)
        masters.add(cluster.port_of_slot(slot_of(cluster, campaign)))
    return made


def slot_of(cluster: Cluster, campaign: Campaign) -> int:
    """The slot of the campaign's keys, as the server computes it; every key of the campaign shares it."""
    keys = campaign_keys(campaign.pk)
    node = cluster.node(cluster.ports[0])
    slots = {int(node.execute_command("CLUSTER", "KEYSLOT", key)) for key in [*keys.state, keys.second(0)]}
    node.close()
    assert len(slots) == 1, slots
    assert slots == {key_slot(keys.stock.encode())}
    return slots.pop()


def storm(campaigns: list[Campaign], *, threads: int, claims_per_thread: int) -> list[tuple[int, str, str | None]]:
    """Claims from many threads at once on random campaigns by random shoppers: (campaign, status, claim id)."""
    answers = claim_storm(lambda rng: (rng.choice(campaigns).pk, f"s{rng.randrange(SHOPPERS):03d}"),
                          threads=threads, claims_per_thread=claims_per_thread)
    return [(campaign_id, status, claim_id) for campaign_id, _, status, claim_id in answers]


def stock(campaign: Campaign) -> int:
    return int(redis_client().get(campaign_keys(campaign.pk).stock))


def balanced(campaign: Campaign) -> bool:
    balance = campaign_verify(campaign=campaign)
    assert balance.problems == [] and balance.users_over_limit == [] and not balance.users_drift, balance
    return balance.balanced


@pytest.mark.django_db(transaction=True)
def test_claims_drain_cancel_and_reconciliation_balance_on_campaigns_spread_over_three_masters(
    on_cluster: Cluster, live_campaign: Callable[..., Campaign], capsys: pytest.CaptureFixture[str]
) -> None:
    # Given the project on a 3-master cluster, and live campaigns whose slots cover every master
    assert isinstance(redis_client(), RedisCluster)
    campaigns = campaigns_on_every_master(on_cluster, live_campaign)
    masters = Counter(on_cluster.port_of_slot(slot_of(on_cluster, c)) for c in campaigns)
    assert len(masters) == 3
    for campaign in campaigns:  # the state of each campaign lives on the master that owns its slot
        owner = on_cluster.node(on_cluster.port_of_slot(slot_of(on_cluster, campaign)))
        assert int(owner.get(campaign_keys(campaign.pk).stock)) == STOCK
        owner.close()

    # When 8 threads claim at once on all of them, far more than the stock, while a drain runs beside them
    draining = threading.Event()

    def drain_meanwhile() -> None:
        try:
            while not draining.is_set():
                for campaign in campaigns:
                    with contextlib.suppress(StoreUnavailable):  # a timeout: the next round drains it
                        drain_campaign(campaign_id=campaign.pk, max_seconds=1)
        finally:
            connections.close_all()

    drainer = threading.Thread(target=drain_meanwhile)
    drainer.start()
    try:
        answers = storm(campaigns, threads=8, claims_per_thread=STOCK * len(campaigns) // 3)
    finally:
        draining.set()
        drainer.join()

    # Then every campaign sold exactly its stock, nobody above the limit, every other answer a clean refusal
    assert {status for _, status, _ in answers} <= {"claimed", "sold_out", "limit_reached", "unavailable"}
    claimed = Counter(cid for cid, status, _ in answers if status == "claimed")
    assert claimed == {c.pk: STOCK for c in campaigns}
    assert remaining_many([c.pk for c in campaigns]) == {c.pk: 0 for c in campaigns}  # one pipeline, 3 nodes

    # When one claim of each campaign is cancelled (still pending, unless the drain beside took it already)
    claim_ids = {cid: [claim_id for c, status, claim_id in answers if c == cid and status == "claimed"]
                 for cid in claimed}
    cancelled = []
    for campaign in campaigns:
        claim_id = claim_ids[campaign.pk][-1]
        entry = ledger.pending_entry(campaign.pk, ledger.parse_claim_id(claim_id)[1])
        assert entry is not None  # kept in the stream until acknowledged and past retention
        assert claim_cancel(user_id=entry.user_id, claim_id=claim_id).status == "cancelled"
        cancelled.append(claim_id)

    # And every ledger is drained, the sweep finds no backlog on any master, and a persisted claim is cancelled
    for campaign in campaigns:
        drain_campaign(campaign_id=campaign.pk)
    assert ledger.backlog_sizes([c.pk for c in campaigns]) == {c.pk: 0 for c in campaigns}
    assert tasks.drain_sweep() == {"drained": {}}
    for campaign in campaigns:
        claim_id = claim_ids[campaign.pk][0]
        user = Claim.objects.get(claim_id=claim_id).user_id
        assert claim_cancel(user_id=user, claim_id=claim_id).status == "cancelled"
        cancelled.append(claim_id)

    # Then the balances hold: 2 coupons back per campaign, claims and coupons exact in PostgreSQL
    for campaign in campaigns:
        assert stock(campaign) == 2
        assert Claim.objects.filter(campaign=campaign).count() == STOCK
        assert Claim.objects.filter(campaign=campaign, status=ClaimStatus.CANCELLED).count() == 2
        assert Coupon.objects.filter(campaign=campaign).exclude(status=CouponStatus.REVOKED).count() == STOCK - 2
        assert balanced(campaign)
        call_command("verify_campaign", str(campaign.pk))  # exits non-zero when it does not balance
    assert set(cancelled) == set(Claim.objects.filter(status=ClaimStatus.CANCELLED).values_list("claim_id", flat=True))

    # When drift is injected on one campaign per master: PostgreSQL loses two claims, a shopper's count and
    # the stock are raised in Redis; and one campaign's state is lost from Redis altogether
    by_master: dict[int, Campaign] = {}
    for campaign in campaigns:
        by_master.setdefault(on_cluster.port_of_slot(slot_of(on_cluster, campaign)), campaign)
    damaged = list(by_master.values())
    lost = [claim_id for claim_id in claim_ids[damaged[0].pk][1:3]]
    lose_from_postgres(lost)
    keys = campaign_keys(damaged[1].pk)
    shopper, count = next((u, n) for u, n in ledger.snapshot(damaged[1].pk).users.items() if u and n)
    redis_client().hincrby(keys.users, shopper, 1)
    redis_client().incrby(keys.stock, 3)
    redis_client().delete(*campaign_keys(damaged[2].pk).state)  # one slot: one DEL on one master
    before = [campaign_verify(campaign=c) for c in damaged]
    assert [len(before[0].missing_entries), before[1].drift, before[2].remaining] == [2, -3, None]
    assert before[1].users_drift == {shopper: (count + 1, count)}

    # Then one reconciliation cycle repairs each of them on its own master, and all balance again
    for campaign in campaigns:
        record = campaign_reconcile(campaign=campaign, repair=True, source="test")
        assert record is not None and record.balanced, record.problems if record else None
    assert Claim.objects.filter(claim_id__in=lost).count() == 2
    assert stock(damaged[1]) == 2
    assert stock(damaged[2]) == 2  # rebuilt from PostgreSQL: 30 - 30 claims + 2 cancelled
    assert tasks.reconcile_campaigns() == {c.pk: {"balanced": True, "repairs": 0} for c in campaigns}
    tasks.housekeeping()
    for campaign in campaigns:
        assert balanced(campaign)

    # And the rebuilt campaign sells its two coupons again, and no more
    rebuilt = damaged[2]
    outcomes = [claim_create(campaign_id=rebuilt.pk, user_id=f"late{i}", idempotency_key=None).status for i in range(4)]
    assert outcomes == ["claimed", "claimed", "sold_out", "sold_out"]
    drain_campaign(campaign_id=rebuilt.pk)
    assert balanced(rebuilt)
    with capsys.disabled():
        print(f"\ncluster: {len(campaigns)} campaigns on masters {dict(masters)}, {len(answers)} claims, "
              f"{sum(claimed.values())} claimed, {len(cancelled)} cancelled, balanced")


@pytest.mark.django_db
def test_a_script_over_two_campaigns_is_refused_by_the_cluster_client_so_the_tags_are_what_keeps_it_working(
    on_cluster: Cluster, live_campaign: Callable[..., Campaign]
) -> None:
    # Given two campaigns on different masters
    campaigns = campaigns_on_every_master(on_cluster, live_campaign)
    one = campaigns[0]
    other = next(c for c in campaigns if on_cluster.port_of_slot(slot_of(on_cluster, c))
                 != on_cluster.port_of_slot(slot_of(on_cluster, one)))

    # When a script is given keys of both, then it is refused before anything runs (a bug, never an outage)
    with pytest.raises(RedisClusterException, match="same key slot"):
        scripts().cancel(keys=[campaign_keys(one.pk).stock, campaign_keys(other.pk).users,
                               campaign_keys(one.pk).cancelled], args=["x", "u"])
    assert stock(one) == STOCK and stock(other) == STOCK


class LateReplies:
    """A TCP proxy to a node: requests go on at once, and so do replies, but for the next `late` ones (each 1.5 s
    late). A reply later than the client's timeout is a reply lost after its command ran."""

    def __init__(self, port: int) -> None:
        self.upstream, self.late = port, 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                client, _ = self.listener.accept()
                upstream = socket.create_connection(("127.0.0.1", self.upstream))
                threading.Thread(target=self._pump, args=(client, upstream, False), daemon=True).start()
                threading.Thread(target=self._pump, args=(upstream, client, True), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, replies: bool) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                if replies and self.late > 0:
                    self.late -= 1
                    time.sleep(1.5)
                sink.sendall(data)
        for end in (source, sink):
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.listener.close()


def test_a_pipelines_command_whose_reply_was_lost_is_never_sent_again(on_cluster: Cluster) -> None:
    # Given keys on two masters, the project's cluster client reaching one of them through a proxy
    by_master = {on_cluster.port_of_slot(key_slot(key.encode())): key for key in (f"lost:{i}" for i in range(30))}
    (late, lost_key), (_, other_key) = list(by_master.items())[:2]
    proxy = LateReplies(late)
    client = _Cluster.from_url(on_cluster.seed_url, retry=Retry(NoBackoff(), 0), socket_timeout=0.5,
                               address_remap=lambda at: ("127.0.0.1", proxy.port) if at[1] == late else at)
    assert client.get(lost_key) is None

    # When a pipeline increments both and that master's reply comes after the client stopped waiting (0.5 s),
    # then that is a timeout
    proxy.late = 1
    pipe = client.pipeline(transaction=False)
    pipe.incr(lost_key)
    pipe.incr(other_key)
    with pytest.raises(redis.TimeoutError):
        pipe.execute()

    # Then each ran once: the lost one was not sent again on its own (redis-py's pipeline would)
    node = on_cluster.node(late)
    assert node.get(lost_key) == b"1" and node.info("commandstats")["cmdstat_incrby"]["calls"] == 1
    assert on_cluster.node(on_cluster.port_of_slot(key_slot(other_key.encode()))).get(other_key) == b"1"
    client.close()
    proxy.close()


@pytest.mark.django_db
def test_an_unreachable_cluster_is_a_fast_unavailable_not_a_server_error(live_campaign) -> None:
    campaign = live_campaign()
    with override_settings(REDIS_URL="redis://127.0.0.1:1/0", COUPONS_REDIS_CLUSTER=True):
        reset_redis_client()
        began = time.monotonic()
        with pytest.raises(Unavailable):
            claim_create(campaign_id=campaign.pk, user_id="alice", idempotency_key=None)
        with pytest.raises(StoreUnavailable):
            ledger.backlog_sizes([campaign.pk])
        assert time.monotonic() - began < 2
        reset_redis_client()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_claims_and_cancels_over_http_on_the_cluster_balance(
    on_cluster: Cluster, monkeypatch: pytest.MonkeyPatch, settings: Any, live_campaign: Callable[..., Campaign],
    request: pytest.FixtureRequest,
) -> None:
    # Given the web server started on the cluster (REDIS_CLUSTER=1, the broker named as production needs)
    monkeypatch.setenv("REDIS_CLUSTER", "1")
    monkeypatch.setenv("CELERY_BROKER_URL", settings.CELERY_BROKER_URL)
    http_server: str = request.getfixturevalue("http_server")
    campaigns = campaigns_on_every_master(on_cluster, live_campaign)
    url = urllib.parse.urlsplit(http_server)
    tokens = {f"s{i:03d}": mint_token(f"s{i:03d}", ttl=600) for i in range(SHOPPERS)}
    answers: list[tuple[int, int, dict[str, Any]]] = []
    lock = threading.Lock()

    def post(conn: http.client.HTTPConnection, path: str, user: str) -> tuple[int, dict[str, Any]]:
        conn.request("POST", path, body="{}", headers={
            "X-User-Id": user, "X-Token": tokens[user], "Content-Type": "application/json"})
        response = conn.getresponse()
        return response.status, json.loads(response.read())

    def run(seed: int) -> None:
        rng = random.Random(seed)
        conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
        mine = []
        for _ in range(STOCK * len(campaigns) // 3):
            campaign = rng.choice(campaigns)
            status, body = post(conn, f"/api/v1/campaigns/{campaign.pk}/claim", f"s{rng.randrange(SHOPPERS):03d}")
            mine.append((campaign.pk, status, body))
        conn.close()
        with lock:
            answers.extend(mine)

    # When 8 storefront connections claim at once on every campaign
    workers = [threading.Thread(target=run, args=(i,)) for i in range(8)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()

    # Then every answer is a 200 (bar a rare fast 503 on a starved machine) and every campaign sold exactly its stock
    statuses = Counter(status for _, status, _ in answers)
    assert set(statuses) <= {200, 503} and statuses[503] <= len(answers) // 20, statuses
    claimed = Counter(cid for cid, status, body in answers if status == 200 and body["status"] == "claimed")
    assert claimed == {c.pk: STOCK for c in campaigns}
    # And the claims ran on the door's event loop, not in a thread: every master holds a connection of the
    # pipelined client (it sends no CLIENT SETINFO, redis-py's clients name themselves) whose last command was
    # a script
    for port in on_cluster.ports:
        node = on_cluster.node(port)
        clients = node.client_list()
        node.close()
        assert [c for c in clients if not c.get("lib-name") and c["cmd"] in ("evalsha", "eval")], clients

    # When a claim of each campaign is cancelled over HTTP, and the ledgers are drained
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    for campaign in campaigns:
        claim_id = next(body["claim_id"] for cid, status, body in answers
                        if cid == campaign.pk and status == 200 and body["status"] == "claimed")
        entry = ledger.pending_entry(campaign.pk, ledger.parse_claim_id(claim_id)[1])
        assert entry is not None
        status, body = post(conn, f"/api/v1/claims/{claim_id}/cancel", entry.user_id)
        assert (status, body["status"]) == (200, "cancelled")
    conn.close()
    for campaign in campaigns:
        drain_campaign(campaign_id=campaign.pk)

    # Then each campaign has one coupon back and balances
    for campaign in campaigns:
        assert stock(campaign) == 1
        assert balanced(campaign)


def test_production_on_a_cluster_needs_a_plain_redis_for_the_broker_and_puts_the_cache_there() -> None:
    cluster = {**GOOD, "REDIS_URL": "redis://redis-cluster-seed.internal:6379/0", "REDIS_CLUSTER": "1"}
    refused = run_with_production_settings({**cluster, "CELERY_BROKER_URL": None}, "check")
    assert refused.returncode != 0
    assert "REDIS_CLUSTER=1 needs CELERY_BROKER_URL" in refused.stderr

    shown = run_with_production_settings(
        {**cluster, "CELERY_BROKER_URL": "redis://broker.internal:6379/0"}, "shell", "-c",
        "from django.conf import settings as s; print(s.COUPONS_REDIS_CLUSTER, s.CACHES['default']['LOCATION'])")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines()[-1].split() == ["True", "redis://broker.internal:6379/0"]
