"""The web application: what config/server.py (the web server of `make run`) answers every request with, and
an ASGI application (`application`) for any ASGI server (`granian --interface asgi config.asgi:application`).

GET /healthz is answered on the event loop too: a liveness probe needs nothing from Django, and it is the
server's bare JSON endpoint that the benchmarks compare the claim with.

POST /api/v1/campaigns/{id}/claim is answered on the worker's event loop: the same checks and answer as every
other way in (orders.apis.claim_answer_async shares them with the Django view), with the claim script sent
through the loop's auto-pipelined Redis connection (campaigns/redis_async.py), so that a hundred shoppers'
claims cost Redis one read and one write instead of a hundred. Everything else is Django, called as a WSGI
application in a pool of threads, exactly as a WSGI server calls it (Django's own ASGI handler measured 3-7x
slower than its WSGI one here).
"""
from __future__ import annotations

import asyncio
import io
import logging
import os
import re
import sys
import time
from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import unquote_to_bytes

import orjson
from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.dev")
django_application = get_wsgi_application()

from django.conf import settings  # noqa: E402  (after Django is set up: the imports below load the apps)

from orders.apis import claim_answer_async, claim_answered  # noqa: E402
from orders.services import known_sold_out  # noqa: E402

from .api import CONTENT_LENGTH_RE, ID_RE, MAX_BODY_BYTES, body_of  # noqa: E402
from .auth import authenticate  # noqa: E402
from .logs import request_id_from, request_id_or_new, request_id_var  # noqa: E402
from .server import JSON_HEADERS, Response, error_response  # noqa: E402  (the HTTP server's, free of Django)

log = logging.getLogger(__name__)
CLAIM_PATH = re.compile(r"/api/v1/campaigns/([^/]+)/claim")
_ALIVE = orjson.dumps(body_of(0, "ok"))
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


class Application:
    """An ASGI application: the claim on the event loop, the rest through Django's WSGI handler in threads."""

    def __init__(self, wsgi: Any, threads: int) -> None:
        self.wsgi = wsgi
        self.executor = ThreadPoolExecutor(threads, thread_name_prefix="django")
        # Django reads at most this much of a body (a larger one is refused by its Content-Length first).
        self.body_limit = max(settings.DATA_UPLOAD_MAX_MEMORY_SIZE, MAX_BODY_BYTES)

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            path = scope["path"]
            match = CLAIM_PATH.fullmatch(path)
            if match is not None and scope["method"] == "POST":
                await self.claim(scope, receive, send, match.group(1))
            elif path == "/healthz" and scope["method"] in ("GET", "HEAD"):
                await self.alive(scope, send)
            else:
                await self.django(scope, receive, send)
        elif kind == "lifespan":
            await lifespan(receive, send)
        # websockets: not served (returning without accepting closes the connection)

    async def claim(self, scope: dict[str, Any], receive: Receive, send: Send, campaign_id_text: str) -> None:
        meta = environ_headers(scope)
        body = await read_body(receive, meta, MAX_BODY_BYTES)
        await respond(send, *await claim_response(meta, campaign_id_text, body))

    async def alive(self, scope: dict[str, Any], send: Send) -> None:
        await respond(send, *alive_response(environ_headers(scope)))

    async def django(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        meta = environ_headers(scope)
        body = await read_body(receive, meta, self.body_limit)
        raw_path = scope.get("raw_path")
        server = scope.get("server") or ("localhost", 80)
        await respond(send, *await self.django_response(
            meta, body, method=scope["method"], path=wsgi_path(raw_path) if raw_path else scope["path"],
            query=scope["query_string"], server=(str(server[0]), int(server[1] or 80)),
            version=scope.get("http_version", "1.1"), scheme=scope.get("scheme", "http")))

    async def django_response(self, meta: dict[str, Any], body: bytes, *, method: str, path: str, query: bytes,
                              server: tuple[str, int], version: str, scheme: str) -> Response:
        """Django's answer to a request whose headers headers_environ() gave (meta, completed here into its
        WSGI environ) and whose body was read up to body_limit + 1 bytes (b"" when its Content-Length is over
        the limit: Django refuses it by that)."""
        if len(body) > self.body_limit:  # a chunked body over the limit
            return error_response(413, "payload_too_large", "The request body is too large.")
        meta.setdefault("CONTENT_LENGTH", str(len(body)))  # a chunked body, now read whole
        meta.update({
            "REQUEST_METHOD": method,
            "SCRIPT_NAME": "",
            "PATH_INFO": path,
            "QUERY_STRING": query.decode("latin-1"),
            "SERVER_NAME": server[0],
            "SERVER_PORT": str(server[1]),
            "SERVER_PROTOCOL": f"HTTP/{version}",
            "wsgi.version": (1, 0),
            "wsgi.url_scheme": scheme,
            "wsgi.input": io.BytesIO(body),
            "wsgi.errors": sys.stderr,
            "wsgi.multithread": True,
            "wsgi.multiprocess": True,
            "wsgi.run_once": False,
        })
        return await self.wsgi_response(meta)

    def wsgi_response(self, environ: dict[str, Any]) -> Awaitable[Response]:
        """Django's answer to a WSGI environ, from a thread of the pool."""
        return asyncio.get_running_loop().run_in_executor(self.executor, self.call_wsgi, environ)

    def call_wsgi(self, environ: dict[str, Any]) -> Response:
        started: list[Any] = []
        chunks: list[bytes] = []

        def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            started[:] = [status, headers]
            return chunks.append  # the legacy write() callable

        result = self.wsgi(environ, start_response)
        try:
            chunks.extend(result)
        finally:
            close = getattr(result, "close", None)
            if close is not None:
                close()
        headers = [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in started[1]]
        return int(started[0].split(" ", 1)[0]), headers, b"".join(chunks)


async def claim_response(meta: dict[str, Any], campaign_id_text: str, body: bytes) -> Response:
    """The claim's whole answer to a request with these headers (a WSGI environ's) and body: what every web
    server of the project sends (this ASGI application, config/server.py)."""
    request_id = request_id_from(meta)
    token = request_id_var.set(request_id)
    try:
        status, answer, headers = await claim_answer_async(meta, campaign_id_text, body)
    except Exception:  # never a bare 500 page: the contract's JSON, and the traceback in the log
        log.exception("claim failed")
        status, answer, headers = 500, body_of(500, "server_error", "Internal error."), {}
    finally:
        request_id_var.reset(token)
    extra = [(name.lower().encode(), value.encode()) for name, value in headers.items()]
    return status, [*JSON_HEADERS, (b"x-request-id", request_id.encode()), *extra], orjson.dumps(answer)


# sold_out_response(): the request target it takes (the campaign id as parse_id takes it, no query, no
# percent-encoding), and the headers it reads, each by its slot. Anything in the last slot (an Idempotency-Key,
# a chunked body) makes it step aside.
_PLAIN_CLAIM_TARGET = re.compile(f"/api/v1/campaigns/({ID_RE.pattern})/claim".encode())
_USER, _TOKEN, _TYPE, _LENGTH, _REQUEST_ID, _OTHER = range(6)
_PLAIN_CLAIM_HEADERS = {b"x-user-id": _USER, b"x-token": _TOKEN, b"content-type": _TYPE, b"content-length": _LENGTH,
                        b"x-request-id": _REQUEST_ID, b"idempotency-key": _OTHER, b"transfer-encoding": _OTHER}


def sold_out_response(target: bytes, headers: Iterable[tuple[bytes, bytes]], body: bytes | bytearray
                      ) -> Response | None:
    """claim_response()'s answer, decided from the raw request without building its environ, when that answer
    is sold_out from this process's sold-out flag (orders.services.known_sold_out): a POST to the plain
    target of a campaign the flag covers, a valid token, no Idempotency-Key, and no body or the body "{}".

    None for every other request, and for any doubt (a header twice, another media type, a refusal of any
    kind): claim_response() answers those, through the one implementation of the claim's checks. Where this
    answers, it is claim_response()'s own answer (tests/test_sold_out_at_once.py compares the two over many
    requests), counted the same way. config/server.py answers with it in the parser's callback
    (Worker.answer_at_once): a sold-out claim cost the server 80 us of CPU instead of 104 us (README.md,
    Benchmarks).
    """
    match = _PLAIN_CLAIM_TARGET.fullmatch(target)
    if match is None:
        return None
    started = time.perf_counter()
    known = known_sold_out(int(match.group(1)), None)
    if known is None:
        return None
    found: list[bytes | None] = [None] * 6
    slots = _PLAIN_CLAIM_HEADERS
    for name, value in headers:
        slot = slots.get(name)
        if slot is not None:
            if found[slot] is not None:  # twice (the environ would join them), or a key, or a chunked body
                return None
            found[slot] = value
    user, token, media_type, length, request_id, other = found
    if user is None or token is None or other is not None:
        return None
    if body:
        if body != b"{}" or length != b"2" or media_type not in (None, b"application/json"):
            return None
    elif length not in (None, b"0"):
        return None
    if authenticate(user.decode("latin-1"), token.decode("latin-1")) is None:
        return None
    status, answer, _ = claim_answered(known, started)
    incoming = request_id.decode("latin-1") if request_id is not None else None
    return status, [*JSON_HEADERS, (b"x-request-id", request_id_or_new(incoming).encode())], orjson.dumps(answer)


def alive_response(meta: dict[str, Any]) -> Response:
    """GET /healthz: the process is alive when its event loop answers (the same body as the Django view;
    readiness, which needs the stores, is /readyz)."""
    return 200, [*JSON_HEADERS, (b"x-request-id", request_id_from(meta).encode())], _ALIVE


async def respond(send: Send, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


def environ_headers(scope: dict[str, Any]) -> dict[str, Any]:
    """The request's headers as a WSGI environ holds them (HTTP_X_USER_ID, CONTENT_TYPE, ...), and its peer."""
    client = scope.get("client")
    return headers_environ(scope["headers"], str(client[0]) if client else "")


def headers_environ(headers: Iterable[tuple[bytes, bytes]], client: str) -> dict[str, Any]:
    """Raw header pairs as a WSGI environ holds them, and the peer's address as REMOTE_ADDR.

    Values are the raw bytes as latin-1 characters, as in WSGI. A header whose name has an underscore is
    dropped (as nginx does): X_User_Id must not pass for X-User-Id.
    """
    meta: dict[str, Any] = {}
    keys = _environ_keys
    for raw_name, raw_value in headers:
        key = keys.get(raw_name, "")  # "": not seen yet
        if key == "":
            key = _environ_key(raw_name)
        if key is None:
            continue
        value = raw_value.decode("latin-1")
        meta[key] = f"{meta[key]},{value}" if key in meta else value
    meta["REMOTE_ADDR"] = client
    return meta


_environ_keys: dict[bytes, str | None] = {}  # a header's raw name -> its environ key (None: dropped)


def _environ_key(raw_name: bytes) -> str | None:
    """The environ key of a header name (None for a name with an underscore), remembered: a request's dozen
    header names are the same as the last request's."""
    name = raw_name.decode("latin-1")
    key: str | None = None
    if "_" not in name:
        key = name.upper().replace("-", "_")
        if key not in ("CONTENT_TYPE", "CONTENT_LENGTH"):
            key = "HTTP_" + key
    if len(_environ_keys) >= 1024:  # names a client made up: remember a bounded number
        _environ_keys.clear()
    _environ_keys[raw_name] = key
    return key


def wsgi_path(raw_path: bytes) -> str:
    """A request's percent-encoded path as WSGI's PATH_INFO holds it: the decoded bytes as latin-1."""
    return (unquote_to_bytes(raw_path) if b"%" in raw_path else raw_path).decode("latin-1")


async def read_body(receive: Receive, meta: dict[str, Any], limit: int) -> bytes:
    """Read a body of at most `limit` bytes: b"" when Content-Length says it is larger (the caller refuses
    it by its Content-Length, unread), the first limit + 1 bytes of a chunked body that is larger.

    A body of a known length is read until that many bytes are in: granian hands a body over as a message
    with more_body=True and then an empty last one, and waiting for that one costs a second trip through
    the server per request (a fifth of a claim's CPU)."""
    length = meta.get("CONTENT_LENGTH")
    expected = -1  # unknown: read until the last message
    if length is not None:
        if CONTENT_LENGTH_RE.fullmatch(length) is None or int(length) > limit:
            return b""
        if "HTTP_TRANSFER_ENCODING" not in meta:  # both: the server reads it as chunked, so do we
            expected = int(length)
            if expected == 0:
                return b""
    received = b""
    while True:
        message = await receive()
        received += message.get("body", b"")
        if len(received) > limit or not message.get("more_body", False) or len(received) == expected:
            return received[: limit + 1]


application = Application(django_application, threads=int(os.environ.get("COUPONS_WEB_THREADS", "16")))
