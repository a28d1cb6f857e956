"""The operator's console for campaigns (a first version: list with live stock, publish/pause/resume)."""
from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from .errors import ApplicationError
from .models import Campaign
from .selectors import remaining_of
from .services import campaign_pause, campaign_publish, campaign_resume


@admin.register(Campaign)
class CampaignAdmin(admin.ModelAdmin):
    list_display = ["name", "state_display", "starts_at", "ends_at", "total_stock", "remaining_display",
                    "per_user_limit"]
    list_filter = ["paused", "starts_at", "ends_at"]
    search_fields = ["name"]
    readonly_fields = ["published_at", "preheated_at", "created_at", "updated_at"]
    actions = ["publish", "pause", "resume"]
    fieldsets = [
        (None, {"fields": ["name", "starts_at", "ends_at", "total_stock", "per_user_limit", "paused"]}),
        ("Coupon rule", {"fields": ["discount_type", "discount_value", "max_discount", "min_spend", "currency",
                                    "valid_until", "valid_days", "audience"]}),
        ("Lifecycle", {"fields": ["published_at", "preheated_at", "created_at", "updated_at"]}),
    ]

    def get_changelist_instance(self, request: HttpRequest):  # type: ignore[no-untyped-def]
        changelist = super().get_changelist_instance(request)
        campaigns = list(changelist.result_list)
        self._remaining = remaining_of(campaigns)  # one pipelined Redis round trip for the page
        return changelist

    @admin.display(description="status")
    def state_display(self, campaign: Campaign) -> str:
        return campaign.state.label

    @admin.display(description="remaining (live)")
    def remaining_display(self, campaign: Campaign) -> str:
        value = getattr(self, "_remaining", {}).get(campaign.pk)
        return "-" if value is None else str(value)

    def _each(self, request: HttpRequest, queryset: QuerySet[Campaign], service, verb: str) -> None:  # type: ignore[no-untyped-def]
        done = 0
        for campaign in queryset:
            try:
                service(campaign=campaign)
                done += 1
            except ApplicationError as exc:
                self.message_user(request, f"{campaign}: {exc.message}", messages.ERROR)
        if done:
            self.message_user(request, f"{verb} {done} campaign(s).", messages.SUCCESS)

    @admin.action(description="Publish (load into Redis)", permissions=["change"])
    def publish(self, request: HttpRequest, queryset: QuerySet[Campaign]) -> None:
        self._each(request, queryset, campaign_publish, "Published")

    @admin.action(description="Pause", permissions=["change"])
    def pause(self, request: HttpRequest, queryset: QuerySet[Campaign]) -> None:
        self._each(request, queryset, campaign_pause, "Paused")

    @admin.action(description="Resume", permissions=["change"])
    def resume(self, request: HttpRequest, queryset: QuerySet[Campaign]) -> None:
        self._each(request, queryset, campaign_resume, "Resumed")
