"""Extending the validity of a campaign's issued coupons: batches, one event each, once per extension."""
from __future__ import annotations

import json
import threading
from collections import Counter
from datetime import timedelta
from decimal import Decimal
from io import StringIO
from typing import Any

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.core.management import CommandError, call_command
from django.db import connection, connections, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from campaigns.models import Campaign, CampaignEvent, CampaignEventType
from campaigns.redis_state import ClaimCode, run_claim
from coupons.extension import (
    InvalidValidityExtension,
    coupons_extend_validity,
    validity_extension_apply,
    validity_extension_begin,
)
from coupons.models import Coupon, CouponEvent, CouponEventType, CouponStatus
from coupons.services import Order, coupon_redeem, coupon_reserve, coupon_revoke, coupon_settle
from orders.drain import drain_campaign

from .helpers import assert_rows_agree_with_events

pytestmark = pytest.mark.django_db

ORDER_AMOUNT = Decimal("350.00")  # the factory's rule: spend 300.00, get 50.00 off


# --- helpers -------------------------------------------------------------------------------------------


def campaign_with_coupons(live_campaign, count: int, **fields: Any) -> Campaign:
    """A live campaign with `count` active coupons: claimed through claim.lua, drained into PostgreSQL."""
    campaign = live_campaign(total_stock=count + 10, **fields)
    for n in range(count):
        assert run_claim(campaign_id=campaign.pk, user_id=f"u{n}", idempotency_key=None).code == ClaimCode.CLAIMED
    report = drain_campaign(campaign_id=campaign.pk, max_seconds=120)
    assert report.caught_up and Coupon.objects.filter(campaign=campaign).count() == count
    return campaign


def unusable_coupons(campaign: Campaign) -> dict[str, Coupon]:
    """Turn four coupons of the campaign into ones an extension must leave alone; one more into a held one."""
    coupons = list(Coupon.objects.filter(campaign=campaign).order_by("pk")[:5])
    expired, redeemed, revoked, lapsed_unsettled, held = coupons
    past = timezone.now().replace(microsecond=0) - timedelta(days=1)
    Coupon.objects.filter(pk__in=[expired.pk, lapsed_unsettled.pk]).update(
        valid_from=past - timedelta(days=1), expires_at=past
    )
    with transaction.atomic():
        expired.refresh_from_db()
        assert coupon_settle(coupon=expired, now=timezone.now(), source="test")
    assert coupon_redeem(user_id=redeemed.user_id, code=redeemed.code,
                         order=Order("O-redeemed", ORDER_AMOUNT, "CNY")).code == 0
    with transaction.atomic():
        assert coupon_revoke(coupon=revoked, source="test", reason="test").code == 0
    assert coupon_reserve(user_id=held.user_id, code=held.code, order=Order("O-held", ORDER_AMOUNT, "CNY")).code == 0
    rows = {c.pk: c for c in Coupon.objects.filter(pk__in=[c.pk for c in coupons])}
    assert rows[expired.pk].status == CouponStatus.EXPIRED
    assert rows[redeemed.pk].status == CouponStatus.REDEEMED
    assert rows[revoked.pk].status == CouponStatus.REVOKED
    assert rows[lapsed_unsettled.pk].status == CouponStatus.ACTIVE  # active, but past its validity
    assert rows[held.pk].status == CouponStatus.HELD
    return {"expired": rows[expired.pk], "redeemed": rows[redeemed.pk], "revoked": rows[revoked.pk],
            "lapsed_unsettled": rows[lapsed_unsettled.pk], "held": rows[held.pk]}


def expiry_rows(campaign: Campaign) -> dict[int, tuple[Any, ...]]:
    return {pk: rest for pk, *rest in
            Coupon.objects.filter(campaign=campaign).values_list("pk", "expires_at", "status", "version")}


def extended_events(campaign: Campaign) -> list[CouponEvent]:
    return list(CouponEvent.objects.filter(campaign=campaign, type=CouponEventType.EXTENDED))


def batch_statements(queries: CaptureQueriesContext) -> int:
    return sum("WITH batch AS" in q["sql"] for q in queries.captured_queries)


# --- the extension -------------------------------------------------------------------------------------


def test_extension_moves_every_usable_coupon_once_in_batches_with_one_event_each(live_campaign) -> None:
    campaign = campaign_with_coupons(live_campaign, 2_504)
    left_alone = unusable_coupons(campaign)
    before = expiry_rows(campaign)
    usable = {pk for pk, (_, status, _) in before.items() if status in ("active", "held")} - {
        left_alone["lapsed_unsettled"].pk}
    assert len(usable) == 2_500

    with CaptureQueriesContext(connection) as queries:
        extended = coupons_extend_validity(campaign=campaign, days=7, actor="olga", batch_size=1000)

    assert extended == 2_500
    assert batch_statements(queries) == 4  # 3 batches of work, one that finds nothing left
    after = expiry_rows(campaign)
    for pk, (expires_at, status, version) in after.items():
        old_expires, old_status, old_version = before[pk]
        assert (status, version) == (old_status, old_version), pk  # not a state change
        if pk in usable:
            assert expires_at == old_expires + timedelta(days=7) and expires_at.microsecond == 0, pk
        else:
            assert expires_at == old_expires, pk
    events = extended_events(campaign)
    assert len(events) == 2_500 and {e.coupon_id for e in events} == usable
    [extension] = CampaignEvent.objects.filter(campaign=campaign, type=CampaignEventType.VALIDITY_EXTENDED)
    assert extension.actor == "olga" and extension.data["days"] == 7
    event = next(e for e in events if e.coupon_id == left_alone["held"].pk)
    assert event.source == "extension"
    assert event.data["extension"] == extension.pk and event.data["days"] == 7
    assert event.data["from"] == before[event.coupon_id][0].isoformat()
    assert event.data["to"] == after[event.coupon_id][0].isoformat()
    assert_rows_agree_with_events()


def test_running_the_same_extension_again_extends_nothing_more(live_campaign) -> None:
    campaign = campaign_with_coupons(live_campaign, 300)
    extension = validity_extension_begin(campaign=campaign, days=3, actor="olga")
    assert validity_extension_apply(extension=extension, batch_size=100) == 300
    once = expiry_rows(campaign)

    again = validity_extension_apply(extension=extension, batch_size=100)

    assert again == 0
    assert expiry_rows(campaign) == once
    assert len(extended_events(campaign)) == 300


def test_an_interrupted_extension_finishes_the_rest_when_run_again(live_campaign) -> None:
    campaign = campaign_with_coupons(live_campaign, 250)
    before = expiry_rows(campaign)
    extension = validity_extension_begin(campaign=campaign, days=2, actor="olga")
    first_ids = sorted(before)[:100]
    # The first run got as far as 100 coupons (one batch) before its worker died.
    Coupon.objects.filter(pk__in=sorted(before)[100:]).update(status=CouponStatus.REDEEMED, order_id="hide")
    assert validity_extension_apply(extension=extension, batch_size=100) == 100
    Coupon.objects.filter(order_id="hide").update(status=CouponStatus.ACTIVE, order_id=None)

    rest = validity_extension_apply(extension=extension, batch_size=100)

    assert rest == 150
    after = expiry_rows(campaign)
    assert all(after[pk][0] == before[pk][0] + timedelta(days=2) for pk in before)
    assert Counter(e.coupon_id for e in extended_events(campaign)) == Counter(list(before))
    assert set(first_ids) <= {e.coupon_id for e in extended_events(campaign)}


def test_the_same_key_names_the_same_extension(live_campaign) -> None:
    campaign = campaign_with_coupons(live_campaign, 20)

    first = coupons_extend_validity(campaign=campaign, days=5, actor="olga", key="form-1")
    second = coupons_extend_validity(campaign=campaign, days=5, actor="olga", key="form-1")

    assert (first, second) == (20, 0)
    assert CampaignEvent.objects.filter(campaign=campaign, type=CampaignEventType.VALIDITY_EXTENDED).count() == 1
    with pytest.raises(InvalidValidityExtension, match="already extended the coupons by 5 days"):
        coupons_extend_validity(campaign=campaign, days=6, actor="olga", key="form-1")


def test_two_different_extensions_both_apply(live_campaign) -> None:
    campaign = campaign_with_coupons(live_campaign, 20)
    before = expiry_rows(campaign)

    coupons_extend_validity(campaign=campaign, days=5, actor="olga")
    coupons_extend_validity(campaign=campaign, days=2, actor="olga")

    after = expiry_rows(campaign)
    assert all(after[pk][0] == before[pk][0] + timedelta(days=7) for pk in before)
    assert len(extended_events(campaign)) == 40


def test_coupons_issued_after_the_extension_began_are_not_extended(live_campaign) -> None:
    campaign = campaign_with_coupons(live_campaign, 5)
    extension = validity_extension_begin(campaign=campaign, days=3, actor="olga")
    assert run_claim(campaign_id=campaign.pk, user_id="late", idempotency_key=None).code == ClaimCode.CLAIMED
    drain_campaign(campaign_id=campaign.pk)
    late = Coupon.objects.get(campaign=campaign, user_id="late")

    assert validity_extension_apply(extension=extension) == 5

    assert Coupon.objects.get(pk=late.pk).expires_at == late.expires_at
    assert not CouponEvent.objects.filter(coupon=late, type=CouponEventType.EXTENDED).exists()


@pytest.mark.django_db(transaction=True)
def test_two_runs_of_one_extension_at_once_extend_every_coupon_once(live_campaign) -> None:
    campaign = campaign_with_coupons(live_campaign, 2_500)
    before = expiry_rows(campaign)
    extension = validity_extension_begin(campaign=campaign, days=7, actor="olga")
    barrier = threading.Barrier(4)
    results: list[Any] = [None] * 4

    def run(index: int) -> None:
        try:
            connection.ensure_connection()
            barrier.wait(timeout=60)
            results[index] = validity_extension_apply(extension=extension, batch_size=300)
        except BaseException as exc:  # noqa: B036 (reported to the test, which asserts on it)
            results[index] = exc
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)

    assert not any(t.is_alive() for t in threads)
    assert all(isinstance(r, int) for r in results), results
    assert sum(results) == 2_500
    after = expiry_rows(campaign)
    assert all(after[pk][0] == before[pk][0] + timedelta(days=7) for pk in before)
    assert Counter(e.coupon_id for e in extended_events(campaign)) == Counter(list(before))


# --- bad values change nothing -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("days", "message"),
    [
        (0, "at least 1 day"),
        (-1, "only be extended"),
        (366, "at most 365 days"),
        (86_400, "did you mean seconds"),
        (604_800, "did you mean seconds"),
        (86_400_000, "looks like milliseconds"),
        (True, "whole number of days"),
    ],
)
def test_bad_days_are_refused_and_change_nothing(live_campaign, days: Any, message: str) -> None:
    campaign = campaign_with_coupons(live_campaign, 3)
    before = expiry_rows(campaign)

    with pytest.raises(InvalidValidityExtension, match=message) as refused:
        coupons_extend_validity(campaign=campaign, days=days, actor="olga")

    assert refused.value.http_status == 400 and refused.value.status == "invalid_request"
    assert expiry_rows(campaign) == before
    assert not CampaignEvent.objects.filter(campaign=campaign).exists()
    assert extended_events(campaign) == []


# --- the command ---------------------------------------------------------------------------------------


def extend_coupons(*args: str) -> str:
    out = StringIO()
    call_command("extend_coupons", *args, stdout=out)
    return out.getvalue()


def test_command_extends_and_prints_one_json_line(live_campaign) -> None:
    campaign = campaign_with_coupons(live_campaign, 30)

    out = extend_coupons(str(campaign.pk), "--days", "10", "--batch-size", "7")

    [line] = out.splitlines()
    printed = json.loads(line)
    assert printed["extended"] == 30 and printed["days"] == 10 and printed["campaign"] == campaign.pk
    assert len(extended_events(campaign)) == 30
    resumed = json.loads(extend_coupons(str(campaign.pk), "--resume", str(printed["extension"])))
    assert resumed["extended"] == 0 and resumed["extension"] == printed["extension"]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("0", "at least 1 day"),
        ("-1", "only be extended"),
        ("366", "at most 365 days"),
        ("86400", "did you mean seconds"),
        ("604800", "did you mean seconds"),
        ("1.5", "whole number of days"),
        ("seven", "whole number of days"),
    ],
)
def test_command_refuses_bad_days_with_a_clear_message_changing_nothing(
    live_campaign, value: str, message: str
) -> None:
    campaign = campaign_with_coupons(live_campaign, 3)
    before = expiry_rows(campaign)

    with pytest.raises(CommandError, match=message):
        extend_coupons(str(campaign.pk), f"--days={value}")

    assert expiry_rows(campaign) == before
    assert not CampaignEvent.objects.filter(campaign=campaign).exists()


def test_command_refuses_an_unknown_extension_to_resume(live_campaign) -> None:
    campaign = campaign_with_coupons(live_campaign, 1)

    with pytest.raises(CommandError, match="has no validity extension #999999"):
        extend_coupons(str(campaign.pk), "--resume", "999999")


# --- the admin -----------------------------------------------------------------------------------------

CHANGELIST = "/admin/campaigns/campaign/"


def test_admin_extends_validity_through_a_form_once_per_form_and_logs(admin_client, live_campaign) -> None:
    campaign = campaign_with_coupons(live_campaign, 12)
    before = expiry_rows(campaign)

    page = admin_client.post(CHANGELIST, {"action": "extend_validity", "_selected_action": [campaign.pk]})
    assert page.status_code == 200 and b'name="days"' in page.content
    token = page.context["form"].initial["token"]
    form = {"action": "extend_validity", "_selected_action": [campaign.pk], "apply": "1", "days": "4",
            "token": token}
    done = admin_client.post(CHANGELIST, form, follow=True)
    resent = admin_client.post(CHANGELIST, form, follow=True)  # the operator pressed the button twice

    assert done.status_code == 200 and b"extended the validity of 12 coupon(s) by 4 day(s)" in done.content
    assert b"extended the validity of 0 coupon(s)" in resent.content
    after = expiry_rows(campaign)
    assert all(after[pk][0] == before[pk][0] + timedelta(days=4) for pk in before)
    assert len(extended_events(campaign)) == 12
    entries = LogEntry.objects.filter(object_id=str(campaign.pk), action_flag=CHANGE)
    [entry] = entries
    assert "12 coupon(s) by 4 day(s)" in entry.get_change_message()


def test_admin_refuses_seconds_for_days_and_changes_nothing(admin_client, live_campaign) -> None:
    campaign = campaign_with_coupons(live_campaign, 3)
    before = expiry_rows(campaign)

    page = admin_client.post(CHANGELIST, {"action": "extend_validity", "_selected_action": [campaign.pk],
                                          "apply": "1", "days": "86400", "token": "t"})

    assert page.status_code == 200 and b"did you mean seconds" in page.content
    assert expiry_rows(campaign) == before
    assert not CampaignEvent.objects.filter(campaign=campaign).exists()
    assert not LogEntry.objects.filter(object_id=str(campaign.pk)).exists()
