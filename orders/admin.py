"""Claims (the async orders) in the operator's console."""
from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from core.admin import NoAddNoDeleteMixin, ReadOnlyAdminMixin
from coupons.models import Coupon

from .models import Claim, ParkedLedgerEntry, Reconciliation
from .parking import parked_discard, parked_retry


@admin.register(Claim)
class ClaimAdmin(NoAddNoDeleteMixin, admin.ModelAdmin):
    list_display = ["claim_id", "campaign", "user_id", "status", "claimed_at", "coupon_link"]
    list_filter = ["status", "campaign"]
    search_fields = ["=claim_id", "=user_id"]
    list_select_related = ["campaign"]
    readonly_fields = ["claim_id", "campaign", "user_id", "status", "claimed_at", "created_at", "updated_at"]


    @admin.display(description=_("coupon"))
    def coupon_link(self, claim: Claim) -> str:
        coupon = Coupon.objects.filter(claim_id=claim.claim_id).only("pk", "code").first()
        if coupon is None:
            return "-"
        return format_html('<a href="{}">{}</a>', reverse("admin:coupons_coupon_change", args=[coupon.pk]), coupon.code)


@admin.register(Reconciliation)
class ReconciliationAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """What each comparison of Redis with PostgreSQL found and repaired (read-only)."""

    list_display = ["created_at", "campaign", "balanced", "drift", "users_drift", "remaining", "claims", "restocked",
                    "source", "repair_count"]
    list_filter = ["balanced", "source", "campaign"]
    list_select_related = ["campaign"]
    readonly_fields = [f.name for f in Reconciliation._meta.fields]


    @admin.display(description=_("repairs"))
    def repair_count(self, record: Reconciliation) -> int:
        return len(record.repairs)


@admin.register(ParkedLedgerEntry)
class ParkedLedgerEntryAdmin(NoAddNoDeleteMixin, admin.ModelAdmin):
    """Ledger entries the drain could never persist (orders/parking.py): read-only, retried or discarded by the
    actions, each recorded in the entry's history and the admin's log."""

    list_display = ["claim", "campaign", "state", "attempts", "error", "created_at", "updated_at"]
    list_filter = ["state", "campaign"]
    search_fields = ["=entry_id"]
    list_select_related = ["campaign"]
    readonly_fields = [f.name for f in ParkedLedgerEntry._meta.fields]
    actions = ["retry", "discard"]

    @admin.display(description=_("claim id"))
    def claim(self, entry: ParkedLedgerEntry) -> str:
        return entry.claim_id

    @admin.action(description=_("Retry: persist again"), permissions=["change"])
    def retry(self, request: HttpRequest, queryset: QuerySet[ParkedLedgerEntry]) -> None:
        actor = request.user.get_username()
        for parked in queryset.order_by("pk"):
            if parked_retry(parked=parked, actor=actor):
                self.log_change(request, parked, "Retried: persisted as a claim (admin action).")
                self.message_user(request, _("%(claim)s: persisted.") % {"claim": parked.claim_id}, messages.SUCCESS)
            else:
                parked.refresh_from_db()
                self.log_change(request, parked, f"Retried: {parked.state} ({parked.error}) (admin action).")
                self.message_user(request, _("%(claim)s: still %(state)s: %(error)s")
                                  % {"claim": parked.claim_id, "state": parked.get_state_display(),
                                     "error": parked.error},
                                  messages.WARNING)

    @admin.action(description=_("Discard (never a claim)"), permissions=["change"])
    def discard(self, request: HttpRequest, queryset: QuerySet[ParkedLedgerEntry]) -> None:
        actor = request.user.get_username()
        done = 0
        for parked in queryset.order_by("pk"):
            if parked_discard(parked=parked, actor=actor):
                done += 1
                self.log_change(request, parked, "Discarded (admin action).")
        self.message_user(request, ngettext("Discarded %(count)s parked entry.", "Discarded %(count)s parked entries.",
                                            done) % {"count": done}, messages.SUCCESS)
