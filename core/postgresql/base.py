"""Django's PostgreSQL backend (psycopg 3), whose health check of a kept connection waits a bounded time.

Connections are kept between requests (CONN_MAX_AGE) and checked at a request's first query (CONN_HEALTH_CHECKS)
with a SELECT 1. Django waits for its answer without a bound: on a PostgreSQL that hangs (a stopped process, a host
that stopped answering while the kernel still acknowledges) every request of every thread would wait forever.
Here the check waits at most HEALTH_CHECK_SECONDS; a connection that does not answer in time is closed, and
Django opens a new one, which connect_timeout bounds (DATABASE_CONNECT_TIMEOUT): the request gets the contract's
503 (core.api.DatabaseUnavailableMiddleware) within a few seconds instead of never (docs/operating.md, "When a
store is away"). A statement on a connection that stops answering mid-request is not bounded here.
"""
from __future__ import annotations

import select
import time

import psycopg
from django.db.backends.postgresql import base

HEALTH_CHECK_SECONDS = 1.0


class DatabaseWrapper(base.DatabaseWrapper):
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
