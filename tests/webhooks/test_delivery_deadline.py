"""Webhook delivery's one deadline: the lookup, the connects and the answer all inside TOTAL_TIMEOUT, which stays
well inside the lease, so a receiver that never answers costs one failed attempt, retried later, never a second
send of the same delivery in parallel.

The connects are real sockets on loopback: a listener whose accept queue is full drops every further SYN (Linux,
whatever tcp_syncookies says), so a connect to it hangs as one to a blackholed address does. Only the name server
is this test's (socket.getaddrinfo stubbed): it hands out as many of those listeners' addresses as a test wants.
"""
from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from webhooks import addresses as webhook_addresses
from webhooks import delivery
from webhooks.models import Delivery, DeliveryState, OutboxEvent, WebhookEndpoint

from .conftest import SECRET

NAME = "hooks.shop.example"


@contextlib.contextmanager
def silent_addresses(count: int, first: int = 2) -> Iterator[tuple[list[str], int]]:
    """`count` loopback addresses (127.0.0.<first>...) listening on one port whose connects never complete: each
    listener's accept queue (listen(0): one connection) is filled by a connection nobody accepts."""
    for _ in range(20):  # the port must be free on every address
        listeners: list[socket.socket] = []
        fillers: list[socket.socket] = []
        try:
            port = 0
            for k in range(first, first + count):
                listener = socket.socket()
                listeners.append(listener)
                listener.bind((f"127.0.0.{k}", port))
                listener.listen(0)
                port = listener.getsockname()[1]
        except OSError:
            for sock in listeners:
                sock.close()
            continue
        break
    else:
        raise RuntimeError("no port free on every address")
    try:
        addresses = [listener.getsockname()[0] for listener in listeners]
        for ip in addresses:
            while True:  # fill the queue until a connect hangs
                filler = socket.socket()
                filler.settimeout(0.05)  # a loopback connect that is let in completes in microseconds
                try:
                    filler.connect((ip, port))
                except OSError:
                    filler.close()
                    break
                fillers.append(filler)
        yield addresses, port
    finally:
        for sock in fillers + listeners:
            sock.close()


def resolving(monkeypatch: pytest.MonkeyPatch, name: str, addresses: list[str]) -> None:
    real = socket.getaddrinfo

    def fake(host, port, *args, **kwargs):  # this test's name server
        if host == name:
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (ip, port)) for ip in addresses]
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", fake)


@pytest.fixture
def short_deadline(monkeypatch: pytest.MonkeyPatch, allow_private: None) -> float:
    """A test's pace: a 2 s attempt, 1 s connects, a 3 s lease."""
    monkeypatch.setattr(delivery, "TOTAL_TIMEOUT", 2.0)
    monkeypatch.setattr(delivery, "CONNECT_TIMEOUT", 1.0)
    monkeypatch.setattr(delivery, "LEASE", timedelta(seconds=3))
    return 2.0


def timed_post(url: str) -> tuple[delivery.Answer, float]:
    started = time.monotonic()
    answer = delivery.post(url, b"{}", {"Content-Type": "application/json"})
    return answer, time.monotonic() - started


def test_the_deadline_is_well_inside_the_lease() -> None:
    # A batch's attempts run at once and are recorded after the slowest: it must end long before the lease.
    assert delivery.TOTAL_TIMEOUT * 3 <= delivery.LEASE.total_seconds()
    assert delivery.MAX_ADDRESSES * delivery.CONNECT_TIMEOUT <= delivery.TOTAL_TIMEOUT


def test_a_receiver_that_accepts_and_never_answers_fails_at_the_deadline(short_deadline) -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    accepted: list[socket.socket] = []

    def accept() -> None:
        with contextlib.suppress(OSError):
            while True:
                accepted.append(server.accept()[0])  # read nothing, answer nothing

    threading.Thread(target=accept, daemon=True).start()
    try:
        answer, took = timed_post(f"http://127.0.0.1:{server.getsockname()[1]}/h")
    finally:
        server.close()
        for conn in accepted:
            conn.close()

    assert answer.status is None and "timed out" in answer.error and answer.address == "127.0.0.1"
    assert short_deadline - 0.1 <= took < short_deadline + 1.0
    assert len(accepted) == 1


def test_a_name_with_many_silent_addresses_ends_at_the_deadline(short_deadline, monkeypatch) -> None:
    # Eight addresses whose connects hang: one connect each would be 8 s; the deadline ends it at 2 s.
    with silent_addresses(8) as (addresses, port):
        resolving(monkeypatch, NAME, addresses)
        answer, took = timed_post(f"http://{NAME}:{port}/h")

    assert answer.status is None and "timed out" in answer.error and answer.address == ""
    assert took < short_deadline + 1.0


def test_at_most_three_addresses_are_tried(short_deadline, monkeypatch) -> None:
    # The first three addresses hang, the fourth is a live listener: it is never connected to, and the three
    # connects are the attempt's whole time.
    monkeypatch.setattr(delivery, "CONNECT_TIMEOUT", 0.3)
    with silent_addresses(3, first=10) as (addresses, port), socket.socket() as fourth:
        fourth.bind(("127.0.0.13", port))
        fourth.listen()
        fourth.setblocking(False)
        resolving(monkeypatch, NAME, [*addresses, "127.0.0.13"])
        answer, took = timed_post(f"http://{NAME}:{port}/h")
        with pytest.raises(BlockingIOError):  # no connection is waiting to be accepted
            fourth.accept()

    assert answer.status is None and "timed out" in answer.error and answer.address == ""
    assert 0.8 <= took < 1.5  # three connects of 0.3 s, not a fourth


def test_a_name_server_that_never_answers_fails_at_the_deadline(short_deadline, monkeypatch) -> None:
    release = threading.Event()

    def hanging(host, port, *args, **kwargs):  # a lookup that blocks for as long as the system resolver may
        release.wait(8)
        raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")

    monkeypatch.setattr(socket, "getaddrinfo", hanging)
    try:
        answer, took = timed_post(f"http://{NAME}/h")
        assert answer.status is None and "did not resolve" in answer.error
        assert took < short_deadline + 0.5
        with pytest.raises(webhook_addresses.Unresolvable, match="did not resolve within 0.5 s"):
            webhook_addresses.resolve(NAME, 80, 0.5)  # registration's lookup is bounded the same way
    finally:
        release.set()


def test_every_address_connected_to_is_a_checked_one(settings, monkeypatch) -> None:
    # A name whose later addresses are refused is refused whole, before any connect: the 3-address cap never
    # lets an unchecked address through.
    settings.COUPONS_WEBHOOK_ALLOW_PRIVATE = False
    resolving(monkeypatch, NAME, ["93.184.215.14", "93.184.215.15", "93.184.215.16", "169.254.169.254"])
    answer, took = timed_post(f"http://{NAME}/h")
    assert answer.error.startswith("refused:") and "link-local" in answer.error and answer.address == ""
    assert took < 1.0


@pytest.mark.django_db(transaction=True)
def test_a_silent_receiver_is_one_failed_attempt_never_sent_again_in_parallel(short_deadline, monkeypatch) -> None:
    # Given a delivery to a name with many silent addresses, and a backoff that keeps it from being due again
    monkeypatch.setattr(delivery, "backoff", lambda attempts: timedelta(minutes=10))
    with silent_addresses(8, first=30) as (addresses, port):
        resolving(monkeypatch, NAME, addresses)
        endpoint = WebhookEndpoint.objects.create(url=f"http://{NAME}:{port}/h", secret=SECRET,
                                                  event_types=["coupon.issued"])
        now = timezone.now()
        event = OutboxEvent.objects.create(type="coupon.issued", key="coupon:1", campaign_id=1, data={},
                                           created_at=now)
        Delivery.objects.create(event=event, endpoint=endpoint, key=event.key, next_attempt_at=now, retry_from=now,
                                created_at=now)
        reports: list[delivery.DeliveryReport] = []

        def first_worker() -> None:
            try:
                reports.append(delivery.deliver_due(max_seconds=30))
            finally:
                connection.close()

        # When one worker takes it and a second worker looks for due deliveries after the lease has passed
        worker = threading.Thread(target=first_worker)
        started = time.monotonic()
        worker.start()
        time.sleep(delivery.LEASE.total_seconds() + 0.5)
        second = delivery.deliver_due(max_seconds=30)
        worker.join(30)
        took = time.monotonic() - started

    # Then the first attempt ended (and was recorded) within its deadline, long before the lease: the second
    # worker found nothing to send
    assert not worker.is_alive() and reports and reports[0].taken == 1 and reports[0].retried == 1
    assert second.taken == 0
    row = Delivery.objects.get()
    assert row.state == DeliveryState.PENDING and row.attempts == 1 and row.next_attempt_at > timezone.now()
    attempt = row.attempt_log.get()
    assert "timed out" in attempt.error and attempt.status_code is None
    assert attempt.duration_ms < (short_deadline + 1.0) * 1000
    assert took < delivery.LEASE.total_seconds() + 5
