"""Claims (the async orders) in the operator's console."""
from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html

from coupons.models import Coupon

from .models import Claim, Reconciliation


@admin.register(Claim)
class ClaimAdmin(admin.ModelAdmin):
    list_display = ["claim_id", "campaign", "user_id", "status", "claimed_at", "coupon_link"]
    list_filter = ["status", "campaign"]
    search_fields = ["=claim_id", "=user_id"]
    list_select_related = ["campaign"]
    readonly_fields = ["claim_id", "campaign", "user_id", "status", "claimed_at", "created_at", "updated_at"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    @admin.display(description="coupon")
    def coupon_link(self, claim: Claim) -> str:
        coupon = Coupon.objects.filter(claim_id=claim.claim_id).only("pk", "code").first()
        if coupon is None:
            return "-"
        return format_html('<a href="{}">{}</a>', reverse("admin:coupons_coupon_change", args=[coupon.pk]), coupon.code)


@admin.register(Reconciliation)
class ReconciliationAdmin(admin.ModelAdmin):
    """What each comparison of Redis with PostgreSQL found and repaired (read-only)."""

    list_display = ["created_at", "campaign", "balanced", "drift", "users_drift", "remaining", "claims", "restocked",
                    "source", "repair_count"]
    list_filter = ["balanced", "source", "campaign"]
    list_select_related = ["campaign"]
    readonly_fields = [f.name for f in Reconciliation._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    @admin.display(description="repairs")
    def repair_count(self, record: Reconciliation) -> int:
        return len(record.repairs)
