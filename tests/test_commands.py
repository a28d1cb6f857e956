"""The contract's management commands, run as an operator would."""
from __future__ import annotations

import json
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from campaigns.models import Campaign, CampaignState, DiscountType
from campaigns.redis_state import ClaimCode, campaign_keys, redis_client, run_claim
from core.auth import authenticate
from coupons.models import Coupon
from orders import ledger
from orders.drain import drain_campaign, persist_entries
from orders.models import Claim
from tests.conftest import shopper_headers

from .factories import CampaignFactory

pytestmark = pytest.mark.django_db


def run(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out, stderr=StringIO())
    return out.getvalue()


def verify_exit_code(campaign_id: int) -> int:
    try:
        run("verify_campaign", str(campaign_id))
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


def test_campaign_create_with_every_flag_prints_one_json_line_and_publishes() -> None:
    out = run(
        "campaign_create", "--name", "Double 11", "--stock", "500", "--per-user-limit", "2", "--starts", "now",
        "--ends", "+2h", "--discount", "15%", "--max-discount", "40.00", "--min-spend", "300.00",
        "--valid-days", "7", "--audience", "new", "--publish",
    )

    [line] = out.strip().splitlines()
    summary = json.loads(line)
    campaign = Campaign.objects.get(pk=summary["id"])
    assert summary["state"] == CampaignState.LIVE and summary["published"] is True
    assert (campaign.total_stock, campaign.per_user_limit, campaign.discount_type) == (500, 2, DiscountType.PERCENT)
    assert str(campaign.max_discount) == "40.00" and campaign.valid_days == 7 and campaign.audience == "new"
    assert abs((campaign.ends_at - campaign.starts_at) - timedelta(hours=2)) < timedelta(seconds=1)
    assert int(redis_client().get(campaign_keys(campaign.pk).stock)) == 500


def test_campaign_create_reads_naive_times_in_the_operators_zone() -> None:
    out = run("campaign_create", "--name", "x", "--stock", "1", "--starts", "2030-01-01T10:00",
              "--ends", "2030-01-01T12:00", "--valid-until", "2030-02-01T00:00")
    campaign = Campaign.objects.get(pk=json.loads(out)["id"])
    assert campaign.starts_at.isoformat() == "2030-01-01T02:00:00+00:00"  # Asia/Shanghai is UTC+8
    assert campaign.published_at is None and campaign.state == CampaignState.DRAFT


@pytest.mark.parametrize(
    "args, message",
    [
        (["--stock", "-1"], "--stock"),
        (["--ends", "2000-01-01T00:00"], "end after it starts"),
        (["--discount", "120%"], "at most 100"),
        (["--discount", "0"], "more than 0"),
        (["--discount", "0%"], "more than 0"),
        (["--discount", "abc"], "--discount"),
        (["--discount", "1.234"], "at most 2 decimals"),
        (["--per-user-limit", "0"], "--per-user-limit"),
        (["--ends", "tomorrow"], "--ends"),
    ],
)
def test_campaign_create_refuses_bad_values_and_creates_nothing(args: list[str], message: str) -> None:
    with pytest.raises(CommandError, match=message):
        run("campaign_create", "--name", "bad", "--stock", "5", *args)
    assert Campaign.objects.count() == 0


def test_verify_campaign_balances_during_and_after_the_drain(live_campaign) -> None:
    campaign = live_campaign(total_stock=10, per_user_limit=10)
    for _ in range(6):
        run_claim(campaign_id=campaign.pk, user_id="alice", idempotency_key=None)
    assert verify_exit_code(campaign.pk) == 0  # all six still only in the ledger

    # a drain persisted four but has not acknowledged them yet: they are in both PostgreSQL and the ledger
    persist_entries(campaign, ledger.read_new(campaign.pk, consumer="c", count=4))
    assert Claim.objects.count() == 4
    out = run("verify_campaign", str(campaign.pk))

    assert "BALANCED" in out and "10" in out
    drain_campaign(campaign_id=campaign.pk)
    assert verify_exit_code(campaign.pk) == 0


def test_verify_campaign_exits_1_when_redis_stock_drifted(live_campaign) -> None:
    campaign = live_campaign(total_stock=10)
    run_claim(campaign_id=campaign.pk, user_id="alice", idempotency_key=None)
    redis_client().incr(campaign_keys(campaign.pk).stock)  # a coupon appears from nowhere

    assert verify_exit_code(campaign.pk) == 1


def test_verify_campaign_exits_1_when_a_claim_was_lost(live_campaign) -> None:
    campaign = live_campaign(total_stock=10)
    result = run_claim(campaign_id=campaign.pk, user_id="alice", idempotency_key=None)
    redis_client().xdel(campaign_keys(campaign.pk).ledger, result.ledger_id)

    assert verify_exit_code(campaign.pk) == 1


def test_preheat_rebuilds_a_lost_campaign_from_postgres_with_the_right_stock_and_limits(live_campaign) -> None:
    # Given a campaign with 3 persisted claims and 1 still in the ledger, and Redis loses stock and users
    campaign = live_campaign(total_stock=10, per_user_limit=1)
    for user in ["a", "b", "c"]:
        run_claim(campaign_id=campaign.pk, user_id=user, idempotency_key=None)
    drain_campaign(campaign_id=campaign.pk)
    run_claim(campaign_id=campaign.pk, user_id="d", idempotency_key=None)
    keys = campaign_keys(campaign.pk)
    redis_client().delete(keys.stock, keys.users, keys.meta)
    assert run_claim(campaign_id=campaign.pk, user_id="e", idempotency_key=None).code == ClaimCode.NO_STATE

    # When the operator runs preheat
    summary = json.loads(run("preheat", str(campaign.pk)))

    # Then stock is total minus every claim, the ledger was drained, and each shopper keeps their limit
    assert summary == {"id": campaign.pk, "action": "rebuilt", "remaining": 6}
    assert Coupon.objects.filter(campaign=campaign).count() == 4
    assert run_claim(campaign_id=campaign.pk, user_id="a", idempotency_key=None).code == ClaimCode.LIMIT_REACHED
    fresh = run_claim(campaign_id=campaign.pk, user_id="e", idempotency_key=None)
    assert fresh.code == ClaimCode.CLAIMED
    assert fresh.ledger_id > max(Claim.objects.values_list("claim_id", flat=True)).split("-", 1)[1]
    assert verify_exit_code(campaign.pk) == 0


def test_reconcile_reports_and_repair_rebuilds_a_lost_campaign(live_campaign) -> None:
    campaign = live_campaign(total_stock=4)
    run_claim(campaign_id=campaign.pk, user_id="a", idempotency_key=None)
    redis_client().delete(campaign_keys(campaign.pk).stock)
    with pytest.raises(SystemExit):
        run("reconcile", "--campaign", str(campaign.pk))

    out = run("reconcile", "--campaign", str(campaign.pk), "--repair")

    assert "repaired: rebuilt the Redis state" in out and "balanced" in out
    assert int(redis_client().get(campaign_keys(campaign.pk).stock)) == 3


def test_mint_token_prints_a_token_the_api_accepts() -> None:
    token = run("mint_token", "shopper-7", "--ttl", "120").strip()
    assert authenticate("shopper-7", token) == "shopper-7"
    with pytest.raises(CommandError):
        run("mint_token", "not valid!")


def test_demo_creates_a_live_campaign_and_an_operator_once(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("COUPONRUSH_DATA_DIR", str(tmp_path / "var"))
    first = json.loads(run("demo").strip().splitlines()[-1])
    second = json.loads(run("demo").strip().splitlines()[-1])

    campaign = Campaign.objects.get(pk=first["id"])
    assert first["id"] == second["id"] and campaign.state == CampaignState.LIVE
    code_campaign = Campaign.objects.get(pk=first["code_campaign"])
    assert first["code_campaign"] == second["code_campaign"] and code_campaign.state == CampaignState.LIVE
    assert (code_campaign.kind, code_campaign.code, first["code"]) == ("codes", "SAVE50", "SAVE50")
    assert campaign.ends_at > timezone.now()
    from django.contrib.auth import get_user_model

    operator = get_user_model().objects.get(username="operator")
    assert operator.is_staff and operator.check_password((tmp_path / "var" / "demo-operator.txt").read_text().strip())


def test_preheat_of_a_campaign_long_over_says_so_and_loads_nothing() -> None:
    ended = timezone.now() - timedelta(days=8)
    campaign = CampaignFactory(starts_at=ended - timedelta(hours=1), ends_at=ended)

    with pytest.raises(CommandError, match="ended more than the grace period ago"):
        run("preheat", str(campaign.pk))
    assert redis_client().dbsize() == 0


def test_preheat_of_a_draft_says_so_and_loads_nothing(client) -> None:
    # Given a draft (never published): the API does not show it
    campaign = CampaignFactory(published_at=None)

    # When an operator preheats it
    with pytest.raises(CommandError, match="is a draft: publish it first"):
        run("preheat", str(campaign.pk))

    # Then nothing is in Redis, and a claim is the 404 of an unknown campaign (it was claimed, and issued)
    assert redis_client().dbsize() == 0
    claim = client.post(f"/api/v1/campaigns/{campaign.pk}/claim", data="{}", content_type="application/json",
                        **shopper_headers("alice"))
    assert (claim.status_code, claim.json()["status"]) == (404, "not_found")
    assert redis_client().get(campaign_keys(campaign.pk).stock) is None
