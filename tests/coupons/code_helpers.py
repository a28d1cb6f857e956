"""Helpers of the unique codes' tests: a codes campaign, an import, the codes of a batch."""
from __future__ import annotations

from typing import Any

from campaigns.models import Campaign, CampaignKind
from coupons.code_batches import code_batch_import
from coupons.models import CodeBatch, UniqueCode

from ..factories import CampaignFactory


def codes_campaign(**fields: Any) -> Campaign:
    """A published codes campaign without a shared code (unique codes)."""
    return CampaignFactory(kind=CampaignKind.CODES, total_stock=1_000_000, **fields)


def import_codes(campaign: Campaign, codes: list[str]) -> CodeBatch:
    return code_batch_import(campaign=campaign, lines=[f"{c}\n" for c in codes], created_by="test")


def batch_codes(batch: CodeBatch) -> list[str]:
    return list(UniqueCode.objects.filter(batch=batch).values_list("code", flat=True))
