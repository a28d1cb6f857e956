"""Extending a campaign's end: PostgreSQL, the cached end in Redis and every key's expiry move together."""
from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta
from io import StringIO
from typing import Any

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.core.management import CommandError, call_command
from django.db import connection, connections
from django.utils import timezone

from campaigns.extension import ExtensionConflict, InvalidExtension, campaign_extend_end
from campaigns.models import Campaign, CampaignEvent, CampaignEventType
from campaigns.redis_state import ClaimCode, campaign_keys, redis_client, reset_redis_client, run_claim, to_ms
from campaigns.services import keys_expire_at
from core.errors import Unavailable
from tests.factories import CampaignFactory

pytestmark = pytest.mark.django_db


# --- helpers -------------------------------------------------------------------------------------------


def claim(campaign: Campaign, user: str = "alice") -> ClaimCode:
    return run_claim(campaign_id=campaign.pk, user_id=user, idempotency_key=None).code


def expiries(campaign: Campaign) -> dict[str, int]:
    """PEXPIRETIME of every state key of the campaign (-2: the key does not exist)."""
    return {key: redis_client().pexpiretime(key) for key in campaign_keys(campaign.pk).state}


def end_extended_events(campaign: Campaign) -> list[CampaignEvent]:
    return list(CampaignEvent.objects.filter(campaign=campaign, type=CampaignEventType.END_EXTENDED))


def snapshot(campaign: Campaign) -> dict[str, Any]:
    """Everything an extension may change: the row, Redis meta and expiries, the campaign's events."""
    row = Campaign.objects.values("ends_at", "updated_at").get(pk=campaign.pk)
    return {
        "row": row,
        "meta": redis_client().hgetall(campaign_keys(campaign.pk).meta),
        "expiries": expiries(campaign),
        "events": CampaignEvent.objects.filter(campaign=campaign).count(),
    }


def assert_expiries_follow(campaign: Campaign) -> None:
    """Every state key expires at the campaign's (PostgreSQL) end plus the grace, to the millisecond."""
    campaign.refresh_from_db()
    expected = to_ms(keys_expire_at(campaign))
    for key, expire_ms in expiries(campaign).items():
        assert abs(expire_ms - expected) <= 1, key


# --- the extension -------------------------------------------------------------------------------------


def test_extension_moves_the_end_the_cached_end_and_every_key_expiry(live_campaign) -> None:
    campaign = live_campaign(total_stock=5)
    assert claim(campaign) == ClaimCode.CLAIMED  # users and ledger hold data, cancelled holds its marker
    old_end = campaign.ends_at
    new_end = old_end + timedelta(hours=1)

    campaign_extend_end(campaign=campaign, new_end=new_end, actor="olga")

    campaign.refresh_from_db()
    assert campaign.ends_at == new_end
    assert redis_client().hget(campaign_keys(campaign.pk).meta, "ends_ms") == str(to_ms(new_end)).encode()
    expected = to_ms(new_end + timedelta(seconds=7 * 86400))
    for key, expire_ms in expiries(campaign).items():
        assert abs(expire_ms - expected) <= 1, key
    [event] = end_extended_events(campaign)
    assert event.actor == "olga"
    assert datetime.fromisoformat(event.data["from"]) == old_end
    assert datetime.fromisoformat(event.data["to"]) == new_end
    assert event.data["redis"] == "extended"


def test_claims_keep_working_past_the_old_end_only_when_extended(live_campaign) -> None:
    start = timezone.now() - timedelta(minutes=1)
    old_end = timezone.now() + timedelta(seconds=2)
    extended = live_campaign(starts_at=start, ends_at=old_end)
    not_extended = live_campaign(starts_at=start, ends_at=old_end)

    campaign_extend_end(campaign=extended, new_end=old_end + timedelta(hours=1), actor="olga")
    time.sleep(max(0.0, (old_end - timezone.now()).total_seconds()) + 0.2)

    assert timezone.now() > old_end
    assert claim(extended) == ClaimCode.CLAIMED
    assert claim(not_extended) == ClaimCode.ENDED


def test_a_campaign_not_yet_started_can_be_extended(live_campaign) -> None:
    start = timezone.now() + timedelta(hours=1)
    campaign = live_campaign(starts_at=start, ends_at=start + timedelta(hours=1))

    campaign_extend_end(campaign=campaign, new_end=start + timedelta(hours=5), actor="olga")

    assert_expiries_follow(campaign)
    assert claim(campaign) == ClaimCode.NOT_STARTED


def test_the_new_end_may_be_given_in_any_zone(live_campaign) -> None:
    from zoneinfo import ZoneInfo

    campaign = live_campaign()
    new_end = (campaign.ends_at + timedelta(hours=3)).astimezone(ZoneInfo("America/New_York"))

    campaign_extend_end(campaign=campaign, new_end=new_end, actor="olga")

    campaign.refresh_from_db()
    assert campaign.ends_at == new_end
    assert_expiries_follow(campaign)


def test_a_campaign_never_loaded_into_redis_changes_in_postgres_only(db) -> None:
    campaign = CampaignFactory()
    new_end = campaign.ends_at + timedelta(days=2)

    campaign_extend_end(campaign=campaign, new_end=new_end, actor="olga")

    campaign.refresh_from_db()
    assert campaign.ends_at == new_end
    assert redis_client().dbsize() == 0
    [event] = end_extended_events(campaign)
    assert event.data["redis"] == "not_loaded"


def test_a_campaign_whose_redis_state_is_gone_changes_in_postgres_and_preheat_loads_the_new_end(
    live_campaign,
) -> None:
    from campaigns.services import campaign_preheat

    campaign = live_campaign()
    redis_client().delete(campaign_keys(campaign.pk).meta)
    new_end = campaign.ends_at + timedelta(hours=1)

    campaign_extend_end(campaign=campaign, new_end=new_end, actor="olga")

    [event] = end_extended_events(campaign)
    assert event.data["redis"] == "no_state"
    campaign.refresh_from_db()
    campaign_preheat(campaign=campaign)
    assert redis_client().hget(campaign_keys(campaign.pk).meta, "ends_ms") == str(to_ms(new_end)).encode()
    assert_expiries_follow(campaign)


def test_the_same_extension_twice_writes_one_event_and_applies_the_expiries_again(live_campaign) -> None:
    campaign = live_campaign()
    new_end = campaign.ends_at + timedelta(hours=1)
    campaign_extend_end(campaign=campaign, new_end=new_end, actor="olga")
    stock_key = campaign_keys(campaign.pk).stock
    redis_client().pexpire(stock_key, 60_000)  # an expiry that drifted

    again = campaign_extend_end(campaign=campaign, new_end=new_end, actor="olga")

    assert again.ends_at == new_end
    assert len(end_extended_events(campaign)) == 1
    assert_expiries_follow(campaign)


def test_a_repeat_finishes_a_redis_change_that_was_lost(live_campaign) -> None:
    campaign = live_campaign()
    old_end = campaign.ends_at
    new_end = old_end + timedelta(hours=1)
    campaign_extend_end(campaign=campaign, new_end=new_end, actor="olga")
    redis_client().hset(campaign_keys(campaign.pk).meta, "ends_ms", to_ms(old_end))  # e.g. lost in a restart

    campaign_extend_end(campaign=campaign, new_end=new_end, actor="olga")

    assert redis_client().hget(campaign_keys(campaign.pk).meta, "ends_ms") == str(to_ms(new_end)).encode()
    assert len(end_extended_events(campaign)) == 1
    assert_expiries_follow(campaign)


def test_two_extensions_in_a_row_each_move_the_end(live_campaign) -> None:
    campaign = live_campaign()
    first, second = campaign.ends_at + timedelta(hours=1), campaign.ends_at + timedelta(hours=3)

    campaign_extend_end(campaign=campaign, new_end=first, actor="olga")
    campaign_extend_end(campaign=campaign, new_end=second, actor="olga")

    assert [datetime.fromisoformat(e.data["to"]) for e in reversed(end_extended_events(campaign))] == [first, second]
    assert_expiries_follow(campaign)
    with pytest.raises(InvalidExtension, match="later than the current end"):
        campaign_extend_end(campaign=campaign, new_end=first, actor="olga")  # a late retry of the first one


# --- bad values change nothing -------------------------------------------------------------------------


def _ended(live_campaign) -> tuple[Campaign, datetime]:
    start = timezone.now() - timedelta(hours=3)
    return live_campaign(starts_at=start, ends_at=start + timedelta(hours=1)), timezone.now() + timedelta(hours=1)


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("earlier", "must be later than the current end"),
        ("equal", "must be later than the current end"),
        ("over_365_days", "more than 365 days after the current end"),
        ("ended", "an ended campaign can't be extended"),
        ("past_coupon_validity", "can't end later than that"),
    ],
)
def test_a_bad_new_end_is_refused_and_changes_nothing(live_campaign, case: str, message: str) -> None:
    if case == "ended":
        campaign, new_end = _ended(live_campaign)
    elif case == "past_coupon_validity":
        start = timezone.now() - timedelta(minutes=1)
        campaign = live_campaign(starts_at=start, ends_at=start + timedelta(hours=2), valid_days=None,
                                 valid_until=start + timedelta(hours=3))
        new_end = start + timedelta(hours=4)
    else:
        campaign = live_campaign()
        new_end = {
            "earlier": campaign.ends_at - timedelta(minutes=1),
            "equal": campaign.ends_at,
            "over_365_days": campaign.ends_at + timedelta(days=365, seconds=1),
        }[case]
    before = snapshot(campaign)

    with pytest.raises(InvalidExtension, match=message) as refused:
        campaign_extend_end(campaign=campaign, new_end=new_end, actor="olga")

    assert refused.value.http_status == 400 and refused.value.status == "invalid_request"
    assert snapshot(campaign) == before


def test_365_days_exactly_is_allowed(live_campaign) -> None:
    campaign = live_campaign()

    campaign_extend_end(campaign=campaign, new_end=campaign.ends_at + timedelta(days=365), actor="olga")

    assert_expiries_follow(campaign)


def test_a_draft_is_refused_and_changes_nothing(db) -> None:
    campaign = CampaignFactory(published_at=None)
    before = snapshot(campaign)

    with pytest.raises(InvalidExtension, match="is a draft"):
        campaign_extend_end(campaign=campaign, new_end=campaign.ends_at + timedelta(hours=1), actor="olga")

    assert snapshot(campaign) == before


def test_a_naive_new_end_is_refused(live_campaign) -> None:
    campaign = live_campaign()
    before = snapshot(campaign)

    with pytest.raises(InvalidExtension, match="time zone"):
        campaign_extend_end(campaign=campaign, new_end=(campaign.ends_at + timedelta(hours=1)).replace(tzinfo=None),
                            actor="olga")

    assert snapshot(campaign) == before


def test_redis_holding_another_end_is_a_conflict_and_changes_nothing(live_campaign) -> None:
    campaign = live_campaign()
    redis_client().hset(campaign_keys(campaign.pk).meta, "ends_ms", to_ms(campaign.ends_at + timedelta(minutes=5)))
    before = snapshot(campaign)

    with pytest.raises(ExtensionConflict, match="preheat"):
        campaign_extend_end(campaign=campaign, new_end=campaign.ends_at + timedelta(hours=1), actor="olga")

    assert snapshot(campaign) == before


def test_redis_down_is_unavailable_and_the_database_change_rolls_back(live_campaign, settings) -> None:
    campaign = live_campaign()
    row = Campaign.objects.values("ends_at", "updated_at").get(pk=campaign.pk)
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens there: connection refused
    reset_redis_client()

    with pytest.raises(Unavailable):
        campaign_extend_end(campaign=campaign, new_end=campaign.ends_at + timedelta(hours=1), actor="olga")

    assert Campaign.objects.values("ends_at", "updated_at").get(pk=campaign.pk) == row
    assert end_extended_events(campaign) == []


# --- concurrency ---------------------------------------------------------------------------------------


def all_at_once(jobs: list[Any]) -> list[Any]:
    """Run every job in its own thread (own PostgreSQL connection), released together by a barrier."""
    barrier = threading.Barrier(len(jobs))
    results: list[Any] = [None] * len(jobs)

    def run(index: int) -> None:
        try:
            connection.ensure_connection()
            barrier.wait(timeout=60)
            results[index] = jobs[index]()
        except BaseException as exc:  # noqa: B036 (reported to the test, which asserts on it)
            results[index] = exc
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads), "an extension hung"
    return results


@pytest.mark.django_db(transaction=True)
def test_concurrent_extensions_to_the_same_end_write_one_event(live_campaign) -> None:
    campaign = live_campaign()
    new_end = campaign.ends_at + timedelta(hours=2)

    results = all_at_once([lambda: campaign_extend_end(campaign=campaign, new_end=new_end, actor="olga")] * 8)

    assert all(isinstance(r, Campaign) and r.ends_at == new_end for r in results), results
    assert len(end_extended_events(campaign)) == 1
    assert_expiries_follow(campaign)


@pytest.mark.django_db(transaction=True)
def test_concurrent_extensions_to_different_ends_apply_in_turn(live_campaign) -> None:
    campaign = live_campaign()
    targets = [campaign.ends_at + timedelta(hours=h) for h in (1, 2, 3, 4)]

    results = all_at_once([lambda t=t: campaign_extend_end(campaign=campaign, new_end=t, actor="olga")
                           for t in targets])

    won = [r for r in results if isinstance(r, Campaign)]
    assert all(isinstance(r, Campaign | InvalidExtension) for r in results), results
    events = list(reversed(end_extended_events(campaign)))
    assert len(events) == len(won) >= 1
    # Each one that won moved the end from where the previous one left it, so the chain is unbroken.
    for previous, event in zip(events, events[1:], strict=False):
        assert event.data["from"] == previous.data["to"]
    campaign.refresh_from_db()
    assert datetime.fromisoformat(events[-1].data["to"]) == campaign.ends_at
    assert redis_client().hget(campaign_keys(campaign.pk).meta, "ends_ms") == str(to_ms(campaign.ends_at)).encode()
    assert_expiries_follow(campaign)


# --- the command ---------------------------------------------------------------------------------------


def extend_campaign(*args: str) -> str:
    out = StringIO()
    call_command("extend_campaign", *args, stdout=out)
    return out.getvalue()


def test_command_extends_by_a_duration_and_prints_one_json_line(live_campaign) -> None:
    import json

    campaign = live_campaign()
    old_end = campaign.ends_at

    out = extend_campaign(str(campaign.pk), "--by", "+2h")

    [line] = out.splitlines()
    printed = json.loads(line)
    assert printed["id"] == campaign.pk and printed["extended"] is True
    campaign.refresh_from_db()
    assert campaign.ends_at == old_end + timedelta(hours=2)
    assert_expiries_follow(campaign)


def test_command_reads_a_naive_time_in_the_operators_zone(live_campaign) -> None:
    campaign = live_campaign()
    local_end = timezone.localtime(campaign.ends_at + timedelta(days=1)).replace(microsecond=0)

    extend_campaign(str(campaign.pk), "--to", local_end.replace(tzinfo=None).isoformat())

    campaign.refresh_from_db()
    assert campaign.ends_at == local_end


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--to", "1767225600000", "looks like epoch milliseconds"),
        ("--to", "1767225600", "looks like epoch seconds"),
        ("--to", "7200", "a bare number"),
        ("--by", "7200", "a bare number"),
        ("--by", "1767225600000", "looks like epoch milliseconds"),
        ("--by", "-2h", "moves the end later"),
        ("--to", "next tuesday", "expected ISO 8601"),
        ("--by", "+0s", "must be later than the current end"),
        ("--to", "+400d", "more than 365 days"),
    ],
)
def test_command_refuses_unit_mix_ups_and_bad_values_changing_nothing(
    live_campaign, flag: str, value: str, message: str
) -> None:
    campaign = live_campaign()
    before = snapshot(campaign)

    with pytest.raises(CommandError, match=message):
        extend_campaign(str(campaign.pk), f"{flag}={value}")

    assert snapshot(campaign) == before


def test_command_refuses_an_unknown_campaign(db) -> None:
    with pytest.raises(CommandError, match="No campaign #987654"):
        extend_campaign("987654", "--by", "+2h")


# --- the admin -----------------------------------------------------------------------------------------

CHANGELIST = "/admin/campaigns/campaign/"


def test_admin_extend_end_shows_a_form_then_extends_and_logs(admin_client, live_campaign) -> None:
    campaign = live_campaign()
    local_new_end = timezone.localtime(campaign.ends_at + timedelta(hours=2)).replace(microsecond=0)

    page = admin_client.post(CHANGELIST, {"action": "extend_end", "_selected_action": [campaign.pk]})
    assert page.status_code == 200
    assert b'name="new_end"' in page.content and b'value="extend_end"' in page.content
    assert campaign.name.encode() in page.content

    done = admin_client.post(CHANGELIST, {
        "action": "extend_end", "_selected_action": [campaign.pk], "apply": "1",
        "new_end": local_new_end.strftime("%Y-%m-%dT%H:%M:%S"),  # naive: the operator's zone
    }, follow=True)

    assert done.status_code == 200 and b"Extended the end of 1 campaign" in done.content
    campaign.refresh_from_db()
    assert campaign.ends_at == local_new_end
    assert_expiries_follow(campaign)
    [entry] = LogEntry.objects.filter(object_id=str(campaign.pk), action_flag=CHANGE)
    assert "Extended the end" in entry.get_change_message()
    assert end_extended_events(campaign)[0].actor == "admin"


def test_admin_extend_end_with_a_bad_value_shows_the_form_again_and_changes_nothing(
    admin_client, live_campaign
) -> None:
    campaign = live_campaign()
    before = snapshot(campaign)
    earlier = timezone.localtime(campaign.ends_at - timedelta(hours=1))

    page = admin_client.post(CHANGELIST, {
        "action": "extend_end", "_selected_action": [campaign.pk], "apply": "1",
        "new_end": earlier.strftime("%Y-%m-%dT%H:%M:%S"),
    })

    assert page.status_code == 200 and b"must be later than the current end" in page.content
    assert snapshot(campaign) == before
    assert not LogEntry.objects.filter(object_id=str(campaign.pk)).exists()
