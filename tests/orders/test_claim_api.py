"""POST /api/v1/campaigns/{id}/claim through HTTP: every outcome of the contract, and the state behind it.

Each test asserts the answer and what Redis (stock, per-user counts, ledger, stored idempotent answers) and
PostgreSQL hold afterwards, so a request that must change nothing is shown to change nothing.
"""
from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import pytest
from django.test import override_settings
from django.utils import timezone

from campaigns.models import Campaign
from campaigns.redis_state import campaign_keys, redis_client, reset_redis_client
from campaigns.services import campaign_pause
from core.auth import mint_token, token_signature
from coupons.models import Coupon
from orders.models import Claim
from tests.conftest import shopper_headers
from tests.factories import CampaignFactory

pytestmark = pytest.mark.django_db

CLOSED_PORT_REDIS = "redis://127.0.0.1:1/0"


# --- helpers -------------------------------------------------------------------------------------------


def claim_url(campaign_id: Any) -> str:
    return f"/api/v1/campaigns/{campaign_id}/claim"


def claim(
    client: Any,
    campaign_id: Any,
    user: str = "alice",
    *,
    key: str | None = None,
    body: str | bytes = "{}",
    content_type: str = "application/json",
    headers: dict[str, str] | None = None,
) -> Any:
    """POST a claim as an authenticated shopper (or with the given raw headers instead)."""
    extra = shopper_headers(user) if headers is None else dict(headers)
    if key is not None:
        extra["HTTP_IDEMPOTENCY_KEY"] = key
    return client.post(claim_url(campaign_id), data=body, content_type=content_type, **extra)


def stock(campaign: Campaign) -> int | None:
    value = redis_client().get(campaign_keys(campaign.pk).stock)
    return None if value is None else int(value)


def users(campaign: Campaign) -> dict[str, int]:
    """Per-user claim counts (without the "" field load_state.lua keeps so that the hash exists)."""
    counts = redis_client().hgetall(campaign_keys(campaign.pk).users)
    return {k.decode(): int(v) for k, v in counts.items() if k != b""}


def ledger_length(campaign: Campaign) -> int:
    return redis_client().xlen(campaign_keys(campaign.pk).ledger)


def ledger_users(campaign: Campaign) -> list[str]:
    return [fields[b"u"].decode() for _, fields in redis_client().xrange(campaign_keys(campaign.pk).ledger)]


def stored_answers() -> list[bytes]:
    """Every idempotent answer Redis keeps, of any campaign."""
    return sorted(redis_client().scan_iter(match="cpn:*:idem:*"))


def state(campaign: Campaign) -> tuple[Any, ...]:
    """Everything a claim could change: Redis stock, users, ledger, stored answers; PostgreSQL rows."""
    return (
        stock(campaign),
        users(campaign),
        ledger_length(campaign),
        stored_answers(),
        Claim.objects.count(),
        Coupon.objects.count(),
    )


def assert_contract_error(response: Any, http_status: int, slug: str) -> None:
    assert response.status_code == http_status
    assert response["Content-Type"] == "application/json"
    body = response.json()
    assert body["code"] == http_status and body["status"] == slug


# --- business outcomes (HTTP 200) ------------------------------------------------------------------------


def test_first_claim_is_claimed_with_exactly_the_contract_body(client, live_campaign) -> None:
    # given
    campaign = live_campaign(total_stock=3)

    # when
    response = claim(client, campaign.pk, "alice")

    # then
    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"code", "status", "claim_id", "campaign_id"}
    assert body["code"] == 0 and body["status"] == "claimed" and body["campaign_id"] == campaign.pk
    [(entry_id, _)] = redis_client().xrange(campaign_keys(campaign.pk).ledger)
    assert body["claim_id"] == f"{campaign.pk}-{entry_id.decode()}"
    assert "Idempotent-Replayed" not in response
    assert stock(campaign) == 2 and users(campaign) == {"alice": 1} and ledger_users(campaign) == ["alice"]
    assert Claim.objects.count() == 0  # persisted later, by the drain


def test_claim_without_any_body_is_claimed(client, live_campaign) -> None:
    # given
    campaign = live_campaign(total_stock=3)

    # when: no body and no Content-Type at all
    response = client.generic("POST", claim_url(campaign.pk), **shopper_headers("alice"))

    # then
    assert response.status_code == 200 and response.json()["status"] == "claimed"
    assert stock(campaign) == 2 and ledger_length(campaign) == 1


def test_second_claim_by_the_same_shopper_is_refused_at_the_limit(client, live_campaign) -> None:
    # given
    campaign = live_campaign(total_stock=5, per_user_limit=1)
    assert claim(client, campaign.pk, "alice").json()["code"] == 0
    before = state(campaign)

    # when
    response = claim(client, campaign.pk, "alice")

    # then
    assert response.status_code == 200
    assert response.json() == {"code": 1, "status": "limit_reached", "claim_id": None, "campaign_id": campaign.pk}
    assert state(campaign) == before
    assert stock(campaign) == 4 and users(campaign) == {"alice": 1} and ledger_length(campaign) == 1


def test_claim_after_the_last_coupon_is_sold_out(client, live_campaign) -> None:
    # given
    campaign = live_campaign(total_stock=1)
    assert claim(client, campaign.pk, "alice").json()["code"] == 0
    before = state(campaign)

    # when
    response = claim(client, campaign.pk, "bob")

    # then
    assert response.status_code == 200
    assert response.json() == {"code": 2, "status": "sold_out", "claim_id": None, "campaign_id": campaign.pk}
    assert state(campaign) == before
    assert stock(campaign) == 0 and users(campaign) == {"alice": 1} and ledger_users(campaign) == ["alice"]


def test_claim_before_the_window_opens_is_not_started(client, live_campaign) -> None:
    # given
    starts = timezone.now() + timedelta(hours=1)
    campaign = live_campaign(starts_at=starts, ends_at=starts + timedelta(hours=2))
    before = state(campaign)

    # when
    response = claim(client, campaign.pk, "alice")

    # then
    assert response.status_code == 200
    assert response.json() == {"code": 3, "status": "not_started", "claim_id": None, "campaign_id": campaign.pk}
    assert state(campaign) == before and stock(campaign) == 10 and users(campaign) == {}


def test_claim_after_the_window_closed_is_ended(client, live_campaign) -> None:
    # given: a campaign created with its window in the past, then preheated (the check reads Redis meta)
    now = timezone.now()
    campaign = live_campaign(starts_at=now - timedelta(hours=3), ends_at=now - timedelta(hours=1))
    assert stock(campaign) == 10
    before = state(campaign)

    # when
    response = claim(client, campaign.pk, "alice")

    # then
    assert response.status_code == 200
    assert response.json() == {"code": 4, "status": "ended", "claim_id": None, "campaign_id": campaign.pk}
    assert state(campaign) == before and ledger_length(campaign) == 0


def test_claim_on_a_paused_campaign_is_paused(client, live_campaign) -> None:
    # given
    campaign = live_campaign(total_stock=5)
    campaign_pause(campaign=campaign)
    before = state(campaign)

    # when
    response = claim(client, campaign.pk, "alice")

    # then
    assert response.status_code == 200
    assert response.json() == {"code": 5, "status": "paused", "claim_id": None, "campaign_id": campaign.pk}
    assert state(campaign) == before and stock(campaign) == 5 and ledger_length(campaign) == 0


# --- idempotency ---------------------------------------------------------------------------------------


def test_repeating_a_claim_with_the_same_key_replays_the_first_answer_and_decrements_once(
    client, live_campaign
) -> None:
    # given
    campaign = live_campaign(total_stock=5, per_user_limit=3)
    first = claim(client, campaign.pk, "alice", key="order-1")

    # when
    again = claim(client, campaign.pk, "alice", key="order-1")

    # then
    assert first.status_code == again.status_code == 200
    assert first.json()["status"] == "claimed"
    assert again.content == first.content
    assert again.json()["claim_id"] == first.json()["claim_id"]
    assert again["Idempotent-Replayed"] == "true" and "Idempotent-Replayed" not in first
    assert stock(campaign) == 4 and users(campaign) == {"alice": 1} and ledger_length(campaign) == 1


def test_replayed_sold_out_stays_sold_out_even_when_stock_comes_back(client, live_campaign) -> None:
    # given: bob was told sold_out under key k, then a coupon came back into stock
    campaign = live_campaign(total_stock=1)
    claim(client, campaign.pk, "alice")
    first = claim(client, campaign.pk, "bob", key="k")
    assert first.json()["status"] == "sold_out"
    redis_client().incr(campaign_keys(campaign.pk).stock)

    # when
    again = claim(client, campaign.pk, "bob", key="k")

    # then
    assert again.status_code == 200 and again.content == first.content
    assert again.json() == {"code": 2, "status": "sold_out", "claim_id": None, "campaign_id": campaign.pk}
    assert again["Idempotent-Replayed"] == "true"
    assert stock(campaign) == 1 and users(campaign) == {"alice": 1} and ledger_length(campaign) == 1


def test_a_different_key_gets_a_new_decision(client, live_campaign) -> None:
    # given
    campaign = live_campaign(total_stock=5, per_user_limit=2)
    first = claim(client, campaign.pk, "alice", key="k-1")

    # when
    second = claim(client, campaign.pk, "alice", key="k-2")
    third = claim(client, campaign.pk, "alice", key="k-3")

    # then
    assert first.json()["status"] == second.json()["status"] == "claimed"
    assert second.json()["claim_id"] != first.json()["claim_id"]
    assert third.json()["status"] == "limit_reached"
    assert "Idempotent-Replayed" not in second and "Idempotent-Replayed" not in third
    assert stock(campaign) == 3 and users(campaign) == {"alice": 2} and ledger_length(campaign) == 2


def test_the_same_key_of_two_shoppers_gives_each_their_own_claim(client, live_campaign) -> None:
    # given
    campaign = live_campaign(total_stock=5)

    # when
    alice = claim(client, campaign.pk, "alice", key="same")
    bob = claim(client, campaign.pk, "bob", key="same")

    # then
    assert alice.json()["status"] == bob.json()["status"] == "claimed"
    assert alice.json()["claim_id"] != bob.json()["claim_id"] and "Idempotent-Replayed" not in bob
    assert stock(campaign) == 3 and users(campaign) == {"alice": 1, "bob": 1}


def test_a_key_of_255_printable_characters_is_accepted(client, live_campaign) -> None:
    # given
    campaign = live_campaign()
    key = ("~ !A-z0" * 40)[:255]

    # when
    response = claim(client, campaign.pk, key=key)
    again = claim(client, campaign.pk, key=key)

    # then
    assert response.json()["status"] == "claimed" and again["Idempotent-Replayed"] == "true"
    assert stock(campaign) == 9 and len(stored_answers()) == 1


# --- 400 -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key",
    ["k" * 256, "", "a\x01b", "tab\there", "del\x7f", "caf\u00e9", "\u2603", "line\nbreak"],
    ids=["256-chars", "empty", "control", "tab", "del", "latin1", "non-latin1", "newline"],
)
def test_a_bad_idempotency_key_is_a_bad_request_that_changes_nothing(client, live_campaign, key) -> None:
    # given
    campaign = live_campaign()
    before = state(campaign)

    # when
    response = claim(client, campaign.pk, "alice", key=key)

    # then
    assert_contract_error(response, 400, "invalid_request")
    assert state(campaign) == before and stock(campaign) == 10 and stored_answers() == []


@pytest.mark.parametrize(
    "body",
    ['{"a":', "{", "not json", b"\xff\xfe{}", '{"a": 1}{', "[]", "[{}]", '"claim"', "1", "null", "true"],
    ids=["truncated", "brace", "text", "bad-utf8", "trailing", "array", "array-of-object", "string", "number",
         "null", "bool"],
)
def test_a_body_that_is_not_a_json_object_is_a_bad_request_that_changes_nothing(
    client, live_campaign, body
) -> None:
    # given
    campaign = live_campaign()
    before = state(campaign)

    # when
    response = claim(client, campaign.pk, "alice", key="k", body=body)

    # then
    assert_contract_error(response, 400, "invalid_request")
    assert state(campaign) == before and stock(campaign) == 10 and stored_answers() == []


@pytest.mark.parametrize("body", ["[" * 5000, '{"a":' * 3000], ids=["nested-arrays", "nested-objects"])
def test_a_deeply_nested_json_body_is_a_bad_request_not_a_server_error(client, live_campaign, body) -> None:
    # given
    campaign = live_campaign()
    before = state(campaign)
    client.raise_request_exception = False  # see the answer the shopper would get

    # when
    response = claim(client, campaign.pk, "alice", key="k", body=body)

    # then
    assert_contract_error(response, 400, "invalid_request")
    assert state(campaign) == before


@pytest.mark.parametrize(
    "content_length, status, slug",
    [("\u00b2", 400, "invalid_request"), ("\u0662", 400, "invalid_request"), ("1e3", 400, "invalid_request"),
     ("-1", 400, "invalid_request"), ("1" + "0" * 12, 413, "payload_too_large"),
     ("9" * 5000, 413, "payload_too_large")],
    ids=["superscript", "arabic-indic", "exponent", "negative", "13-digits", "5000-digits"],
)
def test_a_content_length_that_is_no_length_is_a_bad_request_and_one_above_any_limit_too_large(
    client, live_campaign, content_length, status, slug,
) -> None:
    # given
    campaign = live_campaign()
    before = state(campaign)
    client.raise_request_exception = False

    # when
    response = client.post(
        claim_url(campaign.pk), data="{}", content_type="application/json", CONTENT_LENGTH=content_length,
        **shopper_headers("alice"),
    )

    # then (more digits than any limit were a 400)
    assert_contract_error(response, status, slug)
    assert state(campaign) == before


@pytest.mark.parametrize(
    "campaign_id",
    ["abc", "-1", "1e3", "0", "0" * 3, "01", "+1", "1.0", "9" * 30, "\u0664\u0662", "\uff11", "\u00b2"],
    ids=["letters", "negative", "exponent", "zero", "zeros", "leading-zero", "plus", "decimal", "30-digits",
         "arabic-indic", "fullwidth", "superscript"],
)
def test_a_campaign_id_that_is_not_an_id_is_a_bad_request(client, live_campaign, campaign_id) -> None:
    # given
    campaign = live_campaign()
    before, keys_before = state(campaign), redis_client().dbsize()

    # when
    response = claim(client, campaign_id, "alice", key="k")

    # then
    assert_contract_error(response, 400, "invalid_request")
    assert state(campaign) == before and redis_client().dbsize() == keys_before


# --- 401 -----------------------------------------------------------------------------------------------


def unauthenticated_body(client: Any, campaign: Campaign) -> bytes:
    """The answer to a claim without any identity: every refusal must look exactly like it."""
    response = claim(client, campaign.pk, headers={})
    assert_contract_error(response, 401, "unauthenticated")
    return response.content


def signed_headers(user_id: str, expires: int | str, *, signature: str | None = None) -> dict[str, str]:
    """Headers with a token signed for `user_id`, even one mint_token would refuse to sign."""
    return {
        "HTTP_X_USER_ID": user_id,
        "HTTP_X_TOKEN": f"{expires}.{signature if signature is not None else token_signature(user_id, expires)}",
    }


def in_a_minute() -> int:
    return int(time.time()) + 60


@pytest.mark.parametrize(
    "headers",
    [
        lambda: {},
        lambda: {"HTTP_X_USER_ID": "alice"},
        lambda: {"HTTP_X_TOKEN": mint_token("alice", ttl=60)},
        lambda: {"HTTP_X_USER_ID": "", "HTTP_X_TOKEN": mint_token("alice", ttl=60)},
        lambda: signed_headers("0042 ", in_a_minute()),
        lambda: signed_headers(" 0042", in_a_minute()),
        lambda: signed_headers("\u0664\u0662", in_a_minute()),
        lambda: signed_headers("\u00b2", in_a_minute()),
        lambda: signed_headers("a" * 65, in_a_minute()),
        lambda: signed_headers("alice\r\nX-Admin: 1", in_a_minute()),
        lambda: signed_headers("a.b", in_a_minute()),
        lambda: signed_headers("alice", int(time.time()) - 5),
        lambda: {"HTTP_X_USER_ID": "alice", "HTTP_X_TOKEN": mint_token("alice", ttl=60, now=time.time() - 120)},
        lambda: signed_headers("alice", int(time.time()) + 3600 + 120),
        lambda: signed_headers("alice", in_a_minute(), signature="0" * 64),
        lambda: signed_headers("alice", in_a_minute(), signature=token_signature("bob", in_a_minute())),
        lambda: signed_headers("alice", in_a_minute(), signature=token_signature("alice", in_a_minute()).upper()),
        lambda: {"HTTP_X_USER_ID": "alice", "HTTP_X_TOKEN": mint_token("bob", ttl=60)},
        lambda: signed_headers("alice", "abc"),
        lambda: signed_headers("alice", "1e9"),
        lambda: signed_headers("alice", f"{in_a_minute()}.5"),
        lambda: signed_headers("alice", f"\u0661{in_a_minute()}"),
        lambda: {"HTTP_X_USER_ID": "alice", "HTTP_X_TOKEN": ""},
        lambda: {"HTTP_X_USER_ID": "alice", "HTTP_X_TOKEN": " " + mint_token("alice", ttl=60)},
    ],
    ids=[
        "no-headers", "no-token", "no-user", "empty-user", "user-trailing-space", "user-leading-space",
        "user-arabic-indic-digits", "user-superscript", "user-65-chars", "user-crlf", "user-dot",
        "expired", "expired-minted", "too-far-ahead", "wrong-signature", "signature-of-another-user",
        "uppercase-signature", "token-of-another-user", "expiry-letters", "expiry-exponent", "expiry-decimal",
        "expiry-arabic-indic", "empty-token", "token-leading-space",
    ],
)
def test_a_claim_without_a_valid_identity_is_refused_with_the_one_401_body_and_changes_nothing(
    client, live_campaign, headers
) -> None:
    # given
    campaign = live_campaign()
    before = state(campaign)

    # when
    response = claim(client, campaign.pk, key="k", headers=headers())

    # then
    assert_contract_error(response, 401, "unauthenticated")
    assert response.content == unauthenticated_body(client, campaign)
    assert state(campaign) == before and stock(campaign) == 10 and users(campaign) == {}


def test_a_64_character_user_id_may_claim(client, live_campaign) -> None:
    # given
    campaign = live_campaign()
    user = "u" * 64

    # when
    response = claim(client, campaign.pk, user)

    # then
    assert response.json()["status"] == "claimed" and users(campaign) == {user: 1}


# --- 404 -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("campaign_id", ["987654", "2147483648", "9" * 18], ids=["unknown", "past-int32", "18-digits"])
def test_a_claim_on_an_unknown_campaign_is_not_found_and_leaves_no_trace(client, db, campaign_id) -> None:
    # when
    response = claim(client, campaign_id, "alice", key="k")

    # then
    assert_contract_error(response, 404, "not_found")
    assert redis_client().dbsize() == 0 and Campaign.objects.count() == 0


def test_a_claim_on_a_draft_campaign_is_not_found_and_never_loads_it(client, db) -> None:
    # given
    draft = CampaignFactory(published_at=None)

    # when
    response = claim(client, draft.pk, "alice", key="k")

    # then
    assert_contract_error(response, 404, "not_found")
    assert redis_client().dbsize() == 0
    draft.refresh_from_db()
    assert draft.preheated_at is None and Claim.objects.count() == 0


# --- 405, 413, 415 -------------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE", "PATCH"])
def test_other_methods_on_the_claim_url_are_not_allowed(client, live_campaign, method) -> None:
    # given
    campaign = live_campaign()
    before = state(campaign)

    # when
    response = client.generic(method, claim_url(campaign.pk), **shopper_headers("alice"))

    # then
    assert_contract_error(response, 405, "method_not_allowed")
    assert response["Allow"] == "POST"
    assert state(campaign) == before


@pytest.mark.parametrize("size", [16 * 1024 + 1, 100 * 1024], ids=["16KiB+1", "100KiB"])
def test_a_body_over_16_kib_is_too_large_and_changes_nothing(client, live_campaign, size) -> None:
    # given
    campaign = live_campaign()
    before = state(campaign)
    body = '{"note": "' + "x" * (size - 12) + '"}'

    # when
    response = claim(client, campaign.pk, "alice", key="k", body=body)

    # then
    assert_contract_error(response, 413, "payload_too_large")
    assert state(campaign) == before


def test_a_body_of_exactly_16_kib_is_accepted(client, live_campaign) -> None:
    # given
    campaign = live_campaign()
    body = '{"note": "' + "x" * (16 * 1024 - 12) + '"}'
    assert len(body) == 16 * 1024

    # when
    response = claim(client, campaign.pk, "alice", body=body)

    # then
    assert response.status_code == 200 and response.json()["status"] == "claimed"


@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        ("text/plain", "{}"),
        ("application/x-www-form-urlencoded", "a=1"),
        ("multipart/form-data; boundary=BoUnDaRy", "--BoUnDaRy--\r\n"),
        ("application/xml", "<claim/>"),
    ],
    ids=["text", "form", "multipart", "xml"],
)
def test_a_body_that_is_not_json_is_an_unsupported_media_type_and_changes_nothing(
    client, live_campaign, content_type, body
) -> None:
    # given
    campaign = live_campaign()
    before = state(campaign)

    # when
    response = claim(client, campaign.pk, "alice", key="k", body=body, content_type=content_type)

    # then
    assert_contract_error(response, 415, "unsupported_media_type")
    assert state(campaign) == before


def test_json_with_a_charset_parameter_is_accepted(client, live_campaign) -> None:
    # given
    campaign = live_campaign()

    # when
    response = claim(client, campaign.pk, "alice", content_type="application/json; charset=utf-8")

    # then
    assert response.json()["status"] == "claimed" and stock(campaign) == 9


# --- 503 and lost state --------------------------------------------------------------------------------


def test_a_claim_while_redis_is_unreachable_is_a_fast_503_and_changes_nothing(client, live_campaign) -> None:
    # given
    campaign = live_campaign()
    before = state(campaign)

    # when: the real client against a closed port
    with override_settings(REDIS_URL=CLOSED_PORT_REDIS):
        reset_redis_client()
        try:
            started = time.monotonic()
            response = claim(client, campaign.pk, "alice", key="k")
            elapsed = time.monotonic() - started
        finally:
            reset_redis_client()

    # then
    assert_contract_error(response, 503, "unavailable")
    assert response["Retry-After"] == "1"
    assert response.json()["detail"]
    assert elapsed < 1.0
    assert state(campaign) == before and stored_answers() == []

    # and once Redis is back, the same key decides for the first time
    retried = claim(client, campaign.pk, "alice", key="k")
    assert retried.json()["status"] == "claimed" and "Idempotent-Replayed" not in retried


def test_a_claim_on_a_never_preheated_campaign_while_redis_is_unreachable_is_a_503(client, db) -> None:
    # given
    campaign = CampaignFactory()

    # when
    with override_settings(REDIS_URL=CLOSED_PORT_REDIS):
        reset_redis_client()
        try:
            response = claim(client, campaign.pk, "alice")
        finally:
            reset_redis_client()

    # then
    assert_contract_error(response, 503, "unavailable")
    assert response["Retry-After"] == "1"
    campaign.refresh_from_db()
    assert campaign.preheated_at is None and redis_client().dbsize() == 0


def test_the_first_claim_on_a_published_campaign_never_preheated_loads_it_and_succeeds(client, db) -> None:
    # given
    campaign = CampaignFactory(total_stock=4)
    assert campaign.preheated_at is None and stock(campaign) is None

    # when
    response = claim(client, campaign.pk, "alice")

    # then
    assert response.status_code == 200 and response.json()["status"] == "claimed"
    campaign.refresh_from_db()
    assert campaign.preheated_at is not None
    assert stock(campaign) == 3 and users(campaign) == {"alice": 1} and ledger_length(campaign) == 1

    # and the next shopper is served from Redis as usual
    assert claim(client, campaign.pk, "bob").json()["status"] == "claimed" and stock(campaign) == 2


def test_the_first_claim_on_an_upcoming_campaign_never_preheated_loads_it_and_is_not_started(client, db) -> None:
    # given
    starts = timezone.now() + timedelta(minutes=30)
    campaign = CampaignFactory(starts_at=starts, ends_at=starts + timedelta(hours=1))

    # when
    response = claim(client, campaign.pk, "alice")

    # then
    assert response.json()["status"] == "not_started"
    campaign.refresh_from_db()
    assert campaign.preheated_at is not None and stock(campaign) == 10 and ledger_length(campaign) == 0


def test_a_campaign_whose_redis_state_was_lost_answers_503_and_never_invents_stock(client, live_campaign) -> None:
    # given: loaded, one claim taken, then Redis lost the campaign's keys
    campaign = live_campaign(total_stock=5)
    claim(client, campaign.pk, "alice")
    redis_client().delete(*campaign_keys(campaign.pk).state)

    # when
    response = claim(client, campaign.pk, "bob", key="k")

    # then
    assert_contract_error(response, 503, "unavailable")
    assert response["Retry-After"] == "1"
    assert stock(campaign) is None and users(campaign) == {} and ledger_length(campaign) == 0
    assert not redis_client().exists(campaign_keys(campaign.pk).meta)
    assert Claim.objects.count() == 0


def test_an_ended_campaign_whose_keys_are_gone_is_ended(client, live_campaign) -> None:
    # given
    now = timezone.now()
    campaign = live_campaign(starts_at=now - timedelta(hours=3), ends_at=now - timedelta(hours=1))
    redis_client().delete(*campaign_keys(campaign.pk).state)

    # when
    response = claim(client, campaign.pk, "alice", key="k")

    # then
    assert response.status_code == 200
    assert response.json() == {"code": 4, "status": "ended", "claim_id": None, "campaign_id": campaign.pk}
    assert redis_client().dbsize() == 0  # nothing reloaded, nothing remembered


def test_an_ended_campaign_never_preheated_is_ended_and_not_loaded(client, db) -> None:
    # given
    now = timezone.now()
    campaign = CampaignFactory(starts_at=now - timedelta(hours=3), ends_at=now - timedelta(hours=1))

    # when
    response = claim(client, campaign.pk, "alice")

    # then
    assert response.json() == {"code": 4, "status": "ended", "claim_id": None, "campaign_id": campaign.pk}
    campaign.refresh_from_db()
    assert campaign.preheated_at is None and redis_client().dbsize() == 0
