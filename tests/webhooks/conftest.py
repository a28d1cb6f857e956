"""A real HTTP receiver on loopback for the webhook tests, and endpoints that point at it."""
from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from webhooks.models import WebhookEndpoint
from webhooks.services import endpoint_add

SECRET = "whsec_test-secret-0123456789"


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes

    @property
    def event(self) -> dict[str, Any]:
        return json.loads(self.body)


@dataclass
class Receiver:
    """An HTTP server in a thread of the test: it records every POST and answers what `answer` says."""

    url: str = ""
    received: list[Received] = field(default_factory=list)
    answer: Callable[[Received], int] = lambda got: 200
    lock: threading.Lock = field(default_factory=threading.Lock)

    def events(self) -> list[dict[str, Any]]:
        with self.lock:
            return [r.event for r in self.received]


def serve(receiver: Receiver) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            body = self.rfile.read(int(self.headers["Content-Length"]))
            got = Received(dict(self.headers.items()), body)
            with receiver.lock:
                receiver.received.append(got)
            status = receiver.answer(got)
            self.send_response(status)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    found = Receiver()
    server = serve(found)
    found.url = f"http://127.0.0.1:{server.server_address[1]}/hooks/couponrush"
    try:
        yield found
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def allow_private(settings: Any) -> None:
    settings.COUPONS_WEBHOOK_ALLOW_PRIVATE = True


@pytest.fixture
def endpoint(allow_private: None, receiver: Receiver, db: Any) -> WebhookEndpoint:
    return endpoint_add(url=receiver.url, secret=SECRET)


def verify_signature(got: Received, secret: str = SECRET) -> bool:
    """The receiver's check, written from the contract alone: t=<unix seconds>,v1=<hex HMAC-SHA256(secret,
    "<t>.<raw body>")>."""
    parts = dict(item.split("=", 1) for item in got.headers["Couponrush-Signature"].split(","))
    expected = hmac.new(secret.encode(), parts["t"].encode() + b"." + got.body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, parts["v1"])


@contextlib.contextmanager
def receiver_down(receiver: Receiver) -> Iterator[None]:
    """The receiver answers 503 to everything while the block runs."""
    before = receiver.answer
    receiver.answer = lambda got: 503
    try:
        yield
    finally:
        receiver.answer = before
