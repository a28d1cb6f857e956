"""Coupons and their append-only event history in the operator's console."""
from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from .models import Coupon, CouponEvent


class ReadOnlyAdminMixin:
    def has_add_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


class CouponEventInline(ReadOnlyAdminMixin, admin.TabularInline):
    model = CouponEvent
    fields = ["created_at", "type", "source", "data"]
    readonly_fields = ["created_at", "type", "source", "data"]
    ordering = ["-id"]
    extra = 0


@admin.register(Coupon)
class CouponAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ["code", "campaign", "user_id", "status", "valid_from", "expires_at"]
    list_filter = ["status", "campaign"]
    search_fields = ["=code", "=user_id", "=claim_id"]
    list_select_related = ["campaign"]
    inlines = [CouponEventInline]


@admin.register(CouponEvent)
class CouponEventAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ["created_at", "coupon", "campaign", "type", "source"]
    list_filter = ["type", "source"]
    search_fields = ["=coupon__code"]
    list_select_related = ["coupon", "campaign"]
