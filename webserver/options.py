"""The server's limits and its command line: every bound a client meets (docs/deployment.md compares them with
other servers'), the options that change some of them, and the number of workers by default."""
from __future__ import annotations

import argparse
import os
from collections.abc import Callable

from .interface import Application

HEADER_LIMIT = 64 * 1024  # the request line and the headers
MAX_HEADERS = 100  # as hyper (granian), the strictest of the servers compared (docs/deployment.md)
REQUEST_SECONDS = 30.0  # from a request's first byte to its last
KEEP_ALIVE_SECONDS = 60.0  # an idle connection is closed after this
MAX_QUEUED = 32  # pipelined requests waiting on one connection before reading pauses
WRITE_SECONDS = 30.0  # a connection whose answers the client does not read for this long is dropped
MAX_CONNECTIONS = 4096  # per worker; one more is answered 503 and closed
LINGER_SECONDS = 2.0  # after a last answer, what the client still sends is read (and dropped) this long at most
STOP_GRACE_SECONDS = 8.0  # a stopping worker finishes its requests in hand for at most this long
RESTARTS, RESTART_WINDOW = 10, 60.0  # a worker that dies more often than this within the window: give up

ApplicationFactory = Callable[[argparse.Namespace], Application]  # called in each worker, after the fork


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

