"""The admin's richer rules (issue 38 goal 3; campaigns/admin_rules.py): a tiers rule edited as rows, checked by
Campaign.clean's rules, and a campaign's rule previewed on a sample cart with shipping (the tier reached and
what is left to the next; buy N get M's free items; free shipping), writing nothing."""
from __future__ import annotations

import re
from decimal import Decimal as D

import pytest
from django.utils import timezone

from campaigns import pricing
from campaigns.models import Campaign
from campaigns.rich_rules import tier_progress
from coupons.models import Coupon

from ..factories import CampaignFactory
from .test_rich_rules import ADD, tier_rows

pytestmark = pytest.mark.django_db
TIERS = [["100.00", "10.00", False], ["200.00", "25.00", False], ["500.00", "10", True]]


def form(**fields: str) -> dict[str, str]:
    now = timezone.localtime()
    return {"name": "Ladder", "kind": "grab", "starts_at_0": now.strftime("%Y-%m-%d"), "starts_at_1": "12:00:00",
            "ends_at_0": now.strftime("%Y-%m-%d"), "ends_at_1": "13:00:00", "total_stock": "5",
            "per_user_limit": "1", "buckets": "1", "discount_type": "tiers", "discount_value": "0",
            "buy_quantity": "", "get_quantity": "", "min_spend": "0", "currency": "CNY", "valid_days": "7",
            "audience": "all", **fields}


def test_the_tiers_are_edited_as_rows(admin_client) -> None:
    page = admin_client.get(ADD).content.decode()
    assert 'name="tiers_threshold_0"' in page and 'name="tiers_percent_2"' in page  # blank rows to fill

    # rows with a gap and a percentage: the empty row is dropped, the percent box kept
    created = admin_client.post(ADD, form(**tier_rows(("100", "10"), ("", ""), ("200", "25"), ("500", "10"),
                                                      percent=(3,))))
    assert created.status_code == 302, created.content.decode()[:2000]
    ladder = Campaign.objects.get(name="Ladder")
    assert ladder.tiers == [["100", "10", False], ["200", "25", False], ["500", "10", True]]
    assert ladder.min_spend == D("100.00")

    change = admin_client.get(f"/admin/campaigns/campaign/{ladder.pk}/change/").content.decode()
    assert re.search(r'name="tiers_threshold_2" value="500"', change)
    assert re.search(r'name="tiers_percent_2" checked', change)
    assert 'name="tiers_threshold_5"' in change  # three blank rows under them
    assert 'id="preview-form"' in change  # the preview's small form on the change page


@pytest.mark.parametrize(("rows", "message"), [
    ({"tiers_threshold_0": "100", "tiers_off_0": ""}, "Tier 1: a threshold and an amount off"),
    ({"tiers_threshold_0": "1e3", "tiers_off_0": "5"}, "Tier 1: a threshold and an amount off"),
    (tier_rows(("200", "10"), ("100", "5")), "Tiers go up"),
    (tier_rows(("100", "120"), percent=(0,)), "percentage is more than 0 and at most 100"),
    ({}, "A tiered rule has 1 to 10 tiers."),  # no row: rich_rules' own check
])
def test_rows_that_cant_be_a_rule_are_answered_on_the_form(admin_client, rows: dict, message: str) -> None:
    answer = admin_client.post(ADD, form(**rows))
    assert answer.status_code == 200 and message in answer.content.decode()
    assert not Campaign.objects.filter(name="Ladder").exists()


def test_tier_progress() -> None:
    tiers = tuple(pricing.Tier(D(t), D(o), p) for t, o, p in TIERS)
    assert tier_progress(tiers, D("60.00")) == (None, D("40.00"))
    assert tier_progress(tiers, D("100.00")) == (0, D("100.00"))
    assert tier_progress(tiers, D("460.00")) == (1, D("40.00"))
    assert tier_progress(tiers, D("900.00")) == (2, None)


def preview(admin_client, campaign: Campaign, lines: str, shipping: str = "0") -> str:
    answer = admin_client.post(f"/admin/campaigns/campaign/{campaign.pk}/preview/",
                               {"lines": lines, "shipping": shipping})
    assert answer.status_code == 200
    return answer.content.decode()


def test_the_preview_shows_the_tier_reached_and_what_is_left_to_the_next(admin_client) -> None:
    campaign = CampaignFactory(discount_type="tiers", discount_value=D(0), tiers=TIERS, min_spend=D("100.00"),
                               exclude_categories=["books"])
    page = preview(admin_client, campaign, "TEA-1,tea,2,120.00\nCUP-9,kitchen,1,60.00\nBOOK-3,books,1,80.00", "12.00")
    assert "ok: 25.00 off 380.00, 367.00 to pay" in page  # 300.00 eligible: the 200 tier; shipping stays payable
    assert "Eligible amount 300.00: 200.00 more reaches the next tier." in page
    assert re.search(r'<tr class="selected"><td>200.00</td><td>25.00</td>', page)
    below = preview(admin_client, campaign, "60.00")  # an amount alone
    assert "min_spend_not_met: 0.00 off 60.00, 60.00 to pay" in below
    assert "Eligible amount 60.00: 40.00 more reaches the next tier." in below
    top = preview(admin_client, campaign, "TEA-1,tea,5,120.00")
    assert "ok: 60.00 off 600.00" in top and "the last tier is reached" in top  # 10% of 600
    assert Coupon.objects.count() == 0


def test_the_preview_prices_free_shipping_and_buy_n_get_m(admin_client) -> None:
    free = CampaignFactory(discount_type="free_shipping", discount_value=D(0), min_spend=D(0),
                           max_discount=D("10.00"))
    page = preview(admin_client, free, "TEA-1,tea,1,120.00", "12.00")
    assert "ok: 10.00 off 120.00, 122.00 to pay" in page and "Shipping 12.00 (10.00 of it taken off)" in page
    assert "not_applicable" in preview(admin_client, free, "TEA-1,tea,1,120.00")  # no shipping
    b2g1 = CampaignFactory(discount_type="buy_get", discount_value=D(0), min_spend=D(0), buy_quantity=2,
                           get_quantity=1)
    page = preview(admin_client, b2g1, "TEA-1,tea,2,120.00\nCUP-9,kitchen,1,60.00")
    assert "(buy 2, get 1 free)" in page and "ok: 60.00 off 300.00, 240.00 to pay" in page


@pytest.mark.parametrize("shipping", ["-1", "x", "1e2", "1.001"])
def test_the_preview_refuses_a_bad_shipping(admin_client, shipping: str) -> None:
    page = preview(admin_client, CampaignFactory(), "TEA-1,tea,1,120.00", shipping)
    assert "errorlist" in page
