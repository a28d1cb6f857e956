"""One client connection, HTTP/1.1 over httptools (llhttp, Node.js's parser): requests parsed as bytes arrive,
held to the limits (webserver.options), answered in order one at a time by one task per busy connection, and
the connection closed softly after its last answer.

The connection asks the worker that serves it (Serving, below) for each answer; it knows nothing else of it.
"""
from __future__ import annotations

import asyncio
import http
import logging
from collections import deque
from collections.abc import Awaitable
from typing import Protocol, cast

import httptools

from .interface import Response, error_response
from .options import HEADER_LIMIT, LINGER_SECONDS, MAX_HEADERS, MAX_QUEUED

log = logging.getLogger("couponrush.server")

_FEED_PIECE = 16 * 1024  # a read is handed to the parser in pieces of at most this size
_MIN_REQUEST = 16  # the fewest bytes a complete request takes ("GET / HTTP/1.0\n\n")
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_NO_BODY_STATUSES = frozenset({204, 304})
_DROPPED_HEADERS = frozenset({b"content-length", b"transfer-encoding", b"connection", b"date", b"keep-alive"})
_STATUS_LINES: dict[int, bytes] = {}


class Serving(Protocol):
    """What a connection needs of the worker that serves it (webserver.worker.Worker): its loop and limits, the
    Date header of the second, whether it is stopping, the set of its connections, and the answer to a request."""

    loop: asyncio.AbstractEventLoop
    connections: set[HttpConnection]
    max_connections: int
    keep_alive: float
    request_timeout: float
    write_timeout: float
    stopping: bool
    date_line: bytes

    def body_limit_of(self, target: bytes) -> int: ...

    def answer(self, incoming: Incoming, connection: HttpConnection) -> Response | Awaitable[Response]: ...


def status_line(status: int) -> bytes:
    line = _STATUS_LINES.get(status)
    if line is None:
        try:
            phrase = http.HTTPStatus(status).phrase
        except ValueError:
            phrase = ""
        line = _STATUS_LINES[status] = f"HTTP/1.1 {status} {phrase}\r\n".encode("latin-1")
    return line


class Incoming:
    """One request as it is parsed, then answered."""

    __slots__ = ("url", "headers", "body", "method", "version", "keep_alive", "began", "header_bytes",
                 "head_received", "head_done", "skip_body", "error", "expect_continue", "continued",
                 "body_left", "in_chunk_head", "hosts", "body_limit")

    def __init__(self, began: float) -> None:
        self.url = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.body = bytearray()
        self.method = "GET"
        self.version = "1.1"
        self.keep_alive = True
        self.began = began
        self.header_bytes = 0  # the request line and the headers, as the parser hands them over
        self.head_received = 0  # bytes of reads that were all request line and headers (a lower bound)
        self.head_done = False  # its headers are complete
        self.skip_body = False  # its Content-Length is over the limit: answered at once, its body never read
        self.error: Response | None = None  # answer this instead, then close
        self.expect_continue = False
        self.continued = False  # "100 Continue" sent
        self.body_left = 0  # bytes of a body of known length still to come
        self.in_chunk_head = False  # a chunk's size line is parsed and no byte of its data yet: the last
        #                             chunk's trailer section comes here
        self.hosts = 0  # Host header fields
        self.body_limit = 0  # the largest body its route takes (asked when its headers are complete)


class _Refuse(Exception):
    """Raised in a parser callback: answer the request with this error and close the connection."""

    def __init__(self, response: Response) -> None:
        super().__init__(response[0])
        self.response = response


class HttpConnection(asyncio.Protocol):
    """One client connection: requests are parsed as bytes arrive and answered in order, one at a time."""

    def __init__(self, worker: Serving) -> None:
        self.worker = worker
        self.loop = worker.loop
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpRequestParser(self)
        self.client = ""
        self.server: tuple[str, int] = ("localhost", 80)
        self.current: Incoming | None = None  # being received
        self.queue: deque[Incoming] = deque()  # received, not yet answered
        self.busy = False  # a task is answering the queue
        self.done_reading = False  # nothing more is parsed (an error, a refused request, an upgrade)
        self.reading_paused = False
        self.writable: asyncio.Future[None] | None = None  # set while the transport's buffer is full
        self.lingering_since: float | None = None  # the last answer is sent: waiting for the client to close
        self.client_done = False  # the client ended its side (a half-close): what it sent is answered, then close
        self.last_active = self.loop.time()
        self.unparsed = b""  # what was read while the queue was full: parsed once it has room again
        self.eof_pending = False  # the client's end of file came behind unparsed bytes
        self.write_blocked_since: float | None = None

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        peer = transport.get_extra_info("peername")
        self.client = str(peer[0]) if isinstance(peer, tuple) else ""
        local = transport.get_extra_info("sockname")
        if isinstance(local, tuple):
            self.server = (str(local[0]), int(local[1]))
        full = len(self.worker.connections) >= self.worker.max_connections
        self.worker.connections.add(self)
        if full:  # the worker holds all it may: say so, and close (what the client sends is read and dropped)
            self.done_reading = True
            response = error_response(503, "unavailable", "The server is at its connection limit; retry shortly.")
            response[1].append((b"retry-after", b"1"))
            transport.write(self.encode(Incoming(0.0), response, False))
            self.close_softly(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self.worker.connections.discard(self)
        self.done_reading = True
        self.queue.clear()
        if self.writable is not None and not self.writable.done():
            self.writable.set_result(None)

    def eof_received(self) -> bool | None:
        """The client has sent all it will: answer the requests it sent, then close. A request cut short is
        dropped (it can never be complete)."""
        if self.unparsed:  # answered once what came before the end is parsed (feed_pieces)
            self.eof_pending = True
            return True
        self.client_done = self.done_reading = True
        self.current = None
        if self.lingering_since is None and (self.busy or self.queue):
            return True  # keep the transport open for the answers
        return None  # the transport closes

    def pause_writing(self) -> None:
        if self.writable is None or self.writable.done():
            self.writable = self.loop.create_future()
            self.write_blocked_since = self.loop.time()

    def resume_writing(self) -> None:
        self.write_blocked_since = None
        if self.writable is not None and not self.writable.done():
            self.writable.set_result(None)

    def data_received(self, data: bytes) -> None:
        if self.done_reading:
            return
        self.last_active = self.loop.time()
        self.feed_pieces(data)

    def feed_pieces(self, data: bytes) -> None:
        """Parse what was read, in pieces that can complete no more requests than the queue has room for:
        once it is full, reading pauses and the rest waits (self.unparsed) until answers make room. A
        client that pipelines and never reads costs the worker one read and MAX_QUEUED requests, no more."""
        view = memoryview(data)
        start, end = 0, len(data)
        while start < end:
            if self.done_reading:
                return
            room = MAX_QUEUED - len(self.queue)
            if room <= 0:
                self.unparsed = bytes(view[start:])
                self.pause_reading()
                return
            size = room * _MIN_REQUEST  # at most `room` requests complete in this many bytes
            request = self.current
            if request is not None and request.head_done:
                size += request.body_left  # body bytes of a known length complete no request
            size = max(_MIN_REQUEST, min(size, _FEED_PIECE))
            self.feed(view[start:start + size] if start or size < end else data)
            start += size
        self.unparsed = b""

    def pause_reading(self) -> None:
        if not self.reading_paused and self.transport is not None:
            self.reading_paused = True
            self.transport.pause_reading()

    def resume_reading(self, transport: asyncio.Transport) -> None:
        """Parse what waited, then read again (unless the queue filled up again meanwhile)."""
        if self.current is not None:  # its clock stood still while the server did not read
            self.current.began = self.loop.time()
        pending, self.unparsed = self.unparsed, b""
        self.reading_paused = False
        if pending:
            self.feed_pieces(pending)
        if self.reading_paused or transport.is_closing():
            return
        if self.eof_pending:
            self.eof_pending = False
            if self.eof_received() is None:
                transport.close()
            return
        transport.resume_reading()

    def feed(self, data: bytes | memoryview) -> None:
        receiving = self.current
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserCallbackError as exc:
            refusal = exc.__context__ if isinstance(exc.__context__, _Refuse) else None
            if refusal is None:
                log.error("request parsing failed", exc_info=exc.__context__ or exc)
                self.refuse(error_response(500, "server_error", "Internal error."))
            else:
                self.refuse(refusal.response)
        except httptools.HttpParserUpgrade:
            # An Upgrade (h2c, websocket) or CONNECT: not served. A complete request is answered as an
            # ordinary one; what follows it on the connection is not HTTP/1.1 and is never read.
            self.done_reading = True
            if self.queue:
                last = self.queue[-1]
                last.keep_alive = False
                if last.method == "CONNECT":  # the parser completes it: a tunnel is not a request to answer
                    last.error = error_response(400, "invalid_request", "CONNECT is not served.")
            if self.current is not None:
                self.refuse(error_response(400, "invalid_request", "Upgrade and CONNECT are not served."))
        except httptools.HttpParserError:
            self.refuse(error_response(400, "invalid_request", "Malformed HTTP request."))
        else:
            # httptools keeps a header's name and value to itself until the header is complete: a header
            # that never ends would grow without bound. A piece that was all one request's head counts here
            # (the piece a request begins in does not: part of it may be the request before; a piece is at
            # most _FEED_PIECE bytes, so what the parser holds stays under HEADER_LIMIT + _FEED_PIECE).
            # Trailers are held the same way: a piece that began and ended in a chunk's head counts too.
            request = self.current
            if request is not None and request is receiving and (not request.head_done or request.in_chunk_head):
                request.head_received += len(data)
                if request.head_received > HEADER_LIMIT:
                    self.refuse(error_response(431, "invalid_request", "The request's headers are too large."))

    # httptools callbacks

    def on_message_begin(self) -> None:
        self.current = Incoming(self.loop.time())

    def on_url(self, url: bytes) -> None:
        request = self.current
        assert request is not None
        request.url += url
        request.header_bytes += len(url)
        if request.header_bytes > HEADER_LIMIT:
            raise _Refuse(error_response(414, "invalid_request", "The request line is too long."))

    def on_header(self, name: bytes, value: bytes) -> None:
        request = self.current
        assert request is not None
        request.header_bytes += len(name) + len(value) + 4  # a trailer's too: head and trailers, one limit
        if request.header_bytes > HEADER_LIMIT or len(request.headers) >= MAX_HEADERS:
            raise _Refuse(error_response(431, "invalid_request", "The request's headers are too large."))
        if request.head_done:
            return  # a trailer field: never a request header (RFC 9110 6.5.1), and nothing here needs one
        name = name.lower()
        if name == b"host":
            request.hosts += 1
        request.headers.append((name, value))

    def on_chunk_header(self) -> None:
        if self.current is not None:
            self.current.in_chunk_head = True

    def on_headers_complete(self) -> None:
        request = self.current
        assert request is not None
        request.head_done = True
        parser = self.parser
        request.method = parser.get_method().decode("latin-1")
        request.version = parser.get_http_version()
        request.keep_alive = parser.should_keep_alive()
        if request.version not in ("1.1", "1.0"):
            raise _Refuse(error_response(505, "http_version_not_supported", "Only HTTP/1.1 and HTTP/1.0 are served."))
        if request.hosts > 1 or (request.hosts == 0 and request.version == "1.1"):  # RFC 9112 3.2
            raise _Refuse(error_response(400, "invalid_request", "An HTTP/1.1 request has exactly one Host header."))
        has_body = False
        for name, value in request.headers:
            if name == b"transfer-encoding":
                if value.strip().lower() != b"chunked":
                    # RFC 9112 6.1: chunked is the only coding served, and it comes once, last
                    raise _Refuse(error_response(501, "not_implemented", "Only Transfer-Encoding: chunked is served."))
                has_body = True
            elif name == b"content-length":
                if value.isdigit():
                    request.body_left = int(value)
                has_body = True
            elif name == b"expect" and value.lower() == b"100-continue" and request.version == "1.1":
                request.expect_continue = True
        if has_body:  # its route's limit, asked once (a request without a body needs none)
            request.body_limit = self.worker.body_limit_of(request.url)
            if request.body_left > request.body_limit:
                # Answered now with no body (the application refuses it by its Content-Length), and the
                # connection closes: the body is never read.
                request.skip_body = True
                request.keep_alive = False
                self.current = None
                self.done_reading = True
                self.enqueue(request)
                return
        if request.expect_continue and not self.busy:
            self.send_continue()

    def send_continue(self) -> None:
        """Ask for the body of the request being received if it waits for "100 Continue" and every request
        before it is answered (a pipelined request's turn comes when the queue is empty)."""
        request = self.current
        if request is not None and request.expect_continue and not request.continued and not self.queue \
                and self.transport is not None and not self.transport.is_closing():
            request.continued = True
            self.transport.write(_CONTINUE)

    def on_body(self, body: bytes) -> None:
        request = self.current
        if request is None or request.skip_body:
            return
        request.in_chunk_head = False
        if request.body_left:  # a body of known length (a chunked one's length is not known: 0 throughout)
            request.body_left = max(0, request.body_left - len(body))
        limit = request.body_limit
        if len(request.body) <= limit:  # a chunked body: keep one byte over the limit
            request.body += body[: limit + 1 - len(request.body)]

    def on_message_complete(self) -> None:
        request = self.current
        if request is None:  # answered at its headers
            return
        self.current = None
        self.enqueue(request)

    # answering

    def refuse(self, response: Response) -> None:
        """Answer with this error after the requests already received, then close."""
        self.done_reading = True
        request = self.current or Incoming(self.loop.time())
        self.current = None
        request.error = response
        request.keep_alive = False
        self.enqueue(request)

    def enqueue(self, request: Incoming) -> None:
        self.queue.append(request)
        if not self.busy:
            self.busy = True
            self.loop.create_task(self.answer_queue())
        elif len(self.queue) >= MAX_QUEUED:
            self.pause_reading()

    async def answer_queue(self) -> None:
        worker = self.worker
        try:
            while self.queue:
                request = self.queue.popleft()
                response = request.error
                if response is None:
                    try:
                        answer = worker.answer(request, self)
                        response = answer if isinstance(answer, tuple) else await answer
                    except Exception:
                        log.exception("request failed: %s %r", request.method, request.url[:200])
                        response = error_response(500, "server_error", "Internal error.")
                transport = self.transport
                if transport is None or transport.is_closing():
                    return
                keep_alive = request.keep_alive and not worker.stopping and not (self.client_done and not self.queue)
                if isinstance(response[2], bytes):
                    transport.write(self.encode(request, response, keep_alive))
                else:
                    keep_alive = await self.send_parts(transport, request, response, keep_alive)
                    if transport.is_closing():
                        return
                if not keep_alive:
                    self.close_softly(transport)
                    return
                if self.writable is not None:
                    await self.writable
                if self.reading_paused and len(self.queue) < MAX_QUEUED // 2:
                    self.resume_reading(transport)
            self.send_continue()
        finally:
            self.busy = False
            self.last_active = self.loop.time()

    def encode(self, request: Incoming, response: Response, keep_alive: bool) -> bytes:
        """The whole answer of a body in bytes; or, of a body in parts, its head (chunked, or for HTTP/1.0 a
        body that ends when the connection closes)."""
        status, headers, body = response
        parts = [status_line(status)]
        for name, value in headers:
            if name not in _DROPPED_HEADERS:
                parts += (name, b": ", value, b"\r\n")
        parts.append(self.worker.date_line)
        if status in _NO_BODY_STATUSES:
            pass
        elif isinstance(body, bytes):
            parts += (b"content-length: ", str(len(body)).encode(), b"\r\n")
        elif request.version != "1.0":
            parts.append(b"transfer-encoding: chunked\r\n")
        if not keep_alive:
            parts.append(b"connection: close\r\n")
        elif request.version == "1.0":  # an HTTP/1.0 client keeps the connection only when told so
            parts.append(b"connection: keep-alive\r\n")
        parts.append(b"\r\n")
        if request.method != "HEAD" and status not in _NO_BODY_STATUSES and isinstance(body, bytes):
            parts.append(body)
        return b"".join(parts)

    async def send_parts(self, transport: asyncio.Transport, request: Incoming, response: Response,
                         keep_alive: bool) -> bool:
        """Send a body that comes in parts, each once the client has taken the one before (the transport's
        buffer drained): chunked, or to HTTP/1.0 until the connection closes. Return whether the connection
        stays open. A part that fails after the head is sent can't become an error answer: the connection is
        aborted, so the client sees a cut body, not a whole one."""
        status, _, body = response
        assert not isinstance(body, bytes)
        chunked = request.version != "1.0"
        keep_alive = keep_alive and chunked
        try:
            transport.write(self.encode(request, response, keep_alive))
            if request.method == "HEAD" or status in _NO_BODY_STATUSES:
                return keep_alive
            async for part in body:
                if transport.is_closing():
                    return False
                if part:
                    transport.write(b"%x\r\n%b\r\n" % (len(part), part) if chunked else part)
                if self.writable is not None:
                    await self.writable
            if chunked:
                transport.write(b"0\r\n\r\n")
            return keep_alive
        except Exception:
            log.exception("a streamed answer failed: %s %r", request.method, request.url[:200])
            transport.abort()
            return False
        finally:
            await body.aclose()

    def close_softly(self, transport: asyncio.Transport) -> None:
        """Close after the last answer: end the sending side only, and read (dropping it) whatever the client
        still sends until it closes its side, for LINGER_SECONDS at most. A socket closed with input unread
        sends a reset, and a reset can destroy the answer before the client has read it (a body the server
        refused unread, the rest of a header over the limit, requests pipelined after a close)."""
        self.done_reading = True
        self.queue.clear()
        if self.client_done or not transport.can_write_eof():
            transport.close()
            return
        self.lingering_since = self.loop.time()
        if self.reading_paused:
            self.reading_paused = False
            transport.resume_reading()
        transport.write_eof()  # after what is written; the client's end of file then closes the transport

    def close_if_idle(self, now: float) -> None:
        """Called every second: close a connection idle too long; refuse a request too slow to arrive."""
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        if self.lingering_since is not None:
            if now - self.lingering_since > LINGER_SECONDS:
                transport.close()
            return
        if self.write_blocked_since is not None and now - self.write_blocked_since > self.worker.write_timeout:
            transport.abort()  # the client has not read its answers for too long
            return
        request = self.current
        if request is not None:
            # not while reading is paused: the rest of it may be waiting on the server, not on the client
            if not self.reading_paused and now - request.began > self.worker.request_timeout:
                self.refuse(error_response(408, "request_timeout", "The request took too long to arrive."))
        elif not self.busy and not self.queue and (self.worker.stopping
                                                   or now - self.last_active > self.worker.keep_alive):
            transport.close()

