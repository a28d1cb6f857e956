"""A worker process: one uvloop event loop serving the listening socket the master gave it, with the application
the factory makes after the fork. It answers what its connections (webserver.protocol) have parsed: files under
the static mount itself, the rest through the application. It keeps the Date header of the second, closes
connections idle or slow for too long, and on SIGTERM finishes the requests in hand (STOP_GRACE_SECONDS at most).
"""
from __future__ import annotations

import argparse
import asyncio
import email.utils
import gc
import signal
import socket
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import httptools
import uvloop

from .interface import Application, Request, Response, body_limit_of, error_response, wsgi_path
from .options import STOP_GRACE_SECONDS, ApplicationFactory
from .protocol import HttpConnection, Incoming
from .static import header, static_file


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
        self.body_limit_for: Callable[[str], int] = lambda path: 0  # the application's, once it is made

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
        self.body_limit_for = body_limit_of(self.app)
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

    def body_limit_of(self, target: bytes) -> int:
        """The largest body the application takes for a request target (its path as Request.path has it; a
        target the parser cannot split, the limit of "/": it is answered 400 anyway)."""
        if target[:1] == b"/" and b"?" not in target and b"%" not in target and b"#" not in target:
            return self.body_limit_for(target.decode("latin-1"))
        try:
            path = httptools.parse_url(target).path
        except httptools.HttpParserInvalidURLError:
            path = None
        return self.body_limit_for(wsgi_path(path or b"/"))

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
        # skipped: refused by its Content-Length. The body is held once while it is answered: the buffer it was
        # read into goes as soon as its bytes are made (an upload of 64 MiB is 64 MiB, not 128).
        body = b"" if incoming.skip_body else bytes(incoming.body)
        incoming.body = bytearray()
        return Request(incoming.method, path, query, incoming.headers, body, connection.client, connection.server,
                       incoming.version)

    async def static_or_app(self, incoming: Incoming, connection: HttpConnection, path: str, query: bytes
                            ) -> Response:
        assert self.static is not None
        found = await static_file(self.loop, self.static, path, header(incoming.headers, b"if-modified-since"))
        if found is not None:
            return found
        answer = self.app.answer(self.request_of(incoming, connection, path, query))
        return answer if isinstance(answer, tuple) else await answer

