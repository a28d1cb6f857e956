"""A budget's figures and its operator's tools: campaign_create --budget (bad input a clear error, nothing made),
verify_campaign balancing the money (an imbalance caught), reconcile lowering a budget left too high, the
rebuild loading it from PostgreSQL, campaign_report and the console showing budget, used and left. Real
PostgreSQL and Redis."""
from __future__ import annotations

import io
import json
from decimal import Decimal

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from campaigns.models import Campaign
from campaigns.redis_state import redis_client
from campaigns.redis_state.budget import budget_key
from coupons.services import coupon_redeem, coupon_reserve
from orders.rebuild import campaign_rebuild
from orders.reconciliation import campaign_reconcile
from orders.verify import campaign_verify

from .test_budget import grab, left, order
from .test_use_concurrency import issue_coupon

pytestmark = pytest.mark.django_db(transaction=True)


def spent(campaign: Campaign) -> Campaign:
    """The campaign after alice's 50.00 redeemed and bob's 50.00 held."""
    alice, bob = issue_coupon(campaign, "alice"), issue_coupon(campaign, "bob")
    assert coupon_redeem(user_id="alice", code=alice.code, order=order("A-1")).code == 0
    assert coupon_reserve(user_id="bob", code=bob.code, order=order("B-1")).code == 0
    return campaign


def verify_lines(campaign: Campaign) -> tuple[int, list[str]]:
    out = io.StringIO()
    try:
        call_command("verify_campaign", str(campaign.pk), stdout=out)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    return code, out.getvalue().strip().splitlines()


# --- campaign_create --budget ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("budget", "currency", "why"), [
    ("0", "CNY", "an amount > 0"), ("-5", "CNY", "an amount is >= 0"), ("abc", "CNY", "not an amount"),
    ("10.005", "CNY", "at most 2 decimals"), ("10.5", "JPY", "at most 0 decimals"),
    ("1000000000000", "CNY", "12 digits"), ("NaN", "CNY", "an amount is >= 0"), ("1e3", "CNY", "an amount > 0 in CNY"),
])
def test_a_bad_budget_is_a_clear_error_and_makes_nothing(budget: str, currency: str, why: str) -> None:
    with pytest.raises(CommandError, match="--budget") as refused:
        call_command("campaign_create", "--name", "Capped", "--stock", "10", "--currency", currency,
                     "--budget", budget, stdout=io.StringIO())
    assert why in str(refused.value)
    assert not Campaign.objects.exists()


def test_campaign_create_budget_loads_it_with_the_campaign() -> None:
    out = io.StringIO()
    call_command("campaign_create", "--name", "Capped", "--stock", "10", "--budget", "1500.50", "--publish",
                 stdout=out)
    printed = json.loads(out.getvalue())
    campaign = Campaign.objects.get(pk=printed["id"])

    assert printed["budget"] == "1500.50" and campaign.budget == Decimal("1500.50")
    assert left(campaign) == Decimal("1500.50")


# --- verify, reconcile, rebuild ----------------------------------------------------------------------------------


def test_verify_campaign_balances_the_money_and_catches_an_imbalance() -> None:
    campaign = spent(grab(budget=Decimal("300.00")))

    code, lines = verify_lines(campaign)
    assert code == 0 and lines[-1] == "BALANCED"
    assert "  budget 300.00 = left in Redis 200.00 + used (held and redeemed) 100.00" in lines
    assert campaign_verify(campaign=campaign).money == {"budget": "300.00", "used": "100.00", "left": "200.00"}

    # Redis pays 30.00 more than the budget allows (a give-back counted twice, a bad manual edit)
    redis_client().incrby(budget_key(campaign.pk), 3000)
    code, lines = verify_lines(campaign)
    balance = campaign_verify(campaign=campaign)
    assert code == 1 and lines[-1] == "NOT BALANCED" and balance.money_drift == -3000
    assert any("Redis has 30.00 more left than the budget" in p for p in balance.problems)

    # And money taken in Redis that no coupon holds (a give-back that failed) is named too
    redis_client().decrby(budget_key(campaign.pk), 3000 + 2500)
    balance = campaign_verify(campaign=campaign)
    assert not balance.balanced and balance.money_drift == 2500
    assert any("25.00 taken in Redis that no held or redeemed coupon holds" in p for p in balance.problems)


def test_reconcile_repair_lowers_a_budget_left_too_high_and_only_that() -> None:
    campaign = spent(grab(budget=Decimal("300.00")))
    redis_client().incrby(budget_key(campaign.pk), 3000)

    record = campaign_reconcile(campaign=campaign, repair=True, source="test")

    assert record is not None and record.balanced
    assert any("lowered the budget left from 230.00" in r for r in record.repairs)
    assert left(campaign) == Decimal("200.00")
    # a budget left too low (money unspent) is reported, never raised: a use may be running
    redis_client().decrby(budget_key(campaign.pk), 1000)
    record = campaign_reconcile(campaign=campaign, repair=True, source="test")
    assert record is not None and not record.balanced and left(campaign) == Decimal("190.00")


def test_a_rebuild_loads_what_is_left_of_the_budget_from_postgresql() -> None:
    campaign = spent(grab(budget=Decimal("300.00")))
    redis_client().delete(budget_key(campaign.pk))

    campaign_rebuild(campaign=campaign)

    assert left(campaign) == Decimal("200.00")
    assert campaign_verify(campaign=campaign).balanced


# --- the report and the console ----------------------------------------------------------------------------------


def test_the_report_shows_budget_used_and_left() -> None:
    campaign = spent(grab(budget=Decimal("300.00")))

    out = io.StringIO()
    call_command("campaign_report", str(campaign.pk), stdout=out)
    assert json.loads(out.getvalue())["budget"] == {"budget": "300.00", "used": "100.00", "left": "200.00"}
    out = io.StringIO()
    call_command("campaign_report", str(campaign.pk), "--format", "csv", stdout=out)
    header, *_, total = out.getvalue().strip().splitlines()
    assert header.endswith(",redeemed_net,redemption_rate,budget,budget_used,budget_left")
    assert total.endswith(",300.00,100.00,200.00")


def test_an_unbudgeted_campaigns_report_has_no_budget() -> None:
    campaign = grab(budget=None)
    out = io.StringIO()
    call_command("campaign_report", str(campaign.pk), stdout=out)
    assert "budget" not in json.loads(out.getvalue())


def test_the_console_shows_budget_used_and_left(admin_client) -> None:
    campaign = spent(grab(budget=Decimal("300.00")))

    page = admin_client.get(f"/admin/campaigns/campaign/{campaign.pk}/change/").content.decode()

    assert 'id="live-budget">100.00 used, 200.00 left of 300.00 CNY<' in page
    assert 'name="budget"' not in page  # locked once published: its money left is in Redis
    report = admin_client.get(f"/admin/campaigns/campaign/{campaign.pk}/report/").content.decode()
    assert 'id="report-budget">100.00 used, 200.00 left of 300.00 CNY<' in report
