"""Storefront keys' tokens "<key id>.<expires>.<sig>" (docs/api.md, Shoppers: Storefront keys): accepted for their
key, refused (the same 401) for a revoked key, another storefront's secret, an unknown key id, a key id with the
default key's signature and a storefront's signature without its key id; the default key switched off."""
from __future__ import annotations

import hmac
from typing import Any
from unittest import mock

import pytest
from django.conf import settings
from django.test import Client, override_settings

from core import auth
from core.auth import Identity, authenticate, identify, mint_token
from storefronts.keyring import KEYRING
from storefronts.services import storefront_add, storefront_key_revoke, storefront_key_rotate

from .conftest import headers, signed

pytestmark = pytest.mark.django_db(transaction=True)  # the keyring's thread reads what the test committed


def test_a_storefronts_token_identifies_the_shopper_and_the_storefront_with_its_channels() -> None:
    storefront, key = storefront_add(name="Web shop", channels="web,app")
    token = signed(key.secret, "alice", key_id=key.key_id)
    assert authenticate("alice", token) == "alice"
    assert identify("alice", token) == Identity("alice", key.key_id, storefront.pk, frozenset({"web", "app"}))
    assert identify("alice", mint_token("alice")) == Identity("alice")  # the default key: no storefront


def test_tags_are_signed_into_a_storefronts_token_as_into_the_default_keys() -> None:
    _, key = storefront_add(name="App")
    token = signed(key.secret, "alice", key_id=key.key_id, tags="vip,gold")
    assert authenticate("alice", token, tags="vip,gold") == "alice"
    assert authenticate("alice", token) is None
    assert authenticate("alice", token, tags="vip") is None


def test_a_revoked_keys_token_is_refused_and_the_rotated_key_goes_on() -> None:
    _, old = storefront_add(name="Web shop")
    new = storefront_key_rotate(key_id=old.key_id)
    old_token = signed(old.secret, "alice", key_id=old.key_id)
    new_token = signed(new.secret, "alice", key_id=new.key_id)
    assert authenticate("alice", old_token) == authenticate("alice", new_token) == "alice"  # both valid at once
    storefront_key_revoke(key_id=old.key_id)
    KEYRING.refresh()
    assert authenticate("alice", old_token) is None
    assert authenticate("alice", new_token) == "alice"


def test_a_token_signed_with_another_storefronts_secret_is_refused() -> None:
    _, web = storefront_add(name="Web shop")
    _, app = storefront_add(name="App")
    assert authenticate("alice", signed(app.secret, "alice", key_id=web.key_id)) is None
    assert authenticate("alice", signed(web.secret, "alice", key_id=web.key_id)) == "alice"


def test_a_key_id_that_does_not_exist_is_refused_even_when_signed_with_the_default_secret() -> None:
    storefront_add(name="Web shop")
    default_secret = settings.COUPONS_TOKEN_SECRET
    assert authenticate("alice", signed(default_secret, "alice", key_id="sf_nosuchkey")) is None
    assert authenticate("alice", signed(default_secret, "alice", key_id="1234")) is None  # digits: still a key id


def test_the_default_keys_form_signed_with_a_storefronts_secret_is_refused() -> None:
    _, key = storefront_add(name="Web shop")
    assert authenticate("alice", signed(key.secret, "alice")) is None  # "<expires>.<sig>": the default key's form


def test_a_key_id_with_the_default_keys_signature_is_refused() -> None:
    _, key = storefront_add(name="Web shop")
    default_token = mint_token("alice")
    assert authenticate("alice", default_token) == "alice"
    assert authenticate("alice", f"{key.key_id}.{default_token}") is None


@pytest.mark.parametrize("token", ["sf_x.1.2", "a" * 33 + ".9999999999." + "0" * 64, "a b.9999999999." + "0" * 64,
                                   ".9999999999." + "0" * 64, "k.k.9999999999." + "0" * 64, "k." * 2])
def test_tokens_outside_the_form_are_refused(token: str) -> None:
    assert authenticate("alice", token) is None


def test_an_expired_or_too_distant_storefront_token_is_refused() -> None:
    _, key = storefront_add(name="Web shop")
    assert authenticate("alice", signed(key.secret, "alice", key_id=key.key_id, ttl=-5)) is None
    assert authenticate("alice", signed(key.secret, "alice", key_id=key.key_id, ttl=3600 + 120)) is None


def test_the_default_key_switched_off_refuses_its_tokens_and_not_the_storefronts() -> None:
    _, key = storefront_add(name="Web shop")
    default_token, keyed = mint_token("alice"), signed(key.secret, "alice", key_id=key.key_id)
    with override_settings(COUPONS_TOKEN_DEFAULT_KEY=False):
        assert authenticate("alice", default_token) is None
        assert authenticate("alice", keyed) == "alice"
    assert authenticate("alice", default_token) == "alice"


def test_every_signature_check_is_a_constant_time_comparison() -> None:
    _, key = storefront_add(name="Web shop")
    KEYRING.refresh()
    tokens = [mint_token("alice"), signed(key.secret, "alice", key_id=key.key_id),
              signed(key.secret, "alice", key_id="sf_unknown"), signed("wrong", "alice", key_id=key.key_id)]
    for token in tokens:
        with mock.patch.object(auth.hmac, "compare_digest", wraps=hmac.compare_digest) as compare:
            authenticate("alice", token)
        assert compare.call_count == 1, token
    with override_settings(COUPONS_TOKEN_DEFAULT_KEY=False), \
            mock.patch.object(auth.hmac, "compare_digest", wraps=hmac.compare_digest) as compare:
        assert authenticate("alice", mint_token("alice")) is None
    assert compare.call_count == 1


def test_the_routes_answer_a_storefronts_shopper_and_refuse_a_revoked_key_with_the_same_401(client: Client) -> None:
    _, key = storefront_add(name="Web shop")
    token = signed(key.secret, "alice", key_id=key.key_id)
    assert client.get("/api/v1/me/coupons", **headers("alice", token)).status_code == 200
    storefront_key_revoke(key_id=key.key_id)
    KEYRING.refresh()
    refused: Any = client.get("/api/v1/me/coupons", **headers("alice", token))
    unknown: Any = client.get("/api/v1/me/coupons", **headers("alice", mint_token("bob")))
    assert refused.status_code == 401
    assert refused.json() == client.get("/api/v1/me/coupons", **headers("alice", "1.2")).json()
    assert unknown.status_code == 401


def test_an_api_key_never_authenticates_a_shopper_route(client: Client) -> None:
    _, key = storefront_add(name="Web shop")
    for extra in ({"HTTP_X_TOKEN": key.api_key}, {"HTTP_AUTHORIZATION": f"Bearer {key.api_key}"}):
        assert client.get("/api/v1/me/coupons", HTTP_X_USER_ID="alice", **extra).status_code == 401
