"""POST /api/v1/campaigns/{id}/grants and campaigns of kind grant (docs/api.md, Grants)."""
from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from campaigns.models import CampaignKind
from campaigns.services import campaign_pause
from grants.apis import MAX_USER_IDS
from grants.models import GrantBatch

from ..conftest import shopper_headers
from .conftest import drained_and_balanced, remaining

pytestmark = pytest.mark.django_db


def grants(client: Client, campaign_id: int | str, body: Any, key: str | None, **headers: str) -> Any:
    if key is not None:
        headers["HTTP_AUTHORIZATION"] = f"Bearer {key}"
    data = body if isinstance(body, str | bytes) else json.dumps(body)
    return client.post(f"/api/v1/campaigns/{campaign_id}/grants", data=data, content_type="application/json",
                       **headers)


def test_the_api_grants_and_answers_the_counts(client: Client, live_campaign: Any, service_key: str) -> None:
    campaign = live_campaign(total_stock=3, per_user_limit=1)
    body = {"batch": "crm-7", "user_ids": ["a", "b", "a", "bad id", 42, None, "c", "d"]}
    response = grants(client, campaign.pk, body, service_key)
    assert response.status_code == 200
    assert response.json() == {"code": 0, "status": "granted", "batch": "crm-7", "granted": 3, "limit_reached": 0,
                               "sold_out": 1, "invalid": 3, "duplicate": 1}
    again = grants(client, campaign.pk, body, service_key).json()
    assert (again["granted"], again["sold_out"]) == (0, 1)
    assert remaining(campaign) == 0
    drained_and_balanced(campaign)
    assert GrantBatch.objects.filter(source="api").count() == 2


@pytest.mark.parametrize("how", ["no key", "shopper token", "shopper token as bearer", "wrong key", "not bearer",
                                 "no keys configured"])
def test_the_api_refuses_anything_but_an_operator_api_key(client: Client, live_campaign: Any, service_key: str,
                                                           settings: Any, how: str) -> None:
    campaign = live_campaign(total_stock=3)
    body = {"batch": "b", "user_ids": ["a"]}
    shopper = shopper_headers("a")
    if how == "no key":
        response = grants(client, campaign.pk, body, None)
    elif how == "shopper token":
        response = grants(client, campaign.pk, body, None, **shopper)
    elif how == "shopper token as bearer":
        response = grants(client, campaign.pk, body, shopper["HTTP_X_TOKEN"], **shopper)
    elif how == "wrong key":
        response = grants(client, campaign.pk, body, service_key[:-1] + "x")
    elif how == "not bearer":
        response = grants(client, campaign.pk, body, None, HTTP_AUTHORIZATION=f"Basic {service_key}")
    else:
        settings.COUPONS_SERVICE_API_KEYS = []
        response = grants(client, campaign.pk, body, "")
    assert response.status_code == 401
    assert response.json()["status"] == "unauthenticated"
    assert remaining(campaign) == 3 and not GrantBatch.objects.exists()


@pytest.mark.parametrize("body", [
    "not json", "[]", {"user_ids": ["a"]}, {"batch": "b"}, {"batch": "has space", "user_ids": ["a"]},
    {"batch": "b", "user_ids": "a"}, {"batch": "b", "user_ids": ["a"] * (MAX_USER_IDS + 1)}, '{"batch": NaN}'])
def test_bad_input_is_the_contracts_400_and_changes_nothing(client: Client, live_campaign: Any, service_key: str,
                                                             body: Any) -> None:
    campaign = live_campaign(total_stock=3)
    response = grants(client, campaign.pk, body, service_key)
    assert response.status_code == 400, response.content
    assert response.json()["status"] == "invalid_request"
    assert remaining(campaign) == 3 and not GrantBatch.objects.exists()


def test_ten_thousand_ids_in_one_call_are_granted(client: Client, live_campaign: Any, service_key: str) -> None:
    campaign = live_campaign(total_stock=20_000)
    body = {"batch": "big", "user_ids": [f"shopper-{n}" for n in range(MAX_USER_IDS)]}
    answer = grants(client, campaign.pk, body, service_key).json()
    assert answer.get("granted") == MAX_USER_IDS, answer
    assert remaining(campaign) == 10_000


def test_an_unknown_ended_or_paused_campaign_is_answered_as_the_contract_says(
        client: Client, live_campaign: Any, service_key: str) -> None:
    body = {"batch": "b", "user_ids": ["a"]}
    assert grants(client, 999_999, body, service_key).status_code == 404
    assert grants(client, "x", body, service_key).status_code == 400
    paused = live_campaign(total_stock=3)
    campaign_pause(campaign=paused)
    assert grants(client, paused.pk, body, service_key).json() == {
        "code": 5, "status": "paused", "detail": f"Campaign {paused.pk} is paused: resume it to grant its coupons."}
    ended = live_campaign(total_stock=3)
    ended.ends_at = timezone.now() - timedelta(seconds=1)
    ended.save()
    assert grants(client, ended.pk, body, service_key).json()["code"] == 4


def test_a_grant_campaign_is_granted_but_no_shopper_can_claim_it_or_see_it_listed(
        client: Client, live_campaign: Any, service_key: str) -> None:
    campaign = live_campaign(kind=CampaignKind.GRANT, total_stock=5)
    grab = live_campaign(total_stock=5)
    claim_url = f"/api/v1/campaigns/{campaign.pk}/claim"
    claim = client.post(claim_url, content_type="application/json", **shopper_headers("a"))
    assert claim.status_code == 404 and claim.json()["status"] == "not_found"
    listed = [c["id"] for c in client.get("/api/v1/campaigns").json()["results"]]
    assert grab.pk in listed and campaign.pk not in listed
    assert grants(client, campaign.pk, {"batch": "vip", "user_ids": ["a", "b"]}, service_key).json()["granted"] == 2
    claim = client.post(claim_url, content_type="application/json", **shopper_headers("c"))
    assert claim.status_code == 404
    assert remaining(campaign) == 3
    drained_and_balanced(campaign)


def test_a_call_while_the_same_batch_runs_is_the_409_and_a_dead_run_is_taken_over(
        client: Client, live_campaign: Any, service_key: str) -> None:
    from grants.lines import read_ids
    from grants.models import GrantSource, GrantStatus
    from grants.services import STALE_SECONDS, grant_batch_start

    campaign = live_campaign(total_stock=5)
    running = grant_batch_start(campaign=campaign, name="b", source=GrantSource.API, read=read_ids([(1, "x", "x")]))
    response = grants(client, campaign.pk, {"batch": "b", "user_ids": ["a"]}, service_key)
    assert response.status_code == 409 and response.json()["status"] == "idempotency_in_flight"
    assert response["Retry-After"]
    GrantBatch.objects.filter(pk=running.pk).update(updated_at=timezone.now() - timedelta(seconds=STALE_SECONDS + 1))
    assert grants(client, campaign.pk, {"batch": "b", "user_ids": ["a"]}, service_key).json()["granted"] == 1
    running.refresh_from_db()
    assert running.status == GrantStatus.STOPPED and "process died" in running.error
