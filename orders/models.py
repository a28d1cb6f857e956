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
    # No index of its own: claim_campaign_status and claim_campaign_user both begin with the campaign.
    campaign = models.ForeignKey(Campaign, on_delete=models.PROTECT, related_name="claims", db_index=False)
    user_id = models.CharField(max_length=64)
    status = models.CharField(max_length=10, choices=ClaimStatus.choices, default=ClaimStatus.PENDING)
    # The SHA-256 (32 hex) of the shopper's Idempotency-Key, never the key: a Redis rebuilt from PostgreSQL
    # stores the claim's answer under it again, so a repeat still replays 'claimed'.
    key_digest = models.CharField(max_length=32, blank=True, default="", db_default="")  # old workers insert without it
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


class Reconciliation(models.Model):
    """One comparison of a campaign's Redis state with PostgreSQL (DESIGN.md's balance), and what was repaired."""

    campaign = models.ForeignKey(Campaign, on_delete=models.PROTECT, related_name="reconciliations")
    created_at = models.DateTimeField(auto_now_add=True)
    source = models.CharField(max_length=20, help_text="beat, command or admin")
    total_stock = models.PositiveIntegerField()
    remaining = models.IntegerField(null=True, blank=True, help_text="Redis stock; empty when Redis had none")
    claims = models.PositiveIntegerField(help_text="Claims persisted or still only in the ledger")
    restocked = models.PositiveIntegerField()
    drift = models.IntegerField(null=True, blank=True, help_text="total - (remaining + claims - restocked)")
    users_drift = models.PositiveIntegerField(default=0, help_text="Shoppers whose Redis count was wrong")
    problems = models.JSONField(default=list, blank=True)
    repairs = models.JSONField(default=list, blank=True)
    balanced = models.BooleanField(help_text="After the repairs")

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["campaign", "-created_at"], name="reconciliation_latest")]

    def __str__(self) -> str:
        return f"#{self.campaign_id} {'balanced' if self.balanced else 'DRIFT'} at {self.created_at:%Y-%m-%d %H:%M}"


class ParkedState(models.TextChoices):
    PARKED = "parked", "Parked (not persisted)"
    RETRIED = "retried", "Retried and persisted"
    DISCARDED = "discarded", "Discarded"


class ParkedLedgerEntry(models.Model):
    """A ledger entry the drain could not persist (a malformed user id, a time out of range, ...): kept here with
    its raw fields and the error, and acknowledged in the ledger, so that it holds back no other claim
    (orders/parking.py). One row per entry, however often it is tried: a retry that fails again counts an
    attempt and leaves it parked; each retry and discard is in `history` and the admin's log."""

    campaign = models.ForeignKey(Campaign, on_delete=models.PROTECT, related_name="parked_entries", db_index=False)
    entry_id = models.CharField(max_length=48, help_text="The ledger stream entry id")
    fields = models.JSONField(help_text="The entry's raw fields as Redis held them (bytes not UTF-8 escaped)")
    error = models.TextField(help_text="Why it could not be persisted (the last attempt's error)")
    state = models.CharField(max_length=10, choices=ParkedState.choices, default=ParkedState.PARKED)
    attempts = models.PositiveIntegerField(default=1, help_text="Times it was tried and failed")
    history = models.JSONField(default=list, blank=True, help_text="Retries and discards: when, by whom, outcome")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [models.UniqueConstraint(fields=["campaign", "entry_id"], name="parked_entry_once")]

    def __str__(self) -> str:
        return f"{self.campaign_id}-{self.entry_id} ({self.state})"

    @property
    def claim_id(self) -> str:
        return f"{self.campaign_id}-{self.entry_id}"
