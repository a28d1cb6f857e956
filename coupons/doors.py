"""A shopper's reads on the event loop: POST /api/v1/carts/validate and GET /api/v1/me/coupons answered by the web
server's worker (and the ASGI application) through their use cases written once (coupons.carts.validation;
coupons.selectors.UserCoupons and coupons.mine.coupons_shown), their reads awaited on the loop (core.pg_loop, the
loop's Redis client) instead of handed to a Django thread, where each blocking call costs the worker a GIL
hand-off (docs/design.md, "Cost of a thread"; measured in docs/benchmarks.md).

Only a plain request is answered here: a valid shopper token, no query string, an answer asked as JSON, and for a
cart JSON in UTF-8 that Django's view would take (the same parser, the same input serializer instance:
core.api.validated). Anything else (another Accept or Content-Type, a bad token, a body the serializer refuses) is
handed on untouched to Django's view (coupons.apis.CartValidateApi, coupons.mine.MyCouponsApi) before anything is
counted or changed, so every refusal keeps its one implementation there. So is a list the view would change or
link: a shopper with a coupon due to lapse or expire (the view settles it first), with none, or with more than
one page. What a cart's validation itself raises is answered here as the view answers it: the guard's 429
(nothing counted) and the 503 of a store that failed (the codes counted given back).
"""
from __future__ import annotations

import io
import logging
from collections.abc import Awaitable
from typing import Any, NamedTuple

import orjson
from rest_framework.exceptions import ParseError, ValidationError
from rest_framework.renderers import JSONRenderer
from rest_framework.serializers import Serializer

from core.api import validated
from core.auth import Identity, tags_of
from core.errors import ApplicationError, unavailable_of
from core.handlers import PRIVATE_CACHE_CONTROL
from core.http import body_of, client_ip, declared_length, error_body, host_allowed, shopper_identity
from core.logs import request_id_from, request_id_var
from core.parsers import StrictJSONParser
from core.web import bad_host_response, headers_environ, server_host
from webserver.interface import JSON_HEADERS, Application, Request, Response

from .apis import CartValidateInputSerializer
from .carts import cart_validate_async
from .guard import CodeLookups
from .mine import CouponPagination, coupons_shown, drf_json
from .selectors import UserCoupons

log = logging.getLogger(__name__)
CART_PATH, MINE_PATH = "/api/v1/carts/validate", "/api/v1/me/coupons"
# Every environ key the doors read (the Host; the shopper's token; the client's address; the body's kind; a use's
# Idempotency-Key: coupons/use_door.py), by raw name.
ENVIRON_KEYS = {b"host": "HTTP_HOST", b"x-user-id": "HTTP_X_USER_ID", b"x-token": "HTTP_X_TOKEN",
                     b"x-shopper-tags": "HTTP_X_SHOPPER_TAGS", b"x-request-id": "HTTP_X_REQUEST_ID",
                     b"x-forwarded-for": "HTTP_X_FORWARDED_FOR", b"content-type": "CONTENT_TYPE",
                     b"content-length": "CONTENT_LENGTH", b"accept": "HTTP_ACCEPT",
                     b"idempotency-key": "HTTP_IDEMPOTENCY_KEY"}
JSON_TYPES = frozenset({"application/json", "application/json; charset=utf-8", "application/json;charset=utf-8"})
JSON_RANGES = frozenset({"*/*", "application/*", "application/json"})
# The event loop's doors' headers (the claim's, the claim status's): JSON, nosniff, private, no-store.
HEADERS = [*JSON_HEADERS, (b"cache-control", PRIVATE_CACHE_CONTROL.encode())]
PARSER, RENDERER = StrictJSONParser(), JSONRenderer()  # the view's (REST_FRAMEWORK's defaults)
_FAILED = orjson.dumps(body_of(500, "server_error", "Internal error."))


class ShopperDoors:
    def __init__(self, inner: Application) -> None:
        self.inner = inner
        self.body_limit = inner.body_limit

    def answer(self, request: Request) -> Response | Awaitable[Response]:
        if not request.query:
            if request.method == "POST" and request.path == CART_PATH:
                return self.cart_response(request)
            if request.method == "GET" and request.path == MINE_PATH:
                return self.mine_response(request)
        return self.inner.answer(request)

    def close(self) -> None:
        self.inner.close()

    def cart_response(self, request: Request) -> Response | Awaitable[Response]:
        opened = opened_request(request)
        if not isinstance(opened, Opened):
            return opened
        meta, request_id = opened
        checked = _plain_cart(meta, request.body)
        if checked is None:
            return self.inner.answer(request)
        return self._cart(meta, checked, request_id)

    def mine_response(self, request: Request) -> Response | Awaitable[Response]:
        opened = opened_request(request)
        if not isinstance(opened, Opened):
            return opened
        meta, request_id = opened
        if not asks_json(meta.get("HTTP_ACCEPT")):
            return self.inner.answer(request)
        try:
            user_id = shopper_identity(meta).user_id
        except ApplicationError:
            return self.inner.answer(request)
        return self._mine(request, user_id, request_id)

    async def _mine(self, request: Request, user_id: str, request_id: str) -> Response:
        """The first page of the shopper's coupons when it is the whole list and nothing in it is due; else
        Django's view's answer (it settles what is due, and links the pages)."""
        coupons = UserCoupons(user_id=user_id, status=None)
        try:
            rows = await coupons.read(slice(0, CouponPagination.page_size)).run_async()
        except Exception as exc:
            return failed_response(exc, request_id)
        if not rows or coupons.due or (coupons.total or 0) > CouponPagination.page_size:
            handed = self.inner.answer(request)
            return handed if isinstance(handed, tuple) else await handed
        body = {"code": 0, "status": "ok", "count": coupons.total, "next": None, "previous": None,
                "results": coupons_shown(rows)}
        return 200, answer_headers(request_id), drf_json(body)

    async def _cart(self, meta: dict[str, Any], checked: tuple[str, frozenset[str], dict[str, Any]],
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
            return failed_response(exc, request_id)
        finally:
            request_id_var.reset(token)
        return 200, answer_headers(request_id), RENDERER.render(answer.body)


class Opened(NamedTuple):
    meta: dict[str, Any]  # the headers the doors read, as a WSGI environ holds them
    request_id: str


def opened_request(request: Request) -> Opened | Response:
    """The request's headers and id, or the JSON 400 of a Host not ours (core.http.host_allowed)."""
    meta = headers_environ(request.headers, request.client, only=ENVIRON_KEYS)
    request_id = request_id_from(meta)
    if not host_allowed(meta.get("HTTP_HOST") or server_host(request)):
        return bad_host_response((b"x-request-id", request_id.encode()))
    return Opened(meta, request_id)


def failed_response(exc: Exception, request_id: str) -> Response:
    """The answer Django's view gives to what a use case raised: its contract error, the 503 of a store that
    failed, or the contract's 500 (never a bare 500 page), its traceback in the log."""
    error = exc if isinstance(exc, ApplicationError) else unavailable_of(exc)
    if error is None:
        token = request_id_var.set(request_id)
        log.exception("a shopper's request failed past Django's view")
        request_id_var.reset(token)
        return 500, answer_headers(request_id), _FAILED
    extra = [(name.lower().encode(), value.encode()) for name, value in error.headers().items()]
    return error.http_status, answer_headers(request_id) + extra, orjson.dumps(error_body(error))


def _plain_cart(meta: dict[str, Any], body: bytes) -> tuple[str, frozenset[str], dict[str, Any]] | None:
    """(the shopper, their storefront's channels, the checked cart) of a request this door answers, or None: one
    for Django's view."""
    checked = plain_json(meta, body, CartValidateInputSerializer)
    return None if checked is None else (checked[0].user_id, checked[0].channels, checked[1])


def plain_json(meta: dict[str, Any], body: bytes, serializer: type[Serializer]
               ) -> tuple[Identity, dict[str, Any]] | None:
    """(who the shopper's token says they are, the body checked by the view's input `serializer`) of a plain JSON
    request a door answers: JSON in UTF-8 of the length declared, an answer asked as JSON, a valid token, a JSON
    object the serializer accepts (the view's parser and serializer instance: core.api.validated). None: one for
    Django's view. Nothing here counts or changes anything."""
    if (meta.get("CONTENT_TYPE") or "").lower() not in JSON_TYPES or not asks_json(meta.get("HTTP_ACCEPT")):
        return None
    length = meta.get("CONTENT_LENGTH")
    if length is not None and declared_length(length) != len(body):  # bad, or a body not read whole
        return None
    try:
        identity = shopper_identity(meta)
        data = PARSER.parse(io.BytesIO(body))
        if not isinstance(data, dict):
            return None
        return identity, validated(serializer, data)
    except (ApplicationError, ParseError, ValidationError):
        return None


def asks_json(accept: str | None) -> bool:
    """Whether DRF's negotiation (REST_FRAMEWORK's one JSON renderer) answers an Accept header's value with the JSON
    the doors write: none, or media ranges without parameters of which one takes JSON ("application/json, text/plain,
    */*", as browsers' and HTTP libraries' defaults send). A parameter ("; indent=2" changes DRF's rendering; q
    values) or nothing JSON (DRF's 406) is the view's to answer."""
    if accept is None:
        return True
    ranges = [part.strip().lower() for part in accept.split(",")]
    return not any(";" in media for media in ranges) and any(media in JSON_RANGES for media in ranges)


def answer_headers(request_id: str) -> list[tuple[bytes, bytes]]:
    return [*HEADERS, (b"x-request-id", request_id.encode())]
