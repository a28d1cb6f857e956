"""core/postgresql: a kept connection is checked only after it idled, and a shopper's request waits a bounded time
for each statement (a hung PostgreSQL is a 503 within seconds, not a hang). Real PostgreSQL throughout."""
from __future__ import annotations

import time

import psycopg
import pytest
from django.db import OperationalError, close_old_connections, connection

from core.postgresql.base import CHECK_AFTER_IDLE_SECONDS, DatabaseWrapper, statements_bounded

pytestmark = pytest.mark.django_db(transaction=True)


def _request(sql: str = "SELECT 1") -> object:
    """What the server does around a request's query: Django's request_started/finished handler on either side."""
    close_old_connections()
    with connection.cursor() as cursor:
        cursor.execute(sql)
        row = cursor.fetchone()
    close_old_connections()
    return row[0]


@pytest.fixture
def checks(monkeypatch) -> list[int]:
    """The health checks (SELECT 1) made: one backend pid each."""
    made: list[int] = []
    real = DatabaseWrapper.is_usable

    def counted(self: DatabaseWrapper) -> bool:
        made.append(self.connection.info.backend_pid if self.connection is not None else 0)
        return real(self)

    monkeypatch.setattr(DatabaseWrapper, "is_usable", counted)
    return made


def _terminate(pid: int) -> None:
    db = connection.settings_dict
    with psycopg.connect(dbname=db["NAME"], user=db.get("USER") or None, host=db.get("HOST") or None,
                         port=db.get("PORT") or None, password=db.get("PASSWORD") or None, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", [pid])


def test_a_connection_a_request_used_moments_ago_is_not_checked_again(checks) -> None:
    # given a kept connection that a request has just used
    assert connection.settings_dict["CONN_HEALTH_CHECKS"]
    _request()
    checks.clear()

    # when more requests follow at once (under load, each checked it: a round trip of its own)
    for _ in range(5):
        assert _request() == 1

    # then none of them spent a round trip on a SELECT 1
    assert checks == []


def test_a_connection_that_died_while_idle_is_found_by_the_check_and_replaced(checks) -> None:
    # given a kept connection, idle for longer than the window, whose backend PostgreSQL ended meanwhile
    _request()
    dead = connection.connection.info.backend_pid
    _terminate(dead)
    connection._used_at -= CHECK_AFTER_IDLE_SECONDS + 1  # type: ignore[attr-defined]  # as if a second and more had passed

    # when the next request queries
    assert _request("SELECT pg_backend_pid()") != dead

    # then the check ran on the dead connection, and the request got a new one without an error
    assert checks == [dead]


def test_a_statement_that_outlasts_the_bound_is_an_operational_error_that_closes_its_connection() -> None:
    # given a connection in use (the bound must hold whatever the health check decided)
    _request()
    started = time.monotonic()

    # when a statement takes longer than the block's bound (a hung PostgreSQL: the server never answers)
    with statements_bounded(0.3), pytest.raises(OperationalError, match="did not answer within 0.3 s"):
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_sleep(5)")

    # then it is an error within the bound, not five seconds later, and the connection is given up
    assert time.monotonic() - started < 2
    assert not connection.is_usable()
    close_old_connections()  # the request's end (errors_occurred): closed
    assert connection.connection is None
    assert _request() == 1  # the next request connects anew


def test_outside_a_bounded_block_a_statement_waits_as_django_does() -> None:
    # the console, commands and tasks: a long statement is no failure
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_sleep(0.5), 7")
        assert cursor.fetchone()[1] == 7
