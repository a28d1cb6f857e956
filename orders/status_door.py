"""GET /api/v1/claims/{claim_id} on the event loop: the web server's worker (and the ASGI application) answers what
Redis knows exactly (orders/claim_status.py: pending, and the answer the drain stored when it issued the coupon),
long polls included, through the loop's pipelined Redis client; what PostgreSQL decides, and any request when
Redis fails, it hands on to Django (orders.apis.ClaimDetailApi, the same decisions, then PostgreSQL). Every other
request is handed on untouched.
"""
from __future__ import annotations

import logging
import re
from collections.abc import Awaitable

import orjson

from core.errors import ApplicationError
from core.http import error_body, host_allowed
from core.logs import request_id_from, request_id_var
from core.web import bad_host_response, headers_environ, server_host
from webserver.interface import Application, Request, Response

from .claim_status import HandOn, StatusRequest, claim_status_async, status_request_of, waits_in_query
from .door import CLAIM_HEADERS

log = logging.getLogger(__name__)
STATUS_PATH = re.compile(r"/api/v1/claims/([^/]+)")
# Every environ key the checks read (the Host; core.http.authenticated_user; the request id), by raw name.
STATUS_ENVIRON_KEYS = {b"host": "HTTP_HOST", b"x-user-id": "HTTP_X_USER_ID", b"x-token": "HTTP_X_TOKEN",
                       b"x-shopper-tags": "HTTP_X_SHOPPER_TAGS", b"x-request-id": "HTTP_X_REQUEST_ID"}


class ClaimStatusDoor:
    def __init__(self, inner: Application) -> None:
        self.inner = inner
        self.body_limit = inner.body_limit

    def answer(self, request: Request) -> Response | Awaitable[Response]:
        if request.method == "GET":
            match = STATUS_PATH.fullmatch(request.path)
            if match is not None:
                return self.status_response(request, match.group(1))
        return self.inner.answer(request)

    def close(self) -> None:
        self.inner.close()

    def status_response(self, request: Request, claim_id_text: str) -> Response | Awaitable[Response]:
        """The answer, or an awaitable of it: a refused request at once, the rest after Redis (or Django)."""
        meta = headers_environ(request.headers, request.client, only=STATUS_ENVIRON_KEYS)
        request_id = request_id_from(meta)
        if not host_allowed(meta.get("HTTP_HOST") or server_host(request)):
            return bad_host_response((b"x-request-id", request_id.encode()))
        try:
            checked = status_request_of(meta, claim_id_text, waits_in_query(request.query))
        except ApplicationError as exc:
            return _refused(exc, request_id)
        return self._later(request, checked, request_id)

    async def _later(self, request: Request, checked: StatusRequest, request_id: str) -> Response:
        token = request_id_var.set(request_id)
        try:
            body = await claim_status_async(checked)
        except HandOn:
            handed = self.inner.answer(request)
            return handed if isinstance(handed, tuple) else await handed
        except ApplicationError as exc:
            return _refused(exc, request_id)
        except Exception:  # never a bare 500 page: the contract's JSON, and the traceback in the log
            log.exception("claim status failed")
            return 500, _headers(request_id), orjson.dumps({"code": 500, "status": "server_error",
                                                            "detail": "Internal error."})
        finally:
            request_id_var.reset(token)
        return 200, _headers(request_id), body


def _headers(request_id: str, extra: dict[str, str] | None = None) -> list[tuple[bytes, bytes]]:
    headers = [*CLAIM_HEADERS, (b"x-request-id", request_id.encode())]  # the claim's: private, no-store
    if extra:
        headers += [(name.lower().encode(), value.encode()) for name, value in extra.items()]
    return headers


def _refused(exc: ApplicationError, request_id: str) -> Response:
    return exc.http_status, _headers(request_id, exc.headers()), orjson.dumps(error_body(exc))
