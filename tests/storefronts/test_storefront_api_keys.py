"""A storefront's api_key on the service route (POST /api/v1/campaigns/{id}/grants, Authorization: Bearer): accepted
while its key lives, refused once revoked; a shopper's token (of the same key) never passes there, and the
operators' interim COUPONS_SERVICE_API_KEYS still do."""
from __future__ import annotations

import hmac
import json
from typing import Any
from unittest import mock

import pytest
from django.test import Client

from storefronts import keyring
from storefronts.keyring import KEYRING
from storefronts.services import storefront_add, storefront_key_revoke

from .conftest import signed

pytestmark = pytest.mark.django_db(transaction=True)


def grant(client: Client, campaign_id: int, batch: str, authorization: str | None, **extra: Any) -> Any:
    if authorization is not None:
        extra["HTTP_AUTHORIZATION"] = authorization
    return client.post(f"/api/v1/campaigns/{campaign_id}/grants", data=json.dumps({"batch": batch,
                       "user_ids": ["ann"]}), content_type="application/json", **extra)


def test_a_storefronts_api_key_grants_until_its_key_is_revoked(client: Client, live_campaign: Any,
                                                                  settings: Any) -> None:
    settings.COUPONS_SERVICE_API_KEYS = []
    campaign = live_campaign(total_stock=10)
    _, key = storefront_add(name="Web shop")
    granted = grant(client, campaign.pk, "b1", f"Bearer {key.api_key}")
    assert granted.status_code == 200 and granted.json()["granted"] == 1
    storefront_key_revoke(key_id=key.key_id)
    KEYRING.refresh()
    refused = grant(client, campaign.pk, "b2", f"Bearer {key.api_key}")
    assert refused.status_code == 401 and refused.json()["status"] == "unauthenticated"


def test_a_shoppers_token_never_authenticates_the_service_route(client: Client, live_campaign: Any,
                                                                 settings: Any) -> None:
    settings.COUPONS_SERVICE_API_KEYS = []
    campaign = live_campaign(total_stock=10)
    _, key = storefront_add(name="Web shop")
    token = signed(key.secret, "ann", key_id=key.key_id)
    shopper = {"HTTP_X_USER_ID": "ann", "HTTP_X_TOKEN": token}
    for authorization in (None, f"Bearer {token}", f"Bearer {key.secret}", f"Bearer {key.key_id}"):
        assert grant(client, campaign.pk, "b", authorization, **shopper).status_code == 401


def test_the_interim_operator_keys_still_pass(client: Client, live_campaign: Any, settings: Any) -> None:
    settings.COUPONS_SERVICE_API_KEYS = ["an-operator-key-of-forty-characters-long-x"]
    campaign = live_campaign(total_stock=10)
    storefront_add(name="Web shop")
    assert grant(client, campaign.pk, "b", "Bearer an-operator-key-of-forty-characters-long-x").status_code == 200


def test_api_keys_are_compared_in_constant_time_with_every_live_one() -> None:
    _, web = storefront_add(name="Web shop")
    _, app = storefront_add(name="App")
    KEYRING.refresh()
    with mock.patch.object(keyring.hmac, "compare_digest", wraps=hmac.compare_digest) as compare:
        owner = KEYRING.api_key_owner(app.api_key)
    assert owner is not None and owner.key_id == app.key_id and compare.call_count == 2
    assert KEYRING.api_key_owner(web.api_key + "x") is None
