"""The project's HTTP/1.1 server: `webserver.main(argv, application_factory)` (config/server.py is the
project's entry point, `python -m config.server --port 8000`).

HTTP/1.1 on uvloop, requests parsed by httptools (llhttp, Node.js's parser), in worker processes that each
listen on the port (SO_REUSEPORT: the kernel spreads connections over them), under a master process that
starts them, starts a worker again when one dies, and stops them gracefully on SIGTERM / SIGINT.

The server knows nothing of what it serves: each worker calls the application factory after the fork and
hands every request to the application it returns (webserver.interface: a Request in, a Response or an
awaitable of one out), one request of a connection at a time, in order, from one task per busy connection.
Files under the static mount are the server's own. Answers are whole (Content-Length), or, when the
application gives a body in parts (webserver.interface.Parts: a CSV export), chunked, each part sent once the
client has taken the one before. (Writing an answer the
application gives at once in the parser's callback, without the task, was measured and not kept: the same
sold-out claims/s within noise, 1.02x over 4 interleaved rounds, docs/benchmarks.md.)

Limits: a request line of at most 64 KiB (414) and headers of at most 64 KiB and 100 fields (431), a body of
at most the application's body_limit (413, by Content-Length before anything is read), a whole request within
30 s of its first byte (408; not counting while reading is paused), an idle connection closed after 60 s, at
most 32 pipelined requests waiting before reading pauses. A malformed request (CONNECT too) is a 400 in the
contract's JSON form, then the connection closes. An Upgrade request is answered as a plain one, then the
connection closes. A connection closed after an answer is half-closed first, and what the client still sends
is read and dropped (2 s at most): closing with input unread would reset the connection, and the reset can
destroy the answer before the client reads it.

A port another process listens on (even another server of this kind, SO_REUSEPORT or not) is exit code 2.
"""
from __future__ import annotations

import argparse
import asyncio
import ctypes
import email.utils
import errno
import gc
import http
import logging
import mimetypes
import os
import signal
import socket
import sys
import time
from collections import deque
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, cast

import httptools
import uvloop

from .interface import Application, Request, Response, error_response, wsgi_path

log = logging.getLogger("couponrush.server")

HEADER_LIMIT = 64 * 1024  # the request line and the headers
MAX_HEADERS = 100  # as hyper (granian), the strictest of the servers compared (docs/deployment.md)
REQUEST_SECONDS = 30.0  # from a request's first byte to its last
KEEP_ALIVE_SECONDS = 60.0  # an idle connection is closed after this
_FEED_PIECE = 16 * 1024  # a read is handed to the parser in pieces of at most this size
MAX_QUEUED = 32  # pipelined requests waiting on one connection before reading pauses
_MIN_REQUEST = 16  # the fewest bytes a complete request takes ("GET / HTTP/1.0\n\n")
WRITE_SECONDS = 30.0  # a connection whose answers the client does not read for this long is dropped
MAX_CONNECTIONS = 4096  # per worker; one more is answered 503 and closed
LINGER_SECONDS = 2.0  # after a last answer, what the client still sends is read (and dropped) this long at most
STOP_GRACE_SECONDS = 8.0  # a stopping worker finishes its requests in hand for at most this long
RESTARTS, RESTART_WINDOW = 10, 60.0  # a worker that dies more often than this within the window: give up

_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_NO_BODY_STATUSES = frozenset({204, 304})
_DROPPED_HEADERS = frozenset({b"content-length", b"transfer-encoding", b"connection", b"date", b"keep-alive"})
_STATUS_LINES: dict[int, bytes] = {}
_STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT}

ApplicationFactory = Callable[[argparse.Namespace], Application]  # called in each worker, after the fork


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
                 "body_left", "in_chunk_head", "hosts")

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


class _Refuse(Exception):
    """Raised in a parser callback: answer the request with this error and close the connection."""

    def __init__(self, response: Response) -> None:
        super().__init__(response[0])
        self.response = response


class HttpConnection(asyncio.Protocol):
    """One client connection: requests are parsed as bytes arrive and answered in order, one at a time."""

    def __init__(self, worker: Worker) -> None:
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
        for name, value in request.headers:
            if name == b"transfer-encoding" and value.strip().lower() != b"chunked":
                # RFC 9112 6.1: chunked is the only coding served, and it comes once, last
                raise _Refuse(error_response(501, "not_implemented", "Only Transfer-Encoding: chunked is served."))
            if name == b"content-length":
                if value.isdigit():
                    request.body_left = int(value)
                if value.isdigit() and int(value) > self.worker.body_limit:
                    # Answered now with no body (the application refuses it by its Content-Length), and
                    # the connection closes: the body is never read.
                    request.skip_body = True
                    request.keep_alive = False
                    self.current = None
                    self.done_reading = True
                    self.enqueue(request)
                    return
            elif name == b"expect" and value.lower() == b"100-continue" and request.version == "1.1":
                request.expect_continue = True
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
        if len(request.body) <= self.worker.body_limit:  # a chunked body: keep one byte over the limit
            request.body += body[: self.worker.body_limit + 1 - len(request.body)]

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


class Worker:
    """One worker process: an event loop serving the listening socket it was given."""

    def __init__(self, sock: socket.socket, args: argparse.Namespace, static: tuple[str, Path] | None,
                 application_factory: ApplicationFactory) -> None:
        self.sock = sock
        self.args = args
        self.keep_alive: float = args.keep_alive
        self.request_timeout: float = args.request_timeout
        self.write_timeout: float = args.write_timeout
        self.max_connections: int = args.max_connections
        self.static = static
        self.application_factory = application_factory
        self.app: Application
        self.loop: asyncio.AbstractEventLoop  # the worker's, once it serves
        self.connections: set[HttpConnection] = set()
        self.stopping = False
        self.date_line = b""
        self.body_limit = 0

    def run(self) -> None:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(self.serve())

    async def serve(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.setup()
        stop = asyncio.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            self.loop.add_signal_handler(signum, stop.set)
        self.tick()
        server = await self.loop.create_server(lambda: HttpConnection(self), sock=self.sock, backlog=2048)
        await stop.wait()
        self.stopping = True
        server.close()  # no new connections; the requests in hand are answered, each with Connection: close
        deadline = self.loop.time() + STOP_GRACE_SECONDS
        while self.connections and self.loop.time() < deadline:
            for connection in list(self.connections):
                connection.close_if_idle(self.loop.time())
            await asyncio.sleep(0.05)
        for connection in list(self.connections):
            if connection.transport is not None:
                connection.transport.abort()
        self.app.close()

    def setup(self) -> None:
        # The application is made here, in the worker, after the fork: nothing of it is shared.
        self.app = self.application_factory(self.args)
        self.body_limit = self.app.body_limit
        # What starting made (Django, the apps, the URL patterns: ~110,000 objects) lives as long as the
        # worker: frozen, a full collection no longer walks it. Walking it took 40-55 ms, a pause every few
        # seconds under load for every request in hand (p99 of the selling claims 54-94 ms -> 22-33 ms).
        gc.collect()
        gc.freeze()

    def tick(self) -> None:
        """Once a second: the Date header, and connections idle or slow for too long."""
        now = time.time()
        self.date_line = b"date: " + email.utils.formatdate(now, usegmt=True).encode() + b"\r\n"
        loop_now = self.loop.time()
        for connection in list(self.connections):
            connection.close_if_idle(loop_now)
        self.loop.call_at(loop_now + 1.0 - (now % 1.0), self.tick)

    def answer(self, incoming: Incoming, connection: HttpConnection) -> Response | Awaitable[Response]:
        """The application's answer to a complete request (or an awaitable of it); static files are ours."""
        target = incoming.url
        if target[:1] == b"/" and b"?" not in target and b"%" not in target and b"#" not in target:
            path, query = target.decode("latin-1"), b""  # the usual target: a plain path, nothing to parse
        else:
            try:
                url = httptools.parse_url(target)
            except httptools.HttpParserInvalidURLError:  # one llhttp let through (http://host:99999/)
                return error_response(400, "invalid_request", "Malformed request target.")
            path, query = wsgi_path(url.path or b"/"), url.query or b""
            if url.host:  # an absolute-form target: its authority is the request's Host (RFC 9112 3.2.2)
                authority = url.host + (b":%d" % url.port if url.port else b"")
                incoming.headers = [(n, v) for n, v in incoming.headers if n != b"host"] + [(b"host", authority)]
        method = incoming.method
        if self.static is not None and method in ("GET", "HEAD") and path.startswith(self.static[0]):
            return self.static_or_app(incoming, connection, path, query)
        return self.app.answer(self.request_of(incoming, connection, path, query))

    def request_of(self, incoming: Incoming, connection: HttpConnection, path: str, query: bytes) -> Request:
        body = b"" if incoming.skip_body else bytes(incoming.body)  # skipped: refused by its Content-Length
        return Request(incoming.method, path, query, incoming.headers, body, connection.client, connection.server,
                       incoming.version)

    async def static_or_app(self, incoming: Incoming, connection: HttpConnection, path: str, query: bytes
                            ) -> Response:
        found = await self.static_file(path, _header(incoming.headers, b"if-modified-since"))
        if found is not None:
            return found
        answer = self.app.answer(self.request_of(incoming, connection, path, query))
        return answer if isinstance(answer, tuple) else await answer

    async def static_file(self, path: str, if_modified_since: str | None) -> Response | None:
        """A file under the static mount (None when there is no such file: the application answers then)."""
        assert self.static is not None
        route, root = self.static
        relative = path[len(route):]
        if not relative.startswith("/") or "\x00" in relative or ".." in relative.split("/"):
            return None
        try:
            return await self.loop.run_in_executor(None, _read_static, root, relative.lstrip("/"), if_modified_since)
        except OSError:
            return None


def _header(headers: list[tuple[bytes, bytes]], name: bytes) -> str | None:
    for key, value in headers:
        if key == name:
            return value.decode("latin-1")
    return None


def _read_static(root: Path, relative: str, if_modified_since: str | None) -> Response | None:
    target = (root / relative).resolve()
    if root not in target.parents or not target.is_file():
        return None
    stat = target.stat()
    last_modified = email.utils.formatdate(stat.st_mtime, usegmt=True).encode()
    headers = [(b"last-modified", last_modified), (b"cache-control", b"public, max-age=3600")]
    if if_modified_since:
        try:
            since = email.utils.parsedate_to_datetime(if_modified_since).timestamp()
        except (TypeError, ValueError, IndexError, OverflowError):
            since = None
        if since is not None and int(stat.st_mtime) <= since:
            return 304, headers, b""
    kind, encoding = mimetypes.guess_type(target.name)
    if kind is None or encoding is not None:
        kind = "application/octet-stream"
    elif kind.startswith("text/") or kind in ("application/javascript", "application/json"):
        kind += "; charset=utf-8"
    return 200, [(b"content-type", kind.encode()), *headers], target.read_bytes()


# ---------------------------------------------------------------------------------------------------------
# The master process


def listening_sockets(host: str, port: int, count: int) -> list[socket.socket]:
    """`count` sockets listening on one port (SO_REUSEPORT), one per worker. The master keeps them open, so
    a worker started again takes over its socket's queue of connections: none is refused meanwhile."""
    sockets: list[socket.socket] = []
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # SO_REUSEPORT would let these sockets join another server's on the port (any process of this user):
    # a bind without it fails when anything listens there (EADDRINUSE), and port 0 takes a free port.
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a closed connection's TIME_WAIT is no owner
        probe.bind((host, port))
        port = probe.getsockname()[1]
    try:
        for _ in range(count):
            sock = socket.socket(family, socket.SOCK_STREAM)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.bind((host, port))
            sock.listen(2048)
            sock.set_inheritable(True)
    except OSError:
        for sock in sockets:
            sock.close()
        raise
    return sockets


def _die_with_parent() -> None:
    """A worker gets SIGTERM when its master dies, however it died (Linux)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGTERM), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class Master:
    def __init__(self, args: argparse.Namespace, application_factory: ApplicationFactory) -> None:
        self.args = args
        self.application_factory = application_factory
        self.static = (args.static_path_route.rstrip("/"), Path(args.static_path_mount).resolve()) \
            if args.static_path_mount else None
        self.sockets = listening_sockets(args.host, args.port, args.workers)
        self.port = self.sockets[0].getsockname()[1]
        self.children: dict[int, int] = {}  # pid -> worker index
        self.deaths: deque[float] = deque()
        self.stopping = False

    def say(self, message: str) -> None:
        print(f"[server {os.getpid()}] {message}", file=sys.stderr, flush=True)

    def spawn(self, index: int) -> None:
        # The stop signals wait until the child has its own handlers and the master knows the child's pid:
        # the master's handler must not run in the child, nor miss a child it has not recorded yet.
        signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
        pid = os.fork()
        if pid == 0:
            status = 1
            try:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                signal.signal(signal.SIGALRM, signal.SIG_DFL)
                signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)
                _die_with_parent()
                sock = self.sockets[index]
                for other in self.sockets:
                    if other is not sock:
                        other.close()
                Worker(sock, self.args, self.static, self.application_factory).run()
                status = 0
            except BaseException:  # noqa: BLE001  (the worker's last word, then it exits)
                logging.getLogger("couponrush.server").exception("worker failed")
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(status)
        self.children[pid] = index
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)

    def on_stop(self, signum: int, frame: Any) -> None:
        if not self.stopping:
            self.say(f"{signal.Signals(signum).name}: stopping the workers")
            self.stop()

    def stop(self) -> None:
        """SIGTERM to the workers (SIGKILL after the grace period), and the listening sockets closed here:
        once each worker has closed its own, a new connection is refused instead of waiting in a queue no
        one reads."""
        self.stopping = True
        for sock in self.sockets:
            sock.close()
        self.signal_children(signal.SIGTERM)
        signal.alarm(int(STOP_GRACE_SECONDS) + 2)

    def on_alarm(self, signum: int, frame: Any) -> None:
        self.say("workers still running after the grace period: killing them")
        self.signal_children(signal.SIGKILL)

    def signal_children(self, signum: int) -> None:
        for pid in list(self.children):
            try:
                os.kill(pid, signum)
            except ProcessLookupError:
                pass

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self.on_stop)
        signal.signal(signal.SIGINT, self.on_stop)
        signal.signal(signal.SIGALRM, self.on_alarm)
        for index in range(self.args.workers):
            self.spawn(index)
        self.say(f"listening on http://{self.args.host}:{self.port} with {self.args.workers} workers")
        exit_code = 0
        while self.children:
            try:
                pid, status = os.wait()
            except ChildProcessError:
                break
            index = self.children.pop(pid, -1)
            if index < 0 or self.stopping:
                continue
            code = os.waitstatus_to_exitcode(status)
            now = time.monotonic()
            self.deaths.append(now)
            while self.deaths and now - self.deaths[0] > RESTART_WINDOW:
                self.deaths.popleft()
            if len(self.deaths) > RESTARTS:
                self.say(f"worker {pid} exited ({code}): {RESTARTS} restarts within {RESTART_WINDOW:.0f}s, "
                         "giving up")
                exit_code = 1
                self.stop()  # and wait for the others, as on SIGTERM
                continue
            self.say(f"worker {pid} exited ({code}): starting another")
            self.spawn(index)
        self.say("stopped")
        return exit_code


def parse_args(argv: list[str] | None, prog: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=prog, description="Serve the application over HTTP/1.1.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--workers", type=int, default=default_workers(),
                        help=f"worker processes (default {default_workers()}: the CPUs this process may use, less one)")
    parser.add_argument("--threads", type=int, default=int(os.environ.get("COUPONS_WEB_THREADS", "16")),
                        help="threads per worker for blocking work (default COUPONS_WEB_THREADS or 16)")
    parser.add_argument("--keep-alive", type=float, default=KEEP_ALIVE_SECONDS,
                        help=f"seconds an idle connection stays open (default {KEEP_ALIVE_SECONDS:g})")
    parser.add_argument("--request-timeout", type=float, default=REQUEST_SECONDS,
                        help=f"seconds from a request's first byte to its last (default {REQUEST_SECONDS:g})")
    parser.add_argument("--write-timeout", type=float, default=WRITE_SECONDS,
                        help=f"seconds a client may leave its answers unread (default {WRITE_SECONDS:g})")
    parser.add_argument("--max-connections", type=int, default=MAX_CONNECTIONS,
                        help=f"connections per worker; one more is answered 503 (default {MAX_CONNECTIONS})")
    parser.add_argument("--static-path-route", default="/static", help="URL prefix of the static files")
    parser.add_argument("--static-path-mount", default="", help="folder served under the static route")
    args = parser.parse_args(argv)
    if args.workers < 1 or args.threads < 1:
        parser.error("--workers and --threads must be at least 1")
    if args.keep_alive <= 0 or args.request_timeout <= 0 or args.write_timeout <= 0 or args.max_connections < 1:
        parser.error("--keep-alive, --request-timeout, --write-timeout and --max-connections must be positive")
    return args



def default_workers() -> int:
    """The CPUs this process may use, less one, at least one: on a host that also runs Redis, PostgreSQL and the
    load's other end, a worker per core leaves the loopback traffic and Redis no core of their own, and the tail
    at a steady rate gets worse, not better (docs/scaling.md, "Workers per host": 2 cores, 1 worker against 2).
    On a web host of its own, give --workers the number of cores."""
    return max(1, len(os.sched_getaffinity(0)) - 1)

def main(argv: list[str] | None, application_factory: ApplicationFactory, prog: str = "couponrush server") -> int:
    """Serve what application_factory(args) returns in each worker until SIGTERM / SIGINT."""
    args = parse_args(argv, prog)
    try:
        master = Master(args, application_factory)
    except OSError as exc:
        detail = "the port is in use" if exc.errno == errno.EADDRINUSE else exc.strerror
        print(f"{prog}: cannot listen on {args.host}:{args.port}: {detail}", file=sys.stderr)
        return 2
    return master.run()

