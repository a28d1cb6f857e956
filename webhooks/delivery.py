"""Send the outbox's deliveries: signed POSTs, at least once, in order per ordering key, retried with backoff.

A worker takes due deliveries (a lease: next_attempt_at moved LEASE ahead in the statement that locks them, FOR
UPDATE SKIP LOCKED, so two workers never take one delivery for the same attempt), POSTs them outside any
transaction, then records the attempt and the outcome: any 2xx is delivered; anything else is retried after an
exponential backoff with full jitter until the retry window (24 h from the first try) is over, then dead. A
worker that dies mid-POST leaves its deliveries to be taken again when their lease ends (at least once; the
receiver dedupes by the event's id). Only the oldest pending event of an (endpoint, key) is due, so a coupon's
later event waits until its earlier one is delivered or dead.
"""
from __future__ import annotations

import hashlib
import hmac
import http.client
import json
import logging
import random
import socket
import ssl
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from core.tracing import span

from .addresses import IPAddress, Refused, checked_addresses, parse_url
from .models import Delivery, DeliveryAttempt, DeliveryState, OutboxEvent, WebhookEndpoint

log = logging.getLogger(__name__)

# One deadline for the whole attempt, from before the name is resolved: the lookup, each connect, the TLS
# handshake and every read and write get what is left of it, and the socket is shut when it passes (a slow
# drip). So an attempt never outlives its lease, after which another worker would send the delivery again.
TOTAL_TIMEOUT = 10.0  # seconds one attempt may take in all
CONNECT_TIMEOUT = 3.0  # seconds to connect to one address, at most (and never past the deadline)
MAX_ADDRESSES = 3  # addresses tried at most, in the resolver's order: a name with many silent ones costs 3 connects
READ_TIMEOUT = 5.0  # seconds any one read of the answer may wait
ANSWER_CAP = 64 * 1024  # bytes of the answer read at most; the rest is never read
HEAD_KEPT = 512  # bytes of the answer kept in the attempt's record
LEASE = timedelta(seconds=60)  # several times TOTAL_TIMEOUT: a batch's attempts run at once, then are recorded
RETRY_WINDOW = timedelta(hours=24)
BACKOFF_BASE, BACKOFF_CAP = 10.0, 3600.0  # seconds: the n-th retry waits uniform(0, min(cap, base * 2**n))
CONCURRENCY = 8  # deliveries sent at once by one worker (threads; only the calling thread touches the database)
SIGNATURE_HEADER = "Couponrush-Signature"


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """The Couponrush-Signature header's value: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>."""
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={mac}"


def payload(event: OutboxEvent) -> bytes:
    """The event's JSON body, the same bytes on every attempt: {id, type, created, data}."""
    created = timezone.localtime(event.created_at, timezone.get_fixed_timezone(0)).isoformat()
    return json.dumps({"id": event.pk, "type": event.type, "created": created, "data": event.data},
                      separators=(",", ":"), sort_keys=True).encode()


@dataclass
class Answer:
    status: int | None = None
    head: bytes = b""
    error: str = ""
    address: str = ""
    duration_ms: int = 0

    @property
    def delivered(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


class Deadline:
    """The seconds an attempt has left; an OSError (TimeoutError) once none is left, so a step that would start
    after the deadline fails as a step that ran into it does."""

    def __init__(self, seconds: float) -> None:
        self.at = time.monotonic() + seconds

    def left(self, at_most: float | None = None) -> float:
        left = self.at - time.monotonic()
        if left <= 0:
            raise TimeoutError("the attempt's deadline passed")
        return left if at_most is None else min(left, at_most)


def _connect(addresses: list[IPAddress], port: int, deadline: Deadline) -> tuple[socket.socket, str]:
    """Connect to the first of `addresses` (checked ones, at most MAX_ADDRESSES of them) that answers, each
    given CONNECT_TIMEOUT or what the deadline has left. The address itself, never the name: no second lookup."""
    last: OSError | None = None
    for ip in addresses[:MAX_ADDRESSES]:
        sock = socket.socket(socket.AF_INET6 if ip.version == 6 else socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.settimeout(deadline.left(CONNECT_TIMEOUT))
            sock.connect((str(ip), port))
            return sock, str(ip)
        except OSError as exc:
            sock.close()
            last = exc
    raise last or OSError("no address")


def post(url: str, body: bytes, headers: dict[str, str]) -> Answer:
    """POST `body` to `url`: resolve its host once, check every address (webhooks.addresses), connect to one of
    the first MAX_ADDRESSES (Host header and TLS server name are the URL's host), read at most ANSWER_CAP bytes
    of the answer, all within TOTAL_TIMEOUT from the start, the lookup included. Never raises: failures are the
    answer's error."""
    started = time.monotonic()
    deadline = Deadline(TOTAL_TIMEOUT)
    answer = Answer()
    sock: socket.socket | None = None
    watchdog: threading.Timer | None = None
    try:
        target = parse_url(url)
        addresses = checked_addresses(target, timeout=deadline.left())
        raw, answer.address = _connect(addresses, target.port, deadline)
        sock = raw
        if target.scheme == "https":
            # The ssl module holds the whole handshake to the socket's timeout (a deadline, not per read).
            raw.settimeout(deadline.left())
            sock = ssl.create_default_context().wrap_socket(raw, server_hostname=target.host)
        sock.settimeout(deadline.left(READ_TIMEOUT))
        shut = sock

        def cut() -> None:  # the whole attempt's deadline: a blocked read or write fails at once
            try:
                shut.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

        watchdog = threading.Timer(deadline.left(), cut)
        watchdog.daemon = True
        watchdog.start()
        conn = http.client.HTTPConnection(target.host, target.port, timeout=READ_TIMEOUT)
        conn.sock = sock  # connected above, to the checked address: http.client never resolves the name again
        conn.request("POST", target.path, body=body, headers=headers)
        response = conn.getresponse()
        answer.status = response.status
        answer.head = response.read(ANSWER_CAP)[:HEAD_KEPT]
    except Refused as exc:
        answer.error = f"refused: {exc.message}"
    except (OSError, http.client.HTTPException, ssl.SSLError, ValueError) as exc:
        answer.error = f"{exc.__class__.__name__}: {exc}"[:300] if str(exc) else exc.__class__.__name__
        if time.monotonic() - started >= TOTAL_TIMEOUT - 0.05:
            answer.error = f"timed out after {TOTAL_TIMEOUT:g} s ({answer.error})"[:300]
    finally:
        if watchdog is not None:
            watchdog.cancel()
        if sock is not None:
            try:
                sock.close()
            except OSError:
                pass
    answer.duration_ms = int((time.monotonic() - started) * 1000)
    return answer


_D, _E = Delivery._meta.db_table, OutboxEvent._meta.db_table
# The due heads: pending, due, and no older pending event of the same (endpoint, key). Locked with SKIP LOCKED
# and leased in the same statement; a row another worker leased meanwhile fails the due test when PostgreSQL
# re-reads it under the lock.
_TAKE_SQL = f"""
WITH due AS (
    SELECT d.id FROM {_D} d
    WHERE d.state = 'pending' AND d.next_attempt_at <= statement_timestamp()
      AND NOT EXISTS (SELECT 1 FROM {_D} p WHERE p.endpoint_id = d.endpoint_id AND p.key = d.key
                      AND p.state = 'pending' AND p.event_id < d.event_id)
    ORDER BY d.next_attempt_at, d.id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE {_D} d SET next_attempt_at = statement_timestamp() + %(lease)s::interval, attempts = d.attempts + 1
FROM due WHERE d.id = due.id AND d.state = 'pending'
RETURNING d.id
"""


def take_due(limit: int) -> list[Delivery]:
    """Lease up to `limit` due deliveries (their attempts counted); return them with their event and endpoint."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(_TAKE_SQL, {"limit": limit, "lease": str(LEASE.total_seconds()) + " seconds"})
        ids = [row[0] for row in cursor.fetchall()]
    if not ids:
        return []
    return list(Delivery.objects.select_related("event", "endpoint").filter(pk__in=ids).order_by("id"))


def backoff(attempts: int) -> timedelta:
    """Full jitter: the wait after the `attempts`-th failure, uniform in [0, min(cap, base * 2**(attempts-1))]."""
    return timedelta(seconds=random.uniform(0, min(BACKOFF_CAP, BACKOFF_BASE * 2 ** min(attempts - 1, 20))))


def record(delivery: Delivery, answer: Answer, started_at: datetime) -> str:
    """Write the attempt and the delivery's new state (delivered, retried later, or dead); return the state."""
    now = timezone.now()
    fields: dict[str, Any] = {"last_status": answer.status, "last_error": answer.error[:300]}
    if answer.delivered:
        fields.update(state=DeliveryState.DELIVERED, delivered_at=now, next_attempt_at=now)
    else:
        end = delivery.retry_from + RETRY_WINDOW
        if now >= end:
            fields.update(state=DeliveryState.DEAD, next_attempt_at=now)
        else:
            fields.update(next_attempt_at=min(now + backoff(delivery.attempts), end))
    with transaction.atomic():
        DeliveryAttempt.objects.create(
            delivery=delivery, number=delivery.attempts, started_at=started_at, duration_ms=answer.duration_ms,
            address=answer.address, status_code=answer.status,
            response_head=answer.head.decode("utf-8", "replace"), error=answer.error[:300])
        # Only while still ours: pending, with this attempt's number.
        ours = Delivery.objects.filter(pk=delivery.pk, state=DeliveryState.PENDING, attempts=delivery.attempts)
        ours.update(**fields)
    return str(fields.get("state", DeliveryState.PENDING))


def send(delivery: Delivery) -> tuple[Answer, datetime]:
    """POST one delivery, signed now with its endpoint's secret (which goes nowhere else)."""
    body = payload(delivery.event)
    endpoint: WebhookEndpoint = delivery.endpoint
    started_at = timezone.now()
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "couponrush-webhooks/1",
        SIGNATURE_HEADER: signature(endpoint.secret, int(time.time()), body),
        "Couponrush-Event-Id": str(delivery.event_id),
        "Couponrush-Event-Type": delivery.event.type,
    }
    return post(endpoint.url, body, headers), started_at


@dataclass
class DeliveryReport:
    taken: int = 0
    delivered: int = 0
    retried: int = 0
    dead: int = 0
    states: list[str] = field(default_factory=list, repr=False)


def deliver_due(*, max_seconds: float = 20.0, concurrency: int = CONCURRENCY) -> DeliveryReport:
    """Send due deliveries, `concurrency` at a time, until none is due or `max_seconds` passed. Safe to run in
    several workers at once."""
    report = DeliveryReport()
    deadline = time.monotonic() + max_seconds
    with span("couponrush.webhooks.deliver") as traced, ThreadPoolExecutor(concurrency,
                                                                          thread_name_prefix="webhook") as pool:
        while time.monotonic() < deadline:
            batch = take_due(concurrency)
            if not batch:
                break
            report.taken += len(batch)
            for delivery, (answer, started_at) in zip(batch, pool.map(send, batch), strict=True):
                state = record(delivery, answer, started_at)
                report.states.append(state)
                if state == DeliveryState.DELIVERED:
                    report.delivered += 1
                elif state == DeliveryState.DEAD:
                    report.dead += 1
                    log.warning("webhook delivery %s of event %s to endpoint %s is dead after %d attempts: %s",
                                delivery.pk, delivery.event_id, delivery.endpoint_id, delivery.attempts,
                                answer.error or f"HTTP {answer.status}")
                else:
                    report.retried += 1
                    log.info("webhook delivery %s of event %s to endpoint %s failed (attempt %d): %s",
                             delivery.pk, delivery.event_id, delivery.endpoint_id, delivery.attempts,
                             answer.error or f"HTTP {answer.status}")
        traced.set(taken=report.taken, delivered=report.delivered, retried=report.retried, dead=report.dead)
    return report


def delivery_retry(*, delivery: Delivery) -> bool:
    """An operator's retry of a dead delivery: pending again now, with a new retry window. False if not dead."""
    now = timezone.now()
    return bool(Delivery.objects.filter(pk=delivery.pk, state=DeliveryState.DEAD).update(
        state=DeliveryState.PENDING, next_attempt_at=now, retry_from=now))
