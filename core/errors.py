"""The one home of errors and codes (docs/api.md, Answers).

BUSINESS_CODES is the one registry of business codes and their slugs (HTTP 200); `Code` lists those a decided
request answers with. An ApplicationError carries its whole HTTP form: `http_status`, `code`, `status` (the
stable slug), `message` and `retry_after` (seconds, or None). One function gives their JSON (core.http.error_body),
which DRF's views (core.api.exception_handler) and the doors on the event loop (orders/apis.py,
orders/status_door.py) send; nothing else maps a status to a slug or a Retry-After. Every subclass is registered
in ApplicationError.registry, and tests/core/test_errors.py checks that each slug has one HTTP status.
"""
from __future__ import annotations

import enum
from typing import ClassVar

import psycopg
import redis
from django import db

# The one registry of business outcomes (docs/api.md, "Business codes"): each status slug a decided request (HTTP
# 200) may answer with, and its code, never renumbered (clients switch on them). Every enum of these codes takes
# its values from here (Code below; the Lua scripts' replies, campaigns.redis_state's ClaimCode and TakeCode) and
# every refusal's slug is looked up here (SLUGS): tests/core/test_errors.py checks the enums and the scripts'
# numbers against it, tests/test_docs.py this table against the contract's.
BUSINESS_CODES: dict[str, int] = {
    "claimed": 0, "reserved": 0, "redeemed": 0, "released": 0, "cancelled": 0,  # done: one slug an operation
    "limit_reached": 1,
    "sold_out": 2,
    "not_started": 3,
    "ended": 4,
    "paused": 5,
    "expired": 10,
    "already_redeemed": 11,
    "min_spend_not_met": 12,
    "not_yet_valid": 13,
    "revoked": 14,
    "not_eligible": 15,
    "on_hold": 16,
    "hold_lapsed": 17,  # 17 and 18, couponrush's: confirm of an order whose hold is no longer there
    "not_held": 18,
    "not_combinable": 19,  # 19-21: carts (issue 20), campaigns.pricing's refusals
    "not_applicable": 20,
    "min_quantity_not_met": 21,
    "budget_exhausted": 22,  # 22 and 23: named by the contract, answered by nothing yet (not in Code)
    "group_limit_reached": 23,
}

# The slug of each refusal's code (every code but 0, which has one slug an operation).
SLUGS: dict[int, str] = {code: slug for slug, code in BUSINESS_CODES.items() if code}


class Code(enum.IntEnum):
    """The business codes the service answers with, each the registry's (BUSINESS_CODES): a member's name is its
    slug in capitals, DONE (0) stands for each operation's own."""

    DONE = BUSINESS_CODES["claimed"]
    LIMIT_REACHED = BUSINESS_CODES["limit_reached"]
    SOLD_OUT = BUSINESS_CODES["sold_out"]
    NOT_STARTED = BUSINESS_CODES["not_started"]
    ENDED = BUSINESS_CODES["ended"]
    PAUSED = BUSINESS_CODES["paused"]
    EXPIRED = BUSINESS_CODES["expired"]
    ALREADY_REDEEMED = BUSINESS_CODES["already_redeemed"]
    MIN_SPEND_NOT_MET = BUSINESS_CODES["min_spend_not_met"]
    NOT_YET_VALID = BUSINESS_CODES["not_yet_valid"]
    REVOKED = BUSINESS_CODES["revoked"]
    NOT_ELIGIBLE = BUSINESS_CODES["not_eligible"]
    ON_HOLD = BUSINESS_CODES["on_hold"]
    HOLD_LAPSED = BUSINESS_CODES["hold_lapsed"]
    NOT_HELD = BUSINESS_CODES["not_held"]
    NOT_COMBINABLE = BUSINESS_CODES["not_combinable"]
    NOT_APPLICABLE = BUSINESS_CODES["not_applicable"]
    MIN_QUANTITY_NOT_MET = BUSINESS_CODES["min_quantity_not_met"]


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
