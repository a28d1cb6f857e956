"""Redis Cluster (COUPONS_REDIS_CLUSTER): the process's Redis clients as redis.cluster.RedisCluster.

Every key of a campaign carries its hash tag {c<id>}, so each script and MULTI of a campaign runs on the one
shard that owns its slot; a pipeline over several campaigns (remaining_many, backlog_sizes) is split by the
client, one round trip per node. REDIS_URL names any one node (a seed); the client learns the others from
CLUSTER SLOTS and follows MOVED/ASK redirections (a redirected command never ran, so following one is not
a retry). Like the single-node client: no retries, timeouts well under a second.

redis-py raises its own RedisClusterException, which is not a RedisError, when no node can be reached or a
slot is not covered. Every caller here expects a RedisError (a fast 503), so the client translates them:
to a ConnectionError when it followed a command's connection error or timeout (the command may have run:
the claim then reads its stored answer), otherwise to ClusterUnavailable (nothing was sent). A cross-slot
command stays a RedisClusterException: that is a bug in the key names, never an outage.
"""
from __future__ import annotations

from typing import Any, cast

import redis
from redis.backoff import NoBackoff
from redis.cluster import ClusterPipeline, RedisCluster, TransactionStrategy
from redis.exceptions import CrossSlotTransactionError, RedisClusterException
from redis.retry import Retry


class ClusterUnavailable(redis.RedisError):
    """No node of the cluster could be reached, or the command's slot has no node: nothing was sent."""


def _translated(exc: RedisClusterException) -> Exception:
    if isinstance(exc, CrossSlotTransactionError) or "same key slot" in str(exc):
        return exc
    if isinstance(exc.__context__, (redis.ConnectionError, redis.TimeoutError)):
        return redis.ConnectionError(str(exc))
    return ClusterUnavailable(str(exc))


class _ClusterPipeline(ClusterPipeline):
    def execute(self, raise_on_error: bool = True) -> list[Any]:
        transaction = isinstance(self._execution_strategy, TransactionStrategy)
        commands = list(self._execution_strategy.command_queue) if transaction else []
        try:
            replies = super().execute(raise_on_error)
        except RedisClusterException as exc:
            raise _translated(exc) from exc
        if not transaction:
            return replies
        # redis-py 8.1's cluster MULTI/EXEC leaves the replies unparsed (XINFO STREAM, XPENDING, SMEMBERS...):
        # parse them with the node client's callbacks, as the single-node pipeline does.
        node = self.nodes_manager.default_node
        assert node is not None and node.redis_connection is not None  # set since the client learned the cluster
        callbacks = node.redis_connection.response_callbacks
        parsed = []
        for reply, command in zip(replies, commands, strict=True):
            name = command.args[0]
            if not isinstance(reply, Exception) and name in callbacks and name not in self.cluster_response_callbacks:
                options = {k: v for k, v in command.options.items() if k != "keys"}
                reply = callbacks[name](reply, **options)
            parsed.append(reply)
        return parsed


class _Cluster(RedisCluster):
    def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().execute_command(*args, **kwargs)
        except RedisClusterException as exc:
            raise _translated(exc) from exc

    def pipeline(self, transaction: Any = None, shard_hint: Any = None) -> ClusterPipeline:
        pipe = super().pipeline(transaction, shard_hint)
        pipe.__class__ = _ClusterPipeline  # the same pipeline; only its execute() translates errors
        return pipe


def cluster_client(
    url: str, *, timeout: float, connect_timeout: float | None = None, max_connections: int | None = None
) -> redis.Redis:
    """A cluster client from a seed node's URL (database 0 only). With max_connections, each node gets a
    BlockingConnectionPool of that size (a burst waits up to `timeout` for a connection instead of failing).

    It has the single-node client's commands for keys of one slot, hence the type. Raise redis.RedisError.
    """
    options: dict[str, Any] = {"socket_timeout": timeout, "socket_connect_timeout": connect_timeout or timeout}
    if max_connections:
        options.update(connection_pool_class=redis.BlockingConnectionPool, max_connections=max_connections,
                       timeout=timeout)
    try:
        client = _Cluster.from_url(url, retry=Retry(NoBackoff(), 0), **options)
    except RedisClusterException as exc:
        raise _translated(exc) from exc
    return cast(redis.Redis, client)


def close(client: redis.Redis) -> None:
    """Close a client's connections, whichever kind it is."""
    if isinstance(client, RedisCluster):
        client.close()
    else:
        client.connection_pool.disconnect()
