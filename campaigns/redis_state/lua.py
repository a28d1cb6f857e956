"""The Lua scripts (campaigns/lua/), loaded once per client (EVALSHA, the whole script again when Redis lost
it), every run that changes a campaign's state confirmed by replicas when COUPONS_REDIS_REPLICA_ACKS asks."""
from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import redis

from core.hot import hot

from ..redis_async import NotAcknowledged
from .clients import async_client, redis_client

log = logging.getLogger(__name__)
LUA_DIR = Path(__file__).resolve().parent.parent / "lua"


class _Script:
    """One of the Lua scripts, every one of which changes the campaign's state. With replica acks
    (COUPONS_REDIS_REPLICA_ACKS), it runs with a WAIT after it on the same connection (one round trip) and
    answers only once that many replicas hold its change: NotAcknowledged (with the script's reply) otherwise.

    A script that gives back (`gives_back`: cancel, a shared code's give-back, add_stock) answers its reply
    even then: it holds on the master, and a failover that lost it would only leave stock unsold (verify_campaign
    names it, reconcile returns it), never promise a coupon twice; raising would undo the PostgreSQL side of a
    change Redis already made."""

    def __init__(self, client: redis.Redis, name: str, *, gives_back: bool = False) -> None:
        self.client = client
        self.name, self.gives_back = name, gives_back
        self.registered = client.register_script((LUA_DIR / f"{name}.lua").read_text())
        self.sha, self.script = self.registered.sha, self.registered.script

    def __call__(self, *, keys: list[str], args: list[Any]) -> Any:
        if not hot().replica_acks:
            return self.registered(keys=keys, args=args)
        try:
            return self.each([(keys, args)])[0]  # the script and WAIT on one connection
        except NotAcknowledged as exc:
            if not self.gives_back:
                raise
            log.warning("%s: %s; it holds on the master", self.name, exc)
            return exc.reply

    def each(self, calls: list[tuple[list[str], list[Any]]]) -> list[Any]:
        """Run the script once for each (keys, args), in one pipelined round trip (each run atomic on its own,
        not the runs together), with replica acks as one call's; NotAcknowledged's reply is all the replies."""
        return run_each(self.client, self.sha, cast(str, self.script), calls,
                        lambda pipe: replicated(pipe, raise_on_error=False))


def run_each(client: redis.Redis, sha: str, script: str, calls: list[tuple[list[str], list[Any]]],
             execute: Callable[[Any], list[Any]] = lambda pipe: list(pipe.execute(raise_on_error=False)),
             ) -> list[Any]:
    """A script (its SHA-1 and text) run once for each (keys, args) in one pipelined round trip, by `execute` (a
    pipeline's replies, errors among them); raise the first error. A call told NOSCRIPT (Redis lost its scripts:
    SCRIPT FLUSH, a restart) is sent again with the whole script, and only such a call: on a cluster the calls go
    to several masters, of which only some may have lost them, and a call that ran must never run twice."""

    def send(command: str, body: str, some: list[tuple[list[str], list[Any]]]) -> list[Any]:
        pipe = client.pipeline(transaction=False)
        for keys, args in some:  # pipe.evalsha: not on a cluster
            pipe.execute_command(command, body, len(keys), *keys, *args)
        return execute(pipe)

    replies = send("EVALSHA", sha, calls)
    lost = [i for i, reply in enumerate(replies) if isinstance(reply, redis.exceptions.NoScriptError)]
    if lost:
        for i, reply in zip(lost, send("EVAL", script, [calls[i] for i in lost]), strict=True):
            replies[i] = reply
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
    return replies


async def run_async(sha: str, script: str, keys: list[str], args: list[Any]) -> Any:
    """A script (its SHA-1 and text) run once through the event loop's pipelined client (on a cluster, on its
    first key's master), the whole script sent when Redis lost it (NOSCRIPT), without replica acks: for reads and
    counters that are no campaign's state. Raise RedisError (or OSError, TimeoutError: core.errors maps them)."""
    client = async_client()
    try:
        return await client.execute("EVALSHA", sha, len(keys), *keys, *args)
    except redis.ResponseError as exc:
        if not str(exc).startswith("NOSCRIPT"):
            raise
    return await client.execute("EVAL", script, len(keys), *keys, *args)


def replicated(pipe: Any, *, raise_on_error: bool = True) -> list[Any]:
    """Execute a pipeline (not a MULTI); with replica acks, WAIT after its commands on the same connection and
    return the replies only once that many replicas hold what this connection wrote (and so everything the
    master held before it): raise NotAcknowledged, whose `reply` is the replies, when fewer confirmed it in time.
    The drain reads the ledger through it (orders/ledger.py): it never persists a claim a failover may lose.
    On a cluster the commands (of one slot) and the WAIT go on one connection of the slot's master
    (redis_cluster._ClusterPipeline.execute_then_wait: the cluster pipeline would send the WAIT elsewhere).

    With `raise_on_error` False, errors are among the replies, and replies with an error are returned unconfirmed,
    as an error is raised before confirmation otherwise (run_each sends a NOSCRIPT's command again, and that WAIT
    confirms all the master held before it)."""
    conf = hot()
    if not conf.replica_acks:
        return list(pipe.execute(raise_on_error=raise_on_error))
    on_one_connection = getattr(pipe, "execute_then_wait", None)
    if on_one_connection is not None:
        *replies, replicas = on_one_connection(conf.replica_acks, conf.replica_ack_timeout_ms,
                                               raise_on_error=raise_on_error)
    else:
        pipe.execute_command("WAIT", conf.replica_acks, conf.replica_ack_timeout_ms)
        *replies, replicas = pipe.execute(raise_on_error=raise_on_error)
    if int(replicas) < conf.replica_acks and (
            raise_on_error or not any(isinstance(reply, Exception) for reply in replies)):
        raise NotAcknowledged(replies[0] if len(replies) == 1 else replies, int(replicas))
    return replies


class _Scripts:
    def __init__(self, client: redis.Redis) -> None:
        self.claim = _Script(client, "claim")
        self.load_state = _Script(client, "load_state")
        self.cancel = _Script(client, "cancel", gives_back=True)
        self.compare_and_set = _Script(client, "compare_and_set")
        self.add_stock = _Script(client, "add_stock", gives_back=True)
        self.extend = _Script(client, "extend")
        self.void = _Script(client, "void")  # its change must be confirmed before the claim is cancelled (run_void)
        self.code_take = _Script(client, "code_take")
        self.code_give_back = _Script(client, "code_give_back", gives_back=True)
        self.move_out = _Script(client, "move_out")
        self.move_in = _Script(client, "move_in", gives_back=True)  # its donor gave already: never undone
        self.budget_take = _Script(client, "budget_take")
        self.budget_give_back = _Script(client, "budget_give_back", gives_back=True)


_scripts: _Scripts | None = None


def scripts() -> _Scripts:
    global _scripts
    if _scripts is None:
        _scripts = _Scripts(redis_client())
    return _scripts


def forget_scripts() -> None:
    """Forget the scripts registered on the client (reset_redis_client)."""
    global _scripts
    _scripts = None


def text(value: bytes | str) -> str:
    """A reply (bytes, or str from a client that decodes) as str."""
    return value.decode() if isinstance(value, bytes) else str(value)
