"""Helpers of the use API's tests (test_use_api.py, test_use_holds.py, test_hot_statements.py): a use over HTTP
through Django's client, its answer, and everything a use could change."""
from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from coupons.models import Coupon, CouponEvent, CouponEventType, IdempotencyRecord
from tests.conftest import shopper_headers

ORDER = {"order_id": "A-1", "order_amount": "350.00", "currency": "CNY"}
FRESH = object()  # a new random Idempotency-Key for each request


def use(
    client: Any,
    code: str,
    action: str,
    user: str = "alice",
    body: dict[str, Any] | str | None = None,
    *,
    key: Any = FRESH,
    **headers: str,
) -> Any:
    """POST /coupons/{code}/{action} as `user` with a JSON body (default: order A-1 of 350.00 CNY)."""
    if body is None:
        body = dict(ORDER) if action in ("redeem", "reserve") else {"order_id": ORDER["order_id"]}
    extra = shopper_headers(user, **headers)
    if key is FRESH:
        key = uuid.uuid4().hex
    if key is not None:
        extra["HTTP_IDEMPOTENCY_KEY"] = key
    data = body if isinstance(body, str) else json.dumps(body)
    response = client.post(f"/api/v1/coupons/{code}/{action}", data=data, content_type="application/json", **extra)
    assert response.status_code != 500, response.content
    assert response["Content-Type"] == "application/json"
    return response


def answer(response: Any) -> tuple[int, int, str]:
    body = response.json()
    return response.status_code, body["code"], body["status"]


def state() -> tuple[Any, ...]:
    """Everything a use of a coupon could change: coupon rows, events, stored idempotent answers."""
    return (
        list(Coupon.objects.order_by("pk").values_list(
            "pk", "status", "version", "order_id", "hold_until", "order_amount", "discount", "redeemed_at"
        )),
        list(CouponEvent.objects.order_by("pk").values_list("pk", "type")),
        list(IdempotencyRecord.objects.order_by("pk").values_list("user_id", "endpoint", "key", "in_flight")),
    )


def assert_contract_error(response: Any, http_status: int, slug: str) -> None:
    assert response.status_code == http_status
    body = response.json()
    assert body["code"] == http_status and body["status"] == slug and body["detail"]


def move(coupon: Coupon, **fields: Any) -> None:
    Coupon.objects.filter(pk=coupon.pk).update(**fields)


def reserved(client: Any, coupon: Coupon, order_id: str = "A-1", hold_seconds: int = 900) -> Any:
    response = use(client, coupon.code, "reserve", body={**ORDER, "order_id": order_id, "hold_seconds": hold_seconds})
    assert answer(response) == (200, 0, "reserved")
    return response


ISSUED = (CouponEventType.ISSUED, "drain")
RESERVED = (CouponEventType.RESERVED, "api")
REDEEMED = (CouponEventType.REDEEMED, "api")
RELEASED = (CouponEventType.RELEASED, "api")



@pytest.fixture(autouse=True)
def answers_not_exceptions(client: Any) -> None:
    """Imported by a test module: its client shows the answer the shopper would get, a 500 included."""
    client.raise_request_exception = False
