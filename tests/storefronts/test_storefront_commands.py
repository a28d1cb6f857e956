"""storefront_add / storefront_rotate / storefront_revoke / storefront_reencrypt (docs/api.md, Commands), and the
secrets at rest: a dump of the tables hands out neither a secret nor an api_key."""
from __future__ import annotations

import io
import json
import re
from typing import Any

import pytest
from cryptography.fernet import Fernet
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import override_settings

from core.auth import KEY_ID_RE, authenticate
from storefronts.keyring import KEYRING
from storefronts.models import Storefront, StorefrontKey

from .conftest import signed

pytestmark = pytest.mark.django_db(transaction=True)


def command(*args: str) -> dict[str, Any]:
    out = io.StringIO()
    call_command(*args, stdout=out)
    lines = out.getvalue().splitlines()
    assert len(lines) == 1, lines
    return json.loads(lines[0])


def test_storefront_add_prints_one_json_line_with_a_working_key() -> None:
    issued = command("storefront_add", "Web shop", "--channels", "web,app")
    assert set(issued) == {"key_id", "secret", "api_key"}
    assert KEY_ID_RE.fullmatch(issued["key_id"]) and len(issued["secret"]) >= 43 and len(issued["api_key"]) >= 43
    storefront = Storefront.objects.get()
    assert (storefront.name, storefront.channels) == ("Web shop", ["web", "app"])
    assert authenticate("alice", signed(issued["secret"], "alice", key_id=issued["key_id"])) == "alice"


@pytest.mark.parametrize("args, named", [
    (["Web shop", "--channels", "Web"], "channel"),
    (["Web shop", "--channels", "web app"], "channel"),
    (["Web shop", "--channels", ",".join(f"c{i}" for i in range(11))], "channels"),
    (["  "], "name"),
    (["x" * 101], "name"),
])
def test_storefront_add_refuses_bad_input_and_makes_nothing(args: list[str], named: str) -> None:
    with pytest.raises(CommandError, match=named):
        call_command("storefront_add", *args, stdout=io.StringIO())
    assert not Storefront.objects.exists() and not StorefrontKey.objects.exists()


def test_a_second_storefront_of_the_same_name_is_refused() -> None:
    command("storefront_add", "Web shop")
    with pytest.raises(CommandError, match="exists"):
        call_command("storefront_add", "Web shop", stdout=io.StringIO())
    assert StorefrontKey.objects.count() == 1


def test_rotate_adds_a_key_to_the_same_storefront_and_revoke_refuses_only_the_old_one() -> None:
    old = command("storefront_add", "Web shop")
    new = command("storefront_rotate", old["key_id"])
    assert new["key_id"] != old["key_id"] and new["secret"] != old["secret"] and new["api_key"] != old["api_key"]
    assert {k.storefront.name for k in StorefrontKey.objects.all()} == {"Web shop"}
    revoked = command("storefront_revoke", old["key_id"])
    assert revoked["key_id"] == old["key_id"] and revoked["revoked_at"]
    assert command("storefront_revoke", old["key_id"]) == revoked  # again: nothing changes
    KEYRING.refresh()
    assert authenticate("alice", signed(old["secret"], "alice", key_id=old["key_id"])) is None
    assert authenticate("alice", signed(new["secret"], "alice", key_id=new["key_id"])) == "alice"


@pytest.mark.parametrize("name", ["storefront_rotate", "storefront_revoke"])
def test_an_unknown_key_id_is_a_clear_error(name: str) -> None:
    with pytest.raises(CommandError, match="No storefront key sf_nope"):
        call_command(name, "sf_nope", stdout=io.StringIO())


def test_a_dump_of_the_tables_holds_neither_secret_nor_api_key() -> None:
    issued = command("storefront_add", "Web shop")
    rotated = command("storefront_rotate", issued["key_id"])
    with connection.cursor() as cursor:
        cursor.execute("SELECT s::text FROM storefronts_storefrontkey s")
        dump = "\n".join(row[0] for row in cursor.fetchall())
    assert issued["key_id"] in dump
    for value in (issued["secret"], issued["api_key"], rotated["secret"], rotated["api_key"]):
        assert value not in dump
    stored = StorefrontKey.objects.get(key_id=issued["key_id"])
    assert stored.secret_encrypted.startswith("gAAAA")  # a Fernet token
    assert re.fullmatch(r"[0-9a-f]{64}", stored.api_key_sha256)


def test_the_secrets_open_only_with_the_encryption_key_and_survive_its_rotation() -> None:
    issued = command("storefront_add", "Web shop")
    token = signed(issued["secret"], "alice", key_id=issued["key_id"])
    new_key = Fernet.generate_key().decode()
    with override_settings(COUPONS_STOREFRONT_ENCRYPTION_KEYS=[new_key]):  # the old key lost: refused
        KEYRING.refresh()
        assert authenticate("alice", token) is None
    with override_settings(COUPONS_STOREFRONT_ENCRYPTION_KEYS=[new_key, *_old_keys()]):
        assert command("storefront_reencrypt") == {"reencrypted": 1}
    with override_settings(COUPONS_STOREFRONT_ENCRYPTION_KEYS=[new_key]):  # re-encrypted: the new key alone opens it
        KEYRING.refresh()
        assert authenticate("alice", token) == "alice"


def _old_keys() -> list[str]:
    from django.conf import settings

    return list(settings.COUPONS_STOREFRONT_ENCRYPTION_KEYS)
