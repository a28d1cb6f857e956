"""The web server (webserver/, started by config/server.py) over real sockets, as a client sees it: HTTP/1.1
framing (keep-alive, pipelining, chunked bodies, 100-continue, HEAD), its limits and errors in the contract's
JSON form, static files, timeouts, and the master's care of its workers (graceful stop, a killed worker
replaced, a port in use).

Each server is the run command's own (devstack.web_command) against the test database, with its own
static folder; the timeouts are checked on one started with short ones."""
from __future__ import annotations

import contextlib
import email.utils
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from django.conf import settings
from django.db import connection, transaction

from campaigns.models import Campaign
from campaigns.redis_state import campaign_keys, redis_client
from core.auth import mint_token
from core.http import MAX_BODY_BYTES
from devstack import resolve, web_command
from webserver.options import HEADER_LIMIT, MAX_HEADERS, RESTARTS, STOP_GRACE_SECONDS

from ..conftest import ROOT, free_port, process_env, stop_group, wait_for

# The servers run against the test database: every test has it set up (in a transaction of its own, which
# the servers never see); a test whose data a server must see commits it (transaction=True).
pytestmark = pytest.mark.django_db

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


# ---------------------------------------------------------------------------------------------------------
# Keep-alive and pipelining


def test_one_connection_serves_request_after_request(server) -> None:
    with Client(server.port) as client:
        for path, status in [("/healthz", 200), ("/api/v1/campaigns/424242", 404), ("/healthz", 200),
                             ("/api/v1/campaigns", 200)]:
            client.send(request("GET", path))
            reply = client.reply()
            assert reply.status == status
            assert reply.header("connection") is None  # HTTP/1.1: kept open without saying so
        client.assert_open()


def test_http_1_0_closes_unless_asked_to_keep_the_connection(server) -> None:
    with Client(server.port) as client:
        client.send(request("GET", "/healthz", version="1.0"))
        reply = client.reply()
        assert (reply.status, reply.header("connection")) == (200, "close")
        client.assert_closed()

    with Client(server.port) as client:
        for _ in range(2):
            client.send(request("GET", "/healthz", {"Connection": "keep-alive"}, version="1.0"))
            reply = client.reply()
            # an HTTP/1.0 client keeps a connection only when the answer says so
            assert (reply.status, reply.header("connection")) == (200, "keep-alive")
        client.send(request("GET", "/api/v1/campaigns/424242", version="1.0"))
        assert client.reply().header("connection") == "close"
        client.assert_closed()


@pytest.mark.parametrize("path", ["/healthz", "/api/v1/campaigns/424242", "/static/app.css"])
def test_connection_close_is_honoured_and_nothing_after_it_is_answered(server, path) -> None:
    with Client(server.port) as client:
        client.send(request("GET", path, {"Connection": "close"}) + request("GET", "/healthz"))
        reply = client.reply()
        assert reply.status in (200, 404) and reply.header("connection") == "close"
        client.assert_closed()


@pytest.mark.django_db(transaction=True)
def test_pipelined_requests_come_back_whole_and_in_order(server, live_campaign) -> None:
    campaign = live_campaign(total_stock=5)
    claim = request("POST", f"/api/v1/campaigns/{campaign.pk}/claim",
                    shopper("ann", **{"X-Request-ID": "pipe-0003", "Content-Type": "application/json"}), b"{}")
    with Client(server.port) as client:
        client.send(request("GET", "/healthz", {"X-Request-ID": "pipe-0001"})
                    + request("GET", "/api/v1/campaigns/424242", {"X-Request-ID": "pipe-0002"})
                    + claim
                    + request("GET", f"/api/v1/campaigns/{campaign.pk}", {"X-Request-ID": "pipe-0004"})
                    + request("HEAD", "/healthz", {"X-Request-ID": "pipe-0005"})
                    + request("GET", "/static/app.css", {"X-Request-ID": "pipe-0006"}))
        replies = [client.reply(), client.reply(), client.reply(), client.reply(), client.reply(head=True),
                   client.reply()]
        client.assert_open()

    assert [r.header("x-request-id") for r in replies[:5]] == [f"pipe-000{i}" for i in range(1, 6)]
    assert [r.status for r in replies] == [200, 404, 200, 200, 200, 200]
    assert replies[0].json() == {"code": 0, "status": "ok"}
    assert replies[1].json()["status"] == "not_found"
    assert replies[2].json()["status"] == "claimed"
    assert replies[3].json()["remaining"] == 4  # after the claim before it
    assert replies[5].body == b"body { color: red; }\n"
    assert stock(campaign) == 4


def test_a_client_that_half_closes_after_its_requests_gets_their_answers(server) -> None:
    with Client(server.port) as client:
        client.send(request("GET", "/healthz", {"X-Request-ID": "half-0001"})
                    + request("GET", "/api/v1/campaigns/424242", {"X-Request-ID": "half-0002"}))
        client.sock.shutdown(socket.SHUT_WR)  # as `nc -N` does
        first, last = client.reply(), client.reply()
        client.assert_closed()
    assert [(r.status, r.header("x-request-id"), r.header("connection")) for r in (first, last)] == [
        (200, "half-0001", None), (404, "half-0002", "close")]


def test_many_pipelined_requests_in_one_write_are_all_answered(server) -> None:
    count = 100  # more than MAX_QUEUED: reading pauses and resumes
    with Client(server.port) as client:
        client.send(b"".join(request("GET", "/healthz", {"X-Request-ID": f"many-{i:04d}"}) for i in range(count)))
        assert [client.reply().header("x-request-id") for _ in range(count)] == [f"many-{i:04d}" for i in range(count)]
        client.assert_open()


@pytest.mark.django_db(transaction=True)
def test_sold_out_claims_decided_without_waiting_keep_their_order_among_answers_that_wait(server,
                                                                                         live_campaign) -> None:
    """Sold-out claims (which the application answers without waiting), claims that need Redis and requests for
    Django: in one pipelined write, every answer still comes back in the order of the requests, and the
    sold-out ones are the claim's whole answer."""
    campaign = live_campaign(total_stock=1)
    path = f"/api/v1/campaigns/{campaign.pk}/claim"
    json_type = {"Content-Type": "application/json"}
    with Client(server.port) as client:
        client.send(request("POST", path, shopper("first", **json_type), b"{}"))
        assert client.reply().json()["status"] == "claimed"
        for _ in range(2):  # each worker learns from the script that it is sold out (a connection stays on one)
            client.send(request("POST", path, shopper("late", **json_type), b"{}"))
            assert client.reply().json()["status"] == "sold_out"
        pipelined = [
            request("POST", path, shopper("s-1", **json_type, **{"X-Request-ID": "order-0001"}), b"{}"),
            request("GET", f"/api/v1/campaigns/{campaign.pk}", {"X-Request-ID": "order-0002"}),  # Django, in a thread
            request("POST", path, shopper("s-2", **{"X-Request-ID": "order-0003"})),
            request("POST", path, shopper("s-3", **json_type, **{"X-Request-ID": "order-0004", "Idempotency-Key": "k"}),
                    b"{}"),  # a key: Redis decides
            request("POST", path, {"X-User-Id": "s-4", "X-Token": "1.bad", "X-Request-ID": "order-0005"}, b"{}"),
            request("GET", "/healthz", {"X-Request-ID": "order-0006"}),
            request("POST", path, shopper("s-5", **json_type, **{"X-Request-ID": "order-0007"}), b"{}"),
        ]
        client.send(b"".join(pipelined))
        replies = [client.reply() for _ in pipelined]
        client.assert_open()

    assert [r.header("x-request-id") for r in replies] == [f"order-{i:04d}" for i in range(1, 8)]
    assert [r.status for r in replies] == [200, 200, 200, 200, 401, 200, 200]
    sold_out = {"code": 2, "status": "sold_out", "claim_id": None, "campaign_id": campaign.pk}
    assert [replies[i].json() for i in (0, 2, 3, 6)] == [sold_out] * 4
    assert replies[1].json()["id"] == campaign.pk and replies[1].json()["remaining"] == 0
    assert replies[4].json()["status"] == "unauthenticated"
    for reply in (replies[0], replies[6]):
        assert [name.lower() for name, _ in reply.headers] == [
            "content-type", "x-content-type-options", "cache-control", "x-request-id", "date", "content-length"]
        assert reply.header("cache-control") == "private, no-store"


# ---------------------------------------------------------------------------------------------------------
# Bodies: chunked, 100-continue, over the limit


def chunked(*chunks: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks) + b"0\r\n\r\n"


@pytest.mark.django_db(transaction=True)
def test_a_chunked_claim_body_answers_as_a_plain_one(server, live_campaign) -> None:
    campaign = live_campaign(total_stock=5)
    path = f"/api/v1/campaigns/{campaign.pk}/claim"
    json_type = {"Content-Type": "application/json"}
    with Client(server.port) as client:
        client.send(request("POST", path, shopper("ann", **json_type), b"{}"))
        plain = client.reply().json()
        client.send(request("POST", path, shopper("bob", **json_type, **{"Transfer-Encoding": "chunked"}),
                            chunked(b"{", b"}")))
        reply = client.reply()
        body = reply.json()
        # not JSON, and not an object: the contract's 400, and the connection stays usable
        client.send(request("POST", path, shopper("cy", **json_type, **{"Transfer-Encoding": "chunked"}),
                            chunked(b'{"a":')))
        not_json = client.reply()
        client.send(request("POST", path, shopper("cy", **json_type, **{"Transfer-Encoding": "chunked"}),
                            chunked(b"[1]")))
        not_object = client.reply()
        client.send(request("GET", "/healthz"))
        assert client.reply().status == 200

    assert reply.status == 200 and plain["status"] == body["status"] == "claimed"
    assert set(body) == set(plain) and body["claim_id"] != plain["claim_id"]
    for bad in (not_json, not_object):
        assert (bad.status, bad.json()["code"], bad.json()["status"]) == (400, 400, "invalid_request")
        assert bad.header("connection") is None
    assert stock(campaign) == 3


def test_a_chunked_body_reaches_django(server) -> None:
    headers = shopper("ann", **{"Content-Type": "application/json", "Transfer-Encoding": "chunked",
                                "Idempotency-Key": "chunk-1"})
    with Client(server.port) as client:
        client.send(request("POST", "/api/v1/coupons/NOPE-NOPE-NOPE/redeem", headers, chunked(b'{"order_id": ')))
        malformed = client.reply()
        client.send(request("POST", "/api/v1/coupons/NOPE-NOPE-NOPE/redeem", headers,
                            chunked(b'{"order_id": "o-1", ', b'"order_amount": "100.00", "currency": "CNY"}')))
        whole = client.reply()
    # Django parsed what the chunks carried: a broken JSON body is a 400, a whole one reaches the lookup
    assert (malformed.status, malformed.json()["status"]) == (400, "invalid_request")
    assert (whole.status, whole.json()["status"]) == (404, "not_found")


def test_a_malformed_chunked_framing_is_a_400_and_closes(server) -> None:
    for framing in [b"zz\r\n{}\r\n0\r\n\r\n", b"2\r\n{}}}}\r\n0\r\n\r\n", b"-2\r\n{}\r\n0\r\n\r\n"]:
        with Client(server.port) as client:
            client.send(request("POST", "/api/v1/campaigns/1/claim", shopper("ann", **{"Transfer-Encoding": "chunked"}),
                                framing))
            assert_error(client.reply(), 400, "invalid_request")
            client.assert_closed()


@pytest.mark.django_db(transaction=True)
def test_expect_100_continue_is_answered_before_the_body_is_sent(server, live_campaign) -> None:
    campaign = live_campaign(total_stock=5)
    path = f"/api/v1/campaigns/{campaign.pk}/claim"
    def head(user: str) -> bytes:
        return request("POST", path, shopper(user, **{"Expect": "100-continue", "Content-Length": "2",
                                                      "Content-Type": "application/json"}))

    with Client(server.port) as client:
        client.send(head("ann"))
        assert client.read_exactly(len(CONTINUE)) == CONTINUE
        client.assert_open()  # nothing more until the body comes
        client.send(b"{}")
        reply = client.reply()
        assert (reply.status, reply.json()["status"]) == (200, "claimed")

        # behind a pipelined request: the 100 comes after that request's answer
        client.send(request("GET", "/api/v1/campaigns/424242") + head("bob"))
        assert client.reply().status == 404
        assert client.read_exactly(len(CONTINUE)) == CONTINUE
        client.send(b"{}")
        reply = client.reply()
        assert (reply.status, reply.json()["status"]) == (200, "claimed")
    assert stock(campaign) == 3


@pytest.mark.parametrize(("headers", "status", "slug"), [
    ({}, 401, "unauthenticated"),  # the claim checks the token before the body
    (shopper("ann"), 413, "payload_too_large"),
    (shopper("ann", Expect="100-continue"), 413, "payload_too_large"),  # no 100: the body is not wanted
])
def test_a_claim_longer_than_the_limit_is_answered_without_its_body(server, headers, status, slug) -> None:
    with Client(server.port) as client:
        client.send(request("POST", "/api/v1/campaigns/1/claim",
                            {**headers, "Content-Length": str(BODY_LIMIT + 1), "Content-Type": "application/json"}))
        reply = client.reply()  # the body is never sent
        body = reply.json()
        assert (reply.status, body["code"], body["status"]) == (status, status, slug)
        assert reply.header("connection") == "close"
        client.assert_closed()


@pytest.mark.parametrize(("path", "content_type"), [
    ("/api/v1/coupons/NOPE/redeem", "application/json"),
    # a form outside the API (the admin's upload of codes): before, Django got it empty and answered its
    # CSRF 403 (the token was in the body it never read)
    ("/admin/coupons/codebatch/campaign/1/import/", "multipart/form-data; boundary=x"),
])
def test_a_django_body_longer_than_the_limit_is_answered_without_it(server, path, content_type) -> None:
    with Client(server.port) as client:
        client.send(request("POST", path, shopper("ann", **{
            "Content-Length": str(BODY_LIMIT + 1), "Content-Type": content_type, "Idempotency-Key": "big"})))
        reply = client.reply()
        assert (reply.status, reply.json()["status"], reply.header("connection")) == (413, "payload_too_large", "close")
        client.assert_closed()


@pytest.mark.parametrize("path", ["/api/v1/campaigns/1/claim", "/api/v1/coupons/NOPE/redeem"])
def test_a_client_sending_the_refused_body_anyway_still_reads_the_answer(server, path) -> None:
    """The server reads (and drops) what still comes before it closes: a socket closed with input unread
    resets the connection, and the reset can reach the client before it has read the answer."""
    body = b"x" * (40 * BODY_LIMIT)
    with Client(server.port) as client:
        def send_all() -> None:
            with contextlib.suppress(OSError):
                client.send(request("POST", path, shopper("ann", **{"Idempotency-Key": "big"}), body))

        sender = threading.Thread(target=send_all)
        sender.start()
        try:
            reply = client.reply()
            assert (reply.status, reply.json()["status"], reply.header("connection")) == (
                413, "payload_too_large", "close")
            client.assert_closed()
        finally:
            sender.join(10)


def test_a_claim_body_within_the_servers_limit_but_over_the_claims_is_a_413_on_a_kept_connection(server) -> None:
    body = b'{"a":"' + b"x" * MAX_BODY_BYTES + b'"}'
    assert len(body) <= BODY_LIMIT
    with Client(server.port) as client:
        client.send(request("POST", "/api/v1/campaigns/1/claim", shopper("ann"), body) + request("GET", "/healthz"))
        reply = client.reply()
        assert (reply.status, reply.json()["status"], reply.header("connection")) == (413, "payload_too_large", None)
        assert client.reply().status == 200


# ---------------------------------------------------------------------------------------------------------
# The head's limits, malformed requests


def test_a_request_line_over_the_limit_is_a_414(server) -> None:
    with Client(server.port) as client:
        client.send(b"GET /" + b"a" * HEADER_LIMIT + b" HTTP/1.1\r\nHost: x\r\n\r\n")
        assert_error(client.reply(), 414, "invalid_request")
        client.assert_closed()


@pytest.mark.parametrize("head", [
    pytest.param(b"".join(b"X-Big-%d: %s\r\n" % (i, b"v" * 8000) for i in range(9)) + b"\r\n", id="many-large"),
    pytest.param(b"X-Big: " + b"v" * (HEADER_LIMIT + 1) + b"\r\n\r\n", id="one-huge"),
    pytest.param(b"X-Big: " + b"v" * (4 * HEADER_LIMIT), id="one-that-never-ends"),
    pytest.param(b"X-" + b"n" * (4 * HEADER_LIMIT), id="a-name-that-never-ends"),
])
def test_headers_over_the_limit_are_a_431(server, head) -> None:
    with Client(server.port) as client:
        client.send(b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + head)
        assert_error(client.reply(), 431, "invalid_request")
        client.assert_closed()


def test_large_heads_and_bodies_within_the_limits_pipelined_in_one_write_are_all_answered(server) -> None:
    big_head = {f"X-Big-{i}": "v" * 4000 for i in range(15)}  # 60 KiB of headers
    body = b"x" * (BODY_LIMIT - 100)
    with Client(server.port) as client:
        client.send(request("POST", "/api/v1/coupons/NOPE/redeem", shopper("ann", **{"Idempotency-Key": "k"}), body)
                    + request("GET", "/healthz", big_head) + request("POST", "/api/v1/campaigns/1/claim", body=body)
                    + request("GET", "/healthz", big_head))
        replies = [client.reply() for _ in range(4)]
        client.assert_open()
    # the bodies read whole (the application's own 415 for a body that is no JSON, and the claim's 401 before it
    # looks at one), the connection kept; no 431 for heads that shared a read with a large body
    assert [(r.status, r.header("connection")) for r in replies] == [(415, None), (200, None), (401, None), (200, None)]


def test_more_than_max_headers_is_a_431(server) -> None:
    def head(count: int) -> bytes:  # Host and count - 1 others
        return b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-H%d: 1\r\n" % i for i in range(count - 1))

    with Client(server.port) as client:
        client.send(head(MAX_HEADERS) + b"\r\n")
        assert client.reply().status == 200
    with Client(server.port) as client:
        client.send(head(MAX_HEADERS + 1) + b"\r\n")
        assert_error(client.reply(), 431, "invalid_request")
        client.assert_closed()


@pytest.mark.parametrize("garbage", [
    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",  # a TLS ClientHello
    b"HELLO\r\n\r\n",
    b"GET / HTTP/9.9\r\n\r\n",
    b"GET /a b HTTP/1.1\r\n\r\n",
    b"GET / HTTP/1.1\r\nBad Header: x\r\n\r\n",
    b"POST / HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
    b"POST / HTTP/1.1\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    b"POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
])
def test_a_malformed_request_is_a_400_and_closes(server, garbage) -> None:
    with Client(server.port) as client:
        client.send(garbage)
        assert_error(client.reply(), 400, "invalid_request")
        client.assert_closed()


@pytest.mark.parametrize("target", [b"http://127.0.0.1:99999/healthz", b"http://[::1/healthz"])
def test_a_target_the_url_parser_refuses_is_a_400_not_a_500(server, target) -> None:
    with Client(server.port) as client:
        client.send(b"GET " + target + b" HTTP/1.1\r\nHost: x\r\n\r\n")
        reply = client.reply()
        assert (reply.status, reply.json()["status"]) == (400, "invalid_request")


def test_an_error_after_good_pipelined_requests_comes_after_their_answers(server) -> None:
    with Client(server.port) as client:
        client.send(request("GET", "/healthz", {"X-Request-ID": "good-0001"})
                    + request("GET", "/api/v1/campaigns/424242", {"X-Request-ID": "good-0002"})
                    + b"GET /x HTTP/1.1\r\nHost: x\r\nContent-Length: nope\r\n\r\n"
                    + request("GET", "/healthz"))
        first, second = client.reply(), client.reply()
        assert [(r.status, r.header("x-request-id"), r.header("connection")) for r in (first, second)] == [
            (200, "good-0001", None), (404, "good-0002", None)]
        assert_error(client.reply(), 400, "invalid_request")
        client.assert_closed()


# ---------------------------------------------------------------------------------------------------------
# HEAD, bodiless statuses, headers


@pytest.mark.parametrize("path", ["/healthz", "/api/v1/campaigns", "/api/v1/campaigns/424242", "/static/app.css"])
def test_head_has_the_gets_headers_and_no_body(server, path) -> None:
    with Client(server.port) as client:
        client.send(request("HEAD", path) + request("GET", path))
        head, get = client.reply(head=True), client.reply()  # framing: nothing follows HEAD's headers
        client.send(request("GET", "/healthz"))
        assert client.reply().status == 200
    assert head.status == get.status
    assert head.header("content-length") == get.header("content-length") == str(len(get.body))
    assert head.header("content-type") == get.header("content-type")


def test_a_304_has_no_body(server) -> None:
    with Client(server.port) as client:
        client.send(request("GET", "/static/app.css", {"If-Modified-Since": email.utils.formatdate(MTIME, usegmt=True)})
                    + request("GET", "/healthz"))
        not_modified = client.reply()
        assert client.reply().status == 200  # what follows the 304's head is the next answer
    assert not_modified.status == 304 and not not_modified.all("content-length")


def test_every_answer_has_one_well_formed_date_lowercase_names_and_one_content_length(server) -> None:
    with Client(server.port) as client:
        client.send(request("GET", "/api/v1/campaigns") + request("GET", "/healthz") + request("GET", "/static/app.js")
                    + request("GET", "/api/v1/campaigns/424242") + b"BROKEN\r\n\r\n")
        replies = [client.reply() for _ in range(5)]
    for reply in replies:
        date = reply.header("date")
        assert date is not None and DATE_RE.fullmatch(date), date
        assert abs(email.utils.parsedate_to_datetime(date).timestamp() - time.time()) < 5
        assert all(name == name.lower() for name, _ in reply.headers), reply.headers
        assert reply.header("content-length") == str(len(reply.body))
    # Django's own headers, lowercased, its Content-Length replaced by the server's one
    assert replies[0].header("x-content-type-options") == "nosniff"
    assert replies[0].header("allow") == "GET, HEAD, OPTIONS"
    assert [r.status for r in replies] == [200, 200, 200, 404, 400]


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
