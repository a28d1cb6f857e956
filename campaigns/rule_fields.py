"""What a storefront reads of a campaign's richer rule (issue 38; docs/api.md, Richer rules) in the public answers
(GET /campaigns, GET /campaigns/{id}, GET /me/coupons): its tiers as objects, buy N get M's quantities. Free
shipping's cap is the answers' `max_discount`."""
from __future__ import annotations

from decimal import Decimal
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from .money import money_text
from .rich_rules import tiers_of

TIER_SCHEMA = {
    "type": "array",
    "description": "A tiers rule's steps, thresholds going up (the first is min_spend); [] for any other rule.",
    "items": {
        "type": "object",
        "required": ["threshold", "off", "percent"],
        "properties": {
            "threshold": {"type": "string", "description": "decimal string: the eligible amount that reaches it"},
            "off": {"type": "string", "description": "decimal string: an amount off, or a percentage (percent)"},
            "percent": {"type": "boolean"},
        },
    },
}


def tiers_shown(campaign: Any) -> list[dict[str, Any]]:
    """Campaign.tiers as the answers show them: amounts in the currency's decimals, a percentage with two."""
    if not campaign.tiers:
        return []
    currency = campaign.currency
    return [{"threshold": money_text(tier.threshold, currency),
             "off": str(tier.off.quantize(Decimal("0.01"))) if tier.percent else money_text(tier.off, currency),
             "percent": tier.percent} for tier in tiers_of(campaign.tiers)]


@extend_schema_field(TIER_SCHEMA)
class TiersField(serializers.Field):
    """A campaign's tiers (tiers_shown); `campaign`: the attribute path of the campaign from the serialized object
    ("" for a campaign itself)."""

    def __init__(self, *, campaign: str = "", **kwargs: Any) -> None:
        self.campaign_path = [name for name in campaign.split(".") if name]
        super().__init__(source="*", read_only=True, **kwargs)

    def to_representation(self, value: Any) -> list[dict[str, Any]]:
        for name in self.campaign_path:
            value = getattr(value, name)
        return tiers_shown(value)
