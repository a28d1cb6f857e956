"""Storefront clients in the console: add (the key shown once), change channels, a new key, revoke with a
confirmation; no page but the one that made a key shows its secret or api_key."""
from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from core.auth import authenticate, identify
from storefronts.keyring import KEYRING
from storefronts.models import Storefront, StorefrontKey

from .conftest import signed

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def operator(client: Client) -> Client:
    client.force_login(User.objects.create_superuser("op", "op@example.com", "pw"))
    return client


def issued_of(page: Any) -> dict[str, str]:
    context = page.context
    return context["issued"].as_dict()


def test_adding_a_storefront_shows_its_key_once_and_never_again(operator: Client) -> None:
    page = operator.post("/admin/storefronts/storefront/add/", {"name": "Web shop", "channels": "web,app",
                                                                 "keys-TOTAL_FORMS": "0", "keys-INITIAL_FORMS": "0"})
    assert page.status_code == 200 and "no-store" in page["Cache-Control"]
    issued = issued_of(page)
    assert issued["secret"] in page.content.decode() and issued["api_key"] in page.content.decode()
    storefront = Storefront.objects.get()
    assert storefront.channels == ["web", "app"]
    identity = identify("alice", signed(issued["secret"], "alice", key_id=issued["key_id"]))
    assert identity is not None and identity.channels == {"web", "app"}
    for url in ("/admin/storefronts/storefront/", f"/admin/storefronts/storefront/{storefront.pk}/change/",
                "/admin/storefronts/storefrontkey/", f"/admin/storefronts/storefront/{storefront.pk}/history/"):
        body = operator.get(url).content.decode()
        assert issued["key_id"] in body or url.endswith(("/storefront/", "/history/"))
        assert issued["secret"] not in body and issued["api_key"] not in body


def test_bad_channels_are_a_form_error_and_make_nothing(operator: Client) -> None:
    page = operator.post("/admin/storefronts/storefront/add/", {"name": "Web shop", "channels": "Web App",
                                                                 "keys-TOTAL_FORMS": "0", "keys-INITIAL_FORMS": "0"})
    assert page.status_code == 200 and "1-32 of a-z" in page.content.decode()
    assert not Storefront.objects.exists()


def test_changing_channels_reaches_the_identity(operator: Client) -> None:
    page = operator.post("/admin/storefronts/storefront/add/", {"name": "Web shop", "channels": "web",
                                                                 "keys-TOTAL_FORMS": "0", "keys-INITIAL_FORMS": "0"})
    issued, storefront = issued_of(page), Storefront.objects.get()
    key = StorefrontKey.objects.get()
    changed = operator.post(f"/admin/storefronts/storefront/{storefront.pk}/change/", {
        "name": "Web shop", "channels": "web,mini", "keys-TOTAL_FORMS": "1", "keys-INITIAL_FORMS": "1",
        "keys-0-id": str(key.pk), "keys-0-storefront": str(storefront.pk)})
    assert changed.status_code == 302
    KEYRING.refresh()
    identity = identify("alice", signed(issued["secret"], "alice", key_id=issued["key_id"]))
    assert identity is not None and identity.channels == {"web", "mini"}


def test_a_new_key_then_revoking_the_old_one_after_a_confirmation(operator: Client) -> None:
    first = issued_of(operator.post("/admin/storefronts/storefront/add/", {
        "name": "Web shop", "channels": "", "keys-TOTAL_FORMS": "0", "keys-INITIAL_FORMS": "0"}))
    storefront = Storefront.objects.get()
    page = operator.post("/admin/storefronts/storefront/", {"action": "issue_key", "_selected_action": [storefront.pk]})
    second = issued_of(page)
    assert "no-store" in page["Cache-Control"] and second["key_id"] != first["key_id"]
    old = StorefrontKey.objects.get(key_id=first["key_id"])
    confirm = operator.post("/admin/storefronts/storefrontkey/", {"action": "revoke", "_selected_action": [old.pk]})
    assert confirm.status_code == 200 and first["key_id"] in confirm.content.decode()
    old.refresh_from_db()
    assert old.revoked_at is None  # nothing yet: the confirmation only
    done = operator.post("/admin/storefronts/storefrontkey/", {"action": "revoke", "_selected_action": [old.pk],
                                                                "apply": "1"})
    assert done.status_code == 302
    old.refresh_from_db()
    assert old.revoked_at is not None
    KEYRING.refresh()
    assert authenticate("alice", signed(first["secret"], "alice", key_id=first["key_id"])) is None
    assert authenticate("alice", signed(second["secret"], "alice", key_id=second["key_id"])) == "alice"
