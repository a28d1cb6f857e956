"""Fixtures of the web server's tests: a static folder, the module's servers, a server of a test's own."""
from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from .harness import (
    MTIME,
    SECRET,
    Server,
)

# ---------------------------------------------------------------------------------------------------------
# Fixtures


@pytest.fixture(scope="module")
def static_mount(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A static folder: files, a subfolder, a link inside, and links leading out of it to a secret."""
    base = tmp_path_factory.mktemp("static")
    (base / "secret.txt").write_bytes(SECRET)
    mount = base / "mount"
    (mount / "img").mkdir(parents=True)
    (mount / "app.css").write_text("body { color: red; }\n")
    (mount / "app.js").write_text("console.log('hi');\n")
    (mount / "img" / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)))
    (mount / "blob.unknownext").write_bytes(b"\x00\x01")
    (mount / "style.css").symlink_to(mount / "app.css")  # a link that stays inside: served
    (mount / "escape.txt").symlink_to(base / "secret.txt")
    (mount / "out").symlink_to(base)
    for path in mount.rglob("*"):
        os.utime(path, (MTIME, MTIME), follow_symlinks=False)
        os.utime(path, (MTIME, MTIME))
    return mount


@pytest.fixture(scope="module")
def server(django_db_setup: Any, static_mount: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The run command's server for this module's tests, serving `static_mount` under /static."""
    started = Server(tmp_path_factory.mktemp("log") / "server.log", mount=static_mount)
    yield started
    started.stop()


@pytest.fixture(scope="module")
def hasty(django_db_setup: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The run command's server with one second of keep-alive and one second for a whole request."""
    started = Server(tmp_path_factory.mktemp("log") / "hasty.log", "--keep-alive", "1", "--request-timeout", "1")
    yield started
    started.stop()


@pytest.fixture
def own_server(django_db_setup: Any, tmp_path: Path) -> Iterator[Callable[..., Server]]:
    """Start a server for one test (a test that stops or breaks it); every one is stopped after the test."""
    started: list[Server] = []

    def start(*options: str, **kwargs: Any) -> Server:
        started.append(Server(tmp_path / f"server-{len(started)}.log", *options, **kwargs))
        return started[-1]

    yield start
    for one in started:
        one.stop()


