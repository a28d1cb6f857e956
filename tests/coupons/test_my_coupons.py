"""GET /api/v1/me/coupons made lean (coupons/mine.py): a page is one query (its count and the lazy expiry's check
in it), with DRF's pagination answers unchanged, and a coupon due to expire is settled even where the page does
not show it."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from coupons.models import Coupon, CouponStatus
from orders.drain import drain_campaign
from tests.conftest import shopper_headers

pytestmark = pytest.mark.django_db


@pytest.fixture
def five_coupons(client, live_campaign) -> list[str]:
    """Alice's five coupons of one campaign, newest first (their codes)."""
    campaign = live_campaign(total_stock=10, per_user_limit=5)
    for _ in range(5):
        answer = client.post(f"/api/v1/campaigns/{campaign.pk}/claim", data={}, content_type="application/json",
                             **shopper_headers("alice"))
        assert answer.json()["status"] == "claimed"
    drain_campaign(campaign_id=campaign.pk)
    return list(Coupon.objects.filter(user_id="alice").order_by("-created_at", "-id").values_list("code", flat=True))


def page(client, **query) -> dict:
    answer = client.get("/api/v1/me/coupons", query, **shopper_headers("alice"))
    assert answer.status_code == 200, answer.content
    return answer.json()


def test_a_page_is_one_query_with_its_count_and_links(client, five_coupons) -> None:
    with CaptureQueriesContext(connection) as queries:
        second = page(client, page_size=2, page=2)
    assert len(queries) == 1
    assert second["count"] == 5 and [c["code"] for c in second["results"]] == five_coupons[2:4]
    assert "page=3" in second["next"] and "page_size=2" in second["next"]
    assert second["previous"] and "page=" not in second["previous"].split("?", 1)[1].replace("page_size", "")
    last = page(client, page_size=2, page="last")
    assert last["count"] == 5 and [c["code"] for c in last["results"]] == five_coupons[4:]
    assert last["next"] is None


def test_a_page_past_the_last_is_a_404_and_an_empty_first_page_a_page(client, five_coupons) -> None:
    answer = client.get("/api/v1/me/coupons", {"page_size": 2, "page": 4}, **shopper_headers("alice"))
    assert answer.status_code == 404 and answer.json()["status"] == "not_found"
    assert page(client, status="redeemed") == {"code": 0, "status": "ok", "count": 0, "next": None,
                                               "previous": None, "results": []}


def test_a_due_coupon_is_settled_before_any_page_shows_it_even_one_the_page_leaves_out(client, five_coupons) -> None:
    oldest = Coupon.objects.get(code=five_coupons[-1])
    Coupon.objects.filter(pk=oldest.pk).update(valid_from=timezone.now() - timedelta(days=1),
                                                          expires_at=timezone.now() - timedelta(seconds=5))
    first = page(client, page_size=2)  # the due coupon is on page 3: settled all the same
    assert first["count"] == 5
    assert Coupon.objects.get(pk=oldest.pk).status == CouponStatus.EXPIRED
    expired = page(client, status="expired")
    assert [c["code"] for c in expired["results"]] == [oldest.code]


def test_a_filter_that_shows_nothing_still_settles_what_is_due(client, five_coupons) -> None:
    newest = Coupon.objects.get(code=five_coupons[0])
    Coupon.objects.filter(pk=newest.pk).update(valid_from=timezone.now() - timedelta(days=1),
                                                          expires_at=timezone.now() - timedelta(seconds=5))
    assert [c["code"] for c in page(client, status="expired")["results"]] == [newest.code]


def test_a_pages_coupons_are_built_as_the_orm_builds_them(five_coupons) -> None:
    """Each field through its converter (JSON parsed, not its text): the page's objects equal the ORM's."""
    from coupons.selectors import UserCoupons

    Coupon.objects.filter(code=five_coupons[0]).update(shares=[{"sku": "TEA-1", "discount": "5.00"}])
    page = UserCoupons(user_id="alice", status=None)[0:5]
    orm = {c.pk: c for c in Coupon.objects.filter(user_id="alice").select_related("campaign")}
    for coupon in page:
        mine = orm[coupon.pk]
        assert [getattr(coupon, f.attname) for f in Coupon._meta.concrete_fields] == [
            getattr(mine, f.attname) for f in Coupon._meta.concrete_fields]
        assert coupon.campaign.discount_value == mine.campaign.discount_value
    assert page[0].shares == [{"sku": "TEA-1", "discount": "5.00"}]
