"""Storefront API of coupons: the shopper's own coupons."""
from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from django.conf import settings
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, OpenApiResponse, extend_schema, inline_serializer
from redis import RedisError
from rest_framework import serializers
from rest_framework.pagination import PageNumberPagination
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from campaigns.money import InvalidAmount, parse_amount, parse_currency
from campaigns.redis_state import redis_client
from core.api import ShopperApi, ShopperTokenAuthentication
from core.errors import BadRequest, NotFound, RateLimited
from core.http import idempotency_key

from .codes import normalize_code
from .idempotency import Answer, run_idempotent
from .metrics import USES
from .models import Coupon, CouponStatus
from .outcomes import REFUSALS, UseCode, refused
from .selectors import coupons_of_user
from .services import (
    HOLD_SECONDS_DEFAULT,
    HOLD_SECONDS_MAX,
    Order,
    coupon_confirm,
    coupon_redeem,
    coupon_release,
    coupon_reserve,
    coupons_settle_due,
)


class CouponOutputSerializer(serializers.ModelSerializer):
    campaign_id = serializers.IntegerField()
    discount_type = serializers.CharField(source="campaign.discount_type")
    discount_value = serializers.DecimalField(source="campaign.discount_value", max_digits=12, decimal_places=2)
    max_discount = serializers.DecimalField(
        source="campaign.max_discount", max_digits=12, decimal_places=2, allow_null=True
    )
    min_spend = serializers.DecimalField(source="campaign.min_spend", max_digits=12, decimal_places=2)
    currency = serializers.CharField(source="campaign.currency")

    class Meta:
        model = Coupon
        fields = [
            "code", "campaign_id", "claim_id", "status", "valid_from", "expires_at",
            "discount_type", "discount_value", "max_discount", "min_spend", "currency",
            "order_id", "hold_until", "discount",
        ]


class CouponPagination(PageNumberPagination):
    page_size = 20
    page_size_query_param = "page_size"
    max_page_size = 100

    def get_paginated_response(self, data: Any) -> Response:
        assert self.page is not None
        return Response({
            "code": 0, "status": "ok", "count": self.page.paginator.count,
            "next": self.get_next_link(), "previous": self.get_previous_link(), "results": data,
        })

    def get_page_size(self, request: Any) -> int:
        raw = request.query_params.get(self.page_size_query_param)
        if raw is None:
            return self.page_size
        if not (raw.isascii() and raw.isdigit() and len(raw) <= 4) or not 1 <= int(raw) <= self.max_page_size:
            raise BadRequest(f"page_size is a whole number from 1 to {self.max_page_size}.")
        return int(raw)

    def get_paginated_response_schema(self, schema: dict[str, Any]) -> dict[str, Any]:
        wrapped = super().get_paginated_response_schema(schema)
        wrapped["properties"] = {"code": {"type": "integer", "example": 0},
                                 "status": {"type": "string", "example": "ok"}, **wrapped["properties"]}
        return wrapped


class MyCouponsApi(APIView):
    """GET /api/v1/me/coupons?status=: the shopper's coupons, newest first, paginated."""

    authentication_classes = [ShopperTokenAuthentication]
    permission_classes = [IsAuthenticated]
    pagination_class = CouponPagination

    @extend_schema(
        tags=["coupons"],
        summary="The shopper's coupons",
        description="The authenticated shopper's coupons, newest first, 20 a page (page_size up to 100), "
                    "optionally of one status. Coupons past their validity are expired (with their event) before "
                    "the list is read, so a shopper never sees a stale status.",
        parameters=[
            OpenApiParameter("status", str, enum=list(CouponStatus.values), required=False),
            OpenApiParameter("page", int, required=False),
            OpenApiParameter("page_size", int, required=False),
        ],
        responses={200: CouponOutputSerializer(many=True)},
    )
    def get(self, request: Request) -> Response:
        status = request.query_params.get("status")
        if status is not None and status not in CouponStatus.values:
            raise BadRequest(f"status is one of: {', '.join(CouponStatus.values)}.")
        user_id = request.user.user_id  # type: ignore[union-attr]
        coupons_settle_due(user_id=user_id)  # lazy expiry: what a shopper sees is never stale
        coupons = coupons_of_user(user_id=user_id, status=status)
        paginator = self.pagination_class()
        page = paginator.paginate_queryset(coupons, request, view=self)
        return paginator.get_paginated_response(CouponOutputSerializer(page, many=True).data)


# --- using a coupon: reserve, confirm, redeem, release ------------------------------------------------

ORDER_ID_RE = re.compile(r"[A-Za-z0-9_.:-]{1,64}")


def order_id_from(data: dict[str, Any]) -> str:
    """Return the order id of a request body: a positive integer or 1-64 of [A-Za-z0-9_.:-]."""
    value = data.get("order_id")
    if isinstance(value, int) and not isinstance(value, bool) and 0 < value < 10**18:
        return str(value)
    if isinstance(value, str) and ORDER_ID_RE.fullmatch(value):
        return value
    raise BadRequest("order_id is required: a positive integer or 1-64 characters of A-Z a-z 0-9 _ . : -")


def order_from(data: dict[str, Any]) -> Order:
    try:
        currency = parse_currency(data.get("currency"))
        amount = parse_amount(data.get("order_amount"), currency)
    except InvalidAmount as exc:
        raise BadRequest(str(exc)) from exc
    return Order(order_id=order_id_from(data), amount=amount, currency=currency)


def hold_seconds_from(data: dict[str, Any]) -> int:
    value = data.get("hold_seconds", HOLD_SECONDS_DEFAULT)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= HOLD_SECONDS_MAX:
        raise BadRequest(f"hold_seconds is a whole number of seconds from 1 to {HOLD_SECONDS_MAX} (default 900).")
    return value


def coupon_endpoint(code: str, action: str, user_id: str) -> tuple[str, str]:
    """Return (canonical code, idempotency endpoint); a code that can't exist is the same 404 as unknown
    (and counts as a miss)."""
    canonical = normalize_code(code)
    if canonical is None:
        guarded_by_misses(user_id, _not_found)()  # raises: TooManyMisses or NotFound
        raise NotFound("No such coupon.")
    return canonical, f"POST /api/v1/coupons/{canonical}/{action}"


class TooManyMisses(RateLimited):
    message = "Too many unknown coupon codes from this shopper; retry in a minute."


def _misses_key(user_id: str) -> str:
    return f"cr:code-misses:{user_id}:{int(time.time() // 60)}"


def _not_found() -> Answer:
    raise NotFound("No such coupon.")


def guarded_by_misses(user_id: str, execute: Callable[[], Answer]) -> Callable[[], Answer]:
    """Refuse a shopper who tried too many unknown codes this minute; count each miss (codes resist guessing)."""

    def run() -> Answer:
        try:
            if int(redis_client().get(_misses_key(user_id)) or 0) >= settings.COUPONS_CODE_MISSES_PER_MINUTE:
                raise TooManyMisses()
        except RedisError:
            pass  # the guard fails open: the answer itself does not depend on Redis
        try:
            return execute()
        except NotFound:
            try:
                pipe = redis_client().pipeline(transaction=True)
                pipe.incr(_misses_key(user_id))
                pipe.expire(_misses_key(user_id), 120)
                pipe.execute()
            except RedisError:
                pass
            raise

    return run


def answer_response(answer: Answer) -> Response:
    headers = {"Idempotent-Replayed": "true"} if answer.replayed else None
    return Response(answer.body, status=answer.status, headers=headers)


_USE_CODES = "0 done, 10 expired, 11 already_redeemed, 12 min_spend_not_met, 13 not_yet_valid, 14 revoked, " \
    "15 not_eligible, 16 on_hold, 17 hold_lapsed (confirm only), 18 not_held (confirm only)"
_IDEMPOTENCY_HEADER = OpenApiParameter(
    "Idempotency-Key", str, OpenApiParameter.HEADER, required=True,
    description="1-255 printable ASCII characters; a repeat replays the first answer (Idempotent-Replayed: true)",
)
_OPTIONAL_IDEMPOTENCY_HEADER = OpenApiParameter(
    "Idempotency-Key", str, OpenApiParameter.HEADER, required=False, description=_IDEMPOTENCY_HEADER.description
)
def _order_id_field() -> serializers.Field:
    return serializers.CharField(help_text="The shop's order id: an integer or 1-64 of [A-Za-z0-9_.:-]")


def _order_fields() -> dict[str, serializers.Field]:
    return {
        "order_id": _order_id_field(),
        "order_amount": serializers.CharField(help_text='Decimal string, e.g. "350.00"'),
        "currency": serializers.CharField(help_text="ISO 4217, the coupon's currency, e.g. CNY"),
    }
_USE_RESPONSE = inline_serializer("CouponUseResult", {
    "code": serializers.IntegerField(help_text=_USE_CODES),
    "status": serializers.CharField(),
    "discount": serializers.CharField(required=False, help_text="decimal string"),
    "payable": serializers.CharField(required=False, help_text="order amount minus discount, decimal string"),
    "hold_until": serializers.DateTimeField(required=False),
    "detail": serializers.CharField(required=False),
})


def _refusal_examples(*codes: UseCode) -> list[OpenApiExample]:
    """Response examples of refusals: the very bodies the API sends (coupons.outcomes)."""
    return [OpenApiExample(REFUSALS[code][0], response_only=True, value=refused(code).body(),
                           description=f"code {int(code)}: {REFUSALS[code][1]}") for code in codes]


_USE_REFUSALS = (UseCode.EXPIRED, UseCode.ALREADY_REDEEMED, UseCode.MIN_SPEND_NOT_MET, UseCode.NOT_YET_VALID,
                 UseCode.REVOKED, UseCode.NOT_ELIGIBLE, UseCode.ON_HOLD)
_IDEMPOTENCY_NOTE = (" A repeat with the same Idempotency-Key and the same request within 24 h answers the first "
                     "answer unchanged (header Idempotent-Replayed: true); with a different request 422; while "
                     "the first is still running 409.")
_ERRORS = {409: OpenApiResponse(description="The same Idempotency-Key is still in flight (Retry-After)."),
           422: OpenApiResponse(description="The same Idempotency-Key was used with a different request.")}


class CouponUseApi(ShopperApi):
    """Base of redeem, reserve, confirm and release: every answer, errors included, is counted by outcome."""

    operation = ""

    def finalize_response(self, request: Request, response: Any, *args: Any, **kwargs: Any) -> Any:
        response = super().finalize_response(request, response, *args, **kwargs)
        data = getattr(response, "data", None)
        outcome = data.get("status") if isinstance(data, dict) else None
        USES.labels(self.operation, outcome if isinstance(outcome, str) else str(response.status_code)).inc()
        return response


class CouponRedeemApi(CouponUseApi):
    """POST /api/v1/coupons/{code}/redeem: use the coupon for an order in one step."""

    operation = "redeem"

    @extend_schema(
        tags=["coupons"], parameters=[_IDEMPOTENCY_HEADER],
        summary="Use a coupon for an order in one step",
        description="Apply the shopper's coupon to an order: the discount is computed from the coupon's rule "
                    "(fixed or percentage with a cap, minimum spend, currency) and the coupon becomes redeemed by "
                    "this order. 200 with code 0 `redeemed`, `discount` and `payable`, or a refusal: " + _USE_CODES
                    + ". The same order redeeming again gets its redemption back." + _IDEMPOTENCY_NOTE,
        request=inline_serializer("RedeemRequest", _order_fields()),
        responses={200: _USE_RESPONSE, **_ERRORS},
        examples=[OpenApiExample("redeemed", response_only=True,
                                 value={"code": 0, "status": "redeemed", "discount": "50.00", "payable": "300.00"}),
                  *_refusal_examples(*_USE_REFUSALS),
                  OpenApiExample("request", request_only=True,
                                 value={"order_id": "A-1001", "order_amount": "350.00", "currency": "CNY"})],
    )
    def post(self, request: Request, code: str) -> Response:
        key = idempotency_key(request._request, required=True)
        order = order_from(self.body())
        canonical, endpoint = coupon_endpoint(code, "redeem", self.user_id)
        return answer_response(run_idempotent(
            user_id=self.user_id, endpoint=endpoint, key=key, payload=asdict(order),
            execute=guarded_by_misses(self.user_id, lambda: Answer(
                200, coupon_redeem(user_id=self.user_id, code=canonical, order=order).body())),
        ))


class CouponReserveApi(CouponUseApi):
    """POST /api/v1/coupons/{code}/reserve: hold the coupon for an order awaiting payment."""

    operation = "reserve"

    @extend_schema(
        tags=["coupons"], parameters=[_IDEMPOTENCY_HEADER],
        summary="Hold a coupon for an order awaiting payment",
        description="Reserve the coupon for an order until `hold_until` (now + hold_seconds, default 900, at most "
                    f"{HOLD_SECONDS_MAX}): nobody else can use it meanwhile. Confirm when the order is paid, "
                    "release when it is cancelled; a hold not confirmed in time lapses and the coupon is usable "
                    "again. 200 with code 0 `reserved`, `discount`, `payable` and `hold_until`, or a refusal: "
                    + _USE_CODES + "." + _IDEMPOTENCY_NOTE,
        request=inline_serializer("ReserveRequest", {
            **_order_fields(),
            "hold_seconds": serializers.IntegerField(required=False, min_value=1, max_value=HOLD_SECONDS_MAX,
                                                     default=HOLD_SECONDS_DEFAULT)}),
        responses={200: _USE_RESPONSE, **_ERRORS},
        examples=[OpenApiExample("reserved", response_only=True, value={
            "code": 0, "status": "reserved", "discount": "50.00", "payable": "300.00",
            "hold_until": "2026-11-30T10:15:00+00:00"}),
                  *_refusal_examples(*_USE_REFUSALS),
                  OpenApiExample("request", request_only=True, value={
                      "order_id": "A-1002", "order_amount": "350.00", "currency": "CNY", "hold_seconds": 900})],
    )
    def post(self, request: Request, code: str) -> Response:
        key = idempotency_key(request._request, required=True)
        body = self.body()
        order, hold_seconds = order_from(body), hold_seconds_from(body)
        canonical, endpoint = coupon_endpoint(code, "reserve", self.user_id)
        return answer_response(run_idempotent(
            user_id=self.user_id, endpoint=endpoint, key=key, payload={**asdict(order), "hold": hold_seconds},
            execute=guarded_by_misses(self.user_id, lambda: Answer(200, coupon_reserve(
                user_id=self.user_id, code=canonical, order=order, hold_seconds=hold_seconds).body())),
        ))


class CouponConfirmApi(CouponUseApi):
    """POST /api/v1/coupons/{code}/confirm: the held order was paid; the coupon becomes redeemed."""

    operation = "confirm"

    @extend_schema(
        tags=["coupons"], parameters=[_OPTIONAL_IDEMPOTENCY_HEADER],
        summary="Confirm a held coupon: the order was paid",
        description="The order that holds the coupon was paid: the coupon becomes redeemed by it. 200 with code 0 "
                    "`redeemed` (again for a repeat), or a refusal: 16 on_hold (held for another order), 11 "
                    "already_redeemed, 14 revoked, 10 expired, 17 hold_lapsed (this order's hold lapsed: reserve "
                    "again), 18 not_held (this order holds no hold on the coupon). Idempotency-Key optional."
                    + _IDEMPOTENCY_NOTE,
        request=inline_serializer("ConfirmRequest", {"order_id": _order_id_field()}),
        responses={200: _USE_RESPONSE, **_ERRORS},
        examples=[OpenApiExample("redeemed", response_only=True,
                                 value={"code": 0, "status": "redeemed", "discount": "50.00", "payable": "300.00"}),
                  *_refusal_examples(UseCode.HOLD_LAPSED, UseCode.NOT_HELD, UseCode.ON_HOLD,
                                     UseCode.ALREADY_REDEEMED, UseCode.REVOKED, UseCode.EXPIRED),
                  OpenApiExample("request", request_only=True, value={"order_id": "A-1002"})],
    )
    def post(self, request: Request, code: str) -> Response:
        key = idempotency_key(request._request)
        order_id = order_id_from(self.body())
        canonical, endpoint = coupon_endpoint(code, "confirm", self.user_id)
        return answer_response(run_idempotent(
            user_id=self.user_id, endpoint=endpoint, key=key, payload={"order_id": order_id},
            execute=guarded_by_misses(self.user_id, lambda: Answer(
                200, coupon_confirm(user_id=self.user_id, code=canonical, order_id=order_id).body())),
        ))


class CouponReleaseApi(CouponUseApi):
    """POST /api/v1/coupons/{code}/release: the order was cancelled or not paid; undo its hold or use."""

    operation = "release"

    @extend_schema(
        tags=["coupons"], parameters=[_OPTIONAL_IDEMPOTENCY_HEADER],
        summary="Release a coupon: the order was cancelled or not paid",
        description="Undo this order's hold or redemption: the coupon is usable again if still valid (else "
                    "expired). Always 200 with code 0 `released` and the coupon's `coupon_status`; releasing a "
                    "coupon the order does not hold changes nothing. Idempotency-Key optional." + _IDEMPOTENCY_NOTE,
        request=inline_serializer("ReleaseRequest", {"order_id": _order_id_field()}),
        responses={200: inline_serializer("ReleaseResult", {
            "code": serializers.IntegerField(), "status": serializers.CharField(),
            "coupon_status": serializers.ChoiceField(choices=CouponStatus.choices)}), **_ERRORS},
        examples=[OpenApiExample("released", response_only=True,
                                 value={"code": 0, "status": "released", "coupon_status": "active"}),
                  OpenApiExample("request", request_only=True, value={"order_id": "A-1002"})],
    )
    def post(self, request: Request, code: str) -> Response:
        key = idempotency_key(request._request)
        order_id = order_id_from(self.body())
        canonical, endpoint = coupon_endpoint(code, "release", self.user_id)
        return answer_response(run_idempotent(
            user_id=self.user_id, endpoint=endpoint, key=key, payload={"order_id": order_id},
            execute=guarded_by_misses(self.user_id, lambda: Answer(
                200, coupon_release(user_id=self.user_id, code=canonical, order_id=order_id).body())),
        ))
