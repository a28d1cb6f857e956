"""An application for the web server alone (no Django): it answers every request with what the server handed
it, as JSON, so that tests see exactly what the server passes on; at once, or for a path under /wait after a
millisecond (as a claim that asks Redis is).

    python -m tests.webserver.echo_app --port N [server options]
"""
from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Awaitable

import orjson

from webserver import JSON_HEADERS, Request, Response, main


class Echo:
    body_limit = 64 * 1024

    def answer(self, request: Request) -> Response | Awaitable[Response]:
        if request.path.startswith("/wait"):  # answered after a wait, as a claim that asks Redis is
            return self.later(request)
        return self.echo(request)

    async def later(self, request: Request) -> Response:
        await asyncio.sleep(0.001)
        return self.echo(request)

    def echo(self, request: Request) -> Response:
        return 200, JSON_HEADERS, orjson.dumps({
            "method": request.method, "path": request.path, "query": request.query.decode("latin-1"),
            "headers": [[name.decode("latin-1"), value.decode("latin-1")] for name, value in request.headers],
            "body": request.body.decode("latin-1"), "version": request.version,
        })

    def close(self) -> None:
        pass


def echo(args: argparse.Namespace) -> Echo:
    return Echo()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], echo, prog="echo_app"))
