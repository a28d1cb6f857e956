import hashlib
import hmac
import time

import pytest
from django.test import override_settings

from core.auth import authenticate, mint_token, token_signature


def test_minted_token_authenticates_its_user() -> None:
    assert authenticate("shopper_1-A", mint_token("shopper_1-A", ttl=60)) == "shopper_1-A"


@pytest.mark.parametrize("secret", ["s", "x" * 64, "y" * 65, "a longer secret of the kind production uses " * 3])
def test_signature_is_the_contracts_hmac_sha256_for_any_secret_length(secret: str) -> None:
    with override_settings(COUPONS_TOKEN_SECRET=secret):
        expected = hmac.new(secret.encode(), b"alice.1764470000", hashlib.sha256).hexdigest()
        assert token_signature("alice", 1764470000) == expected
        assert authenticate("alice", f"{int(time.time()) + 60}.{'0' * 64}") is None


def test_token_of_another_user_is_refused() -> None:
    assert authenticate("bob", mint_token("alice", ttl=60)) is None


@pytest.mark.parametrize(
    "user_id",
    ["0042 ", " 0042", "\u0664\u0662", "\u00b2", "a" * 65, "a\r\nb", "a\nb", "", "a.b", "a/b", "\u00e9"],
)
def test_user_ids_outside_the_contract_are_refused_even_with_a_matching_signature(user_id: str) -> None:
    expires = int(time.time()) + 60
    token = f"{expires}.{token_signature(user_id, expires)}"
    assert authenticate(user_id, token) is None


def test_64_character_user_id_is_accepted() -> None:
    user = "u" * 64
    assert authenticate(user, mint_token(user, ttl=60)) == user


def test_expired_token_is_refused() -> None:
    assert authenticate("alice", mint_token("alice", ttl=60, now=time.time() - 120)) is None


def test_token_too_far_ahead_is_refused() -> None:
    expires = int(time.time()) + 3600 + 120
    assert authenticate("alice", f"{expires}.{token_signature('alice', expires)}") is None


@pytest.mark.parametrize(
    "token",
    [
        "abc.def",
        "1e9." + "0" * 64,
        "-5." + "0" * 64,
        "",
        ".",
        "123",
        "{exp}." + "0" * 64,
        "{exp}.{sig}x",
        "{exp}.{upper}",
        " {exp}.{sig}",
        "\u0661{exp}.{sig}",
    ],
)
def test_malformed_or_wrong_tokens_are_refused(token: str) -> None:
    expires = int(time.time()) + 60
    sig = token_signature("alice", expires)
    assert authenticate("alice", token.format(exp=expires, sig=sig, upper=sig.upper())) is None


def test_token_signed_with_another_secret_is_refused() -> None:
    token = mint_token("alice", ttl=60)
    with override_settings(COUPONS_TOKEN_SECRET="another-secret"):
        assert authenticate("alice", token) is None


def test_mint_token_refuses_a_ttl_beyond_the_maximum() -> None:
    with pytest.raises(ValueError):
        mint_token("alice", ttl=3601)


def test_a_token_signed_with_tags_is_the_contracts_hmac_of_user_expires_and_tags() -> None:
    with override_settings(COUPONS_TOKEN_SECRET="s3cret"):
        expected = hmac.new(b"s3cret", b"alice.1764470000.vip,gold", hashlib.sha256).hexdigest()
        assert token_signature("alice", 1764470000, "vip,gold") == expected
        assert token_signature("alice", 1764470000) != expected


def test_tags_authenticate_only_with_the_header_the_token_was_signed_with() -> None:
    tagged = mint_token("alice", ttl=60, tags="vip,gold")
    assert authenticate("alice", tagged, tags="vip,gold") == "alice"
    assert authenticate("alice", tagged) is None  # the header dropped
    assert authenticate("alice", tagged, tags="vip") is None  # a tag dropped
    assert authenticate("alice", tagged, tags="gold,vip") is None  # not as sent
    plain = mint_token("alice", ttl=60)
    assert authenticate("alice", plain) == "alice"
    assert authenticate("alice", plain, tags="vip") is None  # a tag added to a token signed without


@pytest.mark.parametrize("tags", ["", "VIP", "vip, gold", "vip,", ",vip", "a" * 33, ",".join(["t"] * 11), "v\u00edp",
                                  "vip;gold"])
def test_tags_outside_the_contract_are_refused_even_with_a_matching_signature(tags: str) -> None:
    expires = int(time.time()) + 60
    assert authenticate("alice", f"{expires}.{token_signature('alice', expires, tags)}", tags=tags) is None
    with pytest.raises(ValueError):
        mint_token("alice", ttl=60, tags=tags)


def test_ten_tags_of_32_characters_are_accepted() -> None:
    tags = ",".join(f"{i}" * 32 for i in range(10))
    assert authenticate("alice", mint_token("alice", ttl=60, tags=tags), tags=tags) == "alice"


@pytest.mark.django_db
def test_a_shopper_route_takes_a_tagged_token_only_with_its_tags_header() -> None:
    from django.test import Client

    token = mint_token("alice", ttl=60, tags="vip")
    headers = {"HTTP_X_USER_ID": "alice", "HTTP_X_TOKEN": token, "HTTP_HOST": "localhost"}
    client = Client()
    assert client.get("/api/v1/me/coupons", **headers, HTTP_X_SHOPPER_TAGS="vip").status_code == 200
    for tags in ({}, {"HTTP_X_SHOPPER_TAGS": "gold"}, {"HTTP_X_SHOPPER_TAGS": "vip,gold"}):
        refused = client.get("/api/v1/me/coupons", **headers, **tags)
        assert refused.status_code == 401
        assert refused.json()["status"] == "unauthenticated"
