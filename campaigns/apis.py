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

from .models import Campaign, CampaignState, DiscountType
from .money import money_text
from .rule_fields import TiersField
from .selectors import remaining_of, visible_campaigns


class AmountInCurrencyField(serializers.DecimalField):
    """An amount of money in its currency's decimals, as the uses answer it (JPY "999", CNY "350.00"): the
    campaign's currency is at `campaign` (the attribute path of the campaign from the serialized object, "" for
    a campaign itself). `rule`: the campaign's discount value, a percentage for a percent discount."""

    def __init__(self, *, campaign: str = "", rule: bool = False, **kwargs: Any) -> None:
        self.campaign_path = [name for name in campaign.split(".") if name]
        self.rule = rule
        super().__init__(max_digits=24, decimal_places=2, **kwargs)

    def get_attribute(self, instance: Any) -> Any:
        value = super().get_attribute(instance)
        if value is None:
            return None
        campaign = instance
        for name in self.campaign_path:
            campaign = getattr(campaign, name)
        return value, campaign

    def to_representation(self, value: Any) -> Any:
        amount, campaign = value
        if self.rule and campaign.discount_type == DiscountType.PERCENT:
            return super().to_representation(amount)  # a percentage, not an amount
        return money_text(amount, campaign.currency)


class CampaignOutputSerializer(serializers.ModelSerializer):
    state = serializers.ChoiceField(choices=CampaignState.choices)
    remaining = serializers.IntegerField(allow_null=True, help_text="Live stock from Redis; null if unknown.")
    discount_value = AmountInCurrencyField(rule=True, help_text="An amount off (fixed), or a percentage (percent).")
    max_discount = AmountInCurrencyField(allow_null=True)
    min_spend = AmountInCurrencyField()
    tiers = TiersField()
    buy_quantity = serializers.IntegerField(help_text="Buy N get M's N; 0 for any other rule.")
    get_quantity = serializers.IntegerField(help_text="Buy N get M's M (free items); 0 for any other rule.")

    class Meta:
        model = Campaign
        fields = [
            "id", "name", "state", "starts_at", "ends_at", "total_stock", "remaining", "per_user_limit",
            "discount_type", "discount_value", "max_discount", "min_spend", "currency", "valid_until",
            "valid_days", "audience", "kind", "tiers", "buy_quantity", "get_quantity",
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
