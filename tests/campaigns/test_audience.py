"""Audience tags and channels in the claim's atomic step (docs/api.md, Richer rules): a campaign with tags or
channels admits only a shopper carrying one of each list it has (the tags signed into the token, the channels of
the storefront whose key signed it), others get 15 not_eligible and nothing changes; no database query."""
from __future__ import annotations

import hashlib
import hmac
import time

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from campaigns.redis_state import ClaimCode, ClaimFlow, campaign_keys, claim_audience, redis_client, run_flow
from core.auth import mint_token
from storefronts.keyring import KEYRING
from storefronts.services import storefront_add

pytestmark = pytest.mark.django_db


def claim(campaign, user: str, audience: str = ""):
    return run_flow(ClaimFlow(campaign.pk, user, None, None, audience))


def left(campaign) -> int:
    return int(redis_client().get(campaign_keys(campaign.pk).stock))


def test_a_tagged_campaign_admits_only_shoppers_carrying_one_of_its_tags(live_campaign) -> None:
    campaign = live_campaign(total_stock=10, audience_tags=["vip", "gold"])

    refused = [claim(campaign, "plain"), claim(campaign, "silver", claim_audience("silver,bronze", frozenset()))]
    admitted = [claim(campaign, "v", claim_audience("vip", frozenset())),
                claim(campaign, "g", claim_audience("silver,gold", frozenset({"web"})))]

    assert [r.code for r in refused] == [ClaimCode.NOT_ELIGIBLE] * 2
    assert [r.status for r in refused] == ["not_eligible"] * 2
    assert [r.code for r in admitted] == [ClaimCode.CLAIMED] * 2
    assert left(campaign) == 8  # the refusals took nothing
    assert redis_client().hget(campaign_keys(campaign.pk).users, "plain") is None  # and counted nothing


def test_a_tag_is_matched_whole_never_as_part_of_another(live_campaign) -> None:
    campaign = live_campaign(total_stock=5, audience_tags=["vip"])

    assert claim(campaign, "a", claim_audience("vip2,xvip", frozenset())).code == ClaimCode.NOT_ELIGIBLE


def test_a_campaign_of_channels_admits_only_shoppers_of_storefronts_of_those_channels(live_campaign) -> None:
    campaign = live_campaign(total_stock=5, channels=["app"])

    assert claim(campaign, "default-key").code == ClaimCode.NOT_ELIGIBLE
    assert claim(campaign, "web", claim_audience(None, frozenset({"web"}))).code == ClaimCode.NOT_ELIGIBLE
    assert claim(campaign, "tagged", claim_audience("app", frozenset())).code == ClaimCode.NOT_ELIGIBLE  # a tag
    assert claim(campaign, "app", claim_audience(None, frozenset({"web", "app"}))).code == ClaimCode.CLAIMED
    assert left(campaign) == 4


def test_tags_and_channels_together_need_one_of_each(live_campaign) -> None:
    campaign = live_campaign(total_stock=5, audience_tags=["vip"], channels=["app"])

    assert claim(campaign, "a", claim_audience("vip", frozenset({"web"}))).code == ClaimCode.NOT_ELIGIBLE
    assert claim(campaign, "b", claim_audience("gold", frozenset({"app"}))).code == ClaimCode.NOT_ELIGIBLE
    assert claim(campaign, "c", claim_audience("vip", frozenset({"app"}))).code == ClaimCode.CLAIMED


def test_a_campaign_asking_nothing_admits_everyone_as_before(live_campaign) -> None:
    campaign = live_campaign(total_stock=5)

    assert claim(campaign, "a").code == ClaimCode.CLAIMED
    assert claim(campaign, "b", claim_audience("vip", frozenset({"web"}))).code == ClaimCode.CLAIMED


def test_over_http_the_tags_come_from_the_signed_token(live_campaign) -> None:
    campaign = live_campaign(total_stock=5, audience_tags=["vip"])
    client = Client()

    def post(user: str, token: str, **tags: str) -> dict:
        response = client.post(f"/api/v1/campaigns/{campaign.pk}/claim", content_type="application/json",
                               HTTP_X_USER_ID=user, HTTP_X_TOKEN=token, HTTP_HOST="localhost", **tags)
        return {"http": response.status_code, **response.json()}

    plain = post("alice", mint_token("alice", ttl=60))
    vip = post("bob", mint_token("bob", ttl=60, tags="vip"), HTTP_X_SHOPPER_TAGS="vip")
    forged = post("carol", mint_token("carol", ttl=60), HTTP_X_SHOPPER_TAGS="vip")  # a tag the token lacks

    assert (plain["http"], plain["code"], plain["status"]) == (200, 15, "not_eligible")
    assert (vip["http"], vip["code"], vip["status"]) == (200, 0, "claimed")
    assert (forged["http"], forged["status"]) == (401, "unauthenticated")
    assert left(campaign) == 4


@pytest.mark.django_db(transaction=True)  # the key ring's thread reads what the test committed
def test_over_http_the_channels_are_the_storefront_keys(live_campaign) -> None:
    campaign = live_campaign(total_stock=5, channels=["app"])
    KEYRING.forget()  # the next keyed token loads the keys
    _, app_key = storefront_add(name="the app", channels="app")
    _, web_key = storefront_add(name="the web shop", channels="web")
    client = Client()

    def token(key, user: str) -> str:
        expires = int(time.time()) + 60
        signature = hmac.new(key.secret.encode(), f"{user}.{expires}".encode(), hashlib.sha256).hexdigest()
        return f"{key.key_id}.{expires}.{signature}"

    def post(user: str, token: str) -> dict:
        return client.post(f"/api/v1/campaigns/{campaign.pk}/claim", content_type="application/json",
                           HTTP_X_USER_ID=user, HTTP_X_TOKEN=token, HTTP_HOST="localhost").json()

    try:
        assert post("w", token(web_key, "w"))["status"] == "not_eligible"
        assert post("d", mint_token("d", ttl=60))["status"] == "not_eligible"
        assert post("a", token(app_key, "a"))["status"] == "claimed"
    finally:
        KEYRING.forget()
    assert left(campaign) == 4


@pytest.mark.parametrize("flag,value", [("--audience-tags", "VIP"), ("--audience-tags", "a b"),
                                        ("--channels", "x" * 33), ("--channels", ",".join(f"c{i}" for i in range(21)))])
def test_campaign_create_refuses_names_outside_the_form(flag: str, value: str) -> None:
    from campaigns.models import Campaign

    before = Campaign.objects.count()
    with pytest.raises(CommandError):
        call_command("campaign_create", "--name", "n", "--stock", "5", flag, value)
    assert Campaign.objects.count() == before
