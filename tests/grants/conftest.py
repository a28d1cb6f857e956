"""Helpers of the grants tests: a grant file, the command's JSON line, a campaign's state after a drain."""
from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from campaigns.models import Campaign
from campaigns.redis_state import campaign_keys, redis_client
from orders.drain import drain_campaign
from orders.verify import campaign_verify


def grant_file(tmp_path: Path, text: str | bytes, name: str = "shoppers.txt") -> str:
    path = tmp_path / name
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return str(path)


def run_grant(campaign: Campaign, path: str, *args: str) -> tuple[dict[str, Any], str]:
    """Run `manage.py grant`; its JSON line and its progress (stderr)."""
    out, err = io.StringIO(), io.StringIO()
    call_command("grant", str(campaign.pk), path, *args, stdout=out, stderr=err)
    lines = out.getvalue().strip().splitlines()
    assert len(lines) == 1, out.getvalue()
    return json.loads(lines[0]), err.getvalue()


def remaining(campaign: Campaign) -> int:
    return int(redis_client().get(campaign_keys(campaign.pk).stock))


def drained_and_balanced(campaign: Campaign) -> None:
    """Drain the campaign's ledger into PostgreSQL and check verify_campaign balances."""
    while drain_campaign(campaign_id=campaign.pk).read:
        pass
    balance = campaign_verify(campaign=campaign)
    assert balance.balanced, balance.problems


@pytest.fixture
def service_key(settings: Any) -> str:
    key = "k" * 40
    settings.COUPONS_SERVICE_API_KEYS = ["another-" + "x" * 32, key]
    return key
