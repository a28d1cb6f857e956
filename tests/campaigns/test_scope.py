"""A campaign's scope and stacking (issue 20, item 1): the fields, their validation, campaign_create's flags,
the admin's fieldset and its preview of the rule on a pasted cart."""
from __future__ import annotations

import json
from decimal import Decimal
from io import StringIO

import pytest
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command

from campaigns import pricing
from campaigns.models import Campaign

from ..factories import CampaignFactory

pytestmark = pytest.mark.django_db


def run(*args: str) -> dict:
    out = StringIO()
    call_command(*args, stdout=out, stderr=StringIO())
    return json.loads(out.getvalue())


def test_campaign_create_takes_the_scope_and_stacking_flags() -> None:
    other = CampaignFactory()
    summary = run("campaign_create", "--name", "Tea week", "--stock", "100", "--discount", "10%",
                  "--categories", "tea, snacks", "--skus", "CUP-9", "--exclude-categories", "gift",
                  "--exclude-skus", "TEA-0", "--min-quantity", "2", "--combinable-with", str(other.pk),
                  "--order-cap", "80.00")

    campaign = Campaign.objects.get(pk=summary["id"])
    assert campaign.coupon_rule() == pricing.CouponRule(
        "percent", Decimal("10.00"), "CNY", include_categories=frozenset({"tea", "snacks"}),
        include_skus=frozenset({"CUP-9"}), exclude_categories=frozenset({"gift"}), exclude_skus=frozenset({"TEA-0"}),
        min_quantity=2, combinable_with=frozenset({other.pk}), order_cap=Decimal("80.00"))
    assert summary["scope"]["include_categories"] == ["snacks", "tea"] and summary["order_cap"] == "80.00"
    exclusive = Campaign.objects.get(pk=run("campaign_create", "--name", "x", "--stock", "1", "--exclusive")["id"])
    assert exclusive.exclusive and exclusive.coupon_rule().exclusive


@pytest.mark.parametrize(("args", "message"), [
    (["--categories", "a b"], "Names are 1-64"),
    (["--combinable-with", "999999"], "No campaign #999999"),
    (["--combinable-with", "x"], "--combinable-with"),
    (["--exclusive", "--combinable-with", "1"], "exclusive campaign combines with no other"),
    (["--min-quantity", "-1"], "--min-quantity"),
    (["--order-cap", "0"], "order cap is positive"),
    (["--order-cap", "1.234"], "at most 2 decimals"),
])
def test_campaign_create_refuses_bad_scope_and_creates_nothing(args: list[str], message: str) -> None:
    CampaignFactory(pk=1)
    with pytest.raises(CommandError, match=message):
        run("campaign_create", "--name", "bad", "--stock", "5", *args)
    assert Campaign.objects.count() == 1


def test_a_campaign_is_not_combinable_with_itself() -> None:
    campaign = CampaignFactory()
    campaign.combinable_with = [campaign.pk]
    with pytest.raises(ValidationError, match="never share an order"):
        campaign.full_clean()


def test_discount_for_is_pricings_on_a_one_line_cart_and_nothing_for_a_scoped_rule() -> None:
    plain = Campaign(discount_type="percent", discount_value=Decimal("15.00"), currency="CNY")
    scoped = Campaign(discount_type="percent", discount_value=Decimal("15.00"), currency="CNY",
                      include_categories=["tea"])

    assert str(plain.discount_for(Decimal("33.33")).amount) == "5.00"
    assert str(scoped.discount_for(Decimal("33.33")).amount) == "0.00"


def test_the_admin_has_the_scope_fieldset_and_previews_the_rule_on_a_pasted_cart(admin_client) -> None:
    campaign = CampaignFactory(discount_value=Decimal("50.00"), min_spend=Decimal("0"), include_categories=["tea"])
    change = admin_client.get(f"/admin/campaigns/campaign/{campaign.pk}/change/").content.decode()
    assert "Scope and stacking" in change and f"/admin/campaigns/campaign/{campaign.pk}/preview/" in change

    page = admin_client.post(f"/admin/campaigns/campaign/{campaign.pk}/preview/",
                             {"lines": "TEA-1,tea,2,120.00\nTEA-2,tea,1,40.00\nCUP-9,,1,60.00"}).content.decode()

    assert "ok: 50.00 off 340.00, 290.00 to pay" in page
    assert "<td>43.75</td>" not in page  # shares are whole cents: 240/280 of 50 = 42.86, 40/280 of 50 = 7.14
    assert "42.86" in page and "7.14" in page and "not covered" in page


@pytest.mark.parametrize("lines", ["", "TEA-1,tea,2", "TEA 1,tea,2,1.00", "TEA-1,tea,0,1.00", "TEA-1,tea,1,1.001",
                                   "TEA-1,tea,x,1.00", "TEA-1,tea,1,NaN"])
def test_the_preview_says_what_is_wrong_with_a_pasted_cart(admin_client, lines: str) -> None:
    campaign = CampaignFactory()
    response = admin_client.post(f"/admin/campaigns/campaign/{campaign.pk}/preview/", {"lines": lines})
    assert response.status_code == 200 and "errorlist" in response.content.decode()
