"""The one registry of errors (core/errors.py): each error class carries its HTTP form, and the contract's
rules hold for every class any app defines."""
from __future__ import annotations

import django.apps
import pytest

from core.errors import PROTOCOL_SLUGS, ApplicationError, Code


@pytest.fixture(scope="module")
def registry() -> dict[str, type[ApplicationError]]:
    for config in django.apps.apps.get_app_configs():  # every app's modules that define errors, loaded
        for module in ("errors", "services", "apis", "idempotency", "extension", "claim", "drain", "cancel"):
            try:
                __import__(f"{config.name}.{module}")
            except ModuleNotFoundError:
                pass
    return ApplicationError.registry


def test_the_registry_holds_the_errors_of_every_app(registry) -> None:
    modules = {name.split(".")[0] for name in registry}
    assert {"core", "campaigns", "coupons", "orders"} <= modules


def test_each_slug_has_one_http_status(registry) -> None:
    statuses: dict[str, set[int]] = {}
    for error in registry.values():
        statuses.setdefault(error.status, set()).add(error.http_status)
    assert {slug: found for slug, found in statuses.items() if len(found) > 1} == {}


def test_a_protocol_error_uses_the_contracts_slug_for_its_status(registry) -> None:
    wrong = {name: (error.http_status, error.status) for name, error in registry.items()
             if error.http_status in (400, 401, 404, 413, 415, 429, 503)
             and PROTOCOL_SLUGS[error.http_status] != error.status}
    assert wrong == {}


def test_every_error_a_client_may_retry_says_when(registry) -> None:
    """429, 503 and the Idempotency-Key in flight carry Retry-After (docs/api.md, Answers)."""
    silent = [name for name, error in registry.items()
              if (error.http_status in (429, 503) or error.status == "idempotency_in_flight")
              and error.retry_after is None]
    assert silent == []
    assert ApplicationError.registry["core.errors.RateLimited"]().headers() == {"Retry-After": "1"}


def test_business_codes_are_never_renumbered() -> None:
    assert {code.name.lower(): code.value for code in Code} == {
        "done": 0, "limit_reached": 1, "sold_out": 2, "not_started": 3, "ended": 4, "paused": 5, "expired": 10,
        "already_redeemed": 11, "min_spend_not_met": 12, "not_yet_valid": 13, "revoked": 14, "not_eligible": 15,
        "on_hold": 16, "hold_lapsed": 17, "not_held": 18,
        "not_combinable": 19, "not_applicable": 20, "min_quantity_not_met": 21}
