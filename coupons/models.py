"""Issued coupons and their append-only event log (the coupon row is the projection of its events)."""
from __future__ import annotations

from datetime import datetime, timedelta

from django.db import models
from django.db.models import Q
from django.db.models.functions import Now
from django.utils.translation import gettext_lazy as _
from django.utils.translation import pgettext_lazy

from campaigns.models import Campaign


class CouponStatus(models.TextChoices):
    ACTIVE = "active", pgettext_lazy("coupon status", "Active")
    HELD = "held", _("Held for an order")
    REDEEMED = "redeemed", pgettext_lazy("coupon status", "Redeemed")
    EXPIRED = "expired", pgettext_lazy("coupon status", "Expired")
    REVOKED = "revoked", pgettext_lazy("coupon status", "Revoked")


class Coupon(models.Model):
    # A claimed coupon's code (coupons.codes.new_codes), or the unique code of a codes campaign it was bound to.
    code = models.CharField(max_length=40, unique=True, verbose_name=_("code"))
    # No index of its own: coupon_campaign_status (campaign, status) serves every lookup by campaign. Every index
    # of this table is written again when the sweep expires a coupon (a new row version: status is indexed).
    campaign = models.ForeignKey(Campaign, on_delete=models.PROTECT, related_name="coupons", db_index=False,
        verbose_name=_("campaign"))
    user_id = models.CharField(max_length=64, verbose_name=_("user id"))
    # The claim (orders app) this coupon was issued for: one coupon per claim.
    claim_id = models.CharField(max_length=48, unique=True, verbose_name=_("claim id"))
    status = models.CharField(max_length=10, choices=CouponStatus.choices, default=CouponStatus.ACTIVE,
        verbose_name=_("status"))
    valid_from = models.DateTimeField(verbose_name=_("valid from"))
    expires_at = models.DateTimeField(help_text=_("Last second of validity (inclusive)."), verbose_name=_("expires at"))
    # The order holding or having redeemed the coupon, the hold's end, and the discount it was given.
    order_id = models.CharField(max_length=64, null=True, blank=True, verbose_name=_("order id"))  # noqa: DJ001 (NULL = no order)
    hold_until = models.DateTimeField(null=True, blank=True, verbose_name=_("hold until"))
    # 24 digits: an order sent as lines adds up to at most 100 x 1,000,000 x 999,999,999,999.99 (and a discount
    # is at most its order). Widening a numeric's precision rewrites nothing in PostgreSQL.
    order_amount = models.DecimalField(max_digits=24, decimal_places=2, null=True, blank=True,
        verbose_name=_("order amount"))
    discount = models.DecimalField(max_digits=24, decimal_places=2, null=True, blank=True, verbose_name=_("discount"))
    # How the discount falls on the order's lines (coupons.services.shares_of): the cart's digest, each eligible
    # line's share, the order's payable after this coupon, whether the order came with lines. NULL with order_id.
    shares = models.JSONField(null=True, blank=True, verbose_name=_("shares"))
    redeemed_at = models.DateTimeField(null=True, blank=True, verbose_name=_("redeemed at"))
    version = models.PositiveIntegerField(default=1, help_text=_("1 + the number of state changes."),
        verbose_name=_("version"))
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))
    updated_at = models.DateTimeField(auto_now=True, verbose_name=_("updated at"))

    class Meta:
        verbose_name = _("coupon")
        verbose_name_plural = _("coupons")
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
    ISSUED = "issued", pgettext_lazy("coupon event", "Issued")
    RESERVED = "reserved", _("Reserved (held for an order)")
    REDEEMED = "redeemed", pgettext_lazy("coupon event", "Redeemed")
    RELEASED = "released", pgettext_lazy("coupon event", "Released")
    HOLD_LAPSED = "hold_lapsed", _("Hold lapsed")
    EXPIRED = "expired", pgettext_lazy("coupon event", "Expired")
    REVOKED = "revoked", pgettext_lazy("coupon event", "Revoked")
    RESTOCKED = "restocked", _("Stock returned")
    EXTENDED = "extended", _("Validity extended")
    COMPENSATED = "compensated", _("Compensated")


class CouponEvent(models.Model):
    """One change of a coupon's state. Append-only: a database trigger refuses UPDATE and DELETE."""

    # No index of its own: event_coupon_time (coupon, created_at) serves every lookup by coupon.
    coupon = models.ForeignKey(Coupon, on_delete=models.PROTECT, related_name="events", db_index=False,
        verbose_name=_("coupon"))
    # The coupon's campaign, copied from its row by every writer in the same statement (the event log is read
    # by campaign). No foreign key constraint of its own: the coupon's foreign key already protects the campaign
    # (a campaign with coupons cannot be deleted, a coupon with events neither), and a check at every insert cost
    # a sixth of an expiry (docs/benchmarks.md). verify_campaign counts events whose campaign is not their coupon's.
    campaign = models.ForeignKey(Campaign, on_delete=models.PROTECT, related_name="coupon_events",
                                 db_constraint=False, verbose_name=_("campaign"))
    type = models.CharField(max_length=12, choices=CouponEventType.choices, verbose_name=_("type"))
    data = models.JSONField(default=dict, blank=True, verbose_name=_("data"))
    source = models.CharField(max_length=20, help_text=_("Who caused it: drain, api, admin, compensation ..."),
        verbose_name=_("source"))
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))

    class Meta:
        verbose_name = _("coupon event")
        verbose_name_plural = _("coupon events")
        ordering = ["-id"]  # the order things happened (written under the coupon's row lock)
        indexes = [models.Index(fields=["coupon", "created_at"], name="event_coupon_time")]

    def __str__(self) -> str:
        return f"{self.type} {self.coupon_id} ({self.source})"


class IdempotencyRecord(models.Model):
    """One Idempotency-Key of a shopper on one endpoint (IETF draft): the request's fingerprint and the
    answer given, replayed for a repeat; 'in flight' while the first request runs."""

    user_id = models.CharField(max_length=64, verbose_name=_("user id"))
    endpoint = models.CharField(max_length=120, help_text=_("Method and concrete path, e.g. POST .../redeem"),
        verbose_name=_("endpoint"))
    key = models.CharField(max_length=255, verbose_name=_("key"))
    fingerprint = models.CharField(max_length=64, verbose_name=_("fingerprint"))
    in_flight = models.BooleanField(default=True, verbose_name=_("in flight"))
    response_status = models.PositiveSmallIntegerField(null=True, blank=True, verbose_name=_("response status"))
    # The answer's JSON text as sent (jsonb would reorder its keys: a replay must be the same bytes).
    response_body = models.TextField(null=True, blank=True, verbose_name=_("response body"))  # noqa: DJ001 (NULL while in flight)
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))

    class Meta:
        verbose_name = _("idempotency record")
        verbose_name_plural = _("idempotency records")
        constraints = [
            models.UniqueConstraint(fields=["user_id", "endpoint", "key"], name="idempotency_user_endpoint_key"),
        ]
        indexes = [models.Index(fields=["created_at"], name="idempotency_created")]

    def __str__(self) -> str:
        return f"{self.user_id} {self.endpoint} {self.key}"


class SweepCursor(models.Model):
    """Where a walk over all coupons (the drift check) stopped, so the next run goes on from there."""

    name = models.CharField(max_length=40, primary_key=True, verbose_name=_("name"))
    position = models.BigIntegerField(default=0, verbose_name=_("position"))

    def __str__(self) -> str:
        return f"{self.name} at {self.position}"


class CodeBatchSource(models.TextChoices):
    GENERATED = "generated", _("Generated")
    IMPORTED = "imported", _("Imported")


class CodeBatchState(models.TextChoices):
    PENDING = "pending", _("Pending")
    RUNNING = "running", _("Running")
    DONE = "done", _("Done")
    FAILED = "failed", _("Failed")


class CodeBatch(models.Model):
    """One run of codes_generate or codes_import for a codes campaign: its progress and its outcome."""

    campaign = models.ForeignKey(Campaign, on_delete=models.PROTECT, related_name="code_batches",
        verbose_name=_("campaign"))
    source = models.CharField(max_length=10, choices=CodeBatchSource.choices, verbose_name=_("source"))
    prefix = models.CharField(max_length=16, blank=True, verbose_name=_("prefix"))
    requested = models.PositiveIntegerField(help_text=_("Codes asked for (generated) or lines read (imported)."),
        verbose_name=_("requested"))
    inserted = models.PositiveIntegerField(default=0, verbose_name=_("inserted"))
    duplicates = models.PositiveIntegerField(default=0, help_text=_("Imported codes that already existed."),
        verbose_name=_("duplicates"))
    state = models.CharField(max_length=8, choices=CodeBatchState.choices, default=CodeBatchState.PENDING,
        verbose_name=_("state"))
    error = models.TextField(blank=True, verbose_name=_("error"))
    task_id = models.CharField(max_length=64, blank=True, verbose_name=_("task id"))
    created_by = models.CharField(max_length=150, verbose_name=_("created by"))
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))
    finished_at = models.DateTimeField(null=True, blank=True, verbose_name=_("finished at"))

    class Meta:
        verbose_name = _("code batch")
        ordering = ["-created_at", "-id"]
        verbose_name_plural = _("code batches")

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
    code = models.CharField(max_length=40, unique=True, db_collation="C", verbose_name=_("code"))
    campaign = models.ForeignKey(Campaign, on_delete=models.PROTECT, related_name="unique_codes", db_index=False,
                                 db_constraint=False, verbose_name=_("campaign"))
    batch = models.ForeignKey(CodeBatch, on_delete=models.PROTECT, related_name="codes", db_index=False,
                              db_constraint=False, verbose_name=_("batch"))
    holder_id = models.CharField(max_length=64, null=True, blank=True, verbose_name=_("holder id"))  # noqa: DJ001 (NULL = not used yet)
    coupon = models.OneToOneField(Coupon, on_delete=models.PROTECT, null=True, blank=True, related_name="unique_code",
        verbose_name=_("coupon"))
    held_at = models.DateTimeField(null=True, blank=True, verbose_name=_("held at"))
    created_at = models.DateTimeField(db_default=Now(), verbose_name=_("created at"))

    class Meta:
        verbose_name = _("unique code")
        verbose_name_plural = _("unique codes")
        # One index for both exports' keyset pages (a campaign's codes by batch then id, or one batch's by id):
        # one index less to fill per row than one each (~1-2 of ~7 us a row, bench/codes_bench.py).
        indexes = [models.Index(fields=["campaign", "batch", "id"], name="unique_code_export")]
        constraints = [
            models.CheckConstraint(
                condition=(Q(holder_id__isnull=True) & Q(coupon__isnull=True) & Q(held_at__isnull=True))
                | (Q(holder_id__isnull=False) & Q(coupon__isnull=False) & Q(held_at__isnull=False)),
                name="unique_code_held_with_coupon",
            ),
        ]

    def __str__(self) -> str:
        return self.code
