"""The web server (webserver/, started by config/server.py) over real sockets, as a client sees it: HTTP/1.1
framing (keep-alive, pipelining, chunked bodies, 100-continue, HEAD), its limits and errors in the contract's
JSON form, and HEAD (static files, timeouts and the master: test_server_files.py).

Each server is the run command's own (devstack.web_command) against the test database, with its own
static folder; the timeouts are checked on one started with short ones."""
from __future__ import annotations

import contextlib
import email.utils
import socket
import threading
import time

import pytest

from core.http import MAX_BODY_BYTES
from webserver.options import HEADER_LIMIT, MAX_HEADERS

from .harness import (
    BODY_LIMIT,
    CONTINUE,
    DATE_RE,
    MTIME,
    Client,
    assert_error,
    request,
    shopper,
    stock,
)

# The servers run against the test database: every test has it set up (in a transaction of its own, which
# the servers never see); a test whose data a server must see commits it (transaction=True).
pytestmark = pytest.mark.django_db


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


