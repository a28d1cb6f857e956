"""The web server's tests' harness: a server of its own (the run command's, against the test database) and a raw
HTTP/1.1 client (tests/webserver/test_server.py, test_server_files.py, test_edge.py; tests/deploy)."""
from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import subprocess
import time
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from django.conf import settings

from campaigns.models import Campaign
from campaigns.redis_state import campaign_keys, redis_client
from core.auth import mint_token
from core.http import MAX_BODY_BYTES
from devstack import resolve, web_command

from ..conftest import ROOT, free_port, process_env, stop_group, wait_for

BODY_LIMIT = max(settings.DATA_UPLOAD_MAX_MEMORY_SIZE, MAX_BODY_BYTES)  # orders.door.ClaimDoor.body_limit
SECRET = b"the secret outside the static mount"
MTIME = 1_700_000_000  # the static files' modification time
DATE_RE = re.compile(r"(Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d\d (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) "
                     r"\d{4} \d\d:\d\d:\d\d GMT")
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"



# ---------------------------------------------------------------------------------------------------------
# A server of its own, and a raw HTTP/1.1 client


class Server:
    """config.server started with the run command's options (and these), in a process group of its own."""

    def __init__(self, log: Path, *options: str, mount: Path | None = None, workers: int | None = None,
                 env: dict[str, str] | None = None, command: list[str] | None = None) -> None:
        """`command`: another application's server command line (the port is added), instead of the run
        command's."""
        self.port = free_port()
        command = web_command(self.port) if command is None else [*command, "--port", str(self.port)]
        if mount is not None:
            command[command.index("--static-path-mount") + 1] = str(mount)
        if workers is not None:
            command = [*command, "--workers", str(workers)]
        self.log = log
        with log.open("wb") as stderr:  # a file: a pipe nobody reads would stop a chatty server
            self.proc = subprocess.Popen(resolve([*command, *options]), cwd=ROOT, env={**process_env(), **(env or {})},
                                         stdout=subprocess.DEVNULL, stderr=stderr, start_new_session=True)
        try:
            wait_for(self.ready, 30, 0.02, "the server answers /healthz")
        except BaseException:
            self.stop()
            raise

    def ready(self) -> bool:
        if self.proc.poll() is not None:
            pytest.fail(f"the server exited ({self.proc.returncode}): {self.output()[-2000:]}")
        try:
            with Client(self.port, timeout=2) as client:
                client.send(request("GET", "/healthz"))
                return client.reply().status == 200
        except OSError:
            return False

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def workers(self) -> set[int]:
        return live_children(self.proc.pid)

    def stop(self) -> None:
        stop_group(self.proc)


def live_children(pid: int) -> set[int]:
    """The pids of a process's children that are not zombies."""
    try:
        listed = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except FileNotFoundError:
        return set()
    alive = set()
    for child in listed:
        with contextlib.suppress(FileNotFoundError):
            if Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                alive.add(int(child))
    return alive


def group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


class Reply(NamedTuple):
    status: int
    headers: list[tuple[str, str]]  # as sent, in order
    body: bytes

    def all(self, name: str) -> list[str]:
        return [value for key, value in self.headers if key.lower() == name]

    def header(self, name: str) -> str | None:
        values = self.all(name)
        assert len(values) <= 1, f"{name} sent {len(values)} times"
        return values[0] if values else None

    def json(self) -> Any:
        assert self.header("content-type") == "application/json", self.headers
        return json.loads(self.body)


class Client:
    """One connection, read as an HTTP/1.1 client reads it: replies are framed by their Content-Length only."""

    def __init__(self, port: int, timeout: float = 10.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buffer = b""

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _fill(self) -> None:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise EOFError(f"closed with {self.buffer[:200]!r} unread")
        self.buffer += chunk

    def read_until(self, separator: bytes) -> bytes:
        while separator not in self.buffer:
            self._fill()
        head, self.buffer = self.buffer.split(separator, 1)
        return head + separator

    def read_exactly(self, size: int) -> bytes:
        while len(self.buffer) < size:
            self._fill()
        data, self.buffer = self.buffer[:size], self.buffer[size:]
        return data

    def reply(self, head: bool = False) -> Reply:
        lines = self.read_until(b"\r\n\r\n").decode("latin-1").split("\r\n")[:-2]
        version, status, _ = (lines[0] + " ").split(" ", 2)
        assert version == "HTTP/1.1", lines[0]
        headers = [tuple(part.strip() for part in line.split(":", 1)) for line in lines[1:]]
        assert all(len(pair) == 2 for pair in headers), lines
        reply = Reply(int(status), headers, b"")  # type: ignore[arg-type]
        lengths = reply.all("content-length")
        assert len(lengths) <= 1, f"content-length sent {len(lengths)} times"
        assert not reply.all("transfer-encoding")
        if head or reply.status in (204, 304) or reply.status < 200:
            return reply
        assert lengths, f"a {reply.status} without a content-length"
        return reply._replace(body=self.read_exactly(int(lengths[0])))

    def assert_closed(self, seconds: float = 5.0) -> float:
        """The server closes the connection (EOF) within `seconds`, with nothing more sent; the time taken."""
        started = time.monotonic()
        self.sock.settimeout(seconds)
        try:
            chunk = self.sock.recv(65536)
        except TimeoutError:
            pytest.fail(f"the connection is still open after {seconds:g} s")
        assert (self.buffer, chunk) == (b"", b""), "more was sent before the connection closed"
        return time.monotonic() - started

    def assert_open(self, seconds: float = 0.3) -> None:
        """Nothing arrives and the connection stays open for `seconds` (used only where the server must wait)."""
        self.sock.settimeout(seconds)
        with pytest.raises(TimeoutError):
            chunk = self.sock.recv(65536)
            pytest.fail(f"received {chunk!r}")
        self.sock.settimeout(10)


def request(method: str, path: str, headers: dict[str, str] | None = None, body: bytes | None = None,
            version: str = "1.1") -> bytes:
    """A request's bytes: Host, then these headers; Content-Length when a body is given and no framing is."""
    fields = {"Host": "127.0.0.1", **(headers or {})}
    if body is not None and "Content-Length" not in fields and "Transfer-Encoding" not in fields:
        fields["Content-Length"] = str(len(body))
    head = f"{method} {path} HTTP/{version}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in fields.items()) + "\r\n"
    return head.encode("latin-1") + (body or b"")


def shopper(user: str, **extra: str) -> dict[str, str]:
    return {"X-User-Id": user, "X-Token": mint_token(user, ttl=600), **extra}


def assert_error(reply: Reply, status: int, slug: str) -> None:
    """An error in the contract's JSON form, on a connection the server then closes."""
    body = reply.json()
    assert (reply.status, body["code"], body["status"]) == (status, status, slug)
    assert set(body) == {"code", "status", "detail"} and body["detail"]
    assert reply.header("connection") == "close"


def stock(campaign: Campaign) -> int:
    return int(redis_client().get(campaign_keys(campaign.pk).stock))


