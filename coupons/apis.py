"""Storefront API of coupons: the shopper's own coupons."""
from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.pagination import PageNumberPagination
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from config.api import BadRequest, ShopperTokenAuthentication

from .models import Coupon, CouponStatus
from .selectors import coupons_of_user


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
        coupons = coupons_of_user(user_id=request.user.user_id, status=status)  # type: ignore[union-attr]
        paginator = self.pagination_class()
        page = paginator.paginate_queryset(coupons, request, view=self)
        return paginator.get_paginated_response(CouponOutputSerializer(page, many=True).data)
