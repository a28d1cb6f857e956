"""The sold-out storm's second baseline (bench/suite.py, phase soldout): the project's web server
(webserver/, the same HTTP/1.1 loop, workers and options) with every request answered by a fixed JSON body
once the whole request, body included, is in. It costs what the server costs for the claim's exact request
(POST, the shopper's headers, a body of "{}"), so that sold-out / bare POST says how close the claim comes to
the server's floor for such a request; /healthz (the first baseline) is a GET the server answers without
Django too.

    python bench/bare_post.py --port 8300 --workers 2
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from webserver import JSON_HEADERS, Request, Response, main  # noqa: E402

_ANSWER: Response = (200, JSON_HEADERS, b'{"code":2,"status":"sold_out","claim_id":null,"campaign_id":0}')


class Bare:
    """An application without Django: the fixed answer, without waiting (as the door's sold-out claims are)."""

    body_limit = 16 * 1024

    def answer(self, request: Request) -> Response:
        return _ANSWER

    def close(self) -> None:
        pass


def bare(args: argparse.Namespace) -> Bare:
    return Bare()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], bare, prog="bare_post"))
