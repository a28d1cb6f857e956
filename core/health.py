"""Service endpoints: /healthz (process alive) and /readyz (every registered store reachable).

The database and the broker are checked here; an app adds the stores it needs with register_check() in its
AppConfig.ready() (campaigns adds Redis).
"""
from __future__ import annotations

from collections.abc import Callable

from celery import current_app
from django.db import connection
from django.http import HttpRequest, HttpResponse

from .api import body_of, json_response

_checks: dict[str, Callable[[], object]] = {}


def register_check(name: str, check: Callable[[], object]) -> None:
    """Make /readyz answer 503 while `check()` raises (name: the key in its `checks`)."""
    _checks[name] = check


def healthz(request: HttpRequest) -> HttpResponse:
    return json_response(body_of(0, "ok"))


def _check_database() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")


CHECK_SECONDS = 1.0  # each store's check answers within about this long, however the store fails

# The broker's connection for the check: every socket operation times out (the app's own options may have none,
# as in development), so a broker that accepts connections and never answers (frozen) makes /readyz a 503, not
# a request that hangs.
_BROKER_CHECK_OPTIONS = {"socket_timeout": CHECK_SECONDS, "socket_connect_timeout": CHECK_SECONDS,
                         "retry_on_timeout": False}


def _check_broker() -> None:
    with current_app.connection_for_write(transport_options=_BROKER_CHECK_OPTIONS) as conn:  # config.celery's app
        conn.ensure_connection(max_retries=1, interval_start=0, interval_step=0, timeout=CHECK_SECONDS)


register_check("database", _check_database)
register_check("broker", _check_broker)


def readyz(request: HttpRequest) -> HttpResponse:
    checks = {}
    for name, check in _checks.items():
        try:
            check()
            checks[name] = "ok"
        except Exception as exc:  # any failure means not ready; say which and why
            checks[name] = f"unavailable: {type(exc).__name__}"
    ready = all(v == "ok" for v in checks.values())
    body = body_of(0, "ok", checks=checks) if ready else body_of(503, "unavailable", checks=checks)
    return json_response(body, 200 if ready else 503, None if ready else {"Retry-After": "1"})
