"""The operator's console in a real browser: a campaign from creation to a revoked coupon's event."""
from __future__ import annotations

import json
import urllib.request
from datetime import timedelta
from typing import Any

from django.contrib.auth.models import User
from django.utils import timezone

from campaigns.models import Campaign
from core.auth import mint_token
from coupons.models import Coupon

from ..conftest import wait_for
from .conftest import save_screenshot


def claim(server: str, campaign_id: int, user: str) -> dict[str, Any]:
    request = urllib.request.Request(
        f"{server}/api/v1/campaigns/{campaign_id}/claim", data=b"{}", method="POST",
        headers={"X-User-Id": user, "X-Token": mint_token(user, ttl=600), "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def choose_action(page: Any, action: str, name: str) -> None:
    """Tick the campaign's row on the change list, run an action, land on its confirmation page."""
    page.locator("tr", has_text=name).locator("input.action-select").check()
    page.select_option("select[name=action]", action)
    page.click("button[name=index]")


def test_an_operator_runs_a_campaign_from_creation_to_a_revoked_coupon(plain_server, drain_loop, page) -> None:
    User.objects.create_superuser("ops", "ops@example.com", "a-long-operator-password")
    admin = f"{plain_server}/admin/"

    # log in
    page.goto(admin)
    page.fill("#id_username", "ops")
    page.fill("#id_password", "a-long-operator-password")
    page.click("input[type=submit]")
    page.wait_for_selector("#site-name")

    # create a campaign (a draft)
    page.goto(f"{admin}campaigns/campaign/add/")
    start = timezone.localtime() - timedelta(minutes=1)
    end = start + timedelta(hours=1)
    page.fill("#id_name", "Browser sale")
    page.fill("#id_starts_at_0", start.strftime("%Y-%m-%d"))
    page.fill("#id_starts_at_1", start.strftime("%H:%M:%S"))
    page.fill("#id_ends_at_0", end.strftime("%Y-%m-%d"))
    page.fill("#id_ends_at_1", end.strftime("%H:%M:%S"))
    page.fill("#id_total_stock", "20")
    page.fill("#id_per_user_limit", "1")
    page.fill("#id_discount_value", "50.00")
    page.fill("#id_min_spend", "300.00")
    page.fill("#id_valid_days", "30")
    page.click("input[name=_save]")
    page.wait_for_selector("text=was added successfully")
    campaign = Campaign.objects.get(name="Browser sale")

    # publish it (confirmation page, then the action)
    choose_action(page, "publish", "Browser sale")
    page.click("input[type=submit][value=Publish]")
    page.wait_for_selector("text=Published 1 campaign(s)")

    # claims through the API, then the list and the change page show them
    for user in ("ann", "bob", "cid"):
        assert claim(plain_server, campaign.pk, user)["status"] == "claimed"
    wait_for(lambda: Coupon.objects.filter(campaign=campaign).count() == 3)
    page.goto(f"{admin}campaigns/campaign/")
    if page.is_visible("#toggle-nav-sidebar"):
        page.click("#toggle-nav-sidebar")  # the app list folds away: the whole table fits the screenshot
    row = page.locator("tr", has_text="Browser sale")
    assert "17" in row.inner_text() and "Live" in row.inner_text()
    save_screenshot(page, "admin-campaign-list")
    page.goto(f"{admin}campaigns/campaign/{campaign.pk}/change/")
    assert page.inner_text("#live-remaining") == "17"
    assert page.get_attribute("#burndown", "data-claims") == "3"
    points_before = page.get_attribute("#burndown polyline", "points")
    assert claim(plain_server, campaign.pk, "dan")["status"] == "claimed"
    wait_for(lambda: Coupon.objects.filter(campaign=campaign).count() == 4)
    page.reload()
    assert page.inner_text("#live-remaining") == "16"
    assert page.get_attribute("#burndown", "data-claims") == "4"
    assert page.get_attribute("#burndown polyline", "points") != points_before  # the chart moved
    save_screenshot(page, "admin-campaign-change")

    # extend its end by an hour (a form in the operator's zone)
    page.goto(f"{admin}campaigns/campaign/")
    choose_action(page, "extend_end", "Browser sale")
    new_end = timezone.localtime(campaign.ends_at) + timedelta(hours=1)
    page.fill("#id_new_end", new_end.strftime("%Y-%m-%dT%H:%M:%S"))
    page.click("input[type=submit][value='Extend end']")
    page.wait_for_selector("text=Extended the end of 1 campaign(s)")
    campaign.refresh_from_db()
    assert abs((campaign.ends_at - new_end).total_seconds()) < 1

    # pause it: claims answer 'paused'
    choose_action(page, "pause", "Browser sale")
    page.click("input[type=submit][value=Pause]")
    page.wait_for_selector("text=Paused 1 campaign(s)")
    assert claim(plain_server, campaign.pk, "eve")["status"] == "paused"

    # revoke a coupon and see its event
    coupon = Coupon.objects.get(campaign=campaign, user_id="ann")
    page.goto(f"{admin}coupons/coupon/?q={coupon.code}")
    page.locator("tr", has_text=coupon.code).locator("input.action-select").check()
    page.select_option("select[name=action]", "revoke")
    page.click("button[name=index]")
    page.click("input[type=submit][value=Revoke]")
    page.wait_for_selector("text=Revoked 1 coupon(s)")
    page.goto(f"{admin}coupons/coupon/{coupon.pk}/change/")
    events = page.inner_text("#events-group")
    assert "Revoked" in events and "admin" in events and events.index("Revoked") < events.index("Issued")
    save_screenshot(page, "admin-coupon-events")
