"""A campaign's richer rules (issue 38): tiers (满减), free shipping and buy N get M as Campaign fields (migration
0012: their check constraints), Campaign.clean's errors, the adapter to campaigns.pricing, campaign_create's
--tiers / --free-shipping / --buy --get and their refusals (nothing created)."""
from __future__ import annotations

import json
from decimal import Decimal
from io import StringIO
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command
from django.db import IntegrityError, transaction
from django.utils import timezone

from campaigns import pricing
from campaigns.models import Campaign, DiscountType

from ..factories import CampaignFactory

pytestmark = pytest.mark.django_db
D = Decimal
ADD = "/admin/campaigns/campaign/add/"


def run(*args: str) -> dict[str, Any]:
    out = StringIO()
    call_command("campaign_create", "--name", "Rich", "--stock", "10", *args, stdout=out, stderr=StringIO())
    return json.loads(out.getvalue())


def test_the_discount_types_are_pricings() -> None:
    assert tuple(DiscountType.values) == pricing.DISCOUNT_TYPES


def test_campaign_create_tiers_stores_them_and_the_first_threshold_as_the_minimum_spend() -> None:
    summary = run("--tiers", "100:10,200:25,500:10%", "--max-discount", "60")

    campaign = Campaign.objects.get(pk=summary["id"])
    assert (campaign.discount_type, campaign.discount_value, campaign.min_spend) == ("tiers", D("0.00"), D("100.00"))
    assert campaign.tiers == [["100", "10", False], ["200", "25", False], ["500", "10", True]]
    assert summary["discount_type"] == "tiers" and summary["tiers"] == campaign.tiers
    assert campaign.coupon_rule() == pricing.CouponRule(
        "tiers", D(0), "CNY", max_discount=D("60.00"), min_spend=D("100.00"),
        tiers=(pricing.Tier(D(100), D(10)), pricing.Tier(D(200), D(25)), pricing.Tier(D(500), D(10), True)))
    assert campaign.discount_for(D("199.99")).amount == D("10.00")
    assert campaign.discount_for(D("700.00")).amount == D("60.00")  # 10% of 700 = 70.00, capped


def test_campaign_create_free_shipping_and_buy_get() -> None:
    free = Campaign.objects.get(pk=run("--free-shipping", "--max-discount", "8", "--min-spend", "99")["id"])
    assert (free.discount_type, free.discount_value, free.max_discount, free.min_spend) == (
        "free_shipping", D("0.00"), D("8.00"), D("99.00"))
    assert free.coupon_rule().discount_type == pricing.FREE_SHIPPING and not free.is_scoped

    summary = run("--buy", "2", "--get", "1", "--categories", "socks")
    buy_get = Campaign.objects.get(pk=summary["id"])
    assert (buy_get.discount_type, buy_get.buy_quantity, buy_get.get_quantity) == ("buy_get", 2, 1)
    assert (summary["buy"], summary["get"]) == (2, 1)
    rule = buy_get.coupon_rule()
    assert (rule.buy, rule.get, rule.include_categories) == (2, 1, frozenset({"socks"}))
    assert buy_get.is_scoped  # it needs the cart's lines: on an amount alone it gives nothing
    plain = run("--discount", "15%")
    assert plain["discount_type"] == "percent" and "tiers" not in plain and "buy" not in plain


@pytest.mark.parametrize(("args", "message"), [
    (["--tiers", "100-10"], "THRESHOLD:OFF pairs"),
    (["--tiers", "100:10,"], "THRESHOLD:OFF pairs"),
    (["--tiers", "100:-10"], "THRESHOLD:OFF pairs"),
    (["--tiers", "100:10%%"], "THRESHOLD:OFF pairs"),
    (["--tiers", "200:10,100:5"], "Tiers go up"),
    (["--tiers", "100:30,200:25"], "Tiers go up"),
    (["--tiers", "100:10%,200:5%"], "Tiers go up"),
    (["--tiers", "0:10"], "more than 0"),
    (["--tiers", "100:10.5", "--currency", "JPY"], "decimals"),
    (["--tiers", "100:101%"], "at most 100"),
    (["--tiers", ",".join(f"{n}:{n}" for n in range(1, 12))], "1 to 10 tiers"),
    (["--tiers", "100:10", "--discount", "5"], "--tiers takes the place of --discount"),
    (["--tiers", "100:10", "--min-spend", "50"], "--tiers takes the place of --min-spend"),
    (["--free-shipping", "--discount", "5"], "--free-shipping takes the place of --discount"),
    (["--tiers", "100:10", "--free-shipping"], "choose one"),
    (["--free-shipping", "--buy", "1", "--get", "1"], "choose one"),
    (["--buy", "2"], "--buy N --get M"),
    (["--buy", "0", "--get", "1"], "--buy N --get M"),
    (["--buy", "1", "--get", "1", "--discount", "5%"], "takes the place of --discount"),
])
def test_campaign_create_refuses_bad_rich_rules_and_creates_nothing(args: list[str], message: str) -> None:
    with pytest.raises(CommandError, match=message):
        run(*args)
    assert Campaign.objects.count() == 0


@pytest.mark.parametrize(("fields", "field", "message"), [
    ({"discount_type": "tiers", "discount_value": D(0), "tiers": []}, "tiers", "1 to 10 tiers"),
    ({"discount_type": "tiers", "discount_value": D(0), "tiers": [["100", "x", False]]}, "tiers", "a list of"),
    ({"discount_type": "tiers", "discount_value": D(0), "tiers": {"100": "10"}}, "tiers", "a list of"),
    ({"discount_type": "tiers", "discount_value": D(0), "tiers": [["200", "10", False], ["100", "5", False]]},
     "tiers", "Tiers go up"),
    ({"discount_type": "tiers", "discount_value": D(5), "tiers": [["100", "10", False]]}, "discount_value",
     "leave it 0"),
    ({"discount_type": "fixed", "tiers": [["100", "10", False]]}, "tiers", "Only a tiers rule"),
    ({"discount_type": "free_shipping", "discount_value": D(0), "buy_quantity": 1}, "buy_quantity",
     "Only a buy N get M"),
    ({"discount_type": "buy_get", "discount_value": D(0), "buy_quantity": 2}, "get_quantity", "1 to 1000"),
])
def test_clean_says_what_is_wrong_with_a_rich_rule(fields: dict[str, Any], field: str, message: str) -> None:
    campaign = CampaignFactory.build(**fields)
    with pytest.raises(ValidationError) as caught:
        campaign.full_clean()
    assert message in " ".join(caught.value.message_dict[field])


def test_clean_makes_the_first_threshold_the_minimum_spend() -> None:
    campaign = CampaignFactory.build(discount_type="tiers", discount_value=D(0), min_spend=D("5.00"),
                                     tiers=[["150.00", "20.00", False]])
    campaign.full_clean()
    assert campaign.min_spend == D("150.00")


@pytest.mark.parametrize("fields", [
    {"discount_type": "tiers", "discount_value": D(0)},  # no tiers
    {"discount_type": "fixed", "tiers": [["100", "10", False]]},
    {"discount_type": "free_shipping", "discount_value": D(5)},
    {"discount_type": "fixed", "discount_value": D(0)},
    {"discount_type": "buy_get", "discount_value": D(0), "buy_quantity": 1},  # no get
    {"discount_type": "percent", "buy_quantity": 1, "get_quantity": 1},
])
def test_the_database_refuses_a_rich_rule_that_skipped_clean(fields: dict[str, Any]) -> None:
    campaign = CampaignFactory()
    with pytest.raises(IntegrityError), transaction.atomic():
        Campaign.objects.filter(pk=campaign.pk).update(**fields)


def tier_rows(*rows: tuple[str, str], percent: tuple[int, ...] = ()) -> dict[str, str]:
    """The admin form's tiers rows (campaigns.admin_rules.TiersWidget): threshold and off, a percent box."""
    form = {}
    for index, (threshold, off) in enumerate(rows):
        form |= {f"tiers_threshold_{index}": threshold, f"tiers_off_{index}": off}
        if index in percent:
            form[f"tiers_percent_{index}"] = "on"
    return form


def test_the_admin_creates_rich_rules_and_answers_their_errors_on_the_form(admin_client) -> None:
    now = timezone.localtime()
    form = {"name": "Ladder", "kind": "grab", "starts_at_0": now.strftime("%Y-%m-%d"), "starts_at_1": "12:00:00",
            "ends_at_0": now.strftime("%Y-%m-%d"), "ends_at_1": "13:00:00", "total_stock": "5",
            "per_user_limit": "1", "buckets": "1", "discount_type": "tiers", "discount_value": "0",
            **tier_rows(("100", "10"), ("200", "25")), "buy_quantity": "", "get_quantity": "",
            "min_spend": "0", "currency": "CNY", "valid_days": "7", "audience": "all"}

    no_tiers = dict.fromkeys(tier_rows(("", ""), ("", "")), "")
    down = admin_client.post(ADD, {**form, **tier_rows(("200", "10"), ("100", "5"))})
    no_quantities = admin_client.post(ADD, {**form, **no_tiers, "name": "B2G1", "discount_type": "buy_get"})
    plain = admin_client.post(ADD, {**form, **no_tiers, "name": "Plain", "discount_type": "fixed",
                                    "discount_value": "5"})
    created = admin_client.post(ADD, form)

    assert down.status_code == 200 and "Tiers go up" in down.content.decode()
    assert no_quantities.status_code == 200 and "1 to 1000 items" in no_quantities.content.decode()
    assert plain.status_code == 302 and Campaign.objects.get(name="Plain").tiers == []
    assert created.status_code == 302
    ladder = Campaign.objects.get(name="Ladder")
    assert (ladder.min_spend, ladder.buy_quantity, ladder.coupon_rule().tiers[1]) == (
        D("100.00"), 0, pricing.Tier(D(200), D(25)))
