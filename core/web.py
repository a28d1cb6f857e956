"""The web application's layers below the apps, each a small object of the web server's interface
(webserver.interface: `body_limit`, `answer(request)`, `close()`) that answers its own route and hands every
other request on:

    HealthCheck(DjangoThreads(...))      GET /healthz on the event loop; everything else Django's

An app adds its own layer on top (orders.door.ClaimDoor); config/asgi.py stacks them, RouteBodyLimits gives the
stack its routes' body limits (config/body_limits.py: one table that the server, asgi() and DjangoThreads
read), and asgi() turns the stack into an ASGI application for any ASGI server (uvicorn). Django is called as
a WSGI application in a pool of threads, exactly as a WSGI server calls it (Django's own ASGI handler measured
3-7x slower here). A StreamingHttpResponse is handed on in parts (ThreadedParts), so a download of any size
takes constant memory.
"""
from __future__ import annotations

import asyncio
import io
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from concurrent.futures import CancelledError, ThreadPoolExecutor
from typing import Any

import orjson

from webserver.interface import (
    JSON_HEADERS,
    Application,
    BodyLimits,
    Request,
    Response,
    body_limit_of,
    error_response,
    wsgi_path,
)

from .errors import BadHost
from .http import body_of, declared_length, error_body, host_allowed
from .logs import request_id_or_new

Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


def headers_environ(headers: Iterable[tuple[bytes, bytes]], client: str,
                    only: Mapping[bytes, str] | None = None) -> dict[str, Any]:
    """Raw header pairs as a WSGI environ holds them (HTTP_X_USER_ID, CONTENT_TYPE, ...), and the peer's
    address as REMOTE_ADDR; with `only` (raw name -> environ key), just those headers (a caller that reads a
    few of a request's dozen: the claim).

    Values are the raw bytes as latin-1 characters, as in WSGI, without the whitespace around them (RFC 9110
    5.5: not part of the value; the parser drops only the leading), so `Idempotency-Key: K ` is the key K; a
    header twice, its values joined by commas. A header whose name has an underscore is dropped (as nginx
    does): X_User_Id must not pass for X-User-Id.
    """
    meta: dict[str, Any] = {}
    keys: Mapping[bytes, str | None] = _environ_keys if only is None else only
    for raw_name, raw_value in headers:
        key = keys.get(raw_name, "")  # "": not seen yet (or not wanted)
        if key == "":
            key = _environ_key(raw_name) if only is None else None
        if key is None:
            continue
        value = raw_value.decode("latin-1").strip(" \t")
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


def request_id_header(headers: Iterable[tuple[bytes, bytes]]) -> tuple[bytes, bytes]:
    """The answer's X-Request-ID: the client's when it sent a usable one, else a new one."""
    incoming = None
    for name, value in headers:
        if name == b"x-request-id":
            incoming = value.decode("latin-1")
    return b"x-request-id", request_id_or_new(incoming).encode()


class DjangoThreads:
    """Django's WSGI handler, called in a pool of threads: the answer to everything no layer above answers."""

    def __init__(self, wsgi: Any, threads: int, body_limits: BodyLimits) -> None:
        self.wsgi = wsgi
        self.executor = ThreadPoolExecutor(threads, thread_name_prefix="django")
        # Django reads at most its route's limit: a larger body is a 413 before Django runs
        self.body_limits = body_limits
        self.body_limit = body_limits.default

    def body_limit_for(self, path: str) -> int:
        return self.body_limits(path)

    async def answer(self, request: Request) -> Response:
        meta = headers_environ(request.headers, request.client)
        length = declared_length(meta.get("CONTENT_LENGTH") or "0")
        limit = self.body_limits(request.path) if length or request.body else self.body_limit
        if len(request.body) > limit or (  # a chunked body over the limit, or one the server never read
                length is not None and length > limit):
            # Refused here for every view: Django would see an empty body (a form without its CSRF token: 403)
            return error_response(413, "payload_too_large", "The request body is too large.")
        meta.setdefault("CONTENT_LENGTH", str(len(request.body)))  # a chunked body, now read whole
        meta.update({  # wsgi.input: io.BytesIO shares the body's bytes (no copy until it is written to)
            "REQUEST_METHOD": request.method,
            "SCRIPT_NAME": "",
            "PATH_INFO": request.path,
            "QUERY_STRING": request.query.decode("latin-1"),
            "SERVER_NAME": request.server[0],
            "SERVER_PORT": str(request.server[1]),
            "SERVER_PROTOCOL": f"HTTP/{request.version}",
            "wsgi.version": (1, 0),
            "wsgi.url_scheme": request.scheme,
            "wsgi.input": io.BytesIO(request.body),
            "wsgi.errors": sys.stderr,
            "wsgi.multithread": True,
            "wsgi.multiprocess": True,
            "wsgi.run_once": False,
        })
        meta["couponrush.loop"] = loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.executor, self.call_wsgi, meta)

    def call_wsgi(self, environ: dict[str, Any]) -> Response:
        started: list[Any] = []
        chunks: list[bytes] = []

        def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            started[:] = [status, headers]
            return chunks.append  # the legacy write() callable

        result = self.wsgi(environ, start_response)
        if getattr(result, "streaming", False):  # a StreamingHttpResponse: its parts are sent as they are made
            headers = [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in started[1]]
            return int(started[0].split(" ", 1)[0]), headers, ThreadedParts(result, asyncio_loop(environ))
        try:
            chunks.extend(result)
        finally:
            close = getattr(result, "close", None)
            if close is not None:
                close()
        headers = [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in started[1]]
        return int(started[0].split(" ", 1)[0]), headers, b"".join(chunks)

    def close(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)


def asyncio_loop(environ: dict[str, Any]) -> asyncio.AbstractEventLoop:
    return environ["couponrush.loop"]


class ThreadedParts:
    """The parts of a streaming WSGI answer, made in a thread of their own and handed to the event loop.

    The whole iteration and the answer's close() run in that one thread, as under a WSGI server (Django's
    database connection of the download stays in one thread and is closed by close()), not in the pool: a slow
    client must not hold a pool thread. At most QUEUED parts wait for the client (constant memory). aclose()
    stops the thread at its next part (the client left).
    """

    QUEUED = 4

    def __init__(self, result: Any, loop: asyncio.AbstractEventLoop) -> None:
        self.result, self.loop = result, loop
        self.queue: asyncio.Queue[Any] = asyncio.Queue(self.QUEUED)
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self.parts()

    async def parts(self) -> AsyncIterator[bytes]:
        self.thread = threading.Thread(target=self.make, name="django-stream", daemon=True)
        self.thread.start()
        while True:
            item = await self.queue.get()
            if item is None:
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    def make(self) -> None:
        try:
            for part in self.result:
                if not self.hand_over(part):
                    return
            self.hand_over(None)
        except Exception as exc:  # noqa: BLE001 - handed to the server, which logs it and cuts the answer
            self.hand_over(exc)
        finally:
            self.result.close()

    def hand_over(self, item: Any) -> bool:
        """Put one item in the queue, waiting while it is full; False once the server stopped reading."""
        if self.stop.is_set():
            return False
        try:
            asyncio.run_coroutine_threadsafe(self.queue.put(item), self.loop).result()
        except (RuntimeError, CancelledError):  # the loop is closed or stopping: the worker is going
            return False
        return not self.stop.is_set()

    async def aclose(self) -> None:
        self.stop.set()
        while not self.queue.empty():  # a part being handed over gets in; the thread then sees the stop
            self.queue.get_nowait()
        if self.thread is None:  # never iterated (a HEAD request): close the answer all the same
            await asyncio.get_running_loop().run_in_executor(None, self.result.close)


_ALIVE = orjson.dumps(body_of(0, "ok"))
_BAD_HOST = orjson.dumps(error_body(BadHost()))


def host_of(request: Request) -> str:
    """The request's host as Django's request.get_host() reads it: its Host header (a header twice: the values
    joined by a comma, as in the environ, which no host name passes), else the server's name and port."""
    host: str | None = None
    for name, value in request.headers:
        if name == b"host":
            text = value.decode("latin-1").strip(" \t")
            host = text if host is None else f"{host},{text}"
    return server_host(request) if host is None else host


def server_host(request: Request) -> str:
    """The host of a request without a Host header (HTTP/1.0), as PEP 3333 rebuilds it."""
    name, port = request.server
    return name if port == (443 if request.scheme == "https" else 80) else f"{name}:{port}"


def bad_host_response(request_id_header: tuple[bytes, bytes]) -> Response:
    """The answer to a request whose host is not ours (core.http.host_allowed): the JSON 400 that Django's routes
    give (core.api.HostCheckMiddleware), on the event loop's doors."""
    return 400, [*JSON_HEADERS, request_id_header], _BAD_HOST


class HealthCheck:
    """GET /healthz answered at once: the process is alive when its event loop answers (the same body as the
    Django view; readiness, which needs the stores, is /readyz). A Host not ours is the JSON 400, as on Django's
    routes."""

    def __init__(self, inner: Application, path: str = "/healthz") -> None:
        self.inner, self.path = inner, path
        self.body_limit = inner.body_limit

    def answer(self, request: Request) -> Response | Awaitable[Response]:
        if request.path == self.path and request.method in ("GET", "HEAD"):
            if not host_allowed(host_of(request)):
                return bad_host_response(request_id_header(request.headers))
            return 200, [*JSON_HEADERS, request_id_header(request.headers)], _ALIVE
        return self.inner.answer(request)

    def close(self) -> None:
        self.inner.close()


class RouteBodyLimits:
    """The stack with its routes' body limits: the web server (and asgi()) asks body_limit_for(path) once a
    request, at its head; a path no route names keeps the stack's own body_limit (the claim door's included)."""

    def __init__(self, inner: Application, body_limits: BodyLimits) -> None:
        self.inner, self.body_limits = inner, body_limits
        self.body_limit = inner.body_limit

    def body_limit_for(self, path: str) -> int:
        return self.body_limits(path, self.body_limit)

    def answer(self, request: Request) -> Response | Awaitable[Response]:
        return self.inner.answer(request)

    def close(self) -> None:
        self.inner.close()


def asgi(app: Application) -> Callable[[dict[str, Any], Receive, Send], Awaitable[None]]:
    """The ASGI application of a stack of layers: its body read whole (up to its route's limit + 1 bytes,
    webserver.interface.body_limit_of), then answered as the web server answers it."""
    limit_of = body_limit_of(app)

    async def application(scope: dict[str, Any], receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            await _lifespan(receive, send)
            return
        if kind != "http":
            return  # websockets: not served (returning without accepting closes the connection)
        headers = scope["headers"]
        client = scope.get("client")
        server = scope.get("server") or ("localhost", 80)
        raw_path = scope.get("raw_path")
        path = wsgi_path(raw_path) if raw_path else scope["path"]
        request = Request(scope["method"], path, scope["query_string"], headers,
                          await read_body(receive, headers, limit_of(path)),
                          str(client[0]) if client else "", (str(server[0]), int(server[1] or 80)),
                          scope.get("http_version", "1.1"), scope.get("scheme", "http"))
        answer = app.answer(request)
        status, response_headers, body = answer if isinstance(answer, tuple) else await answer
        await send({"type": "http.response.start", "status": status, "headers": response_headers})
        if isinstance(body, bytes):
            await send({"type": "http.response.body", "body": body})
            return
        try:
            async for part in body:
                await send({"type": "http.response.body", "body": part, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        finally:
            await body.aclose()

    return application


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def read_body(receive: Receive, headers: Iterable[tuple[bytes, bytes]], limit: int) -> bytes:
    """Read a body of at most `limit` bytes: b"" when Content-Length says it is larger (the application
    refuses it by its Content-Length, unread), the first limit + 1 bytes of a chunked body that is larger.

    A body of a known length is read until that many bytes are in: some servers hand a body over as a message
    with more_body=True and then an empty last one, and waiting for that one costs a trip through the server."""
    length: bytes | None = None
    chunked = False
    for name, value in headers:
        if name == b"content-length":
            length = value
        elif name == b"transfer-encoding":
            chunked = True
    expected = -1  # unknown: read until the last message
    if length is not None:
        declared = declared_length(length.decode("latin-1"))
        if declared is None or declared > limit:
            return b""
        if not chunked:  # both: the server reads it as chunked, so do we
            expected = declared
            if expected == 0:
                return b""
    parts: list[bytes] = []  # joined once at the end: adding each to the last would copy a large body over and over
    received = 0
    while True:
        message = await receive()
        part = message.get("body", b"")
        parts.append(part)
        received += len(part)
        if received > limit or not message.get("more_body", False) or received == expected:
            body = parts[0] if len(parts) == 1 else b"".join(parts)
            return body[: limit + 1]
