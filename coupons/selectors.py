"""Reads of coupons."""
from __future__ import annotations

from django.db.models import QuerySet

from .models import Coupon


def coupons_of_user(*, user_id: str, status: str | None = None) -> QuerySet[Coupon]:
    """Return a shopper's coupons, newest first, optionally of one status."""
    coupons = Coupon.objects.filter(user_id=user_id).select_related("campaign")
    if status:
        coupons = coupons.filter(status=status)
    return coupons.order_by("-created_at", "-id")


def coupon_for_claim(*, claim_id: str) -> Coupon | None:
    return Coupon.objects.select_related("campaign").filter(claim_id=claim_id).first()
