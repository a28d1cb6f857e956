"""Django's PostgreSQL backend (psycopg 3): a kept connection is checked only after it idled, the check waits a
bounded time, and a shopper's request (the API's) waits a bounded time for every statement.

Connections are kept between requests (CONN_MAX_AGE) and checked at a request's first query (CONN_HEALTH_CHECKS)
with a SELECT 1, but only on a connection no request has used for CHECK_AFTER_IDLE_SECONDS, as PgBouncer's
server_check_delay does: under load every request's check was a round trip of its own (half of GET /me/coupons'
round trips), spent on a connection the previous request had just used. A connection that breaks while in use
fails that request's statement, which Django notes (errors_occurred) and checks at the request's end, closing it:
the next request connects anew. One that breaks while idle (a PostgreSQL restart, an idle timeout) is found by
the check, as before.

Django waits for PostgreSQL without a bound: on a PostgreSQL that hangs (a stopped process, a host that stopped
answering while the kernel still acknowledges) every request of every thread would wait forever. Here:
- the check waits at most HEALTH_CHECK_SECONDS; a connection that does not answer in time is closed, and Django
  opens a new one, which connect_timeout bounds (DATABASE_CONNECT_TIMEOUT);
- inside `statements_bounded(seconds)` (core.handlers wraps every /api/v1/ request in it: API_STATEMENT_SECONDS)
  each statement and commit waits at most that long; one that does not answer in time closes its connection
  (its state is unknown) and raises OperationalError.
Either way the request gets the contract's 503 (core.api.DatabaseUnavailableMiddleware) within a few seconds
instead of never (docs/operating.md, "When a store is away"). A use whose commit went unanswered may have
committed: its repeat (the same Idempotency-Key, or the same order) gets that use back. The console, the
commands and the Celery tasks keep Django's unbounded wait (a report may take its time).
"""
from __future__ import annotations

import select
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import psycopg
from django.db.backends.postgresql import base
from psycopg.errors import _WaitTimeout

HEALTH_CHECK_SECONDS = 1.0
CHECK_AFTER_IDLE_SECONDS = 1.0
API_STATEMENT_SECONDS = 3.0

_bound: ContextVar[float | None] = ContextVar("statement_bound", default=None)


@contextmanager
def statements_bounded(seconds: float) -> Iterator[None]:
    """Every statement (and commit) of this thread's connections in the block waits at most `seconds`."""
    token = _bound.set(seconds)
    try:
        yield
    finally:
        _bound.reset(token)


class BoundedConnection(psycopg.Connection[Any]):
    """psycopg's connection, whose waits for the server are bounded inside statements_bounded()."""

    def wait(self, gen: Any, *args: Any, **kwargs: Any) -> Any:
        bound = _bound.get()
        if bound is None or kwargs.get("timeout") is not None:
            return super().wait(gen, *args, **kwargs)
        kwargs["timeout"] = bound
        try:
            return super().wait(gen, *args, **kwargs)
        except _WaitTimeout:
            self.pgconn.finish()  # mid-statement, its state unknown: closed, so Django connects anew
            raise psycopg.OperationalError(f"PostgreSQL did not answer within {bound:g} s") from None


class DatabaseWrapper(base.DatabaseWrapper):
    _used_at = float("-inf")  # when a request last started using this connection (time.monotonic)
    health_check_done: bool

    def get_new_connection(self, conn_params: dict[str, Any]) -> Any:
        connection = super().get_new_connection(conn_params)
        connection.__class__ = BoundedConnection  # psycopg.connect() makes a Connection; Django calls it
        return connection

    def connect(self) -> None:
        super().connect()
        self._used_at = time.monotonic()  # just opened: no check needed

    def close_if_health_check_failed(self) -> None:
        """At a request's first query: Django's check, unless a request used the connection moments ago."""
        if self.connection is not None and not self.health_check_done:
            now = time.monotonic()
            if now - self._used_at < CHECK_AFTER_IDLE_SECONDS:
                self.health_check_done = True
            self._used_at = now
        super().close_if_health_check_failed()

    def is_usable(self) -> bool:
        if self.connection is None:
            return False
        pgconn = self.connection.pgconn
        try:
            with self.connection.lock:  # psycopg's own: no other statement on this connection meanwhile
                pgconn.send_query(b"SELECT 1")
                while pgconn.flush():  # the query out (one small packet: at once)
                    pass
                deadline = time.monotonic() + HEALTH_CHECK_SECONDS
                while True:
                    pgconn.consume_input()
                    if not pgconn.is_busy():
                        break
                    left = deadline - time.monotonic()
                    if left <= 0 or not select.select([pgconn.socket], [], [], left)[0]:
                        return False  # no answer in time: Django closes it and connects anew
                ok = True
                while (result := pgconn.get_result()) is not None:
                    ok = ok and result.status == psycopg.pq.ExecStatus.TUPLES_OK
                return ok
        except (psycopg.Error, OSError):
            return False
