"""The web server in front of the internet, over real sockets: what it passes on (never trailers, the
absolute-form target's authority as Host), what it refuses (RFC 9112: a request without Host, another HTTP
version, a transfer coding other than chunked, head and trailers over the limit), and what it bounds (queued
pipelined requests, a client that never reads, connections per worker).

Most tests run the server alone (tests/webserver/echo_app.py: it answers with the request it was handed);
those about the claim run the run command's server."""
from __future__ import annotations

import contextlib
import json
import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from campaigns.redis_state import campaign_keys, redis_client
from webserver.options import HEADER_LIMIT

from ..conftest import wait_for
from .harness import Client, Server, assert_error, request, shopper


class EchoServer(Server):
    """The web server serving tests/webserver/echo_app.py (one worker), with these options."""

    def __init__(self, log: Path, *options: str) -> None:
        super().__init__(log, *options, command=[sys.executable, "-m", "tests.webserver.echo_app", "--workers", "1"])

    def worker_rss_kib(self) -> int:
        worker = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split()[0]
        for line in Path(f"/proc/{worker}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise AssertionError("no VmRSS")


@pytest.fixture(scope="module")
def echo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EchoServer]:
    server = EchoServer(tmp_path_factory.mktemp("echo") / "echo.log")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def run_server(django_db_setup: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The run command's server (Django, the claim)."""
    started = Server(tmp_path_factory.mktemp("log") / "server.log")
    yield started
    started.stop()


@pytest.fixture
def own_echo(tmp_path: Path) -> Iterator[Any]:
    started: list[EchoServer] = []

    def start(*options: str) -> EchoServer:
        started.append(EchoServer(tmp_path / f"echo-{len(started)}.log", *options))
        return started[-1]

    yield start
    for server in started:
        server.stop()


def echoed(client: Client) -> dict[str, Any]:
    reply = client.reply()
    assert reply.status == 200, reply
    return json.loads(reply.body)


CHUNKED = {"Transfer-Encoding": "chunked", "Content-Type": "application/json"}


# ---------------------------------------------------------------------------------------------------------
# Trailers


def test_trailer_fields_never_reach_the_application_as_headers(echo) -> None:
    with Client(echo.port) as client:
        client.send(request("POST", "/t", CHUNKED) + b"2\r\n{}\r\n0\r\nX-User-Id: ann\r\nX-Forwarded-For: 10.9.8.7\r\n"
                    b"Content-Type: text/plain\r\n\r\n")
        seen = echoed(client)
    names = [name for name, _ in seen["headers"]]
    assert seen["body"] == "{}" and "x-user-id" not in names and "x-forwarded-for" not in names
    assert [value for name, value in seen["headers"] if name == "content-type"] == ["application/json"]


def test_an_endless_trailer_field_is_a_431_long_before_it_ends(echo) -> None:
    with Client(echo.port, timeout=5) as client:
        client.send(request("POST", "/t", CHUNKED) + b"2\r\n{}\r\n0\r\nX-Endless: ")
        for _ in range(2 * HEADER_LIMIT // 4096):  # twice the limit, and the field never ends
            client.send(b"a" * 4096)
        assert_error(client.reply(), 431, "invalid_request")  # answered while the field still grows


def test_head_and_trailers_count_against_one_limit(echo) -> None:
    big = "b" * (HEADER_LIMIT // 2)
    with Client(echo.port) as client:
        client.send(request("POST", "/t", {**CHUNKED, "X-Big": big}) + b"2\r\n{}\r\n0\r\n"
                    + f"X-More: {big}\r\n\r\n".encode())
        assert_error(client.reply(), 431, "invalid_request")


@pytest.mark.django_db(transaction=True)
def test_credentials_sent_only_as_trailers_do_not_authenticate_a_claim(run_server, live_campaign) -> None:
    campaign = live_campaign()
    credentials = "".join(f"{k}: {v}\r\n" for k, v in shopper("ann").items())
    with Client(run_server.port) as client:
        client.send(request("POST", f"/api/v1/campaigns/{campaign.pk}/claim", CHUNKED)
                    + b"2\r\n{}\r\n0\r\n" + credentials.encode() + b"\r\n")
        reply = client.reply()
    assert (reply.status, reply.json()["status"]) == (401, "unauthenticated")


# ---------------------------------------------------------------------------------------------------------
# RFC 9112


def test_an_http_1_1_request_without_host_is_a_400(echo) -> None:
    with Client(echo.port) as client:
        client.send(b"GET / HTTP/1.1\r\nX-A: b\r\n\r\n")
        assert_error(client.reply(), 400, "invalid_request")
        client.assert_closed()


def test_two_host_headers_are_a_400(echo) -> None:
    with Client(echo.port) as client:
        client.send(b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n")
        assert_error(client.reply(), 400, "invalid_request")


def test_an_http_1_0_request_without_host_is_answered(echo) -> None:
    with Client(echo.port) as client:
        client.send(b"GET /old HTTP/1.0\r\n\r\n")
        assert echoed(client)["path"] == "/old"


def test_http_2_in_an_http_1_request_line_is_a_505(echo) -> None:
    with Client(echo.port) as client:
        client.send(b"GET / HTTP/2.0\r\nHost: a\r\n\r\n")
        reply = client.reply()
    assert (reply.status, reply.json()["status"]) == (505, "http_version_not_supported")


@pytest.mark.parametrize("version", ["1.2", "3.0", "0.9"])
def test_a_version_that_is_not_http_1_is_refused(echo, version) -> None:
    with Client(echo.port) as client:
        client.send(f"GET / HTTP/{version}\r\nHost: a\r\n\r\n".encode())
        reply = client.reply()
    assert reply.status in (400, 505) and reply.header("connection") == "close"


@pytest.mark.parametrize("coding", ["identity, chunked", "gzip, chunked", "chunked, chunked"])
def test_a_transfer_coding_other_than_chunked_is_refused(echo, coding) -> None:
    with Client(echo.port) as client:
        client.send(request("POST", "/t", {"Transfer-Encoding": coding}) + b"2\r\n{}\r\n0\r\n\r\n")
        reply = client.reply()
    assert reply.status in (400, 501) and reply.header("connection") == "close"


def test_an_absolute_form_targets_authority_is_the_host(echo) -> None:
    with Client(echo.port) as client:
        client.send(b"GET http://shop.example:8080/x/y?q=1 HTTP/1.1\r\nHost: other.example\r\n\r\n")
        seen = echoed(client)
    assert (seen["path"], seen["query"]) == ("/x/y", "q=1")
    assert [value for name, value in seen["headers"] if name == "host"] == ["shop.example:8080"]


# ---------------------------------------------------------------------------------------------------------
# Bounds


def test_pipelined_requests_a_client_never_reads_are_bounded_in_memory(own_echo) -> None:
    server = own_echo()
    burst = b"GET /wait HTTP/1.1\r\nHost: a\r\n\r\n" * (256 * 1024 // 31)  # one 256 KiB write: ~8,000 requests
    before = server.worker_rss_kib()
    clients = [Client(server.port) for _ in range(100)]
    try:
        for client in clients:
            client.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            client.sock.settimeout(5)
            with contextlib.suppress(TimeoutError):
                client.send(burst)
        time.sleep(1.5)
        grown = server.worker_rss_kib() - before
        print(f"worker RSS grew by {grown} KiB")
    finally:
        for client in clients:
            client.sock.close()
    # 100 connections: unbounded, each parsed its whole read (~9,000 requests, several MiB together with their
    # answers); bounded, each holds what it read (at most one read) and 32 requests.
    assert grown < 48 * 1024, f"the worker grew by {grown} KiB"


def test_a_client_that_never_reads_is_dropped_after_the_write_timeout(own_echo) -> None:
    server = own_echo("--write-timeout", "1")
    with Client(server.port) as client:
        client.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sender = threading.Thread(target=_send_quietly, args=(client.sock, b"GET /wait HTTP/1.1\r\nHost: a\r\n\r\n"
                                                              * 200_000), daemon=True)
        sender.start()
        time.sleep(4)  # the client reads nothing meanwhile
        answers, closed = 0, False
        client.sock.settimeout(10)
        try:
            while True:
                chunk = client.sock.recv(1 << 20)
                if not chunk:
                    closed = True
                    break
                answers += chunk.count(b"HTTP/1.1 200")
        except (ConnectionResetError, TimeoutError) as exc:
            closed = isinstance(exc, ConnectionResetError)
    assert closed and answers < 200_000


def _send_quietly(sock: socket.socket, data: bytes) -> None:
    with contextlib.suppress(OSError):
        sock.sendall(data)


def test_connections_over_the_cap_are_a_503_and_closed(own_echo) -> None:
    server = own_echo("--max-connections", "4")
    held = [Client(server.port) for _ in range(4)]
    try:
        for client in held:  # each connection is in hand (answered once)
            client.send(request("GET", "/"))
            assert client.reply().status == 200
        with Client(server.port) as extra:
            extra.send(request("GET", "/"))
            reply = extra.reply()
            assert (reply.status, reply.json()["status"]) == (503, "unavailable")
            assert reply.header("retry-after") == "1"
    finally:
        for client in held:
            client.sock.close()
    wait_for(lambda: _answers(server.port), 5, 0.05, "a connection is taken again once the others closed")


def _answers(port: int) -> bool:
    with Client(port, timeout=2) as client:
        client.send(request("GET", "/"))
        return client.reply().status == 200


# ---------------------------------------------------------------------------------------------------------
# Behind a proxy, and bodies


@pytest.mark.django_db(transaction=True)
def test_a_forwarded_address_from_a_peer_that_is_no_trusted_proxy_does_not_escape_the_address_limit(
        tmp_path, live_campaign) -> None:
    server = Server(tmp_path / "server.log", env={"COUPONS_RATE_LIMIT_IP_PER_SECOND": "2",
                                                  "COUPONS_TRUSTED_PROXY_HOPS": "1",
                                                  "COUPONS_TRUSTED_PROXIES": "10.1.1.1/32"})
    try:
        campaign = live_campaign(total_stock=100, per_user_limit=1)
        for attempt in range(3):  # the five within one second of the limit's clock
            time.sleep(1 - time.time() % 1 + 0.01)
            statuses = []
            with Client(server.port) as client:
                for i in range(5):
                    client.send(request("POST", f"/api/v1/campaigns/{campaign.pk}/claim",
                                        {**shopper(f"f{attempt}-{i}"), "X-Forwarded-For": f"198.51.100.{i}",
                                         "Content-Type": "application/json"}, b"{}"))
                    statuses.append(client.reply().status)
            if time.time() % 1 < 0.9:
                break
    finally:
        server.stop()
    assert statuses == [200, 200, 429, 429, 429]  # one address, the peer's: the header is not the proxy's


@pytest.mark.django_db(transaction=True)
def test_whitespace_after_a_header_value_is_not_part_of_it(run_server, live_campaign) -> None:
    # Given ann's claim with the key K
    campaign = live_campaign(total_stock=5, per_user_limit=3)
    path = f"/api/v1/campaigns/{campaign.pk}/claim"
    answers = []
    for key in ["K", "K \t", "K"]:  # When she repeats it with whitespace after the key, then without
        with Client(run_server.port) as client:
            client.send(request("POST", path, {**shopper("ann"), "Content-Type": "application/json",
                                               "Idempotency-Key": key}, b"{}"))
            answers.append(client.reply().json())
    # Then every repeat replays the one claim (the trailing whitespace made a second key: a second coupon)
    assert [a["status"] for a in answers] == ["claimed"] * 3 and len({a["claim_id"] for a in answers}) == 1
    assert int(redis_client().get(campaign_keys(campaign.pk).stock)) == 4
    # And the user id's trailing whitespace is no part of it either (it was a 401)
    headers = {**shopper("ann"), "Content-Type": "application/json"}
    headers["X-User-Id"] += " "
    with Client(run_server.port) as client:
        client.send(request("POST", path, headers, b"{}"))
        reply = client.reply()
    assert (reply.status, reply.json()["status"]) == (200, "claimed")


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("body", [b'{"x": NaN}', b'{"x": Infinity}', b'{"x": -Infinity}', b'[NaN]'])
def test_a_claim_body_that_is_not_rfc_8259_json_is_a_400_and_claims_nothing(run_server, live_campaign, body) -> None:
    campaign = live_campaign(total_stock=5)
    with Client(run_server.port) as client:
        client.send(request("POST", f"/api/v1/campaigns/{campaign.pk}/claim",
                            {**shopper("ann"), "Content-Type": "application/json"}, body))
        reply = client.reply()
    assert (reply.status, reply.json()["status"]) == (400, "invalid_request")
    assert int(redis_client().get(campaign_keys(campaign.pk).stock)) == 5


@pytest.mark.parametrize("chunk", [40_000, 1_000, 7])
def test_a_chunked_body_larger_than_what_is_parsed_at_a_time_arrives_whole(echo, chunk) -> None:
    body = bytes(48 + i % 10 for i in range(40_000))
    framed = b"".join(b"%x\r\n%s\r\n" % (len(body[i:i + chunk]), body[i:i + chunk]) for i in range(0, len(body), chunk))
    with Client(echo.port) as client:
        client.send(request("POST", "/t", CHUNKED) + framed + b"0\r\n\r\n" + request("GET", "/after"))
        assert echoed(client)["body"] == body.decode()
        assert echoed(client)["path"] == "/after"  # and the connection goes on
