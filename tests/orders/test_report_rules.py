"""The report's discount by rule (issue 38 goal 3; orders/report.py): the campaign's rule and the discount under it,
in the JSON (`rule`, totals' `discount_by_rule`), the CSV (each row's `rule`, after its discount) and the admin's
report page (with a tiers rule's ladder or buy N get M's quantities)."""
from __future__ import annotations

import csv
import io
from decimal import Decimal

import pytest
from django.urls import reverse

from coupons.models import Coupon
from coupons.services import Order, coupon_redeem
from orders.drain import drain_campaign
from orders.report import campaign_report, report_csv_lines

from .test_drain import claim_many

pytestmark = pytest.mark.django_db
TIERS = [["100.00", "10.00", False], ["200.00", "25.00", False]]


def redeem_each(campaign, amounts: dict[str, str]) -> None:
    claim_many(campaign, list(amounts))
    drain_campaign(campaign_id=campaign.pk)
    for user, amount in amounts.items():
        code = Coupon.objects.get(user_id=user, campaign=campaign).code
        assert coupon_redeem(user_id=user, code=code, order=Order(f"o-{user}", Decimal(amount), "CNY")).code == 0


def test_a_tiers_campaigns_report_gives_its_discount_under_its_rule(admin_client, live_campaign) -> None:
    campaign = live_campaign(discount_type="tiers", discount_value=Decimal(0), tiers=TIERS,
                             min_spend=Decimal("100.00"))
    redeem_each(campaign, {"a": "150.00", "b": "250.00", "c": "120.00"})  # 10 + 25 + 10

    report = campaign_report(campaign=campaign).as_json()
    assert report["rule"] == "tiers" and report["totals"]["discount"] == "45.00"
    assert report["totals"]["discount_by_rule"] == {"tiers": "45.00"}
    rows = list(csv.reader(io.StringIO("".join(report_csv_lines(campaign_report(campaign=campaign))))))
    column = rows[0].index("rule")
    assert column == rows[0].index("discount") + 1 and all(row[column] == "tiers" for row in rows[1:])
    assert rows[-1][0] == "total" and rows[-1][rows[0].index("discount")] == "45.00"

    page = admin_client.get(reverse("admin:campaigns_campaign_report", args=[campaign.pk])).content.decode()
    assert 'data-rule="tiers"' in page and "Tiers (spend more, save more): 45.00 CNY" in page
    assert "from 100.00: 10.00, from 200.00: 25.00" in page


def test_a_buy_n_get_m_campaigns_report_names_its_quantities(admin_client, live_campaign) -> None:
    campaign = live_campaign(discount_type="buy_get", discount_value=Decimal(0), min_spend=Decimal(0),
                             buy_quantity=2, get_quantity=1)
    report = campaign_report(campaign=campaign).as_json()
    assert report["rule"] == "buy_get" and report["totals"]["discount_by_rule"] == {"buy_get": "0.00"}
    page = admin_client.get(reverse("admin:campaigns_campaign_report", args=[campaign.pk])).content.decode()
    assert 'data-rule="buy_get"' in page and "(buy 2, get 1 free)" in page
