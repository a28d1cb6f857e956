"""Coupons and their append-only event history in the operator's console.

Nobody edits a coupon's fields here: state changes only through the actions, which call the services
(each writes its event). Django's permissions apply: 'view' looks, 'change' may run the actions.
"""
from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.db import transaction
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse

from core.errors import ApplicationError

from .extension import check_days
from .models import Coupon, CouponEvent
from .services import coupon_extend_validity, coupon_revoke


class NoAddNoDeleteMixin:
    def has_add_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


class ReadOnlyAdminMixin(NoAddNoDeleteMixin):
    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


class CouponEventInline(ReadOnlyAdminMixin, admin.TabularInline):
    model = CouponEvent
    fields = ["created_at", "type", "source", "data"]
    readonly_fields = ["created_at", "type", "source", "data"]
    ordering = ["-id"]  # newest first
    extra = 0


class ExtendCouponsForm(forms.Form):
    days = forms.IntegerField(label="Days to add", help_text="Whole days, 1 to 365.")

    def clean_days(self) -> int:
        try:
            return check_days(self.cleaned_data["days"])
        except ApplicationError as exc:
            raise forms.ValidationError(exc.message) from exc


@admin.register(Coupon)
class CouponAdmin(NoAddNoDeleteMixin, admin.ModelAdmin):
    list_display = ["code", "campaign", "user_id", "status", "order_id", "valid_from", "expires_at"]
    list_filter = ["status", "campaign"]
    search_fields = ["=code", "=user_id", "=claim_id", "=order_id"]
    list_select_related = ["campaign"]
    inlines = [CouponEventInline]
    actions = ["revoke", "extend_validity"]

    def get_readonly_fields(self, request: HttpRequest, obj: Coupon | None = None) -> list[str]:
        return [f.name for f in Coupon._meta.fields]

    def _page(self, request: HttpRequest, queryset: QuerySet[Coupon], form: forms.Form, *, action: str,
              title: str, submit: str) -> TemplateResponse:
        context = {**self.admin_site.each_context(request), "opts": self.model._meta, "title": title,
                   "coupons": list(queryset.select_related("campaign").order_by("pk")[:200]), "form": form,
                   "action": action, "submit": submit}
        return TemplateResponse(request, "admin/coupons/coupon_action.html", context)

    @admin.action(description="Revoke…", permissions=["change"])
    def revoke(self, request: HttpRequest, queryset: QuerySet[Coupon]) -> TemplateResponse | None:
        """Void unused coupons (no stock goes back): each gets a 'revoked' event; coupons in use are refused."""
        if "apply" not in request.POST:
            return self._page(request, queryset, forms.Form(), action="revoke", title="Revoke coupons",
                              submit="Revoke")
        done = 0
        for coupon in queryset.select_related("campaign").order_by("pk"):
            with transaction.atomic():
                outcome = coupon_revoke(coupon=coupon, source="admin",
                                        reason=f"revoked by {request.user.get_username()}")
            if outcome.code == 0:
                done += 1
                self.log_change(request, coupon, "Revoked (admin action).")
            else:
                self.message_user(request, f"{coupon}: not revoked ({outcome.status})", messages.WARNING)
        if done:
            self.message_user(request, f"Revoked {done} coupon(s).", messages.SUCCESS)
        return None

    @admin.action(description="Extend validity…", permissions=["change"])
    def extend_validity(self, request: HttpRequest, queryset: QuerySet[Coupon]) -> TemplateResponse | None:
        """Extend the selected still-usable coupons by N days, one 'extended' event each."""
        if "apply" in request.POST:
            form = ExtendCouponsForm(request.POST)
            if form.is_valid():
                days, done = form.cleaned_data["days"], 0
                for coupon in queryset.order_by("pk"):
                    if coupon_extend_validity(coupon=coupon, days=days, actor=request.user.get_username()):
                        done += 1
                        self.log_change(request, coupon, f"Validity extended by {days} day(s) (admin action).")
                self.message_user(request, f"Extended {done} coupon(s) by {days} day(s); "
                                           f"{queryset.count() - done} were not usable any more.", messages.SUCCESS)
                return None
        else:
            form = ExtendCouponsForm()
        return self._page(request, queryset, form, action="extend_validity", title="Extend coupons' validity",
                          submit="Extend validity")


@admin.register(CouponEvent)
class CouponEventAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ["created_at", "coupon", "campaign", "type", "source"]
    list_filter = ["type", "source"]
    search_fields = ["=coupon__code"]
    list_select_related = ["coupon", "campaign"]
