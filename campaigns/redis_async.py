"""An asyncio Redis client for the claim's fast path that batches concurrent commands (auto-pipelining).

A claim is one EVALSHA. On an event loop serving a hundred shoppers at once, sending each on its own costs a
system call per claim on both sides; this client appends every command issued during one turn of the loop to
a buffer, writes the buffer once, and hands the replies (which Redis sends in order) back to their callers.
One connection per event loop: Redis runs the scripts one after another anyway.

Semantics match the synchronous client's (campaigns/redis_state.redis_client): never a retry (a claim must
not run twice), and a stalled Redis is a fast failure. A watchdog fails every waiting command with
TimeoutError when the oldest has waited `timeout` seconds, and drops the connection; the next command opens
a new one. Callers that must know whether a timed-out command ran find out from Redis afterwards
(redis_state.run_claim_async).

Replicas (acks > 0): after the scripts of one batch the client sends one WAIT <acks> <timeout>, and every
script of the batch answers only once that WAIT has: NotAcknowledged (carrying the script's reply) when fewer
replicas confirmed it in time. While a WAIT is out, the commands issued meanwhile are held and go out together
(with their own WAIT) when it returns: one WAIT per batch, never two queued behind each other.

Sentinel (sentinels given): each new connection asks the sentinels for the master's address first, so after a
failover (the connection dropped, or a demoted master answering READONLY) the next command goes to the new
master. Nothing is ever retried: a command that may have run is the caller's to read back.

Redis Cluster (ClusterPipelinedRedis): one PipelinedRedis per master, each command sent to the master that owns
the hash slot of its first key (every key of one call shares a hash tag), learnt from CLUSTER SLOTS. A MOVED or
ASK reply is followed (the node refused the command, so it did not run); a lost connection or a refused one
makes the client learn the slot map again for the next command, and the command itself is never sent twice.
"""
from __future__ import annotations

import asyncio
import collections
import contextlib
import random
import ssl
import time
from collections.abc import Awaitable, Callable
from typing import Any, cast

import hiredis
from redis.connection import parse_url
from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot
from redis.exceptions import ConnectionError, RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

_SECOND_LOOK_SECONDS = 0.01


class NotSent(ConnectionError):
    """No connection to Redis could be opened: the command was never sent, so it surely did not run."""


class NotAcknowledged(RedisError):
    """The command ran on the master, but fewer replicas than required confirmed it within the timeout (WAIT):
    a failover may lose it. `reply` is the command's own reply."""

    def __init__(self, reply: Any, replicas: int) -> None:
        super().__init__(f"{replicas} replicas confirmed the write, fewer than required")
        self.reply, self.replicas = reply, replicas


async def master_address(sentinels: list[tuple[str, int]], name: str, timeout: float) -> tuple[str, int]:
    """Ask the sentinels (in turn) where the master `name` is. Raise NotSent when none knows."""
    for host, port in sentinels:
        try:
            _, conn = await asyncio.wait_for(asyncio.get_running_loop().create_connection(
                lambda: _Connection(asyncio.get_running_loop(), timeout), host, port), timeout)
        except (OSError, TimeoutError):
            continue
        try:
            reply = await asyncio.wait_for(
                conn.send(hiredis.pack_command(cast(Any, ("SENTINEL", "get-master-addr-by-name", name)))), timeout)
        except (RedisError, TimeoutError):
            continue
        finally:
            conn.abort(ConnectionError("done"))
        if reply:
            return reply[0].decode(), int(reply[1])
    raise NotSent(f"no sentinel of {sentinels} knows the master {name!r}")


class PipelinedRedis:
    """One auto-pipelined connection, used from one event loop."""

    def __init__(self, url: str, *, timeout: float, connect_timeout: float | None = None, acks: int = 0,
                 ack_timeout_ms: int = 0, sentinels: list[tuple[str, int]] | None = None,
                 sentinel_master: str = "", address: tuple[str, int] | None = None) -> None:
        options = parse_url(url)
        self._path: str | None = options.get("path")
        self._host: str = options.get("host", "localhost")
        self._port = int(options.get("port", 6379))
        if address is not None:  # one node of a cluster: the URL gives the password (and TLS) only
            self._path, (self._host, self._port) = None, address
        self._ssl = url.startswith("rediss://")
        self._hello: list[tuple[Any, ...]] = []
        if options.get("password") is not None:
            user = options.get("username")
            self._hello.append(("AUTH", user, options["password"]) if user else ("AUTH", options["password"]))
        if int(options.get("db", 0)):
            self._hello.append(("SELECT", int(options["db"])))
        self.timeout = timeout
        self.connect_timeout = connect_timeout if connect_timeout is not None else timeout
        self.acks = acks
        self._wait = hiredis.pack_command(cast(Any, ("WAIT", acks, ack_timeout_ms))) if acks else b""
        self._sentinels, self._sentinel_master = sentinels or [], sentinel_master
        self._conn: _Connection | None = None
        self._connecting: asyncio.Future[_Connection] | None = None

    async def execute(self, *args: Any, asking: bool = False) -> Any:
        """Send one command (after ASKING: a cluster's ASK redirection); return its reply. Raise
        ConnectionError, TimeoutError or ResponseError."""
        conn = self._conn
        if conn is None or conn.closed or conn.stale:
            conn = await self._connect()
        if asking:
            conn.send_asking()
        return await conn.send(hiredis.pack_command(args))

    async def _acked(self, *args: Any, asking: bool = False) -> Any:
        """execute() for a write with acks: its reply once its batch's WAIT confirmed it (NotAcknowledged)."""
        conn = self._conn
        if conn is None or conn.closed or conn.stale:
            conn = await self._connect()
        if asking:
            conn.send_asking()
        reply, confirmed = conn.send_acked(hiredis.pack_command(args), self._wait)
        result = await reply
        replicas = await confirmed
        if replicas < self.acks:
            raise NotAcknowledged(result, replicas)
        return result

    async def evalsha(self, sha: str, script: str | bytes | memoryview, keys: list[str], args: list[Any],
                      asking: bool = False) -> Any:
        """Run a script by its SHA1; load it with EVAL when Redis does not know it (after SCRIPT FLUSH). With
        acks, answer once the replicas confirmed it (raise NotAcknowledged otherwise)."""
        send = self._acked if self.acks else self.execute  # without acks the claim awaits one coroutine, as before
        try:
            return await send("EVALSHA", sha, len(keys), *keys, *args, asking=asking)
        except ResponseError as exc:
            if not str(exc).startswith("NOSCRIPT"):
                raise
        return await send("EVAL", script, len(keys), *keys, *args, asking=asking)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.abort(ConnectionError("client closed"))
            self._conn = None

    async def _connect(self) -> _Connection:
        # Concurrent callers on a fresh loop share one connection attempt.
        if self._connecting is not None:
            return await asyncio.shield(self._connecting)
        loop = asyncio.get_running_loop()
        self._connecting = loop.create_future()
        try:
            conn = await asyncio.wait_for(self._open(loop), self.connect_timeout)
        except NotSent as exc:
            self._connecting.set_exception(exc)
            self._connecting.exception()
            self._connecting = None
            raise
        except (OSError, TimeoutError, ResponseError) as exc:
            error = exc if isinstance(exc, ResponseError) else NotSent(f"cannot connect to Redis: {exc!r}")
            self._connecting.set_exception(error)
            self._connecting.exception()  # retrieved: other waiters re-raise it, no "never retrieved" warning
            self._connecting = None
            raise error from exc
        self._conn = conn
        self._connecting.set_result(conn)
        self._connecting = None
        return conn

    async def _open(self, loop: asyncio.AbstractEventLoop) -> _Connection:
        def factory() -> _Connection:
            return _Connection(loop, self.timeout)

        if self._path:
            _, conn = await loop.create_unix_connection(factory, self._path)
        else:
            host, port = self._host, self._port
            if self._sentinels:
                host, port = await master_address(self._sentinels, self._sentinel_master, self.connect_timeout)
            context = ssl.create_default_context() if self._ssl else None
            _, conn = await loop.create_connection(factory, host, port, ssl=context)
        for command in self._hello:
            await conn.send(hiredis.pack_command(command))
        return conn


_ASKING = hiredis.pack_command(("ASKING",))


def _retrieved(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()  # an ASKING's error (the connection lost) is its command's to report


class _Connection(asyncio.Protocol):
    def __init__(self, loop: asyncio.AbstractEventLoop, timeout: float) -> None:
        self.loop = loop
        self.timeout = timeout
        self.transport: asyncio.Transport | None = None
        self.reader = hiredis.Reader(notEnoughData=False)
        self.waiting: collections.deque[tuple[asyncio.Future[Any], float]] = collections.deque()
        self.outgoing: list[bytes] = []
        self.flush_scheduled = False
        self.watchdog: asyncio.TimerHandle | None = None
        self.closed = False
        self.writes = 0  # how many writes carried the commands (fewer than commands: the batching works)
        self.batch_ack: asyncio.Future[int] | None = None  # the WAIT of the commands not yet written
        self.wait_command = b""
        self.acking = False  # a WAIT is out: what is issued meanwhile is held until it returns
        self.acks_out: set[asyncio.Future[int]] = set()  # the WAITs' futures (a failed one is -1, never an error)
        self.stale = False  # it answered READONLY (a demoted master): no new command, closed once drained

    # -- sending ------------------------------------------------------------------------------------------

    def send(self, packed: bytes) -> asyncio.Future[Any]:
        if self.closed:
            raise ConnectionError("connection to Redis lost")
        future = self.loop.create_future()
        self.waiting.append((future, time.monotonic()))
        self.outgoing.append(packed)
        if not self.flush_scheduled and not self.acking:
            self.flush_scheduled = True
            self.loop.call_soon(self._flush)
        if self.watchdog is None:
            self.watchdog = self.loop.call_later(self.timeout, self._check)
        return future

    def send_asking(self) -> None:
        """ASKING, in the same write as the next command (a cluster's ASK redirection); its OK is dropped."""
        self.send(_ASKING).add_done_callback(_retrieved)

    def send_acked(self, packed: bytes, wait_command: bytes) -> tuple[asyncio.Future[Any], asyncio.Future[int]]:
        """send() a write; also return the future of its batch's WAIT (the replicas that confirmed it, -1 when
        the connection was lost first)."""
        future = self.send(packed)
        if self.batch_ack is None:
            self.batch_ack = self.loop.create_future()
            self.acks_out.add(self.batch_ack)
            self.wait_command = wait_command
        return future, self.batch_ack

    def _flush(self) -> None:
        self.flush_scheduled = False
        if self.closed or self.transport is None or self.acking or not self.outgoing:
            return
        ack = self.batch_ack
        if ack is not None:  # the batch's one WAIT, after its scripts
            self.batch_ack = None
            self.outgoing.append(self.wait_command)
            self.waiting.append((ack, time.monotonic()))
            self.acking = True
            ack.add_done_callback(self._acked)
        data = b"".join(self.outgoing)
        self.outgoing.clear()
        self.transport.write(data)
        self.writes += 1

    def _acked(self, ack: asyncio.Future[int]) -> None:
        self.acks_out.discard(ack)
        self.acking = False
        self._flush()  # what was held meanwhile

    def _check(self, suspect: asyncio.Future[Any] | None = None) -> None:
        """Fail everything that waits when the oldest command has waited `timeout` seconds.

        In two steps: an event loop that was itself held up may run this timer before it reads the replies
        that arrived meanwhile (uvloop runs timers first), so the oldest command is failed only if it is
        still waiting one poll of the socket later.
        """
        self.watchdog = None
        if not self.waiting:
            return
        oldest, sent_at = self.waiting[0]
        overdue = time.monotonic() - sent_at
        if overdue < self.timeout:
            self.watchdog = self.loop.call_later(self.timeout - overdue, self._check)
        elif oldest is suspect:
            self.abort(RedisTimeoutError(f"Redis did not answer within {self.timeout}s"))
        else:
            self.watchdog = self.loop.call_later(_SECOND_LOOK_SECONDS, self._check, oldest)

    def abort(self, error: Exception) -> None:
        if not self.closed:
            self.closed = True
            if self.transport is not None:
                with contextlib.suppress(RuntimeError):  # its event loop is already closed
                    self.transport.abort()
        if self.batch_ack is not None:
            self.waiting.append((self.batch_ack, 0.0))
            self.batch_ack = None
        while self.waiting:
            future, _ = self.waiting.popleft()
            if future.done():
                continue
            if future in self.acks_out:
                future.set_result(-1)  # a WAIT never answered: nothing confirmed
            else:
                future.set_exception(error)
        if self.watchdog is not None:
            self.watchdog.cancel()
            self.watchdog = None

    # -- asyncio.Protocol ---------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports are not its subclasses

    def data_received(self, data: bytes) -> None:
        self.reader.feed(data)
        waiting = self.waiting
        while True:
            try:
                reply = self.reader.gets()
            except hiredis.ProtocolError as exc:
                self.abort(ConnectionError(f"Redis protocol error: {exc}"))
                return
            if reply is False:
                break
            if not waiting:  # a reply nobody asked for: the stream is out of step, never trust it
                self.abort(ConnectionError("unexpected reply from Redis"))
                return
            future, _ = waiting.popleft()
            if future.done():
                continue
            if isinstance(reply, hiredis.ReplyError):
                if future in self.acks_out:
                    future.set_result(-1)
                    continue
                if str(reply).startswith("READONLY"):
                    self.stale = True  # a replica now (failover): the next command finds the new master
                future.set_exception(ResponseError(str(reply)))
            else:
                future.set_result(reply)
        if self.stale and not waiting:
            self.abort(ConnectionError("Redis is a replica now"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.abort(ConnectionError(f"connection to Redis lost: {exc!r}" if exc else "connection to Redis closed"))


# Commands without a key go to any master (TIME for the claim's clock, PING).
_KEYLESS = frozenset({"TIME", "PING", "CLUSTER", "INFO", "WAIT", "SCRIPT", "ECHO"})
# As redis-py's cluster client (RedisClusterRequestTTL); from the third on each waits a little: while a slot's new
# owner is being told to the nodes, two of them can send a command back and forth (seen: 5 in a row under load).
_MAX_REDIRECTIONS = 16
# The slot map each seed URL's clients learnt last (shared by the process's clients: a fresh one, like the
# lost reply's reader, starts with it and needs no CLUSTER SLOTS round trip).
_slot_maps: dict[str, list[tuple[str, int] | None]] = {}


def _first_key(args: tuple[Any, ...]) -> Any:
    name = args[0].upper() if isinstance(args[0], str) else args[0].decode().upper()
    if name in ("EVAL", "EVALSHA", "FCALL"):
        return args[3] if int(args[2]) > 0 else None
    return None if name in _KEYLESS or len(args) < 2 else args[1]


def slot_of(key: str | bytes) -> int:
    """The key's hash slot, as the cluster computes it (CRC16 of its {hash tag}, or of the whole key)."""
    return int(key_slot(key.encode() if isinstance(key, str) else key))


def _redirection(exc: ResponseError) -> tuple[str, tuple[str, int]] | None:
    """("MOVED" or "ASK", the node's address) of a redirection reply, None for any other error."""
    kind, _, rest = str(exc).partition(" ")
    if kind not in ("MOVED", "ASK"):
        return None
    host, _, port = rest.partition(" ")[2].rpartition(":")
    return kind, (host, int(port))


class ClusterPipelinedRedis:
    """PipelinedRedis for a Redis Cluster: one auto-pipelined connection per master (each batching what is sent
    to it during one turn of the loop, with its own WAIT per batch when acks > 0), each command routed by the
    hash slot of its first key. `url` names any node (a seed, database 0); its password is every node's."""

    def __init__(self, url: str, *, timeout: float, connect_timeout: float | None = None, acks: int = 0,
                 ack_timeout_ms: int = 0) -> None:
        options = parse_url(url)
        self._url = url
        self._seed: tuple[str, int] = (options.get("host", "localhost"), int(options.get("port", 6379)))
        self.timeout = timeout
        self.connect_timeout = connect_timeout if connect_timeout is not None else timeout
        self.acks, self._ack_timeout_ms = acks, ack_timeout_ms
        self._slots: list[tuple[str, int] | None] = list(_slot_maps.get(url) or [None] * REDIS_CLUSTER_HASH_SLOTS)
        self._nodes: dict[tuple[str, int], PipelinedRedis] = {}
        self._refreshing: asyncio.Future[None] | None = None
        self._refresh_task: asyncio.Task[None] | None = None  # held: a task only weakly referenced may vanish

    def node(self, address: tuple[str, int]) -> PipelinedRedis:
        client = self._nodes.get(address)
        if client is None:
            client = self._nodes[address] = PipelinedRedis(
                self._url, address=address, timeout=self.timeout, connect_timeout=self.connect_timeout,
                acks=self.acks, ack_timeout_ms=self._ack_timeout_ms)
        return client

    async def execute(self, *args: Any) -> Any:
        """Send one command to the master of its first key's slot (a keyless one to any master)."""
        key = _first_key(args)
        slot = slot_of(key) if key is not None else random.randrange(REDIS_CLUSTER_HASH_SLOTS)
        return await self._routed(slot, lambda client, asking: client.execute(*args, asking=asking))

    async def evalsha(self, sha: str, script: str | bytes | memoryview, keys: list[str], args: list[Any]) -> Any:
        """PipelinedRedis.evalsha() on the master of the slot of the script's first key."""
        return await self._routed(slot_of(keys[0]),
                                  lambda client, asking: client.evalsha(sha, script, keys, args, asking=asking))

    async def _routed(self, slot: int, send: Callable[[PipelinedRedis, bool], Awaitable[Any]]) -> Any:
        target: tuple[str, int] | None = None
        asking = False
        for redirected in range(_MAX_REDIRECTIONS):
            if redirected > 1:
                await asyncio.sleep(0.005)
            if target is None:
                target = self._slots[slot]
                if target is None:
                    await self.refresh()
                    target = self._slots[slot]
                    if target is None:
                        raise NotSent(f"no master of the cluster serves the slot {slot}")
            try:
                return await send(self.node(target), asking)
            except ResponseError as exc:
                redirection = _redirection(exc)
                if redirection is None:
                    raise
                # MOVED / ASK: the node refused the command without running it (the slot is not, or no longer,
                # its own), so sending it to the owner runs it once, never twice. A claim sent late there
                # still carries its deadline (claim.lua answers -3 past it, changing nothing).
                kind, target = redirection
                asking = kind == "ASK"
                if not asking:
                    self._slots[slot] = target
                    self._refresh_soon()
            except (ConnectionError, RedisTimeoutError):
                # Refused (NotSent: never ran), lost or timed out (may have run: the caller reads it back, never
                # resends it): either way the master may have failed over, so learn the map for the next one.
                self._refresh_soon()
                raise
        raise ResponseError(f"more than {_MAX_REDIRECTIONS} redirections for the slot {slot}")

    def _refresh_soon(self) -> None:
        if self._refreshing is None:
            self._refresh_task = asyncio.get_running_loop().create_task(self.refresh())

    async def refresh(self) -> None:
        """Learn the slot map (CLUSTER SLOTS) from the first node that answers: the seed, then every master
        known. One at a time: concurrent callers wait for the same answer."""
        if self._refreshing is not None:
            return await asyncio.shield(self._refreshing)
        self._refreshing = asyncio.get_running_loop().create_future()
        try:
            candidates = dict.fromkeys([self._seed, *(a for a in self._slots if a), *self._nodes])
            for address in candidates:
                try:
                    reply = await self.node(address).execute("CLUSTER", "SLOTS")
                except (RedisError, OSError):
                    continue
                slots: list[tuple[str, int] | None] = [None] * REDIS_CLUSTER_HASH_SLOTS
                for low, high, master, *_replicas in reply:
                    owner = (master[0].decode() or address[0], int(master[1]))
                    slots[int(low):int(high) + 1] = [owner] * (int(high) - int(low) + 1)
                self._slots = slots
                _slot_maps[self._url] = slots
                return
        finally:
            self._refreshing.set_result(None)
            self._refreshing = None

    def close(self) -> None:
        for client in self._nodes.values():
            client.close()
        self._nodes.clear()


AsyncRedis = PipelinedRedis | ClusterPipelinedRedis
