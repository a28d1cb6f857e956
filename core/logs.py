"""Structured logs: one JSON object per line, with the request id of the request being served.

The request id comes from the X-Request-ID header when it is a sane token (a proxy's), or is made here; it
is sent back in X-Request-ID and put on every log line of the request. Never log a token or a secret: the
formatter writes the message, the logger, the level and the `extra` fields given (campaign, claim_id ...).
"""
from __future__ import annotations

import contextvars
import json
import logging
import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from django.http import HttpRequest, HttpResponse

from .hot import unique_hex

request_id_var: contextvars.ContextVar[str | None] = contextvars.ContextVar("request_id", default=None)
# What is known of the work in hand (campaign, shopper, claim_id ...): put on every log line it makes.
log_fields_var: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar("log_fields", default=None)
REQUEST_ID_RE = re.compile(r"[A-Za-z0-9._-]{8,64}")
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime", "request_id"}


def request_id_from(meta: Any) -> str:
    """Return the incoming X-Request-ID (of a WSGI environ) if it is a sane token, else a new one."""
    return request_id_or_new(meta.get("HTTP_X_REQUEST_ID"))


def request_id_or_new(incoming: str | None) -> str:
    """Return `incoming` (an X-Request-ID header's value) if it is a sane token, else a new request id."""
    return incoming if incoming and REQUEST_ID_RE.fullmatch(incoming) else unique_hex()


def add_log_fields(**fields: Any) -> None:
    """Put these fields on every log line of the work in hand from now on (a request: its middleware or
    fast path forgets them at its end; a task: log_fields())."""
    current = log_fields_var.get()
    log_fields_var.set({**current, **fields} if current else fields)


class log_fields:  # noqa: N801  (used as a function: `with log_fields(campaign=42):`)
    """add_log_fields() for a block, forgotten after it. A class, not a generator: the claim enters one per
    request."""

    __slots__ = ("fields", "token")

    def __init__(self, **fields: Any) -> None:
        self.fields = fields

    def __enter__(self) -> None:
        self.token = log_fields_var.set({**(log_fields_var.get() or {}), **self.fields})

    def __exit__(self, *exc: object) -> None:
        log_fields_var.reset(self.token)


def _record_factory(factory: Callable[..., logging.LogRecord]) -> Callable[..., logging.LogRecord]:
    def make(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = factory(*args, **kwargs)
        fields = log_fields_var.get()
        if fields:
            for name, value in fields.items():
                if value is not None and name not in record.__dict__:
                    setattr(record, name, value)
        return record

    make.couponrush = True  # type: ignore[attr-defined]
    return make


if not getattr(logging.getLogRecordFactory(), "couponrush", False):
    logging.setLogRecordFactory(_record_factory(logging.getLogRecordFactory()))


class RequestIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = request_id_var.get() or "-"
        return True


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, tz=UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        request_id = getattr(record, "request_id", None)
        if request_id and request_id != "-":
            line["request_id"] = request_id
        for name, value in vars(record).items():
            if name not in _STANDARD and not name.startswith("_"):
                line[name] = value if isinstance(value, str | int | float | bool | type(None)) else str(value)
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False)


class RequestIdMiddleware:
    """Give every Django request an id (log lines, and the X-Request-ID answer header)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        request_id = request_id_from(request.META)
        token = request_id_var.set(request_id)
        fields = log_fields_var.set(None)
        try:
            response = self.get_response(request)
        finally:
            log_fields_var.reset(fields)
            request_id_var.reset(token)
        response["X-Request-ID"] = request_id
        return response
