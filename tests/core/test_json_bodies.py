"""Request bodies are JSON as RFC 8259 defines it on every JSON endpoint: NaN, Infinity and -Infinity are a 400
in the contract's form, and nothing changes."""
from __future__ import annotations

import pytest

from coupons.models import Coupon

from ..conftest import shopper_headers
from ..coupons.helpers import issued_coupon

pytestmark = pytest.mark.django_db

NOT_JSON = [b'{"order_id": "A-1", "order_amount": NaN, "currency": "CNY"}',
            b'{"order_id": "A-1", "order_amount": "350.00", "currency": "CNY", "x": Infinity}',
            b'{"order_id": "A-1", "order_amount": -Infinity, "currency": "CNY"}']


@pytest.mark.parametrize("action", ["reserve", "redeem", "confirm", "release"])
@pytest.mark.parametrize("body", NOT_JSON)
def test_a_coupon_use_with_a_body_that_is_not_json_is_a_400(client, live_campaign, action, body) -> None:
    coupon = issued_coupon(live_campaign)
    answer = client.post(f"/api/v1/coupons/{coupon.code}/{action}", body, "application/json",
                         **shopper_headers(coupon.user_id, HTTP_IDEMPOTENCY_KEY="k-1"))
    assert (answer.status_code, answer.json()["status"]) == (400, "invalid_request")
    assert Coupon.objects.get(pk=coupon.pk).status == coupon.status


@pytest.mark.parametrize("body", NOT_JSON)
def test_a_cancel_with_a_body_that_is_not_json_is_a_400(client, body) -> None:
    answer = client.post("/api/v1/claims/42-1764470000000-0/cancel", body, "application/json",
                         **shopper_headers("ann"))
    assert (answer.status_code, answer.json()["status"]) == (400, "invalid_request")


@pytest.mark.parametrize("body", [b'{"x": NaN}', b'{"x": Infinity}'])
def test_a_claim_through_django_with_a_body_that_is_not_json_is_a_400(client, live_campaign, body) -> None:
    campaign = live_campaign()
    answer = client.post(f"/api/v1/campaigns/{campaign.pk}/claim", body, "application/json",
                         **shopper_headers("ann"))
    assert (answer.status_code, answer.json()["status"]) == (400, "invalid_request")
