"""PostgreSQL for the event loop's doors: a read a door needs, awaited on the loop instead of handed to a Django
thread.

A blocking statement in a Django thread costs the worker ~250-300 us of CPU in GIL hand-offs between the loop's
thread and Django's (docs/design.md, "Cost of a thread"); awaited here it costs the loop what psycopg's async
protocol does. Each event loop (a worker's) keeps up to CONNECTIONS connections of Django's DATABASES settings,
made as Django makes its own (`get_connection_params()`: the same adapters, so rows load as the ORM's do;
prepare_threshold 0: every statement prepared; the session's time zone Django's), in autocommit: a door only
reads. A request waits for a free one in turn.

Bounded as Django's API statements are (core.postgresql, API_STATEMENT_SECONDS): every wait for the server (a
statement, a connect beside connect_timeout) and the wait for a free connection. A connection whose statement
failed or ran out of time is closed (its state is unknown) and the next request connects anew. Every failure
raises what core.errors.unavailable_of maps to the contract's 503: psycopg's OperationalError, or Unavailable.
"""
from __future__ import annotations

import asyncio
import weakref
from collections import deque
from typing import Any

import psycopg
from django.db import connection as django_connection
from psycopg.errors import _WaitTimeout

from core.errors import Unavailable
from core.postgresql.base import API_STATEMENT_SECONDS

CONNECTIONS = 4  # per worker: the loop's reads are short; Django's threads keep their own


class LoopPostgres:
    """A worker's connections for one event loop."""

    def __init__(self, size: int = CONNECTIONS, bound: float = API_STATEMENT_SECONDS) -> None:
        self.size, self.bound = size, bound
        self.idle: list[psycopg.AsyncConnection[Any]] = []
        self.opened = 0  # connections open or opening
        self.waiting: deque[asyncio.Future[psycopg.AsyncConnection[Any] | None]] = deque()

    async def fetch(self, sql: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        """The rows of one prepared statement. Raise psycopg.OperationalError or Unavailable."""
        conn = await self._acquire()
        try:
            cursor = conn.cursor()
            await cursor.execute(sql, params)
            rows = await cursor.fetchall()
        except BaseException:
            await self._discard(conn)
            raise
        self._release(conn)
        return rows

    async def _acquire(self) -> psycopg.AsyncConnection[Any]:
        while self.idle:
            conn = self.idle.pop()
            if not conn.closed:
                return conn
            self.opened -= 1
        if self.opened < self.size:
            self.opened += 1
            try:
                return await asyncio.wait_for(_connect(self.bound), self.bound)
            except BaseException as exc:
                self._freed()
                if isinstance(exc, TimeoutError):
                    raise Unavailable() from exc
                raise
        waiter: asyncio.Future[psycopg.AsyncConnection[Any] | None] = asyncio.get_running_loop().create_future()
        self.waiting.append(waiter)
        try:
            handed: psycopg.AsyncConnection[Any] | None = await asyncio.wait_for(waiter, self.bound)
        except TimeoutError as exc:
            raise Unavailable() from exc
        finally:
            if waiter in self.waiting:
                self.waiting.remove(waiter)
        return handed if handed is not None else await self._acquire()  # None: one was closed, open another

    def _release(self, conn: psycopg.AsyncConnection[Any]) -> None:
        while self.waiting:
            waiter = self.waiting.popleft()
            if not waiter.done():
                waiter.set_result(conn)
                return
        self.idle.append(conn)

    async def _discard(self, conn: psycopg.AsyncConnection[Any]) -> None:
        try:
            await conn.close()
        finally:
            self._freed()

    def _freed(self) -> None:
        """One connection fewer: a request waiting for one may open its own."""
        self.opened -= 1
        while self.waiting:
            waiter = self.waiting.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return


class _BoundedConnection(psycopg.AsyncConnection[Any]):
    """psycopg's async connection whose every wait for the server is bounded (core.postgresql's
    BoundedConnection, awaited): past the bound it is closed at once and raises OperationalError. Cancelling the
    wait instead would have psycopg ask the server to cancel the statement and wait for it again, on a hung
    server for seconds more."""

    bound = API_STATEMENT_SECONDS

    async def wait(self, gen: Any, interval: float = 0.1, timeout: float | None = None) -> Any:
        try:
            return await super().wait(gen, interval, self.bound if timeout is None else timeout)
        except _WaitTimeout:
            self.pgconn.finish()  # mid-statement, its state unknown
            raise psycopg.OperationalError(f"PostgreSQL did not answer within {self.bound:g} s") from None


async def _connect(bound: float) -> psycopg.AsyncConnection[Any]:
    params = django_connection.get_connection_params()  # Django's own (no I/O): adapters, timeouts, prepare
    params.pop("cursor_factory", None)  # Django's sync cursor class
    conn = await _BoundedConnection.connect(**params, autocommit=True)
    conn.bound = bound
    # Django's loaders take a timestamp's zone to be the connection's (its ensure_timezone() sets it)
    await conn.execute("SELECT set_config('TimeZone', %s, false)", [django_connection.timezone_name])
    return conn


_pools: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopPostgres] = weakref.WeakKeyDictionary()


def loop_postgres() -> LoopPostgres:
    """This event loop's connections (made at its first read)."""
    loop = asyncio.get_running_loop()
    pool = _pools.get(loop)
    if pool is None:
        pool = _pools[loop] = LoopPostgres()
    return pool


async def fetch(sql: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
    """loop_postgres().fetch()."""
    return await loop_postgres().fetch(sql, params)
