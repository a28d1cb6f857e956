"""Storefront API of campaigns: what is live or coming, with live remaining stock."""
from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api import id_parameter
from core.errors import NotFound
from core.http import parse_id

from .models import Campaign, CampaignState
from .selectors import remaining_of, visible_campaigns


class CampaignOutputSerializer(serializers.ModelSerializer):
    state = serializers.ChoiceField(choices=CampaignState.choices)
    remaining = serializers.IntegerField(allow_null=True, help_text="Live stock from Redis; null if unknown.")

    class Meta:
        model = Campaign
        fields = [
            "id", "name", "state", "starts_at", "ends_at", "total_stock", "remaining", "per_user_limit",
            "discount_type", "discount_value", "max_discount", "min_spend", "currency", "valid_until",
            "valid_days", "audience", "kind",
        ]


def _serialize(campaigns: list[Campaign]) -> list[dict[str, Any]]:
    remaining = remaining_of(campaigns)
    for campaign in campaigns:
        campaign.remaining = remaining[campaign.pk]  # type: ignore[attr-defined]
    return CampaignOutputSerializer(campaigns, many=True).data  # type: ignore[return-value]


class CampaignListApi(APIView):
    """GET /api/v1/campaigns: live and upcoming campaigns (public)."""

    @extend_schema(operation_id="campaign_list", tags=["campaigns"], summary="Live and upcoming campaigns",
                   description="Published campaigns that are live or start later, soonest first (at most 100), "
                               "each with its live `remaining` stock read from Redis (null when Redis does not "
                               "know it). Public: no token needed.",
                   responses={200: inline_serializer("CampaignList", {
        "code": serializers.IntegerField(), "status": serializers.CharField(),
        "results": CampaignOutputSerializer(many=True)})})
    def get(self, request: Request) -> Response:
        campaigns = list(visible_campaigns()[:100])
        return Response({"code": 0, "status": "ok", "results": _serialize(campaigns)})


class CampaignDetailApi(APIView):
    """GET /api/v1/campaigns/{id}: one published campaign with its live remaining stock (public)."""

    @extend_schema(operation_id="campaign_detail", tags=["campaigns"], summary="One campaign",
                   description="One published campaign with its live `remaining` stock, its window, limits and "
                               "coupon rule. Public: no token needed. 404 for an unknown or unpublished campaign.",
                   parameters=[id_parameter("campaign_id")],
                   responses={200: CampaignOutputSerializer})
    def get(self, request: Request, campaign_id: str) -> Response:
        campaign = Campaign.objects.published().filter(pk=parse_id(campaign_id)).first()
        if campaign is None:
            raise NotFound("No such campaign.")
        return Response({"code": 0, "status": "ok", **_serialize([campaign])[0]})
