"""The web server over real sockets: static files, Upgrade and CONNECT, timeouts, and the master's care of its
workers (graceful stop, a killed worker replaced, a port in use). Harness: tests/webserver/harness.py."""
from __future__ import annotations

import contextlib
import email.utils
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator

import pytest
from django.db import connection, transaction

from campaigns.models import Campaign
from devstack import resolve, web_command
from webserver.options import RESTARTS, STOP_GRACE_SECONDS

from ..conftest import ROOT, process_env, stop_group, wait_for
from .harness import (
    CONTINUE,
    MTIME,
    SECRET,
    Client,
    assert_error,
    group_gone,
    request,
)

# The servers run against the test database: every test has it set up (in a transaction of its own, which
# the servers never see); a test whose data a server must see commits it (transaction=True).
pytestmark = pytest.mark.django_db


# ---------------------------------------------------------------------------------------------------------
# Static files


@pytest.mark.parametrize(("path", "content_type", "file"), [
    ("/static/app.css", "text/css; charset=utf-8", "app.css"),
    ("/static/app.js", "text/javascript; charset=utf-8", "app.js"),
    ("/static/img/logo.png", "image/png", "img/logo.png"),
    ("/static/blob.unknownext", "application/octet-stream", "blob.unknownext"),
    ("/static/style.css", "text/css; charset=utf-8", "app.css"),  # a link within the mount
    ("/static/%61pp.css", "text/css; charset=utf-8", "app.css"),
])
def test_a_static_file_is_served_with_its_type_and_last_modified(server, static_mount, path, content_type,
                                                                 file) -> None:
    with Client(server.port) as client:
        client.send(request("GET", path))
        reply = client.reply()
    assert reply.status == 200 and reply.body == (static_mount / file).read_bytes()
    assert reply.header("content-type") == content_type
    assert reply.header("last-modified") == email.utils.formatdate(MTIME, usegmt=True)


@pytest.mark.parametrize(("since", "status"), [
    (email.utils.formatdate(MTIME, usegmt=True), 304),
    (email.utils.formatdate(MTIME + 3600, usegmt=True), 304),
    (email.utils.formatdate(MTIME - 1, usegmt=True), 200),
    ("not a date", 200),
    ("", 200),
])
def test_if_modified_since(server, since, status) -> None:
    with Client(server.port) as client:
        client.send(request("GET", "/static/app.css", {"If-Modified-Since": since}))
        reply = client.reply()
    assert reply.status == status
    assert reply.header("last-modified") == email.utils.formatdate(MTIME, usegmt=True)
    assert reply.body == (b"" if status == 304 else b"body { color: red; }\n")


@pytest.mark.parametrize("path", [
    "/static/../secret.txt",
    "/static/%2e%2e/secret.txt",
    "/static/%2E%2E%2Fsecret.txt",
    "/static/img/%2e%2e/%2e%2e/secret.txt",
    "/static/escape.txt",  # a link to a file outside
    "/static/out/secret.txt",  # a link to a folder outside
    "/static/img/../app.css",  # never normalized: Django answers
    "/static//{base}/secret.txt",
    "/static/%2F{base}/secret.txt",
    "/static/secret.txt%00.css",
    "/static/img",  # a folder
    "/static/",
    "/static",
    "/staticapp.css",
    "/static/missing.css",
])
def test_nothing_outside_the_mount_is_served_and_a_missing_file_is_djangos_404(server, static_mount, path) -> None:
    with Client(server.port) as client:
        client.send(request("GET", path.format(base=str(static_mount.parent).lstrip("/"))))
        reply = client.reply()
        assert (reply.status, reply.json()["status"]) == (404, "not_found")  # Django's (the contract's) 404
        assert SECRET not in reply.body and reply.header("last-modified") is None
        client.send(request("GET", "/healthz"))
        assert client.reply().status == 200


# ---------------------------------------------------------------------------------------------------------
# Upgrade, CONNECT


@pytest.mark.parametrize("upgrade", [
    {"Connection": "Upgrade, HTTP2-Settings", "Upgrade": "h2c", "HTTP2-Settings": "AAMAAABkAARAAAAAAAIAAAAA"},
    {"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
     "Sec-WebSocket-Version": "13"},
])
def test_an_upgrade_is_answered_as_a_plain_request_then_closed(server, upgrade) -> None:
    with Client(server.port) as client:
        # what follows an upgrade request is the new protocol's: never read as HTTP/1.1
        client.send(request("GET", "/healthz", upgrade) + b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
                    + request("GET", "/healthz"))
        reply = client.reply()
        assert (reply.status, reply.json(), reply.header("connection")) == (200, {"code": 0, "status": "ok"}, "close")
        assert reply.header("upgrade") is None
        client.assert_closed()


def test_connect_is_a_400(server) -> None:
    with Client(server.port) as client:
        client.send(b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n")
        assert_error(client.reply(), 400, "invalid_request")
        client.assert_closed()


# ---------------------------------------------------------------------------------------------------------
# Timeouts (a server with --keep-alive 1 --request-timeout 1)


def test_an_idle_connection_is_closed_after_the_keep_alive(hasty) -> None:
    with Client(hasty.port) as answered, Client(hasty.port) as silent:  # silent: nothing ever sent
        answered.send(request("GET", "/healthz"))
        assert answered.reply().status == 200
        assert 0.9 <= answered.assert_closed(seconds=5) <= 3  # checked once a second: 1-2 s after the answer
        silent.assert_closed(seconds=5)


PARTIAL_REQUESTS = [
    b"POST /api/v1/campaigns/1/claim HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n{",  # a body cut short
    b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ",  # headers that never end
    b"GET /heal",  # a request line that never ends
    b"POST /healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n",  # no last chunk
    b"POST /healthz HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n",  # asked, never sent
]


def test_a_request_that_never_finishes_is_a_408(hasty) -> None:
    clients = [Client(hasty.port) for _ in PARTIAL_REQUESTS]
    try:
        for client, partial in zip(clients, PARTIAL_REQUESTS, strict=True):
            client.send(partial)
        started = time.monotonic()
        assert clients[-1].read_exactly(len(CONTINUE)) == CONTINUE
        for client in clients:
            assert_error(client.reply(), 408, "request_timeout")
            client.assert_closed()
        assert time.monotonic() - started <= 3.5  # within 1-2 s of the first byte (checked once a second)
    finally:
        for client in clients:
            client.sock.close()


def test_a_slow_request_behind_a_pipelined_one_is_a_408_after_its_answer(hasty) -> None:
    with Client(hasty.port) as client:
        client.send(request("GET", "/healthz") + b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        assert client.reply().status == 200
        assert_error(client.reply(), 408, "request_timeout")
        client.assert_closed()


@contextlib.contextmanager
def campaigns_locked() -> Iterator[None]:
    """Hold the campaign table: a server's campaign lookup (GET /api/v1/campaigns/ID) waits until the block
    ends (a slow request)."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f'LOCK TABLE "{Campaign._meta.db_table}" IN ACCESS EXCLUSIVE MODE')
        yield


def waiting_on_a_lock() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")  # else the view is read once per transaction
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                       "AND wait_event_type = 'Lock'")
        return int(cursor.fetchone()[0])


@pytest.mark.django_db(transaction=True)
def test_a_request_the_server_stopped_reading_is_not_timed_out(hasty) -> None:
    # More than MAX_QUEUED requests behind a slow one: reading pauses with the last one half read. The rest
    # of it waits on the server, not on the client: no 408 however long the slow one takes.
    count = 40
    last = request("GET", "/healthz", {"X-Request-ID": "last-0001"})
    with Client(hasty.port) as client:
        with campaigns_locked():
            client.send(request("GET", "/api/v1/campaigns/424242")
                        + b"".join(request("GET", "/healthz") for _ in range(count)) + last[:20])
            wait_for(waiting_on_a_lock, 10, 0.02, "the slow request waits on the lock")
            time.sleep(2.5)  # past the request timeout (1 s), checked once a second
            client.send(last[20:])
        replies = [client.reply() for _ in range(count + 2)]
        client.assert_open()
    assert [r.status for r in replies] == [404] + [200] * (count + 1)
    assert replies[-1].header("x-request-id") == "last-0001"


# ---------------------------------------------------------------------------------------------------------
# The master: graceful stop, a worker killed, a port in use


def refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except ConnectionRefusedError:
        return True
    return False


@pytest.mark.django_db(transaction=True)
def test_sigterm_answers_the_requests_in_hand_then_exits_0(own_server) -> None:
    started = own_server()
    slow, idle = Client(started.port), Client(started.port)
    with slow, idle:
        idle.send(request("GET", "/healthz"))
        assert idle.reply().status == 200
        with campaigns_locked():  # a request in hand
            slow.send(request("GET", "/api/v1/campaigns/424242", {"X-Request-ID": "slow-0001"})
                      + request("GET", "/healthz"))
            wait_for(waiting_on_a_lock, 10, 0.02, "the slow request waits on the lock")
            stopping = time.monotonic()
            os.kill(started.proc.pid, signal.SIGTERM)

            idle.assert_closed()  # an idle connection is closed at once
            wait_for(lambda: refused(started.port), 5, 0.02, "a new connection is refused")
            assert started.proc.poll() is None and started.workers()  # a worker still answers the slow one
            slow.assert_open()
        reply = slow.reply()  # the transaction has ended: the lookup proceeds
        assert (reply.status, reply.header("x-request-id"), reply.header("connection")) == (404, "slow-0001", "close")
        slow.assert_closed()  # the request pipelined behind it is not answered

    assert started.proc.wait(STOP_GRACE_SECONDS) == 0
    assert time.monotonic() - stopping < STOP_GRACE_SECONDS  # not stopped by the grace period's end
    assert group_gone(started.proc.pid)
    assert "SIGTERM: stopping the workers" in started.output() and "stopped" in started.output()


def answered_by(port: int) -> str:
    """The process prefix of the request id a /healthz answer generated (core.hot.unique_hex)."""
    with Client(port) as client:
        client.send(request("GET", "/healthz"))
        reply = client.reply()
    assert reply.status == 200
    return str(reply.header("x-request-id"))[:16]


def test_a_killed_worker_is_replaced_and_no_connection_is_refused_meanwhile(own_server) -> None:
    started = own_server(workers=2)
    workers = wait_for(lambda: (lambda w: w if len(w) == 2 else None)(started.workers()), 10, 0.02, "two workers")
    prefixes: set[str] = set()
    wait_for(lambda: prefixes.add(answered_by(started.port)) or len(prefixes) == 2, 20, 0.02, "both workers answer")

    victim, survivor = sorted(workers)
    os.kill(victim, signal.SIGKILL)
    replacement = wait_for(lambda: started.workers() - {survivor, victim}, 10, 0.02, "a new worker")
    assert victim not in replacement and survivor in started.workers()

    # The new worker is still starting: connections to its socket wait in the queue the master kept
    clients = [Client(started.port, timeout=30) for _ in range(24)]
    try:
        for client in clients:
            client.send(request("GET", "/healthz"))
        replies = [client.reply() for client in clients]
    finally:
        for client in clients:
            client.sock.close()
    assert [r.status for r in replies] == [200] * len(replies)
    answering = {str(r.header("x-request-id"))[:16] for r in replies}
    assert len(answering) == 2 and len(answering - prefixes) == 1  # the survivor and the new worker
    assert started.workers() == replacement | {survivor} and started.proc.poll() is None
    assert f"worker {victim} exited (-9): starting another" in started.output()


def test_a_worker_dying_again_and_again_stops_the_server_with_1(own_server) -> None:
    started = own_server(workers=2)
    workers = wait_for(lambda: (lambda w: w if len(w) == 2 else None)(started.workers()), 10, 0.02, "two workers")
    victim, survivor = sorted(workers)
    for _ in range(RESTARTS):
        os.kill(victim, signal.SIGKILL)
        victim = wait_for(lambda v=victim: next(iter(started.workers() - {v, survivor}), None), 10, 0.02,
                          "a new worker")
    os.kill(victim, signal.SIGKILL)  # one death too many
    assert started.proc.wait(STOP_GRACE_SECONDS + 5) == 1
    assert group_gone(started.proc.pid)  # the master waited for the other worker
    assert "giving up" in started.output()


def test_a_port_in_use_is_exit_code_2_with_a_clear_message(server, tmp_path) -> None:
    with (tmp_path / "second.log").open("wb") as log:
        second = subprocess.Popen(resolve(web_command(server.port)), cwd=ROOT, env=process_env(),
                                  stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)
    try:
        code = second.wait(20)
    finally:
        stop_group(second)
    assert code == 2
    assert (tmp_path / "second.log").read_text().strip() == \
        f"python -m config.server: cannot listen on 127.0.0.1:{server.port}: the port is in use"
    with Client(server.port) as client:
        client.send(request("GET", "/healthz"))
        assert client.reply().status == 200

