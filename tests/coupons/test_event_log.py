"""The event log is the truth: append-only in the database itself, and the rows are checked against it."""
from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.db import DatabaseError, transaction

from coupons.models import Coupon, CouponEvent

from .helpers import issued_coupon

pytestmark = pytest.mark.django_db


def replay_check(*args: str) -> tuple[int, str]:
    out = StringIO()
    try:
        call_command("replay_events", "--check", *args, stdout=out)
    except SystemExit as exc:
        return int(exc.code or 0), out.getvalue()
    return 0, out.getvalue()


def test_the_database_refuses_to_update_or_delete_an_event(live_campaign) -> None:
    coupon = issued_coupon(live_campaign)
    event = CouponEvent.objects.get(coupon=coupon)

    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        CouponEvent.objects.filter(pk=event.pk).update(type="redeemed")
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        CouponEvent.objects.filter(pk=event.pk).delete()

    assert CouponEvent.objects.get(pk=event.pk).type == "issued"


def test_replay_check_passes_when_every_row_is_the_fold_of_its_events(live_campaign) -> None:
    issued_coupon(live_campaign, "alice")
    issued_coupon(live_campaign, "bob")

    code, out = replay_check()

    assert code == 0 and "2 coupons checked, 0 disagree" in out


def test_replay_check_exits_1_and_names_a_row_changed_behind_the_log(live_campaign) -> None:
    tampered = issued_coupon(live_campaign, "alice")
    other = issued_coupon(live_campaign, "bob")
    Coupon.objects.filter(pk=tampered.pk).update(status="redeemed", order_id="X-1")  # no event

    code, out = replay_check()
    narrowed, _ = replay_check("--campaign", str(other.campaign_id))

    assert code == 1 and tampered.code in out and other.code not in out
    assert "'status': 'redeemed'" in out and "'status': 'active'" in out
    assert narrowed == 0


def test_admin_cannot_add_change_or_delete_events(admin_client, live_campaign) -> None:
    coupon = issued_coupon(live_campaign)
    event = CouponEvent.objects.get(coupon=coupon)

    assert admin_client.get("/admin/coupons/couponevent/add/").status_code == 403
    assert admin_client.post(f"/admin/coupons/couponevent/{event.pk}/delete/", {"post": "yes"}).status_code == 403
    page = admin_client.get(f"/admin/coupons/couponevent/{event.pk}/change/")
    assert page.status_code == 200 and b'name="_save"' not in page.content
    assert CouponEvent.objects.filter(pk=event.pk).exists()
