"""campaign_report: a campaign driven through claims, holds, redemptions, releases, cancels and expiry reports
exactly what happened, agrees with verify_campaign, in two queries, as JSON and CSV."""
from __future__ import annotations

import csv
import io
import json
from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.management import call_command
from django.utils import timezone

from coupons.compensation import expire_and_lapse_due
from coupons.models import Coupon, CouponStatus
from coupons.services import Order, coupon_confirm, coupon_redeem, coupon_release, coupon_reserve
from orders.cancel import claim_cancel
from orders.drain import drain_campaign
from orders.report import campaign_report
from orders.verify import campaign_verify

from .test_drain import claim_many

pytestmark = pytest.mark.django_db


def drive(live_campaign):
    """10 claims; 3 redeemed (one released afterwards), 2 held (one confirmed, one lapsed), 1 cancelled,
    2 expired; discount 50.00 a redemption."""
    campaign = live_campaign(total_stock=20, currency="CNY", discount_value=Decimal("50.00"))
    users = [f"u{i}" for i in range(10)]
    claim_many(campaign, users)
    drain_campaign(campaign_id=campaign.pk)
    coupons = {c.user_id: c for c in Coupon.objects.filter(campaign=campaign)}
    amount = Decimal("350.00")
    for user in ("u0", "u1", "u2"):
        assert coupon_redeem(user_id=user, code=coupons[user].code, order=Order(f"o-{user}", amount, "CNY")).code == 0
    assert coupon_release(user_id="u2", code=coupons["u2"].code, order_id="o-u2").code == 0
    for user in ("u3", "u4"):
        assert coupon_reserve(user_id=user, code=coupons[user].code, order=Order(f"o-{user}", amount, "CNY")).code == 0
    assert coupon_confirm(user_id="u3", code=coupons["u3"].code, order_id="o-u3").code == 0
    assert claim_cancel(user_id="u5", claim_id=coupons["u5"].claim_id).code == 0
    past = timezone.now() - timedelta(hours=1)
    Coupon.objects.filter(pk=coupons["u4"].pk).update(hold_until=past)
    Coupon.objects.filter(pk__in=[coupons["u6"].pk, coupons["u7"].pk]).update(valid_from=past - timedelta(days=1),
                                                                            expires_at=past)
    report = expire_and_lapse_due()
    assert (report.lapsed, report.expired) == (1, 2)
    return campaign


def test_the_report_of_a_driven_campaign_has_exactly_the_expected_counts(live_campaign,
                                                                         django_assert_num_queries) -> None:
    campaign = drive(live_campaign)

    with django_assert_num_queries(2):
        report = campaign_report(campaign=campaign)

    totals = report.as_json()["totals"]
    assert totals == {"claims": 10, "issued": 10, "reserved": 2, "redeemed": 4, "released": 2, "expired": 2,
                      "revoked": 1, "discount": "150.00", "redeemed_net": 3, "redemption_rate": "0.3000",
                      "discount_by_rule": {"fixed": "150.00"}}
    today = timezone.localdate()
    assert [d.day for d in report.days] == [today]
    # The figures agree with verify_campaign and with the coupons as they are.
    balance = campaign_verify(campaign=campaign)
    assert balance.balanced
    assert totals["claims"] == balance.claims and totals["issued"] == balance.coupons == balance.issued_claims
    assert totals["revoked"] == balance.restocked
    assert totals["redeemed_net"] == Coupon.objects.filter(campaign=campaign, status=CouponStatus.REDEEMED).count()
    assert Decimal(totals["discount"]) == sum(c.discount for c in Coupon.objects.filter(
        campaign=campaign, status=CouponStatus.REDEEMED))


def test_campaign_report_prints_json_and_csv(live_campaign, capsys) -> None:
    campaign = drive(live_campaign)

    call_command("campaign_report", str(campaign.pk))
    printed = json.loads(capsys.readouterr().out)
    call_command("campaign_report", str(campaign.pk), "--format", "csv")
    rows = list(csv.reader(io.StringIO(capsys.readouterr().out)))

    assert printed["totals"]["redeemed"] == 4 and printed["time_zone"] == "Asia/Shanghai"
    assert rows[0] == ["day", "claims", "issued", "reserved", "redeemed", "released", "expired", "revoked",
                       "discount", "rule", "claims: default key", "redeemed_net", "redemption_rate"]
    assert rows[1] == [timezone.localdate().isoformat(), "10", "10", "2", "4", "2", "2", "1", "150.00", "fixed",
                       "10", "", ""]
    assert rows[-1][0] == "total" and rows[-1][1:-2] == rows[1][1:-2]
    assert rows[-1][-2:] == [str(printed["totals"]["redeemed_net"]), printed["totals"]["redemption_rate"]]
    assert printed["storefronts"] == [{"storefront_id": None, "name": "default key", "claims": 10}]
    assert printed["rule"] == "fixed" and printed["totals"]["discount_by_rule"] == {"fixed": "150.00"}


def test_days_are_the_operators_days(live_campaign, settings) -> None:
    campaign = live_campaign(total_stock=5)
    claim_many(campaign, ["a", "b"])
    drain_campaign(campaign_id=campaign.pk)
    from orders.models import Claim

    # A claim accepted at 23:30 UTC is the next day in Shanghai (UTC+8).
    utc_late = timezone.now().astimezone(timezone.get_fixed_timezone(0)).replace(hour=23, minute=30) - timedelta(days=3)
    Claim.objects.filter(campaign=campaign, user_id="a").update(claimed_at=utc_late)

    report = campaign_report(campaign=campaign)

    assert (utc_late.date() + timedelta(days=1)) in [d.day for d in report.days if d.claims == 1]
