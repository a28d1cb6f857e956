"""GET /api/v1/me/coupons made lean (coupons/mine.py): a page is one query (its count and the lazy expiry's check
in it), with DRF's pagination answers unchanged, and a coupon due to expire is settled even where the page does
not show it; the answer is, byte for byte, MyCouponSerializer's as DRF renders it (the schema's)."""
from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.renderers import JSONRenderer

from campaigns.rule_fields import TiersField
from coupons.mine import MyCouponSerializer, drf_json
from coupons.models import Coupon, CouponStatus
from coupons.selectors import PAGE_CAMPAIGN_COLUMNS, PAGE_COUPON_COLUMNS
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


# --- the answer is MyCouponSerializer's (coupons.mine.coupons_shown builds it from the page's rows) -------------

TIERS = [["100.00", "10.00", False], ["200.00", "25.00", False], ["500.00", "10", True]]


@pytest.fixture
def coupons_of_every_kind(client, live_campaign) -> int:
    """Alice's coupons of every rule, currency and status (held with its order, redeemed with its discount, times
    with and without microseconds); return how many."""
    campaigns = [
        live_campaign(per_user_limit=3),
        live_campaign(discount_type="percent", discount_value=Decimal("12.50"), max_discount=Decimal("30.00")),
        live_campaign(currency="JPY", discount_value=Decimal("500"), min_spend=Decimal("1000")),
        live_campaign(discount_type="tiers", discount_value=Decimal(0), tiers=TIERS, min_spend=Decimal("100.00"),
                      max_discount=Decimal("60.00")),
        live_campaign(discount_type="free_shipping", discount_value=Decimal(0), min_spend=Decimal(0),
                      max_discount=Decimal("15.00"), currency="USD"),
        live_campaign(discount_type="buy_get", discount_value=Decimal(0), min_spend=Decimal(0), buy_quantity=2,
                      get_quantity=1),
    ]
    for campaign in campaigns:
        for _ in range(campaign.per_user_limit):
            answer = client.post(f"/api/v1/campaigns/{campaign.pk}/claim", data={},
                                 content_type="application/json", **shopper_headers("alice"))
            assert answer.json()["status"] == "claimed"
        drain_campaign(campaign_id=campaign.pk)
    coupons = list(Coupon.objects.filter(user_id="alice").order_by("id"))
    now = timezone.now()
    Coupon.objects.filter(pk=coupons[0].pk).update(
        status=CouponStatus.HELD, order_id="A-1001", hold_until=now + timedelta(minutes=5), order_amount=400,
        discount=Decimal("50.00"), shares=[{"sku": "TEA-1", "discount": "50.00"}])
    Coupon.objects.filter(pk=coupons[1].pk).update(status=CouponStatus.REDEEMED, order_id="9001", redeemed_at=now,
                                                   discount=Decimal("7.25"), valid_from=now.replace(microsecond=0))
    Coupon.objects.filter(pk=coupons[2].pk).update(status=CouponStatus.REVOKED)
    Coupon.objects.filter(pk=coupons[3].pk).update(status=CouponStatus.EXPIRED, valid_from=now - timedelta(days=2),
                                                   expires_at=now - timedelta(days=1, microseconds=7))
    jpy = next(c for c in coupons if c.campaign.currency == "JPY")
    Coupon.objects.filter(pk=jpy.pk).update(status=CouponStatus.REDEEMED, order_id="J-1", discount=Decimal("500"))
    return len(coupons)


def serializers_answer(user_id: str) -> bytes:
    """The answer's bytes as DRF renders MyCouponSerializer's representation of the shopper's coupons."""
    coupons = Coupon.objects.filter(user_id=user_id).select_related("campaign").order_by("-created_at", "-id")
    return JSONRenderer().render({"code": 0, "status": "ok", "count": len(coupons), "next": None, "previous": None,
                                  "results": MyCouponSerializer(coupons, many=True).data})


@pytest.mark.parametrize("zone", [None, "UTC", "America/New_York"])
def test_the_answer_is_the_serializers_for_coupons_of_every_kind(client, coupons_of_every_kind, zone) -> None:
    with timezone.override(ZoneInfo(zone) if zone else timezone.get_current_timezone()):
        answer = client.get("/api/v1/me/coupons", {"page_size": 100}, **shopper_headers("alice"))
        assert answer.status_code == 200 and answer.json()["count"] == coupons_of_every_kind
        assert answer.content == serializers_answer("alice")
    assert answer["Content-Type"] == "application/json"


def test_every_field_of_the_serializer_is_read_from_the_page() -> None:
    """A field the serializer gains must be one coupons_shown knows: a coupon column, or its campaign's."""
    for name, field in MyCouponSerializer().fields.items():
        if name in PAGE_COUPON_COLUMNS:
            assert field.source == name, name
        elif isinstance(field, TiersField):
            assert field.campaign_path == ["campaign"]
        else:
            assert str(field.source).split(".") == ["campaign", name] and name in PAGE_CAMPAIGN_COLUMNS, name
    assert set(PAGE_COUPON_COLUMNS) <= set(MyCouponSerializer().fields)


def test_an_answer_asked_indented_is_drfs_own(client, five_coupons) -> None:
    plain = client.get("/api/v1/me/coupons", **shopper_headers("alice"))
    indented = client.get("/api/v1/me/coupons", HTTP_ACCEPT="application/json; indent=2", **shopper_headers("alice"))
    assert indented.status_code == 200 and indented.content.startswith(b'{\n  "code": 0,')
    assert indented.json() == plain.json()


@pytest.mark.parametrize("text", ["a\u2028b\u2029c", "\x00\x1f\x7f\"\\/\b\f\n\r\t", "\u4e2d\U0001f600", "\ue000\uffff"])
def test_drf_json_is_drfs_renderer(text: str) -> None:
    body = {"code": 0, "results": [{"code": text, "n": [0, -1, 2**62], "b": [True, False, None], "e": {}}]}
    assert drf_json(body) == JSONRenderer().render(body)
