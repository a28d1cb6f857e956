"""Helpers of the unique codes' tests: a codes campaign, an import, the codes of a batch, codes inserted."""
from __future__ import annotations

from typing import Any

from campaigns.models import Campaign, CampaignKind
from coupons.code_batches import code_batch_import
from coupons.models import CodeBatch, UniqueCode
from coupons.unique_codes import unique_code

from ..factories import CampaignFactory


def codes_campaign(**fields: Any) -> Campaign:
    """A published codes campaign without a shared code (unique codes)."""
    return CampaignFactory(kind=CampaignKind.CODES, total_stock=1_000_000, **fields)


def import_codes(campaign: Campaign, codes: list[str]) -> CodeBatch:
    return code_batch_import(campaign=campaign, lines=[f"{c}\n" for c in codes], created_by="test")


def batch_codes(batch: CodeBatch) -> list[str]:
    return list(UniqueCode.objects.filter(batch=batch).values_list("code", flat=True))


def codes_of(campaign: Campaign, *serials: int, prefix: str = "SPRING") -> list[str]:
    """Unique codes of the campaign, inserted as a generated batch would insert them."""
    batch = CodeBatch.objects.create(campaign=campaign, source="generated", prefix=prefix, requested=len(serials),
                                     inserted=len(serials), state="done", created_by="test")
    codes = [unique_code(prefix, serial) for serial in serials]
    UniqueCode.objects.bulk_create([UniqueCode(code=code, campaign=campaign, batch=batch) for code in codes])
    return codes
