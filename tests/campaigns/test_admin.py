"""The operator's console through Django's test client, with real PostgreSQL and Redis."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Group, User
from django.utils import timezone

from campaigns.models import Campaign, CampaignEvent
from campaigns.redis_state import ClaimCode, campaign_keys, redis_client, run_claim
from coupons.models import Coupon, CouponEvent
from orders.console import VIEWER_GROUP
from orders.drain import drain_campaign
from orders.models import Reconciliation
from orders.verify import campaign_verify

from ..factories import CampaignFactory

pytestmark = pytest.mark.django_db
CHANGELIST = "/admin/campaigns/campaign/"


def run_action(client, action: str, campaigns, url: str = CHANGELIST, **fields):
    """Choose an action (its confirmation page), then confirm it."""
    ids = [str(c.pk) for c in campaigns]
    page = client.post(url, {"action": action, "_selected_action": ids})
    assert page.status_code == 200, page.status_code
    return client.post(url, {"action": action, "_selected_action": ids, "apply": "1", **fields}, follow=True)


def test_the_list_shows_status_window_live_remaining_claims_issued_and_drift(admin_client, live_campaign) -> None:
    campaign = live_campaign(name="Singles day", total_stock=10)
    run_claim(campaign_id=campaign.pk, user_id="ann", idempotency_key=None)
    drain_campaign(campaign_id=campaign.pk)
    CampaignFactory(name="Draft one", published_at=None)
    Reconciliation.objects.create(campaign=campaign, source="test", total_stock=10, remaining=8, claims=1,
                                  restocked=0, drift=1, balanced=False)

    page = admin_client.get(CHANGELIST).content.decode()
    live_only = admin_client.get(CHANGELIST + "?state=live").content.decode()

    for text in ("Singles day", "Live", "Remaining (live)", "Claims issued", "DRIFT 1", "Draft"):
        assert text in page, text
    assert ">9<" in page  # live remaining from Redis
    assert "Singles day" in live_only and "Draft one" not in live_only
    assert "Draft one" in admin_client.get(CHANGELIST + "?q=Draft").content.decode()


def test_the_change_page_shows_the_live_panel_and_the_burn_down_chart(admin_client, live_campaign) -> None:
    campaign = live_campaign(total_stock=10)
    for user in ("ann", "bob", "cid"):
        run_claim(campaign_id=campaign.pk, user_id=user, idempotency_key=None)
    drain_campaign(campaign_id=campaign.pk)

    page = admin_client.get(f"{CHANGELIST}{campaign.pk}/change/").content.decode()

    assert 'id="live-remaining">7<' in page and 'id="live-backlog">0<' in page
    assert '<svg id="burndown"' in page and 'data-claims="3"' in page and "<polyline" in page
    assert 'name="total_stock"' not in page and 'name="per_user_limit"' not in page  # locked once published


def test_a_draft_is_created_with_the_same_validation_messages_as_campaign_create(admin_client) -> None:
    now = timezone.localtime()
    form = {"name": "Bad", "kind": "grab", "starts_at_0": now.strftime("%Y-%m-%d"), "starts_at_1": "12:00:00",
            "ends_at_0": now.strftime("%Y-%m-%d"), "ends_at_1": "11:00:00", "total_stock": "5",
            "per_user_limit": "1", "buckets": "1", "discount_type": "fixed", "discount_value": "10.00",
            "min_spend": "0", "currency": "CNY", "valid_days": "7", "audience": "all"}

    refused = admin_client.post("/admin/campaigns/campaign/add/", form)
    created = admin_client.post("/admin/campaigns/campaign/add/", {**form, "ends_at_1": "13:00:00"})

    assert refused.status_code == 200 and "The campaign must end after it starts." in refused.content.decode()
    assert created.status_code == 302 and Campaign.objects.get(name="Bad").published_at is None


def test_publish_pause_resume_each_confirm_then_act_and_are_logged(admin_client) -> None:
    campaign = CampaignFactory(published_at=None, total_stock=4)

    run_action(admin_client, "publish", [campaign])
    assert int(redis_client().get(campaign_keys(campaign.pk).stock)) == 4
    run_action(admin_client, "pause", [campaign])
    paused = run_claim(campaign_id=campaign.pk, user_id="ann", idempotency_key=None)
    run_action(admin_client, "resume", [campaign])
    resumed = run_claim(campaign_id=campaign.pk, user_id="ann", idempotency_key=None)

    assert (paused.code, resumed.code) == (ClaimCode.PAUSED, ClaimCode.CLAIMED)
    assert [e.type for e in CampaignEvent.objects.filter(campaign=campaign).order_by("id")] == [
        "published", "paused", "resumed"]
    assert LogEntry.objects.filter(object_id=str(campaign.pk)).count() == 3


def test_restock_adds_to_the_total_and_the_live_stock_and_the_balance_holds(admin_client, live_campaign) -> None:
    campaign = live_campaign(total_stock=5)
    run_claim(campaign_id=campaign.pk, user_id="ann", idempotency_key=None)

    run_action(admin_client, "restock", [campaign], quantity="10")
    refused = run_action(admin_client, "restock", [campaign], quantity="0")

    campaign.refresh_from_db()
    assert campaign.total_stock == 15 and int(redis_client().get(campaign_keys(campaign.pk).stock)) == 14
    assert campaign_verify(campaign=campaign).balanced
    assert "Ensure this value is greater than or equal to 1" in refused.content.decode()
    assert CampaignEvent.objects.get(campaign=campaign, type="stock_added").data["added"] == 10


def test_reconcile_now_records_a_reconciliation_and_says_what_it_found(admin_client, live_campaign) -> None:
    campaign = live_campaign(total_stock=5)
    run_claim(campaign_id=campaign.pk, user_id="ann", idempotency_key=None)

    page = run_action(admin_client, "reconcile_now", [campaign]).content.decode()

    record = Reconciliation.objects.get(campaign=campaign)
    assert record.balanced and record.repairs == ["persisted 1 ledger entries missing from PostgreSQL"]
    assert "balanced" in page and "Repaired" in page


def test_an_operator_revokes_a_coupon_and_extends_another_and_each_gets_its_event(admin_client, live_campaign) -> None:
    campaign = live_campaign(total_stock=5)
    for user in ("ann", "bob"):
        run_claim(campaign_id=campaign.pk, user_id=user, idempotency_key=None)
    drain_campaign(campaign_id=campaign.pk)
    ann, bob = Coupon.objects.get(user_id="ann"), Coupon.objects.get(user_id="bob")
    url = "/admin/coupons/coupon/"

    run_action(admin_client, "revoke", [ann], url=url)
    run_action(admin_client, "extend_validity", [bob], url=url, days="3")

    ann.refresh_from_db()
    assert ann.status == "revoked" and CouponEvent.objects.get(coupon=ann, type="revoked").source == "admin"
    assert Coupon.objects.get(pk=bob.pk).expires_at == bob.expires_at + timedelta(days=3)
    assert CouponEvent.objects.get(coupon=bob, type="extended").data["days"] == 3
    page = admin_client.get(f"{url}{ann.pk}/change/").content.decode()
    assert page.index("revoked") < page.index("issued")  # events inline, newest first


def test_a_viewer_can_look_at_everything_but_act_on_nothing(client, live_campaign) -> None:
    campaign = live_campaign(total_stock=5)
    viewer = User.objects.create_user("vera", password="pw", is_staff=True)
    viewer.groups.add(Group.objects.get(name=VIEWER_GROUP))
    client.force_login(viewer)

    assert client.get(CHANGELIST).status_code == 200
    assert client.get(f"{CHANGELIST}{campaign.pk}/change/").status_code == 200
    assert client.get("/admin/coupons/coupon/").status_code == 200
    assert client.get("/admin/django_celery_beat/periodictask/").status_code == 200
    client.post(CHANGELIST, {"action": "pause", "_selected_action": [campaign.pk], "apply": "1"})
    assert not Campaign.objects.get(pk=campaign.pk).paused
    assert client.post(f"{CHANGELIST}{campaign.pk}/change/", {"name": "x"}).status_code == 403


def test_every_periodic_job_carries_a_note_for_operators(admin_client) -> None:
    from django_celery_beat.models import PeriodicTask

    page = admin_client.get("/admin/django_celery_beat/periodictask/").content.decode()
    notes = dict(PeriodicTask.objects.values_list("name", "description"))

    assert set(notes) >= {"drain-ledgers", "expiry-sweep", "reconcile-campaigns", "housekeeping",
                          "preheat-due-campaigns"}
    assert all(notes[name] for name in notes) and "drain-ledgers" in page


def test_the_admin_needs_a_staff_login(client) -> None:
    response = client.get(CHANGELIST)
    assert response.status_code == 302 and "/admin/login/" in response["Location"]
