"""Redis Cluster (COUPONS_REDIS_CLUSTER): the process's Redis clients as redis.cluster.RedisCluster.

Every key of a campaign carries its hash tag {c<id>}, so each script and MULTI of a campaign runs on the one
shard that owns its slot; a pipeline over several campaigns (remaining_many, backlog_sizes) is split by the
client, one round trip per node. REDIS_URL names any one node (a seed); the client learns the others from
CLUSTER SLOTS and follows MOVED/ASK redirections and TRYAGAIN (a redirected command never ran, so following one is
not a retry). Like the single-node client: no retries, timeouts well under a second, and a command whose reply
was lost is never sent again (redis-py's pipeline would send it again alone: _PipelineStrategy). With replica
acks a script and its WAIT go on one connection of the slot's master (_ClusterPipeline.execute_then_wait), not
through the cluster pipeline, which would send the WAIT to every master on connections that wrote nothing.

redis-py raises its own RedisClusterException, which is not a RedisError, when no node can be reached or a
slot is not covered. Every caller here expects a RedisError (a fast 503), so the client translates them:
to a ConnectionError when it followed a command's connection error or timeout (the command may have run:
the claim then reads its stored answer), otherwise to ClusterUnavailable (nothing was sent). A cross-slot
command stays a RedisClusterException: that is a bug in the key names, never an outage.
"""
from __future__ import annotations

import time
from typing import Any, cast

import redis
from redis.backoff import NoBackoff
from redis.cluster import PRIMARY, ClusterNode, ClusterPipeline, PipelineStrategy, RedisCluster, TransactionStrategy
from redis.exceptions import AskError, CrossSlotTransactionError, MovedError, RedisClusterException, TryAgainError
from redis.retry import Retry


class ClusterUnavailable(redis.RedisError):
    """No node of the cluster could be reached, or the command's slot has no node: nothing was sent."""


def _translated(exc: RedisClusterException) -> Exception:
    if isinstance(exc, CrossSlotTransactionError) or "same key slot" in str(exc):
        return exc
    if isinstance(exc.__context__, (redis.ConnectionError, redis.TimeoutError)):
        return redis.ConnectionError(str(exc))
    return ClusterUnavailable(str(exc))


class _PipelineStrategy(PipelineStrategy):
    """redis-py's pipeline but for one thing. A command told MOVED, ASK or TRYAGAIN never ran, and it is sent
    again alone, following it, as redis-py does. A command whose reply was lost (a connection error or a timeout
    once it was sent) may have run, and redis-py would send that one again too, so a script could run twice (a
    guard's take counted twice, a claim made twice). Here it keeps its error, and the slot map is learnt again (a
    node may have failed over)."""

    def _send_cluster_commands(self, stack: list[Any], raise_on_error: bool = True,
                               allow_redirections: bool = True) -> list[Any]:
        super()._send_cluster_commands(stack, raise_on_error=False, allow_redirections=False)
        started = time.monotonic()
        stack = sorted(stack, key=lambda command: command.position)
        if any(isinstance(command.result, (redis.ConnectionError, redis.TimeoutError)) for command in stack):
            try:  # a node may have failed over: learn the map again for the next call, as redis-py does
                self._nodes_manager.initialize()
            except (RedisClusterException, redis.RedisError):
                pass
        for command in stack:
            if allow_redirections and isinstance(command.result, (MovedError, AskError, TryAgainError)):
                try:
                    command.result = self._pipe.parent_execute_command(*command.args, **command.options)
                except redis.RedisError as exc:
                    command.result = exc
        if raise_on_error:
            self._raise_first_error(stack, started)
        return [command.result for command in stack]


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

    def execute_then_wait(self, numreplicas: int, timeout_ms: int, *, raise_on_error: bool = True) -> list[Any]:
        """Execute the queued commands (not a MULTI; their keys in one slot), then WAIT numreplicas timeout_ms,
        on ONE connection of the master that owns the slot: WAIT counts the writes of its own connection only,
        and the cluster pipeline would send it to every master, each on a connection that wrote nothing. Return
        the replies, the WAIT's last (how many replicas hold what the master held after the commands).

        A MOVED or ASK reply to every command means none ran there: they are sent again to the node it names
        (MOVED also updates the slot map, as redis-py does), as after TRYAGAIN (a slot mid-migration). A lost
        reply (connection error, timeout) is never sent again: the map is refreshed for the next call."""
        commands = list(self._execution_strategy.command_queue)
        self.reset()
        try:
            slot = self.determine_slot(*commands[0].args)
            assert slot is not None, "a command without a key has no master to WAIT on"
            node = self.nodes_manager.get_node_from_slot(slot)
            asking = False
            for attempt in range(self.RedisClusterRequestTTL):
                replies = self._on_one_connection(node, commands, numreplicas, timeout_ms, asking=asking)
                redirection = replies[0]
                if not isinstance(redirection, (MovedError, AskError, TryAgainError)) or any(
                        type(reply) is not type(redirection) for reply in replies[1:-1]):
                    break
                if isinstance(redirection, TryAgainError):
                    time.sleep(0.05 if attempt else 0)
                    continue
                asking = isinstance(redirection, AskError)
                if isinstance(redirection, MovedError):
                    self.nodes_manager.move_slot(redirection)
                node = self.nodes_manager.get_node(redirection.host, redirection.port) or ClusterNode(
                    redirection.host, redirection.port, PRIMARY)
        except RedisClusterException as exc:
            raise _translated(exc) from exc
        for reply in replies if raise_on_error else ():
            if isinstance(reply, Exception):
                raise reply
        return replies

    def _on_one_connection(self, node: ClusterNode, commands: list[Any], numreplicas: int, timeout_ms: int, *,
                           asking: bool) -> list[Any]:
        """The replies of the commands and a WAIT sent on one connection of `node` (no retries); with `asking`,
        each command follows an ASKING (whose reply is dropped)."""
        pipe = self.get_redis_connection(node).pipeline(transaction=False)
        for command in commands:
            if asking:
                pipe.execute_command("ASKING")
            pipe.execute_command(*command.args, **command.options)
        pipe.execute_command("WAIT", numreplicas, timeout_ms)
        try:
            replies = pipe.execute(raise_on_error=False)
        except (redis.ConnectionError, redis.TimeoutError):
            try:  # the node may have failed over: learn the map again (as redis-py does), never resend
                self.nodes_manager.initialize()
            except (RedisClusterException, redis.RedisError):
                pass
            raise
        return replies[1:-1:2] + replies[-1:] if asking else replies


class _Cluster(RedisCluster):
    def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().execute_command(*args, **kwargs)
        except RedisClusterException as exc:
            raise _translated(exc) from exc

    def pipeline(self, transaction: Any = None, shard_hint: Any = None) -> ClusterPipeline:
        pipe = super().pipeline(transaction, shard_hint)
        pipe.__class__ = _ClusterPipeline  # the same pipeline; only its execute() translates errors
        if type(pipe._execution_strategy) is PipelineStrategy:
            pipe._execution_strategy.__class__ = _PipelineStrategy  # and it never sends a lost reply's command again
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
