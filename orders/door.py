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
import time
from collections.abc import Awaitable, Coroutine
from typing import Any

import orjson

from campaigns.redis_state import ClaimFlow, ClaimOutcome
from core.errors import ApplicationError
from core.handlers import PRIVATE_CACHE_CONTROL
from core.http import MAX_BODY_BYTES, body_of, error_body, host_allowed
from core.logs import request_id_or_new, request_id_var
from core.web import bad_host_response, server_host
from webserver.interface import JSON_HEADERS, Application, Request, Response

from .apis import claim_body, claim_decided_or_flow, claim_on_loop

log = logging.getLogger(__name__)
CLAIM_PATH = re.compile(r"/api/v1/campaigns/([^/]+)/claim")
# Every header the claim reads, by its raw name, in claim_response()'s order (Django's view reads the same ones from
# its environ: orders.apis.claim_answer; tests/orders/test_claim_door.py checks they are the same).
CLAIM_HEADER_NAMES = (b"host", b"x-user-id", b"x-token", b"x-shopper-tags", b"idempotency-key", b"content-length",
                      b"content-type", b"transfer-encoding", b"x-forwarded-for", b"x-request-id")
_SLOT = {name: n for n, name in enumerate(CLAIM_HEADER_NAMES)}


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
    is the JSON 400 of Django's routes (core.http.host_allowed: one lookup of a remembered decision).

    The headers are read as a WSGI server puts them in its environ (core.web.headers_environ): the raw bytes as
    latin-1, without the whitespace around them, a header twice joined by commas; a name with an underscore is
    none of these."""
    values: list[str | None] = [None] * 10
    for name, raw in request.headers:
        slot = _SLOT.get(name)
        if slot is not None:
            value = raw.decode("latin-1").strip(" \t")
            before = values[slot]
            values[slot] = value if before is None else f"{before},{value}"
    host, user_id, token, tags, key, length, content_type, transfer_encoding, forwarded_for, incoming_id = values
    request_id = request_id_or_new(incoming_id)
    if not host_allowed(host or server_host(request)):
        return bad_host_response((b"x-request-id", request_id.encode()))
    started = time.perf_counter()
    try:  # decided here, nothing logs: the request id goes on the log lines of the part that waits (_later)
        body = request.body
        answer = claim_decided_or_flow(campaign_id_text, user_id, token, tags, key, length, transfer_encoding,
                                       content_type, request.client, forwarded_for,
                                       lambda: body[: MAX_BODY_BYTES + 1], started)
    except Exception:  # never a bare 500 page: the contract's JSON, and the traceback in the log
        token_var = request_id_var.set(request_id)
        log.exception("claim failed")
        request_id_var.reset(token_var)
        return _failed(request_id)
    if type(answer) is ClaimFlow:
        return _later(claim_on_loop(answer, started), request_id)
    return _encoded(answer, request_id)  # type: ignore[arg-type]


async def _later(pending: Coroutine[Any, Any, ClaimOutcome | ApplicationError], request_id: str) -> Response:
    token = request_id_var.set(request_id)
    try:
        answer = await pending
    except Exception:
        log.exception("claim failed")
        return _failed(request_id)
    finally:
        request_id_var.reset(token)
    return _encoded(answer, request_id)


# A claim is the shopper's own (docs/api.md): no cache keeps it, as Django's routes answer (core/handlers.py).
CLAIM_HEADERS = [*JSON_HEADERS, (b"cache-control", PRIVATE_CACHE_CONTROL.encode())]
_REPLAYED = (b"idempotent-replayed", b"true")
_FAILED = orjson.dumps(body_of(500, "server_error", "Internal error."))


def _encoded(answer: ClaimOutcome | ApplicationError, request_id: str) -> Response:
    """The answer of a claim's outcome (orders.apis.claim_body) or of its refusal, the contract's JSON."""
    response_headers = [*CLAIM_HEADERS, (b"x-request-id", request_id.encode())]
    if type(answer) is ClaimOutcome:
        if answer.replayed:
            response_headers.append(_REPLAYED)
        return 200, response_headers, orjson.dumps(claim_body(answer))
    assert isinstance(answer, ApplicationError)
    response_headers += [(name.lower().encode(), value.encode()) for name, value in answer.headers().items()]
    return answer.http_status, response_headers, orjson.dumps(error_body(answer))


def _failed(request_id: str) -> Response:
    return 500, [*CLAIM_HEADERS, (b"x-request-id", request_id.encode())], _FAILED
