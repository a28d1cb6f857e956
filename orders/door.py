"""The claim's door on the event loop: POST /api/v1/campaigns/{id}/claim answered by the web server's worker
(and the ASGI application) without Django, through the claim's one implementation (orders.apis); every other
request is handed on. The script goes through the loop's auto-pipelined Redis connection
(campaigns/redis_async.py), so that a hundred shoppers' claims cost Redis one read and one write instead of a
hundred. A claim decided without Redis (a refusal, a campaign this process knows is sold out) is answered
without a coroutine: the Response itself.
"""
from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Coroutine
from typing import Any

import orjson

from core.handlers import PRIVATE_CACHE_CONTROL
from core.http import MAX_BODY_BYTES, body_of, host_allowed
from core.logs import request_id_from, request_id_var
from core.web import bad_host_response, headers_environ, server_host
from webserver.interface import JSON_HEADERS, Application, Request, Response

from .apis import Answer3, claim_answer_now

log = logging.getLogger(__name__)
CLAIM_PATH = re.compile(r"/api/v1/campaigns/([^/]+)/claim")
# Every environ key the claim's checks read (the Host here; orders.apis.claim_request_of the others:
# tests/orders/test_claim_door.py checks that it reads no other), by the header's raw name: the claim's environ
# holds these and REMOTE_ADDR only (the whole environ cost a tenth of a sold-out answer).
CLAIM_ENVIRON_KEYS = {b"host": "HTTP_HOST", b"x-user-id": "HTTP_X_USER_ID", b"x-token": "HTTP_X_TOKEN",
                      b"idempotency-key": "HTTP_IDEMPOTENCY_KEY", b"content-length": "CONTENT_LENGTH",
                      b"content-type": "CONTENT_TYPE", b"transfer-encoding": "HTTP_TRANSFER_ENCODING",
                      b"x-forwarded-for": "HTTP_X_FORWARDED_FOR", b"x-request-id": "HTTP_X_REQUEST_ID"}


class ClaimDoor:
    def __init__(self, inner: Application) -> None:
        self.inner = inner
        self.body_limit = max(inner.body_limit, MAX_BODY_BYTES)

    def answer(self, request: Request) -> Response | Awaitable[Response]:
        if request.method == "POST":
            match = CLAIM_PATH.fullmatch(request.path)
            if match is not None:
                return claim_response(request, match.group(1))
        return self.inner.answer(request)

    def close(self) -> None:
        self.inner.close()


def claim_response(request: Request, campaign_id_text: str) -> Response | Awaitable[Response]:
    """The claim's whole answer (or an awaitable of it), with the request's id on its log lines. A Host not ours
    is the JSON 400 of Django's routes (core.http.host_allowed: one lookup of a remembered decision)."""
    meta = headers_environ(request.headers, request.client, only=CLAIM_ENVIRON_KEYS)
    request_id = request_id_from(meta)
    if not host_allowed(meta.get("HTTP_HOST") or server_host(request)):
        return bad_host_response((b"x-request-id", request_id.encode()))
    try:  # decided here, nothing logs: the request id goes on the log lines of the part that waits (_later)
        answer = claim_answer_now(meta, campaign_id_text, request.body[: MAX_BODY_BYTES + 1])
    except Exception:  # never a bare 500 page: the contract's JSON, and the traceback in the log
        token = request_id_var.set(request_id)
        log.exception("claim failed")
        request_id_var.reset(token)
        answer = _FAILED
    if isinstance(answer, tuple):
        return _encoded(answer, request_id)
    return _later(answer, request_id)


async def _later(pending: Coroutine[Any, Any, Answer3], request_id: str) -> Response:
    token = request_id_var.set(request_id)
    try:
        answer = await pending
    except Exception:
        log.exception("claim failed")
        answer = _FAILED
    finally:
        request_id_var.reset(token)
    return _encoded(answer, request_id)


_FAILED: Answer3 = (500, body_of(500, "server_error", "Internal error."), {})


# A claim is the shopper's own (docs/api.md): no cache keeps it, as Django's routes answer (core/handlers.py).
CLAIM_HEADERS = [*JSON_HEADERS, (b"cache-control", PRIVATE_CACHE_CONTROL.encode())]


def _encoded(answer: Answer3, request_id: str) -> Response:
    status, body, headers = answer
    response_headers = [*CLAIM_HEADERS, (b"x-request-id", request_id.encode())]
    if headers:
        response_headers += [(name.lower().encode(), value.encode()) for name, value in headers.items()]
    return status, response_headers, orjson.dumps(body)
