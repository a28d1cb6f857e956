"""Service endpoints: /healthz (process alive) and /readyz (database, Redis and broker reachable)."""
from __future__ import annotations

from django.db import connection
from django.http import HttpRequest, HttpResponse

from campaigns.redis_state import redis_client

from .api import body_of, json_response


def healthz(request: HttpRequest) -> HttpResponse:
    return json_response(body_of(0, "ok"))


def _check_database() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")


def _check_redis() -> None:
    redis_client().ping()


def _check_broker() -> None:
    from config.celery import app

    with app.connection_for_write() as conn:
        conn.ensure_connection(max_retries=1, interval_start=0, interval_step=0, timeout=1)


def readyz(request: HttpRequest) -> HttpResponse:
    checks = {}
    for name, check in (("database", _check_database), ("redis", _check_redis), ("broker", _check_broker)):
        try:
            check()
            checks[name] = "ok"
        except Exception as exc:  # any failure means not ready; say which and why
            checks[name] = f"unavailable: {type(exc).__name__}"
    ready = all(v == "ok" for v in checks.values())
    body = body_of(0, "ok", checks=checks) if ready else body_of(503, "unavailable", checks=checks)
    return json_response(body, 200 if ready else 503, None if ready else {"Retry-After": "1"})
