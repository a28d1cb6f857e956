"""Claims: the asynchronous orders of a campaign, persisted from the Redis ledger."""
from __future__ import annotations

from django.db import models

from campaigns.models import Campaign


class ClaimStatus(models.TextChoices):
    PENDING = "pending", "Pending (in the ledger)"
    ISSUED = "issued", "Issued"
    CANCELLED = "cancelled", "Cancelled"
    FAILED = "failed", "Failed"


class Claim(models.Model):
    # "<campaign id>-<ledger stream entry id>", e.g. "42-1764470000000-3": unique, and it says where
    # the claim waits in Redis while it is still pending.
    claim_id = models.CharField(max_length=48, unique=True)
    campaign = models.ForeignKey(Campaign, on_delete=models.PROTECT, related_name="claims")
    user_id = models.CharField(max_length=64)
    status = models.CharField(max_length=10, choices=ClaimStatus.choices, default=ClaimStatus.PENDING)
    claimed_at = models.DateTimeField(help_text="When Redis accepted the claim.")
    created_at = models.DateTimeField(auto_now_add=True, help_text="When the drain persisted it.")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-claimed_at", "-id"]
        indexes = [
            models.Index(fields=["campaign", "status"], name="claim_campaign_status"),
            models.Index(fields=["campaign", "user_id"], name="claim_campaign_user"),
        ]

    def __str__(self) -> str:
        return self.claim_id
