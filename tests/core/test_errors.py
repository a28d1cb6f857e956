"""The one registry of errors (core/errors.py): each error class carries its HTTP form, and the contract's
rules hold for every class any app defines."""
from __future__ import annotations

import re
from pathlib import Path

import django.apps
import pytest

from core.errors import BUSINESS_CODES, PROTOCOL_SLUGS, SLUGS, ApplicationError, Code


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
        "not_combinable": 19, "not_applicable": 20, "min_quantity_not_met": 21,
        "budget_exhausted": 22, "group_limit_reached": 23}


def test_every_code_is_the_registrys_and_named_by_its_slug() -> None:
    assert [code for code in Code if code and SLUGS[code] != code.name.lower()] == []
    assert Code.DONE == BUSINESS_CODES["claimed"] == 0
    assert {BUSINESS_CODES[slug] for slug in ("claimed", "reserved", "redeemed", "released", "cancelled")} == {0}


def test_each_answer_of_a_script_and_of_pricing_is_the_registrys() -> None:
    """The Lua scripts keep their numbers: each enum of their replies (and pricing's slugs, the claim's statuses,
    the uses' refusals) agrees with the registry, and its script's own codes are none of the registry's."""
    from campaigns import pricing
    from campaigns.redis_state import ClaimCode, TakeCode
    from coupons.outcomes import REFUSALS
    from orders.claim import CLAIM_STATUSES

    for enum_ in (ClaimCode, TakeCode):
        shared = {member.name.lower(): int(member) for member in enum_ if int(member) in SLUGS}
        assert shared == {SLUGS[code]: code for code in shared.values()}, enum_
        own = [member for member in enum_ if member and int(member) not in SLUGS]
        assert [member for member in own if int(member) in BUSINESS_CODES.values()] == [], enum_
        assert enum_(0).name in ("CLAIMED", "TAKEN")
    assert {slug: code for code, slug in CLAIM_STATUSES.items()} == {
        slug: BUSINESS_CODES[slug] for slug in CLAIM_STATUSES.values()}
    assert {code: slug for code, (slug, _) in REFUSALS.items()} == {code: SLUGS[code] for code in REFUSALS}
    refusals = (pricing.NOT_COMBINABLE, pricing.NOT_APPLICABLE, pricing.MIN_QUANTITY_NOT_MET, pricing.MIN_SPEND_NOT_MET)
    assert set(refusals) <= set(BUSINESS_CODES)


LUA = Path(__file__).resolve().parents[2] / "campaigns" / "lua"


def test_the_lua_scripts_numbers_are_the_registrys() -> None:
    """The scripts' return codes are the enums' (so the registry's, above), and where a script's header names a
    code's slug ("1 limit_reached"), it names the registry's."""
    from campaigns.redis_state import ClaimCode, TakeCode

    take = (LUA / "code_take.lua").read_text()
    assert {int(n) for n in re.findall(r"^\s*return (-?\d+)\s*$", take, re.M)} == {int(code) for code in TakeCode}
    claim = (LUA / "claim.lua").read_text()
    answered = {int(n) for n in re.findall(r"return '(-?\d+):", claim)} | {
        int(n) for line in claim.splitlines() if re.match(r"\s*(local )?(code|answer)\b", line)
        for n in re.findall(r"'(-?\d+):?'", line)}
    assert answered == {int(code) for code in ClaimCode}
    for script in (take, claim):
        header = script.split("--]]", 1)[0]
        named = [(int(n), slug) for n, slug in re.findall(r"(-?\d+) ([a-z_]+)\b", header) if slug in BUSINESS_CODES]
        assert len(named) >= 5 and [(n, slug) for n, slug in named if BUSINESS_CODES[slug] != n] == []
