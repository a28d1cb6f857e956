"""manage.py grant: coupons to listed shoppers through the claim script (docs/api.md, Grants)."""
from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core.management.base import CommandError
from django.utils import timezone

from campaigns.models import CampaignKind
from campaigns.services import campaign_pause
from grants.models import GrantBatch, GrantStatus
from orders.models import Claim

from .conftest import drained_and_balanced, grant_file, remaining, run_grant

pytestmark = pytest.mark.django_db


def test_a_file_grants_one_coupon_to_each_listed_shopper_and_counts_invalid_and_duplicate_lines(
        live_campaign: Any, tmp_path: Path) -> None:
    campaign = live_campaign(total_stock=10, per_user_limit=1)
    path = grant_file(tmp_path, "alice\nbob\n\nalice\n bob\nbad id\n" + "x" * 65 + "\ncarol\r\nbob\n")
    counts, progress = run_grant(campaign, path, "--batch", "vip-1")
    assert counts == {"batch": "vip-1", "granted": 3, "limit_reached": 0, "sold_out": 0, "invalid": 3,
                      "duplicate": 2}
    assert "chunk 1/1" in progress
    assert remaining(campaign) == 7
    drained_and_balanced(campaign)
    assert sorted(Claim.objects.filter(campaign=campaign).values_list("user_id", flat=True)) == [
        "alice", "bob", "carol"]
    batch = GrantBatch.objects.get()
    assert batch.status == GrantStatus.DONE and batch.progress == 1.0
    assert batch.rejected.splitlines() == ["line,reason,text", "4,duplicate,alice", "5,invalid, bob",
                                           "6,invalid,bad id", f"7,invalid,{'x' * 65}", "9,duplicate,bob"]


def test_a_csv_with_a_user_id_column_is_read_by_that_column(live_campaign: Any, tmp_path: Path) -> None:
    campaign = live_campaign(total_stock=10)
    path = grant_file(tmp_path, "name,user_id\nAlice,u1\n\"Doe, J\",u2\nBroken,\nNo column\n", "list.csv")
    counts, _ = run_grant(campaign, path, "--batch", "csv")
    assert (counts["granted"], counts["invalid"], counts["duplicate"]) == (2, 2, 0)


def test_stock_and_the_per_user_limit_hold_for_grants(live_campaign: Any, tmp_path: Path) -> None:
    campaign = live_campaign(total_stock=3, per_user_limit=1)
    run_grant(campaign, grant_file(tmp_path, "a\n"), "--batch", "first")
    counts, _ = run_grant(campaign, grant_file(tmp_path, "a\nb\nc\nd\ne\n"), "--batch", "second")
    assert (counts["granted"], counts["limit_reached"], counts["sold_out"]) == (2, 1, 2)
    assert remaining(campaign) == 0
    drained_and_balanced(campaign)


def test_the_same_batch_run_again_grants_nothing_twice(live_campaign: Any, tmp_path: Path) -> None:
    campaign = live_campaign(total_stock=100, per_user_limit=5)
    path = grant_file(tmp_path, "\n".join(f"u{n}" for n in range(30)))
    first, _ = run_grant(campaign, path, "--batch", "gift")
    again, progress = run_grant(campaign, path, "--batch", "gift")
    assert first["granted"] == 30 and again["granted"] == 0
    assert "30 shoppers were granted by an earlier run" in progress
    assert remaining(campaign) == 70
    drained_and_balanced(campaign)
    # Past the Idempotency-Key's life in Redis, PostgreSQL still knows the batch's grants.
    from campaigns.redis_state import redis_client
    for key in redis_client().scan_iter(match="*idem:*"):
        redis_client().delete(key)
    third, _ = run_grant(campaign, path, "--batch", "gift")
    assert third["granted"] == 0 and remaining(campaign) == 70
    other, _ = run_grant(campaign, path, "--batch", "another")  # another batch: granted again (limit 5)
    assert other["granted"] == 30


def test_without_a_batch_name_the_file_names_it(live_campaign: Any, tmp_path: Path) -> None:
    campaign = live_campaign(total_stock=10)
    path = grant_file(tmp_path, "a\nb\n")
    first, _ = run_grant(campaign, path)
    again, _ = run_grant(campaign, path)
    assert first["batch"] == again["batch"] and first["batch"].startswith("file-")
    assert (first["granted"], again["granted"]) == (2, 0)


def test_a_campaign_may_be_granted_before_its_window_opens(live_campaign: Any, tmp_path: Path) -> None:
    campaign = live_campaign(starts_at=timezone.now() + timedelta(hours=1), total_stock=5)
    counts, _ = run_grant(campaign, grant_file(tmp_path, "a\nb\n"))
    assert counts["granted"] == 2


def test_a_campaign_never_loaded_into_redis_is_loaded_first(db: Any, tmp_path: Path) -> None:
    from tests.factories import CampaignFactory
    campaign = CampaignFactory(total_stock=5, starts_at=timezone.now() + timedelta(days=1))
    counts, _ = run_grant(campaign, grant_file(tmp_path, "a\n"))
    assert counts["granted"] == 1 and remaining(campaign) == 4


@pytest.mark.parametrize("state", ["ended", "paused", "codes", "draft"])
def test_an_ended_paused_codes_or_draft_campaign_is_refused_and_nothing_changes(
        live_campaign: Any, tmp_path: Path, state: str) -> None:
    campaign = live_campaign(total_stock=5)
    if state == "ended":
        campaign.ends_at = timezone.now() - timedelta(seconds=1)
        campaign.save()
    elif state == "paused":
        campaign_pause(campaign=campaign)
    elif state == "codes":
        campaign.kind = CampaignKind.CODES
        campaign.save()
    else:
        campaign.published_at = None
        campaign.save()
    with pytest.raises(CommandError) as refused:
        run_grant(campaign, grant_file(tmp_path, "a\n"))
    assert {"ended": "has ended", "paused": "is paused", "codes": "No such campaign",
            "draft": "No such campaign"}[state] in str(refused.value)
    assert remaining(campaign) == 5 and not GrantBatch.objects.exists()


def test_a_file_of_another_encoding_or_too_large_is_refused_before_anything_is_granted(
        live_campaign: Any, tmp_path: Path, settings: Any) -> None:
    campaign = live_campaign(total_stock=5)
    with pytest.raises(CommandError, match="not UTF-8"):
        run_grant(campaign, grant_file(tmp_path, "alice\nJos\xe9\n".encode("latin-1")))
    settings.COUPONS_GRANTS_MAX_FILE_BYTES = 10
    with pytest.raises(CommandError, match="more than the 10 bytes"):
        run_grant(campaign, grant_file(tmp_path, "alice\nbob\ncarol\n"))
    with pytest.raises(CommandError, match="user_id column"):
        settings.COUPONS_GRANTS_MAX_FILE_BYTES = 1000
        run_grant(campaign, grant_file(tmp_path, "name,email\na,b\n"))
    assert remaining(campaign) == 5 and not GrantBatch.objects.exists()


def test_a_batch_stopped_by_a_pause_resumes_once_the_campaign_is_resumed(
        live_campaign: Any, tmp_path: Path, monkeypatch: Any) -> None:
    from campaigns.services import campaign_resume
    from grants import services
    campaign = live_campaign(total_stock=5000, per_user_limit=1)
    path = grant_file(tmp_path, "\n".join(f"u{n}" for n in range(2500)))
    real, calls = services.grant_chunk, []

    def pausing(**kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 2:
            campaign_pause(campaign=campaign)
        return real(**kwargs)

    monkeypatch.setattr(services, "grant_chunk", pausing)
    with pytest.raises(CommandError, match="is paused"):
        run_grant(campaign, path, "--batch", "b")
    batch = GrantBatch.objects.get()
    assert (batch.status, batch.chunks_done, batch.granted) == (GrantStatus.STOPPED, 1, 1000)
    campaign_resume(campaign=campaign)
    counts, progress = run_grant(campaign, path, "--batch", "b")
    assert "resuming batch b at chunk 1 of 3" in progress
    assert counts["granted"] == 2500 and remaining(campaign) == 2500
    drained_and_balanced(campaign)
