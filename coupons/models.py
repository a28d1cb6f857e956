"""Issued coupons and their append-only event log (the coupon row is the projection of its events)."""
from __future__ import annotations

from django.db import models
from django.db.models import Q

from campaigns.models import Campaign


class CouponStatus(models.TextChoices):
    ACTIVE = "active", "Active"
    HELD = "held", "Held for an order"
    REDEEMED = "redeemed", "Redeemed"
    EXPIRED = "expired", "Expired"
    REVOKED = "revoked", "Revoked"


class Coupon(models.Model):
    code = models.CharField(max_length=20, unique=True)
    campaign = models.ForeignKey(Campaign, on_delete=models.PROTECT, related_name="coupons")
    user_id = models.CharField(max_length=64)
    # The claim (orders app) this coupon was issued for: one coupon per claim.
    claim_id = models.CharField(max_length=48, unique=True)
    status = models.CharField(max_length=10, choices=CouponStatus.choices, default=CouponStatus.ACTIVE)
    valid_from = models.DateTimeField()
    expires_at = models.DateTimeField()
    version = models.PositiveIntegerField(default=1)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["user_id", "status"], name="coupon_user_status"),
            models.Index(fields=["campaign", "status"], name="coupon_campaign_status"),
            models.Index(fields=["expires_at"], condition=Q(status="active"), name="coupon_active_expiry"),
        ]
        constraints = [
            models.CheckConstraint(condition=Q(valid_from__lte=models.F("expires_at")), name="coupon_valid_window"),
        ]

    def __str__(self) -> str:
        return self.code


class CouponEventType(models.TextChoices):
    ISSUED = "issued", "Issued"
    HELD = "held", "Held"
    REDEEMED = "redeemed", "Redeemed"
    RELEASED = "released", "Released"
    HOLD_LAPSED = "hold_lapsed", "Hold lapsed"
    EXPIRED = "expired", "Expired"
    REVOKED = "revoked", "Revoked"
    EXTENDED = "extended", "Validity extended"
    COMPENSATED = "compensated", "Compensated"


class CouponEvent(models.Model):
    """One change of a coupon's state. Append-only: a database trigger refuses UPDATE and DELETE."""

    coupon = models.ForeignKey(Coupon, on_delete=models.PROTECT, related_name="events")
    campaign = models.ForeignKey(Campaign, on_delete=models.PROTECT, related_name="coupon_events")
    type = models.CharField(max_length=12, choices=CouponEventType.choices)
    data = models.JSONField(default=dict, blank=True)
    source = models.CharField(max_length=20, help_text="Who caused it: drain, api, admin, compensation ...")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["coupon", "created_at"], name="event_coupon_time")]

    def __str__(self) -> str:
        return f"{self.type} {self.coupon_id} ({self.source})"
