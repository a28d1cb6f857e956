"""What the server hands an application and what it takes back: the whole of the server's interface.

An application is any object with `body_limit` (the largest body it reads; a larger Content-Length is refused
before the body is read), `answer(request)` and `close()`; and, when some routes take larger (or smaller) bodies,
`body_limit_for(path)`, asked once for each request that has a body, when its headers are complete (BodyLimits
is such a table of routes). `answer` returns the Response itself when it can
answer without waiting (no coroutine to make and run), or an awaitable of one. A Response's body is its
whole bytes (sent with Content-Length), or Parts that come as they are made (sent chunked: a download of any
size in constant memory). Nothing here imports Django or the project's apps.
"""
from __future__ import annotations

import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Protocol
from urllib.parse import unquote_to_bytes

import orjson

Headers = list[tuple[bytes, bytes]]


class Parts(Protocol):
    """A body made as it is sent: the server iterates it (awaiting the client between parts), then always calls
    aclose(), also when it stops early (the client left, a HEAD request)."""

    def __aiter__(self) -> AsyncIterator[bytes]: ...

    async def aclose(self) -> None: ...


Response = tuple[int, Headers, "bytes | Parts"]  # status, headers (lowercase names), the whole body or its parts
JSON_HEADERS: Headers = [(b"content-type", b"application/json"), (b"x-content-type-options", b"nosniff")]


class Request:
    """One complete request: its head as received (header names lowercased, values raw) and its whole body."""

    __slots__ = ("method", "path", "query", "headers", "body", "client", "server", "version", "scheme")

    def __init__(self, method: str, path: str, query: bytes, headers: Headers, body: bytes, client: str,
                 server: tuple[str, int], version: str = "1.1", scheme: str = "http") -> None:
        self.method = method  # "GET", "POST", ...
        self.path = path  # percent-decoded, as WSGI's PATH_INFO: the bytes as latin-1 characters
        self.query = query  # raw, without the "?"
        self.headers = headers
        self.body = body
        self.client = client  # the peer's address ("" when unknown)
        self.server = server  # (host, port) the request came in on
        self.version = version  # "1.1" or "1.0"
        self.scheme = scheme


class Application(Protocol):
    body_limit: int  # the largest body read on a path that body_limit_for (optional, below) does not answer

    def answer(self, request: Request) -> Response | Awaitable[Response]: ...

    def close(self) -> None: ...

    # Optional: def body_limit_for(self, path: str) -> int, the largest body read for this path (as Request.path
    # holds it). The server asks it (body_limit_of) once per request with a body, its headers complete: a larger
    # Content-Length is refused unread, a chunked body is cut at the limit + 1.


def body_limit_of(app: Application) -> Callable[[str], int]:
    """The application's body limit of a path: its body_limit_for, or its one body_limit for every path."""
    limit_for: Callable[[str], int] | None = getattr(app, "body_limit_for", None)
    if limit_for is not None:
        return limit_for
    limit = app.body_limit
    return lambda path: limit


class BodyLimits:
    """The largest body each route takes: `routes`, (regular expression of a whole path, limit) pairs, the first
    that matches giving its limit; any other path, `default`."""

    def __init__(self, default: int, routes: Iterable[tuple[str, int]] = ()) -> None:
        self.default = default
        self.routes = [(re.compile(pattern), limit) for pattern, limit in routes]
        self.known: dict[str, int] = {}  # a path -> its route's limit (-1: none): the next claim's path is the last's

    def __call__(self, path: str, default: int | None = None) -> int:
        """The limit of `path` (as Request.path holds it): its route's, else `default` (None: self.default)."""
        limit = self.known.get(path)
        if limit is None:
            limit = next((limit for pattern, limit in self.routes if pattern.fullmatch(path) is not None), -1)
            if len(self.known) >= 1024:  # paths a client made up: remember a bounded number
                self.known.clear()
            self.known[path] = limit
        if limit >= 0:
            return limit
        return self.default if default is None else default


def error_response(status: int, slug: str, detail: str) -> Response:
    """An error in the contract's JSON form ({code, status, detail}), for the server's own refusals."""
    return status, list(JSON_HEADERS), orjson.dumps({"code": status, "status": slug, "detail": detail})


def wsgi_path(raw_path: bytes) -> str:
    """A request's percent-encoded path as WSGI's PATH_INFO holds it: the decoded bytes as latin-1."""
    return (unquote_to_bytes(raw_path) if b"%" in raw_path else raw_path).decode("latin-1")
