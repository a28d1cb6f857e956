"""Claims: the asynchronous orders of a campaign, persisted from the Redis ledger."""
from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _
from django.utils.translation import pgettext_lazy

from campaigns.models import Campaign
from storefronts.models import Storefront


class ClaimStatus(models.TextChoices):
    PENDING = "pending", _("Pending (in the ledger)")
    ISSUED = "issued", pgettext_lazy("claim status", "Issued")
    CANCELLED = "cancelled", _("Cancelled")
    FAILED = "failed", _("Failed")


class Claim(models.Model):
    # "<campaign id>-<ledger stream entry id>", e.g. "42-1764470000000-3": unique, and it says where
    # the claim waits in Redis while it is still pending.
    claim_id = models.CharField(max_length=48, unique=True, verbose_name=_("claim id"))
    # No index of its own: claim_campaign_status and claim_campaign_user both begin with the campaign.
    campaign = models.ForeignKey(Campaign, on_delete=models.PROTECT, related_name="claims", db_index=False,
        verbose_name=_("campaign"))
    user_id = models.CharField(max_length=64, verbose_name=_("user id"))
    status = models.CharField(max_length=10, choices=ClaimStatus.choices, default=ClaimStatus.PENDING,
        verbose_name=_("status"))
    # The SHA-256 (32 hex) of the shopper's Idempotency-Key, never the key: a Redis rebuilt from PostgreSQL
    # stores the claim's answer under it again, so a repeat still replays 'claimed'.
    key_digest = models.CharField(max_length=32, blank=True, default="", db_default="",
        verbose_name=_("key digest"))  # old workers insert without it
    claimed_at = models.DateTimeField(help_text=_("When Redis accepted the claim."), verbose_name=_("claimed at"))
    # The storefront whose key signed the shopper's token (the ledger entry's field s, claim.lua); none for a
    # token of the default key and for a grant. PROTECT: the report names the storefronts of its claims.
    storefront = models.ForeignKey(Storefront, on_delete=models.PROTECT, null=True, blank=True, db_index=False,
        related_name="claims", verbose_name=_("storefront"),
        help_text=_("Whose key signed the shopper's token; empty for the default key and for grants."))
    created_at = models.DateTimeField(auto_now_add=True, help_text=_("When the drain persisted it."),
        verbose_name=_("created at"))
    updated_at = models.DateTimeField(auto_now=True, verbose_name=_("updated at"))

    class Meta:
        verbose_name = _("claim")
        verbose_name_plural = _("claims")
        ordering = ["-claimed_at", "-id"]
        indexes = [
            models.Index(fields=["campaign", "status"], name="claim_campaign_status"),
            models.Index(fields=["campaign", "user_id"], name="claim_campaign_user"),
            # a storefront's claims (its PROTECT check); the default key's claims, most of them, are not indexed
            models.Index(fields=["storefront"], name="claim_storefront", condition=models.Q(storefront__isnull=False)),
        ]

    def __str__(self) -> str:
        return self.claim_id


class Reconciliation(models.Model):
    """One comparison of a campaign's Redis state with PostgreSQL (docs/design.md, The accounting identity),
    and what was repaired."""

    campaign = models.ForeignKey(Campaign, on_delete=models.PROTECT, related_name="reconciliations",
        verbose_name=_("campaign"))
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))
    source = models.CharField(max_length=20, help_text=_("beat, command or admin"), verbose_name=_("source"))
    total_stock = models.PositiveIntegerField(verbose_name=_("total stock"))
    remaining = models.IntegerField(null=True, blank=True, help_text=_("Redis stock; empty when Redis had none"),
        verbose_name=_("remaining"))
    claims = models.PositiveIntegerField(help_text=_("Claims persisted or still only in the ledger"),
        verbose_name=_("claims"))
    restocked = models.PositiveIntegerField(verbose_name=_("restocked"))
    drift = models.IntegerField(null=True, blank=True, help_text=_("total - (remaining + claims - restocked)"),
        verbose_name=_("drift"))
    users_drift = models.PositiveIntegerField(default=0, help_text=_("Shoppers whose Redis count was wrong"),
        verbose_name=_("users drift"))
    problems = models.JSONField(default=list, blank=True, verbose_name=_("problems"))
    repairs = models.JSONField(default=list, blank=True, verbose_name=_("repairs"))
    balanced = models.BooleanField(help_text=_("After the repairs"), verbose_name=_("balanced"))

    class Meta:
        verbose_name = _("reconciliation")
        verbose_name_plural = _("reconciliations")
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["campaign", "-created_at"], name="reconciliation_latest")]

    def __str__(self) -> str:
        return f"#{self.campaign_id} {'balanced' if self.balanced else 'DRIFT'} at {self.created_at:%Y-%m-%d %H:%M}"


class ParkedState(models.TextChoices):
    PARKED = "parked", _("Parked (not persisted)")
    RETRIED = "retried", _("Retried and persisted")
    DISCARDED = "discarded", _("Discarded")


class ParkedLedgerEntry(models.Model):
    """A ledger entry the drain could not persist (a malformed user id, a time out of range, ...): kept here with
    its raw fields and the error, and acknowledged in the ledger, so that it holds back no other claim
    (orders/parking.py). One row per entry, however often it is tried: a retry that fails again counts an
    attempt and leaves it parked; each retry and discard is in `history` and the admin's log."""

    campaign = models.ForeignKey(Campaign, on_delete=models.PROTECT, related_name="parked_entries", db_index=False,
        verbose_name=_("campaign"))
    entry_id = models.CharField(max_length=48, help_text=_("The ledger stream entry id"), verbose_name=_("entry id"))
    fields = models.JSONField(help_text=_("The entry's raw fields as Redis held them (bytes not UTF-8 escaped)"),
        verbose_name=_("fields"))
    error = models.TextField(help_text=_("Why it could not be persisted (the last attempt's error)"),
        verbose_name=_("error"))
    state = models.CharField(max_length=10, choices=ParkedState.choices, default=ParkedState.PARKED,
        verbose_name=_("state"))
    attempts = models.PositiveIntegerField(default=1, help_text=_("Times it was tried and failed"),
        verbose_name=_("attempts"))
    history = models.JSONField(default=list, blank=True, help_text=_("Retries and discards: when, by whom, outcome"),
        verbose_name=_("history"))
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))
    updated_at = models.DateTimeField(auto_now=True, verbose_name=_("updated at"))

    class Meta:
        verbose_name = _("parked ledger entry")
        verbose_name_plural = _("parked ledger entries")
        ordering = ["-created_at", "-id"]
        constraints = [models.UniqueConstraint(fields=["campaign", "entry_id"], name="parked_entry_once")]

    def __str__(self) -> str:
        return f"{self.campaign_id}-{self.entry_id} ({self.state})"

    @property
    def claim_id(self) -> str:
        return f"{self.campaign_id}-{self.entry_id}"
