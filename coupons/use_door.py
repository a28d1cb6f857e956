"""A coupon's use past Django's handler: POST /api/v1/coupons/{code}/redeem, reserve, confirm and release checked on
the event loop and run in a Django thread by their one use case (coupons.apis.use_answer), without the request's
trip through Django's handler, its middleware and DRF's view, which cost a claimed coupon's use a third of its CPU
(docs/benchmarks.md). No throttle is skipped: the API's views have none (the unknown-code guard is the use case's).

Only a plain request is taken, as coupons/doors.py takes a cart: a Host of ours, a valid shopper token, no query
string, a code of ASCII, an answer asked as JSON, a body of JSON in UTF-8 that the view's input serializer accepts
(the same parser, the same serializer instance) and an Idempotency-Key as the view takes it. Anything else is
handed on untouched to Django's view (coupons.apis.CouponUseApi) before anything is counted or changed: every
refusal of a request keeps its one implementation there. In the thread the use runs as it runs under Django:
Django's request signals (its connection checked and closed as a request's), every statement bounded as the
API's are (core.postgresql), the request's id in its log lines; what it raises is answered as the view answers
it (core.errors: the contract's error, the 503 of a store that failed), and its answer is counted as the view
counts it (coupons.apis.count_use).
"""
from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable
from typing import Any, NamedTuple

import orjson
from django.core import signals

from core.api import Shopper
from core.auth import tags_of
from core.errors import ApplicationError
from core.http import client_ip, idempotency_key_of
from core.logs import add_log_fields, log_fields_var, request_id_var
from core.postgresql.base import API_STATEMENT_SECONDS, statements_bounded
from core.web import DjangoThreads
from webserver.interface import Application, Request, Response

from .apis import (
    CouponConfirmApi,
    CouponRedeemApi,
    CouponReleaseApi,
    CouponReserveApi,
    CouponUseApi,
    count_use,
    use_answer,
)
from .doors import RENDERER, Opened, answer_headers, failed_response, opened_request, plain_json

USE_PATH = re.compile(r"/api/v1/coupons/([^/]+)/(redeem|reserve|confirm|release)")
OPERATIONS: dict[str, type[CouponUseApi]] = {
    view.operation: view for view in (CouponRedeemApi, CouponReserveApi, CouponConfirmApi, CouponReleaseApi)}
_REPLAYED = (b"idempotent-replayed", b"true")


class _Use(NamedTuple):
    """A plain use's checked request: what the view would have made of it."""

    operation: type[CouponUseApi]
    code: str
    shopper: Shopper
    ip: str | None
    key: str | None
    data: dict[str, Any]
    request_id: str


class UseDoor:
    """The layer of the stack (config/asgi.py) that takes plain uses to `django`'s threads by their use case."""

    def __init__(self, inner: Application, django: DjangoThreads) -> None:
        self.inner, self.executor = inner, django.executor
        self.body_limit = inner.body_limit

    def answer(self, request: Request) -> Response | Awaitable[Response]:
        if request.method == "POST" and not request.query:
            match = USE_PATH.fullmatch(request.path)
            if match is not None and match[1].isascii():
                opened = opened_request(request)
                if not isinstance(opened, Opened):
                    return opened
                use = _plain_use(request, opened, match[1], OPERATIONS[match[2]])
                if use is not None:
                    return self._answered(use)
        return self.inner.answer(request)

    def close(self) -> None:
        self.inner.close()

    async def _answered(self, use: _Use) -> Response:
        return await asyncio.get_running_loop().run_in_executor(self.executor, _run, use)


def _plain_use(request: Request, opened: Opened, code: str, operation: type[CouponUseApi]) -> _Use | None:
    """The checked request of a use this door takes (coupons.doors.plain_json, and an Idempotency-Key as the view
    reads it: trimmed, a repeated header's values joined), or None: one for Django's view. Nothing here counts or
    changes anything."""
    meta = opened.meta
    checked = plain_json(meta, request.body, operation.InputSerializer)
    if checked is None:
        return None
    identity, data = checked
    try:
        key = idempotency_key_of(meta, required=operation.key_required)
    except ApplicationError:
        return None
    shopper = Shopper(identity.user_id, tags_of(meta.get("HTTP_X_SHOPPER_TAGS")), identity.channels)
    return _Use(operation, code, shopper, client_ip(meta), key, data, opened.request_id)


def _run(use: _Use) -> Response:
    """The use in a Django thread, as Django's handler and the view run it."""
    token, fields = request_id_var.set(use.request_id), log_fields_var.set(None)
    try:
        signals.request_started.send(sender=UseDoor)  # Django's connections checked, as at a request's start
        add_log_fields(shopper=use.shopper.user_id)
        with statements_bounded(API_STATEMENT_SECONDS):
            answer = use_answer(use.operation, use.code, use.shopper.user_id, use.ip, use.key,
                                use.operation.call(use.data, use.shopper))
        count_use(use.operation.operation, answer.status, answer.body)
        headers = answer_headers(use.request_id)
        if answer.replayed:
            headers.append(_REPLAYED)
        return answer.status, headers, RENDERER.render(answer.body)
    except Exception as exc:  # noqa: BLE001 - answered as the view answers it
        status, headers, body = failed_response(exc, use.request_id)
        count_use(use.operation.operation, status, orjson.loads(body) if isinstance(body, bytes) else None)
        return status, headers, body
    finally:
        log_fields_var.reset(fields)
        request_id_var.reset(token)
        signals.request_finished.send(sender=UseDoor)  # and closed or kept, as at its end
