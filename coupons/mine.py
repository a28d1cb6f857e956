"""GET /api/v1/me/coupons: the shopper's own coupons, one query a page (docs/api.md)."""
from __future__ import annotations

from typing import Any

from django.core.paginator import EmptyPage, Page, PageNotAnInteger, Paginator
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.pagination import PageNumberPagination
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from campaigns.rule_fields import TiersField
from core.api import ShopperTokenAuthentication
from core.errors import BadRequest

from .apis import CouponOutputSerializer
from .models import Coupon, CouponStatus
from .selectors import UserCoupons
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
    def get(self, request: Request) -> Response:
        filters = self.FilterSerializer(data=request.query_params.dict())  # a plain dict: "?status=" is refused
        filters.is_valid(raise_exception=True)
        status = filters.validated_data.get("status")
        user_id = request.user.user_id  # type: ignore[union-attr]
        # One query a page: the page, its count (a window) and whether any of the shopper's coupons is due to
        # lapse or expire. Lazy expiry first when one is (or when an empty page can't tell): what a shopper sees is
        # never stale.
        paginator = self.pagination_class()
        coupons = UserCoupons(user_id=user_id, status=status)
        page: list[Coupon] | None = paginator.paginate_queryset(coupons, request, view=self)  # type: ignore[arg-type]
        if coupons.due or not page:
            coupons_settle_due(user_id=user_id)
            paginator, coupons = self.pagination_class(), UserCoupons(user_id=user_id, status=status)
            page = paginator.paginate_queryset(coupons, request, view=self)  # type: ignore[arg-type]
        return paginator.get_paginated_response([_COUPON_OUT.to_representation(c) for c in page or []])


# One serializer for every answer: DRF builds a ModelSerializer's fields on each new instance, which cost more than
# the page's query. Its fields only read the coupon (to_representation keeps no state), so threads share it.
_COUPON_OUT = MyCouponSerializer()


