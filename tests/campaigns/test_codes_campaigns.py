"""Codes campaigns in the admin and in campaign_create (issue 19): kind, shared code (upper case, unique among
campaigns not ended, checked again race-free at create and publish), preheated into their own Redis keys."""
from __future__ import annotations

import json
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from campaigns.errors import InvalidCampaign
from campaigns.models import Campaign
from campaigns.redis_state import campaign_keys, redis_client
from campaigns.services import campaign_publish

from ..factories import CampaignFactory

pytestmark = pytest.mark.django_db
ADD = "/admin/campaigns/campaign/add/"


def form(**fields: str) -> dict[str, str]:
    now = timezone.localtime()
    later = now + timedelta(hours=2)
    return {"name": "Save 50", "kind": "codes", "code": "save50", "starts_at_0": now.strftime("%Y-%m-%d"),
            "starts_at_1": now.strftime("%H:%M:%S"), "ends_at_0": later.strftime("%Y-%m-%d"),
            "ends_at_1": later.strftime("%H:%M:%S"), "total_stock": "500", "per_user_limit": "1", "buckets": "1",
            "discount_type": "fixed", "discount_value": "50.00", "min_spend": "300", "currency": "CNY",
            "valid_days": "7", "audience": "all", **fields}


def test_the_admin_creates_and_publishes_a_codes_campaign_with_its_shared_code_upper_case(admin_client) -> None:
    created = admin_client.post(ADD, form())
    campaign = Campaign.objects.get(name="Save 50")
    published = admin_client.post("/admin/campaigns/campaign/", {
        "action": "publish", "_selected_action": [campaign.pk], "apply": "1"}, follow=True)

    campaign.refresh_from_db()
    assert created.status_code == 302 and published.status_code == 200
    assert (campaign.kind, campaign.code, campaign.published_at is not None) == ("codes", "SAVE50", True)
    keys = campaign_keys(campaign.pk)
    assert int(redis_client().get(keys.uses)) == 500 and redis_client().get(keys.stock) is None


@pytest.mark.parametrize(("fields", "message"), [
    ({"code": "SAVE 50"}, "A shared code is 4-32 of A-Z, 0-9 and"),
    ({"kind": "grab"}, "Only a codes campaign has a shared code."),
    ({"code": "Taken"}, "The code TAKEN belongs to another campaign that has not ended."),
])
def test_the_admin_refuses_a_bad_or_taken_shared_code(admin_client, fields, message) -> None:
    CampaignFactory(kind="codes", code="TAKEN")
    CampaignFactory(kind="codes", code="OLD1", starts_at=timezone.now() - timedelta(days=2),
                    ends_at=timezone.now() - timedelta(days=1))

    refused = admin_client.post(ADD, form(**fields))

    assert refused.status_code == 200 and message in refused.content.decode()
    assert admin_client.post(ADD, form(code="old1")).status_code == 302  # the code of an ended campaign is free


def test_publish_checks_the_code_again_under_its_lock() -> None:
    first = CampaignFactory(kind="codes", code="SAVE50")
    # a draft with the same code slipped in (written around the services' check, as a race would)
    second = CampaignFactory(kind="codes", code="save50", published_at=None)

    with pytest.raises(InvalidCampaign, match="belongs to another campaign"):
        campaign_publish(campaign=second)
    second.refresh_from_db()
    assert (second.code, second.published_at, first.code) == ("SAVE50", None, "SAVE50")


def test_campaign_create_makes_a_codes_campaign_with_a_shared_code() -> None:
    out = StringIO()
    call_command("campaign_create", "--name", "Midnight", "--stock", "100", "--kind", "codes", "--code", "night-20",
                 "--publish", stdout=out)

    summary = json.loads(out.getvalue())
    assert (summary["kind"], summary["code"], summary["published"]) == ("codes", "NIGHT-20", True)
    assert int(redis_client().get(campaign_keys(summary["id"]).uses)) == 100
    with pytest.raises(CommandError, match="belongs to another campaign"):
        call_command("campaign_create", "--name", "Again", "--stock", "5", "--kind", "codes", "--code", "NIGHT-20",
                     stdout=StringIO())
    with pytest.raises(CommandError, match="only with --kind codes"):
        call_command("campaign_create", "--name", "Grab", "--stock", "5", "--code", "X1234", stdout=StringIO())


def test_a_grab_campaign_is_loaded_as_before() -> None:
    out = StringIO()
    call_command("campaign_create", "--name", "Grab", "--stock", "7", "--publish", stdout=out)

    summary = json.loads(out.getvalue())
    keys = campaign_keys(summary["id"])
    assert (summary["kind"], summary["code"]) == ("grab", None)
    assert int(redis_client().get(keys.stock)) == 7 and redis_client().get(keys.uses) is None
