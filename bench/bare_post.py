"""The sold-out storm's second baseline (bench/suite.py, phase soldout): the project's web server
(config/server.py, the same HTTP/1.1 loop, workers and options) with every request answered by a fixed JSON
body once the whole request, body included, is in. It costs what the server costs for the claim's exact
request (POST, the shopper's headers, a body of "{}"), so that sold-out / bare POST says how close the claim
comes to the server's floor for such a request; /healthz (the first baseline) is a GET the server answers
without Django too.

    python bench/bare_post.py --port 8300 --workers 2
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from config.server import JSON_HEADERS, HttpConnection, Request, Response, Worker, main  # noqa: E402

_BODY = b'{"code":2,"status":"sold_out","claim_id":null,"campaign_id":0}'


class BareWorker(Worker):
    """A worker without Django: the fixed answer, the server's limits."""

    def setup(self) -> None:
        self.body_limit = 16 * 1024

    def teardown(self) -> None:
        pass

    def answer_at_once(self, request: Request, connection: HttpConnection) -> Response | None:
        return 200, JSON_HEADERS, _BODY  # in the parser's callback, as the web server's sold-out claims are

    async def answer(self, request: Request, connection: HttpConnection) -> Response:
        return 200, JSON_HEADERS, _BODY


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], worker_class=BareWorker))
