"""The one home of errors and codes (docs/api.md, Answers).

BUSINESS_CODES (core/codes.py, re-exported here) is the one registry of business codes and their slugs (HTTP 200);
`Code` lists those a decided request answers with. An ApplicationError carries its whole HTTP form: `http_status`,
`code`, `status` (the stable slug), `message` and `retry_after` (seconds, or None). One function gives their JSON
(core.http.error_body), which DRF's views (core.api.exception_handler) and the doors on the event loop
(orders/apis.py, orders/status_door.py) send; nothing else maps a status to a slug or a Retry-After. Every subclass
is registered in ApplicationError.registry, and tests/core/test_errors.py checks that each slug has one HTTP status.
"""
from __future__ import annotations

from typing import ClassVar

import psycopg
import redis
from django import db

from .codes import BUSINESS_CODES, SLUGS, Code  # noqa: F401  (the registry, re-exported: its home is core/codes.py)


class ApplicationError(Exception):
    """A refusal with a stable code and slug: raise a subclass, never build the JSON by hand."""

    http_status: ClassVar[int] = 400
    code: ClassVar[int] = 400  # the HTTP status for protocol errors
    status: ClassVar[str] = "invalid_request"
    message: str = ""
    retry_after: ClassVar[int | None] = None  # seconds, sent as Retry-After
    registry: ClassVar[dict[str, type[ApplicationError]]] = {}

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        ApplicationError.registry[f"{cls.__module__}.{cls.__qualname__}"] = cls

    def __init__(self, message: str = "", **extra: object) -> None:
        super().__init__(message or self.message)
        self.message = message or self.message
        self.extra = extra

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after)} if self.retry_after is not None else {}


class BadRequest(ApplicationError):
    message = "The request is malformed."


class BadHost(BadRequest):
    message = "The Host header names no host this service serves."


class Unauthenticated(ApplicationError):
    http_status = code = 401
    status = "unauthenticated"
    message = "Missing, invalid or expired token."


class NotFound(ApplicationError):
    http_status = code = 404
    status = "not_found"
    message = "Not found."


class Conflict(ApplicationError):
    http_status = code = 409
    status = "conflict"


class PayloadTooLarge(ApplicationError):
    http_status = code = 413
    status = "payload_too_large"
    message = "The request body is too large."


class UnsupportedMediaType(ApplicationError):
    http_status = code = 415
    status = "unsupported_media_type"
    message = "Send the body as application/json."


class RateLimited(ApplicationError):
    http_status = code = 429
    status = "rate_limited"
    message = "Too many requests; retry after a second."
    retry_after = 1


class Unavailable(ApplicationError):
    http_status = code = 503
    status = "unavailable"
    message = "A required store is unavailable; nothing was changed. Retry shortly."
    retry_after = 1


class OutcomeUnknown(Unavailable):
    """The request's effect may yet happen: work it handed to another thread (core.together) ran past the bound
    its request waits. Answered 503 like a store down; an Idempotency-Key stays in flight, so its repeat is not
    decided twice (coupons.idempotency: 409 until the key is stale, then decided again, which for a use gives
    the same use back)."""

    message = "Not decided in time; it may still be. Retry shortly with the same Idempotency-Key."


class StoreUnavailable(Exception):
    """Redis could not be reached or refused the command; nothing was changed by this request (raised by the
    Redis wrappers, campaigns.redis_state; answered as Unavailable)."""


# A store's failure, whichever door meets it: PostgreSQL down, hung past a bound, restarting or a connection cut
# (Django's wrappers and psycopg's own), Redis unreachable or too slow, and the Redis wrappers' StoreUnavailable.
_STORE_FAILURES = (db.OperationalError, db.InterfaceError, psycopg.OperationalError, psycopg.InterfaceError,
                   redis.ConnectionError, redis.TimeoutError, StoreUnavailable)


def unavailable_of(exc: BaseException) -> Unavailable | None:
    """The contract's answer to a store's failure (503 unavailable, Retry-After), or None: not one. The one
    mapping of both kinds of door: Django's (core.api.DatabaseUnavailableMiddleware) and the event loop's
    (orders/door.py, through orders.apis)."""
    if isinstance(exc, Unavailable):
        return exc
    if isinstance(exc, _STORE_FAILURES):
        return Unavailable()
    return None


# The slug of each HTTP status that a framework (DRF, Django) raises without an ApplicationError.
PROTOCOL_SLUGS = {
    400: "invalid_request",
    401: "unauthenticated",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    429: "rate_limited",
    500: "server_error",
    503: "unavailable",
}
