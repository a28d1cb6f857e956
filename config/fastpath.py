"""The claim's fast path: POST /api/v1/campaigns/{id}/claim answered before Django's request cycle.

The claim is what tens of thousands of shoppers send in the same second; Django's middleware, URL
resolution and request/response objects cost more than the claim itself. This WSGI wrapper answers exactly
that route with the same implementation the Django view uses (orders.apis.claim_answer: token check, id
and Idempotency-Key validation, the Lua script, the answer) and hands every other request to Django.
"""
from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Iterable
from typing import Any

from orders.apis import claim_answer

from .api import MAX_BODY_BYTES, body_of
from .logs import request_id_from, request_id_var

log = logging.getLogger(__name__)
CLAIM_PATH = re.compile(r"/api/v1/campaigns/([^/]+)/claim")
_STATUS_LINES = {200: "200 OK", 400: "400 Bad Request", 401: "401 Unauthorized", 404: "404 Not Found",
                 405: "405 Method Not Allowed", 413: "413 Payload Too Large", 415: "415 Unsupported Media Type",
                 429: "429 Too Many Requests", 500: "500 Internal Server Error", 503: "503 Service Unavailable"}
_BASE_HEADERS = [("Content-Type", "application/json"), ("X-Content-Type-Options", "nosniff")]

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class ClaimFastPath:
    def __init__(self, app: WSGIApp) -> None:
        self.app = app

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        match = CLAIM_PATH.fullmatch(environ.get("PATH_INFO", ""))
        if match is None or environ.get("REQUEST_METHOD") != "POST":
            return self.app(environ, start_response)  # everything else, and other methods (405), is Django's
        request_id = request_id_from(environ)
        token = request_id_var.set(request_id)
        try:
            status, body, headers = claim_answer(environ, match.group(1), lambda: _read_body(environ))
        except Exception:  # never a bare 500 page: the contract's JSON, and the traceback in the log
            log.exception("claim failed")
            status, body, headers = 500, body_of(500, "server_error", "Internal error."), {}
        finally:
            request_id_var.reset(token)
        payload = json.dumps(body, separators=(",", ":")).encode()
        start_response(_STATUS_LINES.get(status, f"{status} Error"),
                       [*_BASE_HEADERS, ("Content-Length", str(len(payload))), ("X-Request-ID", request_id),
                        *headers.items()])
        return [payload]


def _read_body(environ: dict[str, Any]) -> bytes:
    length = int(environ.get("CONTENT_LENGTH") or 0)  # validated by the caller before it asks
    return environ["wsgi.input"].read(min(length, MAX_BODY_BYTES + 1)) if length else b""
