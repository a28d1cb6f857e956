"""PostgreSQL helpers shared by the apps: a cursor whose statements are prepared on the server, and a read that
runs either in a Django thread or on the event loop."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import psycopg
from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.db.backends.utils import CursorDebugWrapper, CursorWrapper
from django.db.models import Model


def prepared_cursor() -> Any:
    """Return a cursor of Django's connection (wrapped as connection.cursor()'s: its errors are Django's, its
    statements logged when queries are) whose statements are bound and prepared on the server: each is parsed
    and planned once per connection, then only executed. For the few hot statements run thousands of times a
    second: a shared code's first use spent ~0.6 ms of PostgreSQL's CPU parsing and planning its write against
    0.2 ms executing it (bench/shared_code.py, docs/benchmarks.md). Django's own cursors bind on the client and
    never prepare.

    DATABASES' OPTIONS prepare_threshold is 0 (config/settings/base.py): a statement through this cursor is
    prepared at its first run. A parameter's type must follow from its value or the SQL (server-side binding:
    cast where one parameter meets two types, `%(user)s::varchar`). Behind a pooler, session mode only
    (docs/scaling.md)."""
    db = connections[DEFAULT_DB_ALIAS]  # once: each use of the `connection` proxy looks the thread's up again
    db.close_if_health_check_failed()  # as Django's own cursors do (bounded: core/postgresql)
    db.ensure_connection()
    raw = psycopg.Cursor(db.connection)
    return _LoggedPrepared(raw, db) if db.queries_logged else CursorWrapper(raw, db)


class Read:
    """One read: a prepared statement, its parameters, and what its rows mean (`built`). A use case written once
    asks for its reads as these; a Django thread runs one with `run()` (prepared_cursor), an event loop's door with
    `await run_async()` (core.pg_loop): the same statement and the same answer either way."""

    __slots__ = ("sql", "params", "built")

    def __init__(self, sql: str, params: dict[str, Any], built: Callable[[list[Any]], Any]) -> None:
        self.sql, self.params, self.built = sql, params, built

    def run(self) -> Any:
        with prepared_cursor() as cursor:
            cursor.execute(self.sql, self.params)
            return self.built(cursor.fetchall())

    async def run_async(self) -> Any:
        from core import pg_loop  # the web worker's: not loaded by commands and tasks

        return self.built(await pg_loop.fetch(self.sql, self.params))


class _LoggedPrepared(CursorDebugWrapper):
    """Logs the statement as written: a prepared statement has no text with its parameters merged in."""

    def execute(self, sql: Any, params: Any = None) -> Any:
        with self.debug_sql(sql, params):
            return CursorWrapper.execute(self, sql, params)


class ModelRows:
    """A model's concrete columns for a prepared SELECT, and its objects built from such rows as Django's ORM
    builds them: Model.from_db, each field's from_db_value applied (psycopg hands Django's connection JSON as
    text; the JSON field parses it)."""

    def __init__(self, model: type[Model]) -> None:
        fields = model._meta.concrete_fields
        self.model = model
        self.width = len(fields)
        self._columns = [f.column for f in fields]
        self._names = [f.attname for f in fields]
        self._converters = [(i, f.from_db_value) for i, f in enumerate(fields) if hasattr(f, "from_db_value")]

    def columns(self, alias: str) -> str:
        """The SELECT list of the model's columns, of the table aliased `alias`, in the order build() takes."""
        return ", ".join(f"{alias}.{column}" for column in self._columns)

    def build(self, values: Sequence[Any]) -> Any:
        row = list(values)
        for i, convert in self._converters:
            row[i] = convert(row[i], None, connection)
        return self.model.from_db(connection.alias, self._names, row)
