"""GET /api/v1/me/coupons: the shopper's own coupons, one query a page (docs/api.md). The answer is
MyCouponSerializer's (the schema's) as DRF renders it, built from the page's rows without DRF's per-object field
machinery (coupons_shown) and written by orjson (drf_json); tests/coupons/test_my_coupons.py holds the bytes equal."""
from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from datetime import tzinfo
from typing import Any

import orjson
from django.core.paginator import EmptyPage, Page, PageNotAnInteger, Paginator
from django.db import DEFAULT_DB_ALIAS, connection
from django.http import HttpResponse, HttpResponseBase
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.pagination import PageNumberPagination
from rest_framework.permissions import IsAuthenticated
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from campaigns.models import Campaign
from campaigns.rule_fields import TiersField
from core.api import ShopperTokenAuthentication, validated
from core.errors import BadRequest

from .apis import CouponOutputSerializer
from .models import Coupon, CouponStatus
from .selectors import PAGE_CAMPAIGN_COLUMNS, PAGE_COUPON_COLUMNS, UserCoupons
from .services import coupons_settle_due


class MyCouponSerializer(CouponOutputSerializer):
    """A coupon in the shopper's list: CouponOutputSerializer's fields and its campaign's richer rule (docs/api.md,
    Richer rules: tiers, buy N get M's quantities), which a storefront shows beside it."""

    tiers = TiersField(campaign="campaign")
    buy_quantity = serializers.IntegerField(source="campaign.buy_quantity", help_text="Buy N get M's N; else 0.")
    get_quantity = serializers.IntegerField(source="campaign.get_quantity", help_text="Buy N get M's M; else 0.")

    class Meta(CouponOutputSerializer.Meta):
        fields = [*CouponOutputSerializer.Meta.fields, "tiers", "buy_quantity", "get_quantity"]


class CountingPaginator(Paginator):
    """Django's paginator over UserCoupons: a page's own query counts them all, so a page is one query instead of a
    COUNT and then the page; "last" (which needs the count first) counts as Django's does."""

    def page(self, number: Any) -> Page:
        if "count" in self.__dict__:  # counted already ("last"): Django's own
            return super().page(number)
        try:
            number = int(number)
        except (TypeError, ValueError):
            raise PageNotAnInteger(self.error_messages["invalid_page"]) from None
        if number < 1:
            raise EmptyPage(self.error_messages["min_page"])
        bottom = (number - 1) * self.per_page
        coupons: UserCoupons = self.object_list  # type: ignore[assignment]
        rows = coupons[bottom:bottom + self.per_page]
        if not rows and number > 1:
            raise EmptyPage(self.error_messages["no_results"])
        self.__dict__["count"] = coupons.total or 0  # the cached_property's value
        return Page(rows, number, self)


class CouponPagination(PageNumberPagination):
    django_paginator_class = CountingPaginator
    page_size = 20
    page_size_query_param = "page_size"
    max_page_size = 100

    def get_paginated_response(self, data: Any) -> Response:
        assert self.page is not None
        return Response({
            "code": 0, "status": "ok", "count": self.page.paginator.count,
            "next": self.get_next_link(), "previous": self.get_previous_link(), "results": data,
        })

    def paginated_answer(self, data: Any) -> HttpResponseBase:
        """get_paginated_response(), its bytes written by drf_json() when DRF's renderer would write them as they
        come (the usual Accept: none, */*, application/json); an "application/json; indent=2" gets DRF's own."""
        response = self.get_paginated_response(data)
        assert self.request is not None
        if self.request.accepted_media_type == JSONRenderer.media_type:
            return HttpResponse(drf_json(response.data), content_type=JSONRenderer.media_type)
        return response

    def get_page_size(self, request: Any) -> int:
        raw = request.query_params.get(self.page_size_query_param)
        if raw is None:
            return self.page_size
        if not (raw.isascii() and raw.isdigit() and len(raw) <= 4) or not 1 <= int(raw) <= self.max_page_size:
            raise BadRequest(f"page_size is a whole number from 1 to {self.max_page_size}.")
        return int(raw)

    def get_page_number(self, request: Any, paginator: Any) -> Any:
        """A page is a whole number from 1 (or "last"): anything else is a 400 (a page past the last is DRF's
        404)."""
        raw = request.query_params.get(self.page_query_param)
        if raw is not None and raw not in self.last_page_strings and not (
                raw.isascii() and raw.isdigit() and raw.strip("0")):
            raise BadRequest("page is a whole number from 1.")
        return super().get_page_number(request, paginator)

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        """page and page_size as get_page_size() and the paginator read them."""
        limits = {self.page_query_param: {"minimum": 1},
                  self.page_size_query_param: {"minimum": 1, "maximum": self.max_page_size}}
        parameters = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            parameter["schema"] = {**parameter["schema"], **limits.get(parameter["name"], {})}
        return parameters

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

    class FilterSerializer(serializers.Serializer):
        status = serializers.ChoiceField(
            choices=CouponStatus.choices, required=False,
            error_messages={"invalid_choice": f"status is one of: {', '.join(CouponStatus.values)}."})

    @extend_schema(
        tags=["coupons"],
        summary="The shopper's coupons",
        description="The authenticated shopper's coupons, newest first, 20 a page (page_size up to 100), "
                    "optionally of one status. Coupons past their validity are expired (with their event) before "
                    "the list is read, so a shopper never sees a stale status.",
        parameters=[FilterSerializer],  # page and page_size: CouponPagination's
        responses={200: MyCouponSerializer(many=True)},
    )
    def get(self, request: Request) -> HttpResponseBase:
        status = request.query_params.get("status")  # as FilterSerializer reads the query's dict(): the last one
        if status is not None and status not in _STATUSES:
            status = validated(self.FilterSerializer, request.query_params.dict()).get("status")  # its 400
        user_id = request.user.user_id  # type: ignore[union-attr]
        # One query a page: the page, its count (a window) and whether any of the shopper's coupons is due to
        # lapse or expire. Lazy expiry first when one is (or when an empty page can't tell): what a shopper sees is
        # never stale.
        paginator = self.pagination_class()
        coupons = UserCoupons(user_id=user_id, status=status)
        page: list[tuple[Any, ...]] | None = paginator.paginate_queryset(
            coupons, request, view=self)  # type: ignore[arg-type]
        if coupons.due or not page:
            coupons_settle_due(user_id=user_id)
            paginator, coupons = self.pagination_class(), UserCoupons(user_id=user_id, status=status)
            page = paginator.paginate_queryset(coupons, request, view=self)  # type: ignore[arg-type]
        return paginator.paginated_answer(coupons_shown(page or []))


_STATUSES = frozenset(CouponStatus.values)


# --- a page's coupons as MyCouponSerializer shows them ----------------------------------------------------------
#
# Each coupon column's value through the serializer's own field for it; what the campaign's columns show (its rule,
# currency, tiers) through the serializer itself, once for each distinct set of those values. DRF's field machinery
# (get_attribute, source paths, a model object for each coupon and campaign) cost a page more than its query.
# tests/coupons/test_my_coupons.py holds the answer equal to the serializer's for coupons of every kind.

@functools.cache
def _coupon_out() -> MyCouponSerializer:
    return MyCouponSerializer()  # one for every answer: to_representation keeps no state, so threads share it


@functools.lru_cache(maxsize=16)
def _column_fields(zone: tzinfo | None) -> tuple[tuple[int, str, Callable[[Any], Any]], ...]:
    """(row index, name, the serializer's to_representation) of each coupon column but `discount`; a time's field
    given `zone`, its default_timezone() now, which it would look up again for each time it shows (a third of its
    cost)."""
    shown = []
    for i, name in enumerate(PAGE_COUPON_COLUMNS):
        field = _coupon_out().fields[name]
        if isinstance(field, serializers.DateTimeField):
            field = copy.copy(field)
            field.timezone = zone  # type: ignore[attr-defined]  # what enforce_timezone takes instead
        if name != "discount":
            shown.append((i, name, field.to_representation))
    return tuple(shown)


_zone_now = serializers.DateTimeField().default_timezone  # the zone a DateTimeField shows a time in, now
_DISCOUNT = PAGE_COUPON_COLUMNS.index("discount")
_CAMPAIGN_AT = len(PAGE_COUPON_COLUMNS)
_CAMPAIGN_CONVERTERS = [(i, field.from_db_value) for i, field in enumerate(
    Campaign._meta.get_field(name) for name in PAGE_CAMPAIGN_COLUMNS) if hasattr(field, "from_db_value")]
_campaigns_shown: dict[tuple[Any, ...], tuple[dict[str, Any], Campaign]] = {}


def _campaign_shown(values: tuple[Any, ...]) -> tuple[dict[str, Any], Campaign]:
    """What a coupon of a campaign with these PAGE_CAMPAIGN_COLUMNS values shows of it: the serializer's
    representation of such a coupon (its own fields still to fill), and the campaign (its currency: `discount`).
    A pure function of the values, so kept for each (a bounded number of them)."""
    shown = _campaigns_shown.get(values)
    if shown is None:
        row = list(values)
        for i, convert in _CAMPAIGN_CONVERTERS:
            row[i] = convert(row[i], None, connection)  # as the ORM builds it (the tiers' JSON parsed)
        # No id: a field the serializer read that the page did not is a loud DoesNotExist, not a query
        campaign = Campaign.from_db(DEFAULT_DB_ALIAS, ("id", *PAGE_CAMPAIGN_COLUMNS), [None, *row])
        if len(_campaigns_shown) >= 256:
            _campaigns_shown.clear()
        shown = _campaigns_shown[values] = (_coupon_out().to_representation(Coupon(campaign=campaign)), campaign)
    return shown


def coupons_shown(rows: list[tuple[Any, ...]]) -> list[dict[str, Any]]:
    """UserCoupons' rows as MyCouponSerializer's to_representation() shows their coupons."""
    fields = _column_fields(_zone_now())
    discount_field = _coupon_out().fields["discount"]
    shown = []
    for row in rows:
        common, campaign = _campaign_shown(row[_CAMPAIGN_AT:])
        coupon = common.copy()  # the serializer's keys in its order; the coupon's own values set below
        for i, name, to_representation in fields:
            value = row[i]
            coupon[name] = None if value is None else to_representation(value)
        discount = row[_DISCOUNT]
        coupon["discount"] = None if discount is None else discount_field.to_representation((discount, campaign))
        shown.append(coupon)
    return shown


def drf_json(body: dict[str, Any]) -> bytes:
    """The bytes DRF's JSONRenderer writes for `body` (compact, UTF-8, U+2028 and U+2029 escaped): orjson writes a
    body of strings, integers, booleans, None, lists and dicts exactly as json.dumps does with its settings."""
    answer = orjson.dumps(body)
    if b"\xe2\x80" in answer:
        answer = answer.replace(b"\xe2\x80\xa8", b"\\u2028").replace(b"\xe2\x80\xa9", b"\\u2029")
    return answer
