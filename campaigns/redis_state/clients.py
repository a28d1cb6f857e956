"""The process's Redis clients: the sync one (a single server, the sentinels' master, or a cluster), one
auto-pipelined client per event loop (campaigns/redis_async.py), and the short-timeout client that reads a lost
reply's outcome. reset_redis_client (reset.py) forgets them with forget_clients()."""
from __future__ import annotations

import asyncio
import threading
import weakref

import redis
from django.conf import settings
from redis.backoff import NoBackoff
from redis.retry import Retry

from ..redis_async import AsyncRedis, ClusterPipelinedRedis, PipelinedRedis

# One client per process. No retries: a claim script must never run twice because a reply was slow,
# and a dead Redis must be a fast 503 (timeouts well under a second).
_client: redis.Redis | None = None
client_lock = threading.Lock()


def redis_client() -> redis.Redis:
    global _client
    if _client is None:
        with client_lock:
            if _client is None and settings.COUPONS_REDIS_CLUSTER:
                from ..redis_cluster import cluster_client  # REDIS_URL is a seed node of a Redis Cluster

                _client = cluster_client(settings.REDIS_URL, timeout=settings.COUPONS_REDIS_SOCKET_TIMEOUT,
                                         max_connections=settings.COUPONS_REDIS_MAX_CONNECTIONS)
            elif _client is None and settings.REDIS_SENTINELS:
                _client = _sentinel_client(settings.COUPONS_REDIS_SOCKET_TIMEOUT,
                                           max_connections=settings.COUPONS_REDIS_MAX_CONNECTIONS)
            elif _client is None:
                timeout = settings.COUPONS_REDIS_SOCKET_TIMEOUT
                pool = redis.BlockingConnectionPool.from_url(
                    settings.REDIS_URL,
                    max_connections=settings.COUPONS_REDIS_MAX_CONNECTIONS,
                    timeout=timeout,
                    socket_timeout=timeout,
                    socket_connect_timeout=timeout,
                    health_check_interval=30,
                    retry=Retry(NoBackoff(), 0),
                )
                _client = redis.Redis(connection_pool=pool)
    return _client


def _sentinel_client(timeout: float, *, max_connections: int | None = None) -> redis.Redis:
    """A client of the master the sentinels (REDIS_SENTINELS) name REDIS_SENTINEL_MASTER: each new connection
    asks them where it is, and a connection to a demoted master (READONLY) is dropped, so the client follows a
    failover. REDIS_URL gives the password and the database only. No retries, like every client here."""
    from redis.sentinel import Sentinel

    options = redis.connection.parse_url(settings.REDIS_URL) if settings.REDIS_URL else {}
    options = {k: v for k, v in options.items() if k in ("username", "password", "db")}
    sentinel = Sentinel(settings.REDIS_SENTINELS, socket_timeout=timeout, socket_connect_timeout=timeout)
    extra = {"max_connections": max_connections} if max_connections else {}
    return sentinel.master_for(settings.REDIS_SENTINEL_MASTER, socket_timeout=timeout,
                               socket_connect_timeout=timeout, retry=Retry(NoBackoff(), 0), **options, **extra)


# One auto-pipelined connection per event loop (a granian ASGI worker runs one).
_async_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AsyncRedis] = weakref.WeakKeyDictionary()


# This thread's last (loop, client): while that loop runs, it is this thread's running loop (a thread runs one
# loop at a time), so the claim needs no asyncio.get_running_loop(), which makes a getpid() system call on every
# call in CPython 3.11 (one per claim; docs/benchmarks.md, "system calls per claim"). reset_redis_client()
# replaces it, so that no thread keeps a client that was closed.
_this_thread = threading.local()


def async_client() -> AsyncRedis:
    last = getattr(_this_thread, "last", None)
    if last is not None and last[0].is_running():
        return last[1]
    loop = asyncio.get_running_loop()
    client = _async_clients.get(loop)
    if client is None:
        client = _async_clients[loop] = pipelined(settings.COUPONS_REDIS_SOCKET_TIMEOUT,
                                                  acks=settings.COUPONS_REDIS_REPLICA_ACKS)
    _this_thread.last = (loop, client)
    return client


def pipelined(timeout: float, *, acks: int = 0) -> AsyncRedis:
    """A pipelined client of REDIS_URL, of the master the sentinels name (REDIS_SENTINELS), or of the masters of
    the cluster REDIS_URL is a node of (COUPONS_REDIS_CLUSTER: each call goes to its first key's master)."""
    if settings.COUPONS_REDIS_CLUSTER:
        return ClusterPipelinedRedis(settings.REDIS_URL, timeout=timeout, acks=acks,
                                     ack_timeout_ms=settings.COUPONS_REDIS_REPLICA_ACK_TIMEOUT_MS)
    return PipelinedRedis(settings.REDIS_URL or "redis://", timeout=timeout, acks=acks,
                          ack_timeout_ms=settings.COUPONS_REDIS_REPLICA_ACK_TIMEOUT_MS,
                          sentinels=settings.REDIS_SENTINELS, sentinel_master=settings.REDIS_SENTINEL_MASTER)


_recovery: redis.Redis | None = None


def recovery_client() -> redis.Redis:
    """A client with short timeouts, only for reading a lost reply's outcome (a stalled Redis fails fast)."""
    global _recovery
    if _recovery is None and settings.COUPONS_REDIS_CLUSTER:
        from ..redis_cluster import cluster_client

        _recovery = cluster_client(settings.REDIS_URL, timeout=0.1)
    elif _recovery is None and settings.REDIS_SENTINELS:
        _recovery = _sentinel_client(0.1)
    elif _recovery is None:
        _recovery = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=0.1, socket_connect_timeout=0.1,
                                         retry=Retry(NoBackoff(), 0))
    return _recovery


def forget_clients() -> None:
    """Close and forget every client (reset_redis_client, holding client_lock): the sync client and the recovery
    client; every event loop's client, a running loop's included (each thread's last one, _this_thread)."""
    global _client, _recovery, _this_thread
    from ..redis_cluster import close

    for sync_client in (_client, _recovery):
        if sync_client is not None:
            close(sync_client)
    _client = None
    _recovery = None
    for client in list(_async_clients.values()):
        client.close()
    _async_clients.clear()
    _this_thread = threading.local()  # every thread's remembered (loop, client) gone at once
