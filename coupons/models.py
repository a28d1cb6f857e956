"""Issued coupons and their append-only event log (the coupon row is the projection of its events)."""
from __future__ import annotations

from datetime import datetime, timedelta

from django.db import models
from django.db.models import Q
from django.db.models.functions import Now

from campaigns.models import Campaign


class CouponStatus(models.TextChoices):
    ACTIVE = "active", "Active"
    HELD = "held", "Held for an order"
    REDEEMED = "redeemed", "Redeemed"
    EXPIRED = "expired", "Expired"
    REVOKED = "revoked", "Revoked"


class Coupon(models.Model):
    # A claimed coupon's code (coupons.codes.new_codes), or the unique code of a codes campaign it was bound to.
    code = models.CharField(max_length=40, unique=True)
    # No index of its own: coupon_campaign_status (campaign, status) serves every lookup by campaign. Every index
    # of this table is written again when the sweep expires a coupon (a new row version: status is indexed).
    campaign = models.ForeignKey(Campaign, on_delete=models.PROTECT, related_name="coupons", db_index=False)
    user_id = models.CharField(max_length=64)
    # The claim (orders app) this coupon was issued for: one coupon per claim.
    claim_id = models.CharField(max_length=48, unique=True)
    status = models.CharField(max_length=10, choices=CouponStatus.choices, default=CouponStatus.ACTIVE)
    valid_from = models.DateTimeField()
    expires_at = models.DateTimeField(help_text="Last second of validity (inclusive).")
    # The order holding or having redeemed the coupon, the hold's end, and the discount it was given.
    order_id = models.CharField(max_length=64, null=True, blank=True)  # noqa: DJ001 (NULL = no order)
    hold_until = models.DateTimeField(null=True, blank=True)
    # 24 digits: an order sent as lines adds up to at most 100 x 1,000,000 x 999,999,999,999.99 (and a discount
    # is at most its order). Widening a numeric's precision rewrites nothing in PostgreSQL.
    order_amount = models.DecimalField(max_digits=24, decimal_places=2, null=True, blank=True)
    discount = models.DecimalField(max_digits=24, decimal_places=2, null=True, blank=True)
    # How the discount falls on the order's lines (coupons.services.shares_of): the cart's digest, each eligible
    # line's share, the order's payable after this coupon, whether the order came with lines. NULL with order_id.
    shares = models.JSONField(null=True, blank=True)
    redeemed_at = models.DateTimeField(null=True, blank=True)
    version = models.PositiveIntegerField(default=1, help_text="1 + the number of state changes.")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["user_id", "status"], name="coupon_user_status"),
            models.Index(fields=["campaign", "status"], name="coupon_campaign_status"),
            # Keyset order of the expiry sweep and of lapsing holds (coupons.compensation).
            models.Index(fields=["expires_at", "id"], condition=Q(status="active"), name="coupon_active_expiry"),
            models.Index(fields=["hold_until", "id"], condition=Q(status="held"), name="coupon_held_until"),
        ]
        constraints = [
            models.CheckConstraint(condition=Q(valid_from__lte=models.F("expires_at")), name="coupon_valid_window"),
            models.CheckConstraint(
                condition=Q(status__in=["held", "redeemed"], order_id__isnull=False)
                | (~Q(status__in=["held", "redeemed"]) & Q(order_id__isnull=True)),
                name="coupon_order_only_when_held_or_redeemed",
            ),
            models.CheckConstraint(
                condition=Q(status="held", hold_until__isnull=False) | (~Q(status="held") & Q(hold_until__isnull=True)),
                name="coupon_hold_until_only_when_held",
            ),
        ]

    def __str__(self) -> str:
        return self.code

    def is_expired_at(self, now: datetime) -> bool:
        """Return whether the coupon's validity is over at `now` (expires_at is inclusive to the second)."""
        return now >= self.expires_at.replace(microsecond=0) + timedelta(seconds=1)

    def hold_lapsed_at(self, now: datetime) -> bool:
        return self.status == CouponStatus.HELD and self.hold_until is not None and now >= self.hold_until

class CouponEventType(models.TextChoices):
    ISSUED = "issued", "Issued"
    RESERVED = "reserved", "Reserved (held for an order)"
    REDEEMED = "redeemed", "Redeemed"
    RELEASED = "released", "Released"
    HOLD_LAPSED = "hold_lapsed", "Hold lapsed"
    EXPIRED = "expired", "Expired"
    REVOKED = "revoked", "Revoked"
    RESTOCKED = "restocked", "Stock returned"
    EXTENDED = "extended", "Validity extended"
    COMPENSATED = "compensated", "Compensated"


class CouponEvent(models.Model):
    """One change of a coupon's state. Append-only: a database trigger refuses UPDATE and DELETE."""

    # No index of its own: event_coupon_time (coupon, created_at) serves every lookup by coupon.
    coupon = models.ForeignKey(Coupon, on_delete=models.PROTECT, related_name="events", db_index=False)
    # The coupon's campaign, copied from its row by every writer in the same statement (the event log is read
    # by campaign). No foreign key constraint of its own: the coupon's foreign key already protects the campaign
    # (a campaign with coupons cannot be deleted, a coupon with events neither), and a check at every insert cost
    # a sixth of an expiry (docs/benchmarks.md). verify_campaign counts events whose campaign is not their coupon's.
    campaign = models.ForeignKey(Campaign, on_delete=models.PROTECT, related_name="coupon_events",
                                 db_constraint=False)
    type = models.CharField(max_length=12, choices=CouponEventType.choices)
    data = models.JSONField(default=dict, blank=True)
    source = models.CharField(max_length=20, help_text="Who caused it: drain, api, admin, compensation ...")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-id"]  # the order things happened (written under the coupon's row lock)
        indexes = [models.Index(fields=["coupon", "created_at"], name="event_coupon_time")]

    def __str__(self) -> str:
        return f"{self.type} {self.coupon_id} ({self.source})"


class IdempotencyRecord(models.Model):
    """One Idempotency-Key of a shopper on one endpoint (IETF draft): the request's fingerprint and the
    answer given, replayed for a repeat; 'in flight' while the first request runs."""

    user_id = models.CharField(max_length=64)
    endpoint = models.CharField(max_length=120, help_text="Method and concrete path, e.g. POST .../redeem")
    key = models.CharField(max_length=255)
    fingerprint = models.CharField(max_length=64)
    in_flight = models.BooleanField(default=True)
    response_status = models.PositiveSmallIntegerField(null=True, blank=True)
    # The answer's JSON text as sent (jsonb would reorder its keys: a replay must be the same bytes).
    response_body = models.TextField(null=True, blank=True)  # noqa: DJ001 (NULL while in flight)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user_id", "endpoint", "key"], name="idempotency_user_endpoint_key"),
        ]
        indexes = [models.Index(fields=["created_at"], name="idempotency_created")]

    def __str__(self) -> str:
        return f"{self.user_id} {self.endpoint} {self.key}"


class SweepCursor(models.Model):
    """Where a walk over all coupons (the drift check) stopped, so the next run goes on from there."""

    name = models.CharField(max_length=40, primary_key=True)
    position = models.BigIntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.name} at {self.position}"


class CodeBatchSource(models.TextChoices):
    GENERATED = "generated", "Generated"
    IMPORTED = "imported", "Imported"


class CodeBatchState(models.TextChoices):
    PENDING = "pending", "Pending"
    RUNNING = "running", "Running"
    DONE = "done", "Done"
    FAILED = "failed", "Failed"


class CodeBatch(models.Model):
    """One run of codes_generate or codes_import for a codes campaign: its progress and its outcome."""

    campaign = models.ForeignKey(Campaign, on_delete=models.PROTECT, related_name="code_batches")
    source = models.CharField(max_length=10, choices=CodeBatchSource.choices)
    prefix = models.CharField(max_length=16, blank=True)
    requested = models.PositiveIntegerField(help_text="Codes asked for (generated) or lines read (imported).")
    inserted = models.PositiveIntegerField(default=0)
    duplicates = models.PositiveIntegerField(default=0, help_text="Imported codes that already existed.")
    state = models.CharField(max_length=8, choices=CodeBatchState.choices, default=CodeBatchState.PENDING)
    error = models.TextField(blank=True)
    task_id = models.CharField(max_length=64, blank=True)
    created_by = models.CharField(max_length=150)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name_plural = "code batches"

    def __str__(self) -> str:
        return f"batch {self.pk} of #{self.campaign_id} ({self.source})"


class UniqueCode(models.Model):
    """A single-use code of a codes campaign; the first shopper to use it holds it (its coupon is issued then)."""

    # Rows come in bulk (COPY, coupons.code_batches), so each per-row cost counts (bench/codes_bench.py, backend
    # CPU per row): the code is compared bytewise (collation "C": codes are ASCII; -1.5 us a row on the unique
    # index), created_at is the database's (nothing to parse), and campaign and batch carry no foreign-key
    # constraint in PostgreSQL (its check cost ~2.5 us a row each, a third of the insert). Their integrity: the
    # only writers (generate, import) take both from a batch row they hold, and batches and campaigns are never
    # deleted (PROTECT, enforced by Django; no delete in the admin).
    code = models.CharField(max_length=40, unique=True, db_collation="C")
    campaign = models.ForeignKey(Campaign, on_delete=models.PROTECT, related_name="unique_codes", db_index=False,
                                 db_constraint=False)
    batch = models.ForeignKey(CodeBatch, on_delete=models.PROTECT, related_name="codes", db_index=False,
                              db_constraint=False)
    holder_id = models.CharField(max_length=64, null=True, blank=True)  # noqa: DJ001 (NULL = not used yet)
    coupon = models.OneToOneField(Coupon, on_delete=models.PROTECT, null=True, blank=True, related_name="unique_code")
    held_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        indexes = [
            models.Index(fields=["campaign", "id"], name="unique_code_campaign"),
            models.Index(fields=["batch", "id"], name="unique_code_batch"),
        ]
        constraints = [
            models.CheckConstraint(
                condition=(Q(holder_id__isnull=True) & Q(coupon__isnull=True) & Q(held_at__isnull=True))
                | (Q(holder_id__isnull=False) & Q(coupon__isnull=False) & Q(held_at__isnull=False)),
                name="unique_code_held_with_coupon",
            ),
        ]

    def __str__(self) -> str:
        return self.code
