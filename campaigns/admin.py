"""The operator's console for campaigns (a first version: list with live stock, publish/pause/resume)."""
from __future__ import annotations

import uuid

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.utils import timezone

from coupons.extension import check_days, validity_extension_apply, validity_extension_begin

from .errors import ApplicationError
from .extension import campaign_extend_end, operator_time
from .models import Campaign
from .selectors import remaining_of
from .services import campaign_pause, campaign_publish, campaign_resume


class ExtendEndForm(forms.Form):
    """The intermediate page of "Extend end…": the new end, in the operator's zone."""

    new_end = forms.DateTimeField(
        label="New end",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local", "step": 1}, format="%Y-%m-%dT%H:%M:%S"),
    )

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        zone = timezone.get_current_timezone_name()
        self.fields["new_end"].help_text = (
            f"In the operator's zone ({zone}); later than the current end, within 365 days."
        )


class ExtendValidityForm(forms.Form):
    """The intermediate page of "Extend coupon validity…": whole days, and a token so a resent form extends once."""

    days = forms.IntegerField(label="Days to add", help_text="Whole days, 1 to 365.")
    token = forms.CharField(widget=forms.HiddenInput)

    def clean_days(self) -> int:
        try:
            return check_days(self.cleaned_data["days"])
        except ApplicationError as exc:
            raise forms.ValidationError(exc.message) from exc


@admin.register(Campaign)
class CampaignAdmin(admin.ModelAdmin):
    list_display = ["name", "state_display", "starts_at", "ends_at", "total_stock", "remaining_display",
                    "per_user_limit"]
    list_filter = ["paused", "starts_at", "ends_at"]
    search_fields = ["name"]
    readonly_fields = ["published_at", "preheated_at", "created_at", "updated_at"]
    actions = ["publish", "pause", "resume", "extend_end", "extend_validity"]
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

    def _extension_page(  # type: ignore[no-untyped-def]
        self, request: HttpRequest, queryset: QuerySet[Campaign], form, *, action: str, title: str, submit: str
    ) -> TemplateResponse:
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": title,
            "campaigns": list(queryset.order_by("pk")),
            "form": form,
            "action": action,
            "submit": submit,
            "zone": timezone.get_current_timezone_name(),
        }
        return TemplateResponse(request, "admin/campaigns/extension_form.html", context)

    @admin.action(description="Extend end…", permissions=["change"])
    def extend_end(self, request: HttpRequest, queryset: QuerySet[Campaign]) -> TemplateResponse | None:
        """Ask for the new end (operator's zone), then move it in PostgreSQL and Redis (campaign_extend_end)."""
        if "apply" in request.POST:
            form = ExtendEndForm(request.POST)
            if form.is_valid():
                errors, done = [], 0
                for campaign in queryset.order_by("pk"):
                    before = campaign.ends_at
                    try:
                        campaign = campaign_extend_end(
                            campaign=campaign, new_end=form.cleaned_data["new_end"],
                            actor=request.user.get_username(),
                        )
                    except ApplicationError as exc:
                        errors.append(f"{campaign}: {exc.message}")
                        continue
                    done += 1
                    if campaign.ends_at != before:
                        self.log_change(request, campaign, f"Extended the end from {operator_time(before)} to "
                                                           f"{operator_time(campaign.ends_at)}.")
                if done:
                    for error in errors:
                        self.message_user(request, error, messages.ERROR)
                    self.message_user(request, f"Extended the end of {done} campaign(s) to "
                                               f"{operator_time(form.cleaned_data['new_end'])}.", messages.SUCCESS)
                    return None
                for error in errors:  # nothing changed: show the page again with what to correct
                    form.add_error(None, error)
        else:
            campaigns = list(queryset)
            initial = {"new_end": campaigns[0].ends_at} if len(campaigns) == 1 else {}
            form = ExtendEndForm(initial=initial)
        return self._extension_page(request, queryset, form, action="extend_end", title="Extend the end",
                                    submit="Extend end")

    @admin.action(description="Extend coupon validity…", permissions=["change"])
    def extend_validity(self, request: HttpRequest, queryset: QuerySet[Campaign]) -> TemplateResponse | None:
        """Ask for N days, then extend the campaigns' issued, still-usable coupons by N days."""
        if "apply" in request.POST:
            form = ExtendValidityForm(request.POST)
            if form.is_valid():
                days, token = form.cleaned_data["days"], form.cleaned_data["token"]
                for campaign in queryset.order_by("pk"):
                    try:
                        # The form's token names the extension: the same form sent twice extends once.
                        extension = validity_extension_begin(
                            campaign=campaign, days=days, actor=request.user.get_username(), key=f"admin:{token}"
                        )
                        extended = validity_extension_apply(extension=extension)
                    except ApplicationError as exc:
                        self.message_user(request, f"{campaign}: {exc.message}", messages.ERROR)
                        continue
                    if extended:  # a form sent again extends (and logs) nothing more
                        self.log_change(request, campaign, f"Extended the validity of {extended} coupon(s) by "
                                                           f"{days} day(s) (extension #{extension.pk}).")
                    self.message_user(request, f"{campaign}: extended the validity of {extended} coupon(s) by "
                                               f"{days} day(s).", messages.SUCCESS)
                return None
        else:
            form = ExtendValidityForm(initial={"token": uuid.uuid4().hex})
        return self._extension_page(request, queryset, form, action="extend_validity",
                                    title="Extend the validity of issued coupons", submit="Extend validity")
