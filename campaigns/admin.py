"""The operator's console for campaigns: the list with live Redis figures, a live panel and burn-down chart
on the change page, and every operation as an action that calls one service (with a confirmation page)."""
from __future__ import annotations

import uuid
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import Http404, HttpRequest
from django.template.response import TemplateResponse
from django.urls import URLPattern, path
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from core.errors import ApplicationError
from core.i18n import StrOrPromise
from coupons.admin import generate_unique_codes, import_unique_codes
from coupons.budget import figures as budget_figures
from coupons.extension import check_days, validity_extension_apply, validity_extension_begin
from orders import ledger
from orders.reconciliation import campaign_reconcile
from orders.report_admin import CampaignReportMixin
from orders.selectors import claims_issued_counts, claims_per_second, claims_timeline, latest_reconciliations

from .admin_rules import SAMPLE_CART, CampaignForm, CartPreviewForm, preview
from .charts import burndown_svg
from .extension import campaign_extend_end, operator_time
from .models import Campaign, CampaignEvent, CampaignState
from .redis_state import StoreUnavailable
from .selectors import remaining_of
from .services import (
    MAX_STOCK_ADDED,
    campaign_add_stock,
    campaign_pause,
    campaign_publish,
    campaign_resume,
    campaign_save,
)

# Fields that, once a campaign is loaded into Redis, would break its balance if edited in place: they
# change only through actions (restock, extend end).
LIVE_LOCKED = ["kind", "code", "buckets",
               "starts_at", "ends_at", "total_stock", "per_user_limit", "rate_limit", "discount_type", "discount_value",
               "max_discount", "min_spend", "currency", "valid_from", "valid_until", "valid_days", "audience",
               # the scope and stacking too: coupons held already were priced on them (their stored shares)
               "include_categories", "exclude_categories", "include_skus", "exclude_skus", "min_quantity",
               "exclusive", "combinable_with", "order_cap",
               "tiers", "buy_quantity", "get_quantity",  # the richer rules' (issue 38), as the rule's other fields
               "budget",  # its money left is in Redis (coupons/budget.py)
               "group", "group_limit"]  # its keys are named after its group (campaigns.redis_state.keys)


class StateFilter(admin.SimpleListFilter):
    title = _("status")
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin) -> list[tuple[str, StrOrPromise]]:
        return [(s.value, s.label) for s in CampaignState]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Campaign]) -> QuerySet[Campaign]:
        now, value = timezone.now(), self.value()
        published = queryset.filter(published_at__isnull=False)
        if value == CampaignState.DRAFT:
            return queryset.filter(published_at__isnull=True)
        if value == CampaignState.ENDED:
            return published.filter(ends_at__lte=now)
        if value == CampaignState.PAUSED:
            return published.filter(ends_at__gt=now, paused=True)
        if value == CampaignState.SCHEDULED:
            return published.filter(ends_at__gt=now, paused=False, starts_at__gt=now)
        if value == CampaignState.LIVE:
            return published.filter(ends_at__gt=now, paused=False, starts_at__lte=now)
        return queryset


class RestockForm(forms.Form):
    quantity = forms.IntegerField(label=_("Coupons to add"), min_value=1, max_value=MAX_STOCK_ADDED)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Formatted here, in the request's language: a lazy string formatted at import is English for good
        self.fields["quantity"].help_text = gettext(
            "1 to %(most)s: added to the total and to the live stock.") % {"most": f"{MAX_STOCK_ADDED:,}"}


class ExtendEndForm(forms.Form):
    """The intermediate page of "Extend end…": the new end, in the operator's zone."""

    new_end = forms.DateTimeField(
        label=_("New end"),
        widget=forms.DateTimeInput(attrs={"type": "datetime-local", "step": 1}, format="%Y-%m-%dT%H:%M:%S"),
    )

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        zone = timezone.get_current_timezone_name()
        self.fields["new_end"].help_text = (
            _("In the operator's zone (%(zone)s); later than the current end, within 365 days.") % {"zone": zone}
        )


class ExtendValidityForm(forms.Form):
    """The intermediate page of "Extend coupon validity…": whole days, and a token so a resent form extends once."""

    days = forms.IntegerField(label=_("Days to add"), help_text=_("Whole days, 1 to 365."))
    token = forms.CharField(widget=forms.HiddenInput)

    def clean_days(self) -> int:
        try:
            return check_days(self.cleaned_data["days"])
        except ApplicationError as exc:
            raise forms.ValidationError(exc.message) from exc


@admin.register(Campaign)
class CampaignAdmin(CampaignReportMixin):
    list_display = ["name", "kind", "code", "state_display", "window", "total_stock", "remaining_display",
                    "claims_issued", "drift_flag", "per_user_limit"]
    list_filter = [StateFilter, "kind", "starts_at", "ends_at"]
    search_fields = ["name", "code"]
    date_hierarchy = "starts_at"
    actions = ["publish", "pause", "resume", "extend_end", "extend_validity", "restock", "reconcile_now",
               generate_unique_codes, import_unique_codes]  # coupons.admin (unique codes)
    change_form_template = "admin/campaigns/campaign/change_form.html"
    form = CampaignForm  # tiers as rows (admin_rules)
    fieldsets = [
        (None, {"fields": ["name", "kind", "code", "starts_at", "ends_at", "total_stock", "per_user_limit",
                           "rate_limit", "buckets", "group", "group_limit", "paused"],
                "description": _("A codes campaign's stock is its shared code's total uses and its per-user limit "
                               "the uses per shopper (without a shared code: unique codes, generated or "
                               "imported). Campaigns of one group share its limit: the coupons one shopper may hold "
                               "of all of them together.")}),
        (_("Coupon rule"), {"fields": ["discount_type", "discount_value", "tiers", "buy_quantity", "get_quantity",
                                    "max_discount", "min_spend", "currency", "valid_from", "valid_until",
                                    "valid_days", "audience", "budget"]}),
        (_("Scope and stacking"), {
            "fields": ["include_categories", "include_skus", "exclude_categories", "exclude_skus", "min_quantity",
                       "exclusive", "combinable_with", "order_cap"],
            "description": _("Which cart lines the coupon covers (no include list: every line; an exclude always "
                           "wins), the minimum quantity and spend judged on those lines, and which coupons may "
                           "share an order with it. \"Preview on a cart\" (top right, once saved) shows what the "
                           "rule gives a cart you paste.")}),
        (_("Lifecycle"), {"fields": ["published_at", "preheated_at", "created_at", "updated_at"]}),
    ]

    def get_urls(self) -> list[URLPattern]:
        preview = path("<path:object_id>/preview/", self.admin_site.admin_view(self.preview_view),
                       name="campaigns_campaign_preview")
        return [preview, *super().get_urls()]

    def preview_view(self, request: HttpRequest, object_id: str) -> TemplateResponse:
        """What the campaign's rule gives a cart pasted as lines of sku,category,quantity,unit_price (or an amount)
        and its shipping: its status, discount and each line's share, as POST /carts/validate prices it
        (campaigns.pricing.validate_cart), and a tiers rule's tier reached (admin_rules.preview)."""
        campaign = self.get_object(request, object_id)
        if campaign is None or not self.has_view_permission(request, campaign):
            raise Http404
        form = CartPreviewForm(request.POST or None, currency=campaign.currency)
        result = preview(campaign, form.cleaned_data["cart"]) if form.is_valid() else None
        context = {**self.admin_site.each_context(request), "opts": self.model._meta, "original": campaign,
                   "title": gettext("Preview %(campaign)s on a cart") % {"campaign": campaign}, "form": form,
                   "result": result, "rule": campaign.coupon_rule()}
        return TemplateResponse(request, "admin/campaigns/pricing_preview.html", context)

    def get_readonly_fields(self, request: HttpRequest, obj: Campaign | None = None) -> list[str]:
        fixed = ["published_at", "preheated_at", "created_at", "updated_at", "paused"]
        if obj is not None and obj.published_at is not None:
            return fixed + LIVE_LOCKED  # change them through the actions (restock, extend end)
        return fixed

    def save_model(self, request: HttpRequest, obj: Campaign, form: forms.ModelForm, change: bool) -> None:
        campaign_save(obj)  # the shared code checked unique again, race-free (the form's check is Campaign.clean)

    def get_changelist_instance(self, request: HttpRequest):  # type: ignore[no-untyped-def]
        changelist = super().get_changelist_instance(request)
        campaigns = list(changelist.result_list)
        ids = [c.pk for c in campaigns]
        self._remaining = remaining_of(campaigns)  # one pipelined Redis round trip for the page
        self._issued = claims_issued_counts(ids)
        self._reconciled = latest_reconciliations(ids)
        return changelist

    @admin.display(description=_("status"))
    def state_display(self, campaign: Campaign) -> StrOrPromise:
        return campaign.state.label

    @admin.display(description=_("window (operator's zone)"), ordering="starts_at")
    def window(self, campaign: Campaign) -> str:
        start, end = timezone.localtime(campaign.starts_at), timezone.localtime(campaign.ends_at)
        end_format = "TIME_FORMAT" if start.date() == end.date() else "SHORT_DATETIME_FORMAT"
        return f"{date_format(start, 'SHORT_DATETIME_FORMAT')} → {date_format(end, end_format)}"  # the page's language

    def has_delete_permission(self, request: HttpRequest, obj: Campaign | None = None) -> bool:
        # A published campaign has claims, coupons and an audit log: it ends, it is never deleted.
        if obj is not None and obj.published_at is not None:
            return False
        return super().has_delete_permission(request, obj)

    @admin.display(description=_("remaining (live)"))
    def remaining_display(self, campaign: Campaign) -> str:
        value = getattr(self, "_remaining", {}).get(campaign.pk)
        return "-" if value is None else str(value)

    @admin.display(description=_("claims issued"))
    def claims_issued(self, campaign: Campaign) -> int:
        return getattr(self, "_issued", {}).get(campaign.pk, 0)

    @admin.display(description=_("drift"))
    def drift_flag(self, campaign: Campaign) -> str:
        record = getattr(self, "_reconciled", {}).get(campaign.pk)
        if record is None:
            return "-"
        return "ok" if record.balanced else f"DRIFT {record.drift if record.drift is not None else ''}".strip()

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "",
                    extra_context: dict | None = None):  # type: ignore[no-untyped-def]
        campaign = self.get_object(request, object_id)
        extra = dict(extra_context or {})
        if campaign is not None:
            extra["live"] = self._live_panel(campaign)
            extra["sample_cart"] = SAMPLE_CART  # the preview's lines to start from (data, not text to translate)
        return super().change_view(request, object_id, form_url, extra_context=extra)

    def _live_panel(self, campaign: Campaign) -> dict:
        """The change page's live figures: Redis remaining, claims/s, ledger backlog, last reconciliation, a
        budget's money used and left."""
        try:
            remaining = remaining_of([campaign])[campaign.pk]
            backlog: int | str = ledger.backlog_sizes([campaign.pk]).get(campaign.pk, 0)
        except StoreUnavailable:
            remaining, backlog = None, str(_("Redis unavailable"))
        timeline = claims_timeline(campaign)
        return {
            "remaining": remaining,
            "backlog": backlog,
            "per_second": claims_per_second(campaign),
            "budget": budget_figures(campaign),  # None: no budget
            "reconciliation": latest_reconciliations([campaign.pk]).get(campaign.pk),
            "events": CampaignEvent.objects.filter(campaign=campaign).order_by("-id")[:10],
            "chart": burndown_svg(total=campaign.total_stock, start=timeline.start,
                                  bucket_seconds=timeline.bucket_seconds, counts=timeline.counts,
                                  now_remaining=remaining),
        }

    def _each(self, request: HttpRequest, queryset: QuerySet[Campaign], service, verb: str,  # type: ignore[no-untyped-def]
              done_message: StrOrPromise, values: dict[str, object] | None = None) -> None:
        """Call the service for each campaign; `verb` goes to the (English) audit log, `done_message` (with
        %(count)s, in the operator's language) to the page."""
        done = 0
        for campaign in queryset.order_by("pk"):
            try:
                service(campaign=campaign, actor=request.user.get_username())
                done += 1
                self.log_change(request, campaign, f"{verb} (admin action).")
            except ApplicationError as exc:
                self.message_user(request, f"{campaign}: {exc.message}", messages.ERROR)
        if done:
            self.message_user(request, done_message % {"count": done, **(values or {})}, messages.SUCCESS)

    def _confirmed(self, request: HttpRequest, queryset: QuerySet[Campaign], *, action: str, title: StrOrPromise,
                   submit: StrOrPromise, service, verb: str, done_message: StrOrPromise) -> TemplateResponse | None:  # type: ignore[no-untyped-def]
        """Show a confirmation page first; on confirmation, call the service for each campaign."""
        if "apply" in request.POST:
            self._each(request, queryset, service, verb, done_message)
            return None
        return self._extension_page(request, queryset, forms.Form(), action=action, title=title, submit=submit)

    @admin.action(description=_("Publish (load into Redis)…"), permissions=["change"])
    def publish(self, request: HttpRequest, queryset: QuerySet[Campaign]) -> TemplateResponse | None:
        return self._confirmed(request, queryset, action="publish", title=_("Publish: load into Redis and open"),
                               submit=_("Publish"), service=campaign_publish, verb="Published",
                               done_message=_("Published %(count)s campaign(s)."))

    @admin.action(description=_("Pause…"), permissions=["change"])
    def pause(self, request: HttpRequest, queryset: QuerySet[Campaign]) -> TemplateResponse | None:
        return self._confirmed(request, queryset, action="pause", title=_("Pause: claims answer 'paused'"),
                               submit=_("Pause"), service=campaign_pause, verb="Paused",
                               done_message=_("Paused %(count)s campaign(s)."))

    @admin.action(description=_("Resume…"), permissions=["change"])
    def resume(self, request: HttpRequest, queryset: QuerySet[Campaign]) -> TemplateResponse | None:
        return self._confirmed(request, queryset, action="resume", title=_("Resume claims"),
                               submit=_("Resume"), service=campaign_resume, verb="Resumed",
                               done_message=_("Resumed %(count)s campaign(s)."))

    @admin.action(description=_("Restock N…"), permissions=["change"])
    def restock(self, request: HttpRequest, queryset: QuerySet[Campaign]) -> TemplateResponse | None:
        """Add N coupons: the total in PostgreSQL and the live stock in Redis grow together."""
        if "apply" in request.POST:
            form = RestockForm(request.POST)
            if form.is_valid():
                quantity = form.cleaned_data["quantity"]
                self._each(request, queryset,
                           lambda campaign, actor: campaign_add_stock(campaign=campaign, quantity=quantity,
                                                                      actor=actor),
                           f"Added {quantity} coupon(s) to",
                           _("Added %(quantity)s coupon(s) to %(count)s campaign(s)."), {"quantity": quantity})
                return None
        else:
            form = RestockForm()
        return self._extension_page(request, queryset, form, action="restock", title=_("Add coupons to the stock"),
                                    submit=_("Restock"))

    @admin.action(description=_("Reconcile now…"), permissions=["change"])
    def reconcile_now(self, request: HttpRequest, queryset: QuerySet[Campaign]) -> TemplateResponse | None:
        """Compare Redis with PostgreSQL now and repair what is safe (the beat job's work, on demand)."""
        if "apply" not in request.POST:
            return self._extension_page(request, queryset, forms.Form(), action="reconcile_now",
                                        title=_("Reconcile: compare Redis with PostgreSQL, repair the safe drift"),
                                        submit=_("Reconcile"))
        for campaign in queryset.order_by("pk"):
            try:
                record = campaign_reconcile(campaign=campaign, repair=True, source="admin")
            except (ApplicationError, StoreUnavailable) as exc:
                self.message_user(request, _("%(campaign)s: Redis unavailable (%(error)s)")
                                  % {"campaign": campaign, "error": exc}, messages.ERROR)
                continue
            if record is None:
                self.message_user(request, _("%(campaign)s: a reconciliation is already running")
                                  % {"campaign": campaign}, messages.WARNING)
                continue
            summary = "balanced" if record.balanced else "DRIFT: " + "; ".join(record.problems)
            repairs = f" Repaired: {'; '.join(record.repairs)}." if record.repairs else ""
            self.log_change(request, campaign, f"Reconciled: {summary}.{repairs}")  # the history: one language
            # The operator's message in their language (the record's problems and repairs are stored English).
            shown = _("balanced") if record.balanced else _("DRIFT: %(problems)s") % {
                "problems": "; ".join(record.problems)}
            shown_repairs = (" " + _("Repaired: %(repairs)s.") % {"repairs": "; ".join(record.repairs)}
                             if record.repairs else "")
            self.message_user(request, f"{campaign}: {shown}.{shown_repairs}",
                              messages.SUCCESS if record.balanced else messages.WARNING)
        return None

    def _extension_page(  # type: ignore[no-untyped-def]
        self, request: HttpRequest, queryset: QuerySet[Campaign], form, *, action: str, title: StrOrPromise,
        submit: StrOrPromise,
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

    @admin.action(description=_("Extend end…"), permissions=["change"])
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
                    self.message_user(request, _("Extended the end of %(count)s campaign(s) to %(end)s.")
                                      % {"count": done, "end": operator_time(form.cleaned_data["new_end"])},
                                      messages.SUCCESS)
                    return None
                for error in errors:  # nothing changed: show the page again with what to correct
                    form.add_error(None, error)
        else:
            campaigns = list(queryset)
            initial = {"new_end": campaigns[0].ends_at} if len(campaigns) == 1 else {}
            form = ExtendEndForm(initial=initial)
        return self._extension_page(request, queryset, form, action="extend_end", title=_("Extend the end"),
                                    submit=_("Extend end"))

    @admin.action(description=_("Extend coupon validity…"), permissions=["change"])
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
                    self.message_user(request, _("%(campaign)s: extended the validity of %(count)s coupon(s) by "
                                                 "%(days)s day(s).")
                                      % {"campaign": campaign, "count": extended, "days": days}, messages.SUCCESS)
                return None
        else:
            form = ExtendValidityForm(initial={"token": uuid.uuid4().hex})
        return self._extension_page(request, queryset, form, action="extend_validity",
                                    title=_("Extend the validity of issued coupons"), submit=_("Extend validity"))
