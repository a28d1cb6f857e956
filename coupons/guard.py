"""The unknown-code guard (docs/api.md, Errors): how many codes that stand for nothing a shopper, and a client
address, may try a minute (COUPONS_CODE_MISSES_PER_MINUTE, COUPONS_CODE_MISSES_PER_IP_PER_MINUTE; then 429).

A claimed coupon's code and a generated unique code resist guessing by their number; an imported code and a
shared code carry no MAC, and this guard is what bounds guessing them. So a code counts BEFORE it is looked up:
code_lookups_take.lua adds the codes about to be looked up to the shopper's counter of this minute and to the
address's, and refuses (TooManyMisses: the 429 with Retry-After) when either would pass its limit. However many
requests run at once, one shopper (and one address) looks up at most the limit a minute; a check that read the
counters and counted the misses afterwards let each request in flight pass on the same reading.

Once answered, the codes that stood for something are given back (any answer but a 404, or a cart's codes not
`not_found`): what stays counted is the unknown codes, as the settings' names say, and a shopper using good
codes is never slowed by them. A request that fails otherwise (a 503) gives its codes back too: it told nothing.

The check and the count are one step per counter. The shopper's key and the address's fall in different slots of
a cluster, so they are two runs of the script, in one pipelined round trip; when one refuses, the other's take
is given back (meanwhile it may refuse another request of the same shopper at the margin: never let one more in).

A shopper's own coupon is no guess and never passes through the guard: its code, or the shopper's use of a shared
code for the order (services.code_is_own), and a cart's codes that are the shopper's (carts.cart_validate). Past
an address's limit, a shopper behind the same NAT still reserves, redeems, confirms and releases their own.

The counters are no campaign's state, so they run without replica acks (a failover that loses a minute's
counters lets a few more guesses in, once; a WAIT would cost every use a round trip), and a Redis error fails
open: the answer itself does not depend on Redis.
"""
from __future__ import annotations

import asyncio
import functools
import hashlib
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any, NoReturn, TypeVar

from django.conf import settings
from redis import RedisError

from campaigns.redis_state import LUA_DIR, redis_client, run_async, run_each
from core.errors import NotFound, RateLimited

MISS_WINDOW_SECONDS = 60  # codes are counted by the minute


class TooManyMisses(RateLimited):
    message = "Too many unknown coupon codes from this shopper or address; retry when this minute is over."

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(MISS_WINDOW_SECONDS - int(time.time()) % MISS_WINDOW_SECONDS)}


def miss_counters(user_id: str, ip: str | None) -> list[tuple[str, int]]:
    """The counters of this minute (key, limit): the shopper's, and the client address's if known (`ip`, as
    core.http.client_ip reads it)."""
    minute = int(time.time() // MISS_WINDOW_SECONDS)
    counters = [(f"cr:code-misses:{user_id}:{minute}", settings.COUPONS_CODE_MISSES_PER_MINUTE)]
    if ip is not None:
        counters.append((f"cr:code-misses-ip:{ip}:{minute}", settings.COUPONS_CODE_MISSES_PER_IP_PER_MINUTE))
    return counters


@functools.cache
def _lua(name: str) -> tuple[str, str]:
    """A script of campaigns/lua/ and its SHA-1 (EVALSHA's name for it)."""
    text = (LUA_DIR / f"{name}.lua").read_text()
    return text, hashlib.sha1(text.encode()).hexdigest()


def _run(name: str, calls: list[tuple[str, list[Any]]]) -> list[Any]:
    """Run the script once for each (key, args), in one pipelined round trip: each run atomic on its own (on a
    cluster the client sends each to its key's master). Raise RedisError."""
    text, sha = _lua(name)
    return run_each(redis_client(), sha, text, [([key], args) for key, args in calls])


class CodeLookups:
    """The codes one request looks up that are not the shopper's own: counted before the lookup (take), and, as
    the block that looked them up ends, all but the unknown ones (`misses`) given back. A NotFound out of the
    block is one unknown code per code taken; any other error gives them all back.

        with CodeLookups(user_id, ip) as lookups:
            lookups.take(len(codes))      # TooManyMisses past the limit: nothing looked up, nothing counted
            answer = look_up(codes)
            lookups.misses = answer.misses
    """

    def __init__(self, user_id: str, ip: str | None) -> None:
        self.counters = miss_counters(user_id, ip)
        self.keys: list[str] = []  # the counters this request counted on (none when Redis failed: open)
        self.taken = 0
        self.misses = 0

    def take(self, n: int, known: int = 0) -> None:
        """Count `n` codes about to be looked up (once a request); raise TooManyMisses, counting nothing, when
        they and the `known` ones (codes this process knows stand for something: never counted, as they would be
        given back) would take the shopper or the address past its limit this minute."""
        calls = self._take_calls(n, known)
        if calls:
            try:
                after = _run("code_lookups_take", calls)
            except RedisError:
                return  # fails open
            refused = self._counted(after, n)
            if refused is not None:
                _give_back(refused, n)
                raise TooManyMisses()

    async def take_async(self, n: int, known: int = 0) -> None:
        """take() through the event loop's client (the scripts of both counters sent together)."""
        calls = self._take_calls(n, known)
        if calls:
            try:
                after = await _run_async("code_lookups_take", calls)
            except _ASYNC_FAILURES:
                return  # fails open
            refused = self._counted(after, n)
            if refused is not None:
                await _give_back_async(refused, n)
                raise TooManyMisses()

    def _take_calls(self, n: int, known: int) -> list[tuple[str, list[Any]]]:
        assert not self.taken, "one take a request"
        if n < 1 and known < 1:
            return []
        return [(key, [n, limit, 2 * MISS_WINDOW_SECONDS, known]) for key, limit in self.counters]

    def _counted(self, after: list[Any], n: int) -> list[str] | None:
        """Note the counters the take counted on; or, when one refused, return those to give back."""
        counted = [key for (key, _), reply in zip(self.counters, after, strict=True) if int(reply) >= 0]
        if len(counted) < len(self.counters):
            return counted if n else []
        if n:
            self.keys, self.taken = counted, n
        return None

    def __enter__(self) -> CodeLookups:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
                 ) -> None:
        _give_back(self.keys, self._to_give_back(exc))

    async def __aenter__(self) -> CodeLookups:
        return self

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
                        ) -> None:
        await _give_back_async(self.keys, self._to_give_back(exc))

    def _to_give_back(self, exc: BaseException | None) -> int:
        misses = self.taken if isinstance(exc, NotFound) else self.misses if exc is None else 0
        return max(self.taken - misses, 0)


def _give_back(keys: list[str], n: int) -> None:
    """Give `n` codes back to each counter (never raises: a counter not given back only refuses sooner)."""
    if keys and n:
        try:
            _run("code_lookups_give_back", [(key, [n]) for key in keys])
        except RedisError:
            pass


async def _give_back_async(keys: list[str], n: int) -> None:
    """_give_back() through the event loop's client."""
    if keys and n:
        try:
            await _run_async("code_lookups_give_back", [(key, [n]) for key in keys])
        except _ASYNC_FAILURES:
            pass


async def _run_async(name: str, calls: list[tuple[str, list[Any]]]) -> list[Any]:
    """_run() on the event loop: each run sent at once (the loop's client pipelines them). Raise the first
    failure, once every run has answered."""
    text, sha = _lua(name)
    replies = await asyncio.gather(*[run_async(sha, text, [key], args) for key, args in calls], return_exceptions=True)
    for reply in replies:
        if isinstance(reply, BaseException):
            raise reply
    return replies


_ASYNC_FAILURES = (RedisError, OSError)  # OSError: TimeoutError and a refused connect too


T = TypeVar("T")


def guarded(user_id: str, ip: str | None, *, own: Callable[[], bool], known: Callable[[], bool],
            execute: Callable[[], T]) -> Callable[[], T]:
    """`execute`, a use of one code, under the guard unless `own()` says the code is the shopper's own: counted
    before it runs, given back unless it raised NotFound (the unknown code that stays counted). A code `known()`
    to stand for something (a live shared code this process remembers, asked without a lookup) is checked
    against the limits but not counted, as it would be given back: one round trip instead of three (the take,
    `own`'s query, the give-back); past the limit, it passes only if it is the shopper's own."""

    def run() -> T:
        if known():
            try:
                CodeLookups(user_id, ip).take(0, known=1)
            except TooManyMisses:
                if not own():
                    raise
            return execute()
        if own():
            return execute()
        with CodeLookups(user_id, ip) as lookups:
            lookups.take(1)
            return execute()

    return run


def refuse_unknown(user_id: str, ip: str | None) -> NoReturn:
    """Answer what cannot be a code as an unknown code is answered (it gives nothing away): raise NotFound, counted
    as a miss, or TooManyMisses past the limit."""
    with CodeLookups(user_id, ip) as lookups:
        lookups.take(1)
        raise NotFound("No such coupon.")
