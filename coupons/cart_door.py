"""POST /api/v1/carts/validate on the event loop: the web server's worker (and the ASGI application) answers a
cart through the use case written once (coupons.carts.validation), its reads awaited on the loop (core.pg_loop,
the loop's Redis client) instead of handed to a Django thread, where each blocking call costs the worker a GIL
hand-off (docs/design.md, "Cost of a thread"; measured in docs/benchmarks.md).

Only a plain request is answered here: JSON in UTF-8 asked as JSON, a valid shopper token, a body that Django's
view would take (the same parser, the same input serializer instance: core.api.validated). Anything else (a
query string, another Accept or Content-Type, a bad token, a body the serializer refuses) is handed on untouched
to Django's view (coupons.apis.CartValidateApi), before anything is counted, so every refusal keeps its one
implementation there. What the validation itself raises is answered here as Django's view answers it: the
guard's 429 (nothing counted) and the 503 of a store that failed (the codes counted given back).
"""
from __future__ import annotations

import io
import logging
from collections.abc import Awaitable
from typing import Any

import orjson
from rest_framework.exceptions import ParseError, ValidationError
from rest_framework.renderers import JSONRenderer

from core.api import validated
from core.auth import tags_of
from core.errors import ApplicationError, unavailable_of
from core.handlers import PRIVATE_CACHE_CONTROL
from core.http import body_of, client_ip, declared_length, error_body, host_allowed, shopper_identity
from core.logs import request_id_from, request_id_var
from core.parsers import StrictJSONParser
from core.web import bad_host_response, headers_environ, server_host
from webserver.interface import JSON_HEADERS, Application, Request, Response

from .carts import cart_validate_async
from .guard import CodeLookups

log = logging.getLogger(__name__)
CART_PATH = "/api/v1/carts/validate"
# Every environ key the door reads (the Host; the shopper's token; the client's address; the body's kind), by raw name.
CART_ENVIRON_KEYS = {b"host": "HTTP_HOST", b"x-user-id": "HTTP_X_USER_ID", b"x-token": "HTTP_X_TOKEN",
                     b"x-shopper-tags": "HTTP_X_SHOPPER_TAGS", b"x-request-id": "HTTP_X_REQUEST_ID",
                     b"x-forwarded-for": "HTTP_X_FORWARDED_FOR", b"content-type": "CONTENT_TYPE",
                     b"content-length": "CONTENT_LENGTH", b"accept": "HTTP_ACCEPT"}
JSON_TYPES = frozenset({"application/json", "application/json; charset=utf-8", "application/json;charset=utf-8"})
ACCEPTED = frozenset({"*/*", "application/json"})  # and none: what DRF's negotiation answers with JSON alike
# The event loop's doors' headers (the claim's, the claim status's): JSON, nosniff, private, no-store.
HEADERS = [*JSON_HEADERS, (b"cache-control", PRIVATE_CACHE_CONTROL.encode())]
_PARSER, _RENDERER = StrictJSONParser(), JSONRenderer()  # the view's (REST_FRAMEWORK's defaults)
_FAILED = orjson.dumps(body_of(500, "server_error", "Internal error."))


class CartDoor:
    def __init__(self, inner: Application) -> None:
        self.inner = inner
        self.body_limit = inner.body_limit

    def answer(self, request: Request) -> Response | Awaitable[Response]:
        if request.method == "POST" and request.path == CART_PATH and not request.query:
            return self.cart_response(request)
        return self.inner.answer(request)

    def close(self) -> None:
        self.inner.close()

    def cart_response(self, request: Request) -> Response | Awaitable[Response]:
        meta = headers_environ(request.headers, request.client, only=CART_ENVIRON_KEYS)
        request_id = request_id_from(meta)
        if not host_allowed(meta.get("HTTP_HOST") or server_host(request)):
            return bad_host_response((b"x-request-id", request_id.encode()))
        checked = _plain(meta, request.body)
        if checked is None:
            return self.inner.answer(request)
        return self._later(meta, checked, request_id)

    async def _later(self, meta: dict[str, Any], checked: tuple[str, frozenset[str], dict[str, Any]],
                     request_id: str) -> Response:
        user_id, channels, data = checked
        token = request_id_var.set(request_id)
        try:
            async with CodeLookups(user_id, client_ip(meta)) as lookups:  # codes not the shopper's own count first
                answer = await cart_validate_async(
                    user_id=user_id, cart=data["cart"], codes=data["codes"], lookups=lookups,
                    tags=tags_of(meta.get("HTTP_X_SHOPPER_TAGS")), channels=channels)
                lookups.misses = answer.misses
        except Exception as exc:
            error = exc if isinstance(exc, ApplicationError) else unavailable_of(exc)
            if error is None:  # never a bare 500 page: the contract's JSON, and the traceback in the log
                log.exception("cart validation failed")
                return 500, _headers(request_id), _FAILED
            extra = [(name.lower().encode(), value.encode()) for name, value in error.headers().items()]
            return error.http_status, _headers(request_id) + extra, orjson.dumps(error_body(error))
        finally:
            request_id_var.reset(token)
        return 200, _headers(request_id), _RENDERER.render(answer.body)


def _plain(meta: dict[str, Any], body: bytes) -> tuple[str, frozenset[str], dict[str, Any]] | None:
    """(the shopper, their storefront's channels, the checked cart) of a request this door answers, or None: one
    for Django's view. Nothing here counts or changes anything."""
    from .apis import CartValidateInputSerializer  # the view's module loads after the apps

    if (meta.get("CONTENT_TYPE") or "").lower() not in JSON_TYPES or meta.get("HTTP_ACCEPT", "*/*") not in ACCEPTED:
        return None
    length = meta.get("CONTENT_LENGTH")
    if length is not None and declared_length(length) is None:
        return None
    try:
        identity = shopper_identity(meta)
        data = _PARSER.parse(io.BytesIO(body))
        if not isinstance(data, dict):
            return None
        return identity.user_id, identity.channels, validated(CartValidateInputSerializer, data)
    except (ApplicationError, ParseError, ValidationError):
        return None


def _headers(request_id: str) -> list[tuple[bytes, bytes]]:
    return [*HEADERS, (b"x-request-id", request_id.encode())]
