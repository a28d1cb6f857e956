"""A group's hash checked, repaired and restored from PostgreSQL (orders/groups.py), and a group's rules where an
operator sets them (campaign_create, Campaign.clean): on the real PostgreSQL and Redis."""
from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command

from campaigns.models import Campaign
from campaigns.redis_state import ClaimCode, campaign_keys, redis_client, run_claim
from campaigns.redis_state.keys import forget_groups
from core.errors import Unavailable
from orders import tasks
from orders.cancel import claim_cancel
from orders.claim import claim_create, forget_campaign_facts
from orders.drain import drain_campaign
from orders.reconciliation import campaign_reconcile
from orders.verify import campaign_verify

pytestmark = pytest.mark.django_db


def held(campaign, user: str) -> int:
    return int(redis_client().hget(campaign_keys(campaign.pk).group, user) or 0)


def two_of_a_group(live_campaign, limit: int = 2):
    return (live_campaign(group="pair", group_limit=limit, per_user_limit=2, total_stock=10),
            live_campaign(group="pair", group_limit=limit, per_user_limit=2, total_stock=10))


def test_a_group_that_balances_verifies_and_a_drift_is_found_and_set_back(live_campaign) -> None:
    first, second = two_of_a_group(live_campaign)
    run_claim(campaign_id=first.pk, user_id="ann", idempotency_key=None)
    run_claim(campaign_id=second.pk, user_id="ann", idempotency_key=None)
    run_claim(campaign_id=second.pk, user_id="bob", idempotency_key=None)
    drain_campaign(campaign_id=second.pk)
    assert campaign_verify(campaign=first).balanced and campaign_verify(campaign=second).balanced

    redis_client().hset(campaign_keys(first.pk).group, mapping={"ann": 0, "eve": 3})  # tampered
    balance = campaign_verify(campaign=first)
    assert not balance.balanced and balance.group is not None
    assert balance.group.drift == {"ann": (0, 2), "eve": (3, 0)}

    record = campaign_reconcile(campaign=first, repair=True, source="test")

    assert record is not None and record.balanced, record.problems
    assert (held(first, "ann"), held(first, "eve"), held(first, "bob")) == (2, 0, 1)
    assert run_claim(campaign_id=first.pk, user_id="ann", idempotency_key=None).code == ClaimCode.GROUP_LIMIT_REACHED


def test_a_group_redis_lost_is_restored_from_postgresql_with_its_campaigns(live_campaign) -> None:
    first, second = two_of_a_group(live_campaign, limit=3)
    for campaign, user in ((first, "ann"), (first, "ann"), (second, "ann"), (second, "bob")):
        assert run_claim(campaign_id=campaign.pk, user_id=user, idempotency_key=None).code == ClaimCode.CLAIMED
    cancelled = claim_create(campaign_id=second.pk, user_id="cat", idempotency_key=None)
    assert claim_cancel(user_id="cat", claim_id=cancelled.claim_id).status == "cancelled"
    drain_campaign(campaign_id=first.pk)
    drain_campaign(campaign_id=second.pk)
    redis_client().flushdb()  # Redis restarted without its data
    forget_groups()
    with pytest.raises(Unavailable):
        claim_create(campaign_id=first.pk, user_id="dan", idempotency_key=None)

    result = tasks.drain_sweep()

    assert sorted(result["rebuilt"]) == sorted([first.pk, second.pk])
    assert (held(first, "ann"), held(first, "bob"), held(first, "cat")) == (3, 1, 0)
    assert claim_create(campaign_id=second.pk, user_id="ann", idempotency_key=None).status == "group_limit_reached"
    assert claim_create(campaign_id=first.pk, user_id="bob", idempotency_key=None).status == "claimed"
    assert campaign_verify(campaign=first).balanced and campaign_verify(campaign=second).balanced


def test_a_group_hash_lost_alone_stops_its_claims_until_reconcile_restores_it(live_campaign) -> None:
    first, second = two_of_a_group(live_campaign)
    run_claim(campaign_id=first.pk, user_id="ann", idempotency_key=None)
    run_claim(campaign_id=second.pk, user_id="ann", idempotency_key=None)
    redis_client().delete(campaign_keys(first.pk).group)
    stock = redis_client().get(campaign_keys(second.pk).stock)
    with pytest.raises(Unavailable):
        claim_create(campaign_id=second.pk, user_id="bob", idempotency_key=None)  # 503: never a guessed count
    assert redis_client().get(campaign_keys(second.pk).stock) == stock
    assert not campaign_verify(campaign=first).balanced

    record = campaign_reconcile(campaign=first, repair=True, source="test")

    assert record is not None and record.balanced, record.problems
    assert held(first, "ann") == 2
    assert claim_create(campaign_id=second.pk, user_id="ann", idempotency_key=None).status == "group_limit_reached"
    assert claim_create(campaign_id=second.pk, user_id="bob", idempotency_key=None).status == "claimed"


def test_campaign_create_takes_a_group_and_its_limit(live_campaign) -> None:
    out = StringIO()
    call_command("campaign_create", "--name", "A", "--stock", "5", "--group", "spring", "--group-limit", "2",
                 "--publish", stdout=out)
    made = json.loads(out.getvalue())
    assert (made["group"], made["group_limit"]) == ("spring", 2)
    assert campaign_keys(made["id"]).group == "cpn:{gspring}:held"
    assert run_claim(campaign_id=made["id"], user_id="ann", idempotency_key=None).code == ClaimCode.CLAIMED


@pytest.mark.parametrize("flags", [
    ["--group", "spring"],  # no limit
    ["--group-limit", "2"],  # no group
    ["--group", "spring", "--group-limit", "0"],
    ["--group", "spring sale", "--group-limit", "2"],  # not a name
    ["--group", "{x}", "--group-limit", "2"],  # a hash tag's braces
    ["--group", "spring", "--group-limit", "2", "--buckets", "2"],
])
def test_campaign_create_refuses_a_bad_group_and_makes_nothing(db, flags) -> None:
    with pytest.raises(CommandError, match="group"):
        call_command("campaign_create", "--name", "A", "--stock", "5", *flags, stdout=StringIO())
    assert not Campaign.objects.exists()


def test_a_campaigns_group_is_fixed_once_it_is_in_redis(live_campaign) -> None:
    campaign = live_campaign(group="spring", group_limit=2)
    campaign.group_limit = 3
    with pytest.raises(ValidationError, match="group"):
        campaign.full_clean()
    campaign.group, campaign.group_limit = "", None
    with pytest.raises(ValidationError, match="group"):
        campaign.full_clean()


def test_a_grouped_claims_status_is_the_same_from_the_door_and_djangos_view(live_campaign, http_server, client
                                                                           ) -> None:
    """The server's processes never met the group: the door's read (no lookup on the loop) finds nothing where it
    looks and hands on to Django's view, which learns the group; both answer pending, then issued, byte for byte."""
    import urllib.request

    from coupons.models import Coupon
    from tests.conftest import shopper_headers

    campaign = live_campaign(group="status", group_limit=2, total_stock=10)
    claimed = run_claim(campaign_id=campaign.pk, user_id="alice", idempotency_key=None)
    claim_id = f"{campaign.pk}-{claimed.ledger_id}"

    def over_http() -> tuple[int, bytes]:
        request = urllib.request.Request(f"{http_server}/api/v1/claims/{claim_id}", headers={
            "X-User-Id": "alice", "X-Token": shopper_headers("alice")["HTTP_X_TOKEN"]})
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read()

    status, body = over_http()
    assert status == 200 and json.loads(body)["status"] == "pending"
    assert client.get(f"/api/v1/claims/{claim_id}", **shopper_headers("alice")).content == body
    drain_campaign(campaign_id=campaign.pk)
    status, body = over_http()
    assert json.loads(body)["status"] == "issued"
    assert json.loads(body)["coupon"]["code"] == Coupon.objects.get(claim_id=claim_id).code
    assert over_http() == (200, body)  # again: the process knows the group now


def test_the_admin_sets_a_group_on_a_draft_and_locks_it_once_published(admin_client) -> None:
    from django.utils import timezone

    from campaigns.services import campaign_publish

    now = timezone.localtime()
    form = {"name": "Grouped", "kind": "grab", "starts_at_0": now.strftime("%Y-%m-%d"), "starts_at_1": "00:00:00",
            "ends_at_0": (now + timezone.timedelta(days=2)).strftime("%Y-%m-%d"), "ends_at_1": "00:00:00",
            "total_stock": "5", "per_user_limit": "1", "buckets": "1", "discount_type": "fixed",
            "discount_value": "10.00", "min_spend": "0", "currency": "CNY", "valid_days": "7", "audience": "all",
            "group": "spring", "group_limit": "2"}
    refused = admin_client.post("/admin/campaigns/campaign/add/", {**form, "group_limit": ""})
    created = admin_client.post("/admin/campaigns/campaign/add/", form)

    assert refused.status_code == 200 and "A group needs its limit" in refused.content.decode()
    assert created.status_code == 302
    campaign = Campaign.objects.get(name="Grouped")
    campaign_publish(campaign=campaign)
    assert campaign_keys(campaign.pk).group == "cpn:{gspring}:held"
    page = admin_client.get(f"/admin/campaigns/campaign/{campaign.pk}/change/").content.decode()
    assert 'name="group"' not in page and 'name="group_limit"' not in page  # locked once published


def test_a_campaigns_home_lost_alone_is_found_and_written_again(live_campaign) -> None:
    """On a cluster the home is in another slot than the group's state, so on another master: a process that never
    met the group claims at the home, finds nothing and answers 503; verify names it, reconcile writes it again."""
    campaign = live_campaign(group="home", group_limit=2, total_stock=10)
    redis_client().delete(campaign_keys(campaign.pk).home)
    forget_groups()
    forget_campaign_facts()
    with pytest.raises(Unavailable):
        claim_create(campaign_id=campaign.pk, user_id="ann", idempotency_key=None)
    balance = campaign_verify(campaign=campaign)
    assert not balance.balanced and balance.group is not None and balance.group.homeless

    record = campaign_reconcile(campaign=campaign, repair=True, source="test")

    assert record is not None and record.balanced, record.problems
    forget_groups()
    assert claim_create(campaign_id=campaign.pk, user_id="ann", idempotency_key=None).status == "claimed"
    assert int(redis_client().get(campaign_keys(campaign.pk).stock)) == 9
