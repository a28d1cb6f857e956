"""Coupons and their append-only event history in the operator's console; unique codes' batches.

Nobody edits a coupon's fields here: state changes only through the actions, which call the services
(each writes its event). Django's permissions apply: 'view' looks, 'change' may run the actions.

Unique codes (issue 19): the campaign actions "Generate unique codes…" and "Import unique codes…" (defined here,
listed in campaigns.admin), the batches' list with a progress bar that refreshes itself while a batch runs,
each batch's JSON status, and CSV downloads per batch and per campaign, streamed. A campaign's codes are its
coupons: downloading them (who holds one can use it) or importing into it takes the permission to change the
campaign, as generating does; the permissions of the batches' records, or to view, show progress only.
"""
from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect, JsonResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html
from django.utils.text import format_lazy
from django.utils.translation import gettext_lazy as _

from campaigns.models import Campaign
from core.admin import NoAddNoDeleteMixin, ReadOnlyAdminMixin
from core.errors import ApplicationError
from core.i18n import StrOrPromise

from .code_batches import (
    MAX_COUNT,
    CodesImportRefused,
    code_batch_create,
    code_batch_import,
    code_batch_send,
    unique_codes_csv,
)
from .extension import check_days
from .models import CodeBatch, CodeBatchSource, CodeBatchState, Coupon, CouponEvent
from .services import coupon_extend_validity, coupon_revoke

PROBLEMS_SHOWN = 500  # an import's bad lines listed on the page (all of them: manage.py codes_import)


class CouponEventInline(ReadOnlyAdminMixin, admin.TabularInline):
    model = CouponEvent
    fields = ["created_at", "type", "source", "data"]
    readonly_fields = ["created_at", "type", "source", "data"]
    ordering = ["-id"]  # newest first
    extra = 0


class ExtendCouponsForm(forms.Form):
    days = forms.IntegerField(label=_("Days to add"), help_text=_("Whole days, 1 to 365."))

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
              title: StrOrPromise, submit: StrOrPromise) -> TemplateResponse:
        context = {**self.admin_site.each_context(request), "opts": self.model._meta, "title": title,
                   "coupons": list(queryset.select_related("campaign").order_by("pk")[:200]), "form": form,
                   "action": action, "submit": submit}
        return TemplateResponse(request, "admin/coupons/coupon_action.html", context)

    @admin.action(description=_("Revoke…"), permissions=["change"])
    def revoke(self, request: HttpRequest, queryset: QuerySet[Coupon]) -> TemplateResponse | None:
        """Void unused coupons (no stock goes back): each gets a 'revoked' event; coupons in use are refused."""
        if "apply" not in request.POST:
            return self._page(request, queryset, forms.Form(), action="revoke", title=_("Revoke coupons"),
                              submit=_("Revoke"))
        done = 0
        for coupon in queryset.select_related("campaign").order_by("pk"):
            with transaction.atomic():
                outcome = coupon_revoke(coupon=coupon, source="admin",
                                        reason=f"revoked by {request.user.get_username()}")
            if outcome.code == 0:
                done += 1
                self.log_change(request, coupon, "Revoked (admin action).")
            else:
                self.message_user(request, _("%(coupon)s: not revoked (%(status)s)")
                                  % {"coupon": coupon, "status": outcome.status}, messages.WARNING)
        if done:
            self.message_user(request, _("Revoked %(count)s coupon(s).") % {"count": done}, messages.SUCCESS)
        return None

    @admin.action(description=_("Extend validity…"), permissions=["change"])
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
                left = queryset.count() - done
                self.message_user(request, _("Extended %(count)s coupon(s) by %(days)s day(s); %(left)s were not "
                                             "usable any more.") % {"count": done, "days": days, "left": left},
                                  messages.SUCCESS)
                return None
        else:
            form = ExtendCouponsForm()
        return self._page(request, queryset, form, action="extend_validity", title=_("Extend coupons' validity"),
                          submit=_("Extend validity"))


@admin.register(CouponEvent)
class CouponEventAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ["created_at", "coupon", "campaign", "type", "source"]
    list_filter = ["type", "source"]
    search_fields = ["=coupon__code"]
    list_select_related = ["coupon", "campaign"]


class GenerateCodesForm(forms.Form):
    count = forms.IntegerField(label=_("Codes"), min_value=1, max_value=MAX_COUNT,
                               help_text=format_lazy(_("How many unique codes, 1 to {max}."), max=f"{MAX_COUNT:,}"))
    code_prefix = forms.CharField(label=_("Prefix"), required=False, max_length=16,
                             help_text=_("Optional: 1-16 letters and digits before each code, e.g. SPRING."))


class ImportCodesForm(forms.Form):
    file = forms.FileField(label=_("File of codes"),
                           help_text=_("One code a line (4-40 of A-Z, 0-9 and '-'), or a CSV as the export writes it."))


def batches_url(campaigns: list[Campaign]) -> str:
    url = reverse("admin:coupons_codebatch_changelist")
    return f"{url}?campaign__id__exact={campaigns[0].pk}" if len(campaigns) == 1 else url


@admin.action(description=_("Generate unique codes…"), permissions=["change"])
def generate_unique_codes(modeladmin: admin.ModelAdmin, request: HttpRequest,
                          queryset: QuerySet[Campaign]) -> HttpResponse | None:
    """Ask for a count and a prefix, then record a batch per campaign and hand it to the worker."""
    campaigns = list(queryset.order_by("pk"))
    if "apply" in request.POST:
        form = GenerateCodesForm(request.POST)
        if form.is_valid():
            sent = []
            for campaign in campaigns:
                try:
                    with transaction.atomic():
                        batch = code_batch_create(campaign=campaign, count=form.cleaned_data["count"],
                                                  prefix=form.cleaned_data["code_prefix"],
                                                  created_by=request.user.get_username())
                        code_batch_send(batch=batch)
                except ApplicationError as exc:
                    form.add_error(None, f"{campaign}: {exc.message}")
                    continue
                sent.append(campaign)
                modeladmin.log_change(request, campaign, f"Unique codes: batch {batch.pk} of {batch.requested:,} "
                                                         f"codes sent to the worker (admin action).")
            if sent:
                for error in form.non_field_errors():
                    modeladmin.message_user(request, str(error), messages.ERROR)
                modeladmin.message_user(request, _("Generating %(count)s codes for %(campaigns)s campaign(s): progress "
                                                   "below.") % {"count": f"{form.cleaned_data['count']:,}",
                                                                "campaigns": len(sent)}, messages.SUCCESS)
                return HttpResponseRedirect(batches_url(sent))
    else:
        form = GenerateCodesForm()
    context = {**modeladmin.admin_site.each_context(request), "opts": modeladmin.model._meta,
               "title": _("Generate unique codes"), "campaigns": campaigns, "form": form,
               "action": "generate_unique_codes", "submit": _("Generate")}
    return TemplateResponse(request, "admin/coupons/codes_action.html", context)


@admin.action(description=_("Import unique codes…"), permissions=["change"])
def import_unique_codes(modeladmin: admin.ModelAdmin, request: HttpRequest,
                        queryset: QuerySet[Campaign]) -> HttpResponse | None:
    """Go to the upload page of the one selected campaign."""
    campaigns = list(queryset[:2])
    if len(campaigns) != 1:
        modeladmin.message_user(request, _("Select one campaign to import codes into."), messages.WARNING)
        return None
    return HttpResponseRedirect(reverse("admin:coupons_codebatch_import", args=[campaigns[0].pk]))


@admin.register(CodeBatch)
class CodeBatchAdmin(NoAddNoDeleteMixin, admin.ModelAdmin):
    list_display = ["id", "campaign", "source", "prefix", "state", "progress", "created_by", "created_at",
                    "finished_at", "downloads"]
    list_filter = ["state", "source", "campaign"]
    list_select_related = ["campaign"]
    actions = ["resume"]
    change_list_template = "admin/coupons/codebatch/change_list.html"

    def get_readonly_fields(self, request: HttpRequest, obj: CodeBatch | None = None) -> list[str]:
        return [f.name for f in CodeBatch._meta.fields]

    def get_list_display(self, request: HttpRequest) -> list[Any]:
        if self._may_change_campaign(request):
            return list(self.list_display)
        return [name for name in self.list_display if name != "downloads"]  # links that would be refused

    @admin.display(description=_("progress"))
    def progress(self, batch: CodeBatch) -> str:
        share = 100 * batch.inserted // batch.requested if batch.requested else 100
        return format_html('<progress value="{}" max="{}" data-batch="{}">{}%</progress> {} / {}', batch.inserted,
                           batch.requested, batch.pk, share, f"{batch.inserted:,}", f"{batch.requested:,}")

    @admin.display(description=_("CSV"))
    def downloads(self, batch: CodeBatch) -> str:
        return format_html('<a href="{}">batch</a> · <a href="{}">campaign</a>',
                           reverse("admin:coupons_codebatch_csv", args=[batch.pk]),
                           reverse("admin:coupons_codebatch_campaign_csv", args=[batch.campaign_id]))

    def changelist_view(self, request: HttpRequest, extra_context: dict | None = None):  # type: ignore[no-untyped-def]
        # The page reloads itself every 2 s while a batch is being made (the progress bars move).
        running = CodeBatch.objects.filter(state__in=[CodeBatchState.PENDING, CodeBatchState.RUNNING]).exists()
        return super().changelist_view(request, {**(extra_context or {}), "refresh_seconds": 2 if running else 0})

    @admin.action(description=_("Resume generation (interrupted batches)"), permissions=["change"])
    def resume(self, request: HttpRequest, queryset: QuerySet[CodeBatch]) -> None:
        """Send unfinished generated batches to the worker again: it continues from their committed count."""
        resent = 0
        for batch in queryset.filter(source=CodeBatchSource.GENERATED).exclude(state=CodeBatchState.DONE):
            code_batch_send(batch=batch)
            resent += 1
        self.message_user(request, _("Sent %(count)s batch(es) to the worker again.") % {"count": resent},
                          messages.SUCCESS)

    def get_urls(self) -> list[URLPattern]:
        view = self.admin_site.admin_view
        return [
            path("<int:pk>/status/", view(self.status_view), name="coupons_codebatch_status"),
            path("<int:pk>/codes.csv", view(self.batch_csv_view), name="coupons_codebatch_csv"),
            path("campaign/<int:campaign_id>/codes.csv", view(self.campaign_csv_view),
                 name="coupons_codebatch_campaign_csv"),
            path("campaign/<int:campaign_id>/import/", view(self.import_view), name="coupons_codebatch_import"),
            *super().get_urls(),
        ]

    def _require(self, allowed: bool) -> None:
        if not allowed:
            raise PermissionDenied

    def _may_change_campaign(self, request: HttpRequest, campaign: Campaign | None = None) -> bool:
        """The campaign admin's own answer (its rules, not only the codename): the codes' downloads and imports
        are the campaign's, as its generate action is."""
        return self.admin_site.get_model_admin(Campaign).has_change_permission(request, campaign)

    def status_view(self, request: HttpRequest, pk: int) -> JsonResponse:
        """A batch's progress as JSON (for scripts and the page): state, inserted, requested, error."""
        self._require(self.has_view_permission(request))
        batch = get_object_or_404(CodeBatch, pk=pk)
        return JsonResponse({"id": batch.pk, "campaign": batch.campaign_id, "source": batch.source,
                             "state": batch.state, "inserted": batch.inserted, "requested": batch.requested,
                             "error": batch.error})

    def _csv(self, campaign_id: int, batch_id: int | None, name: str) -> StreamingHttpResponse:
        response = StreamingHttpResponse(unique_codes_csv(campaign_id=campaign_id, batch_id=batch_id),
                                         content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="{name}.csv"'
        return response

    def batch_csv_view(self, request: HttpRequest, pk: int) -> StreamingHttpResponse:
        batch = get_object_or_404(CodeBatch.objects.select_related("campaign"), pk=pk)
        self._require(self._may_change_campaign(request, batch.campaign))
        return self._csv(batch.campaign_id, batch.pk, f"campaign-{batch.campaign_id}-batch-{batch.pk}-codes")

    def campaign_csv_view(self, request: HttpRequest, campaign_id: int) -> StreamingHttpResponse:
        campaign = get_object_or_404(Campaign, pk=campaign_id)
        self._require(self._may_change_campaign(request, campaign))
        return self._csv(campaign.pk, None, f"campaign-{campaign.pk}-codes")

    def import_view(self, request: HttpRequest, campaign_id: int) -> HttpResponse:
        """Upload legacy codes into a campaign: all or nothing, every bad line listed."""
        campaign = get_object_or_404(Campaign, pk=campaign_id)
        self._require(self._may_change_campaign(request, campaign))
        problems: list = []
        refused = ""
        if request.method == "POST":
            form = ImportCodesForm(request.POST, request.FILES)
            if form.is_valid():
                # File's own line iteration (\n, \r\n or \r), whether the upload is in memory or on disk
                lines = (line.decode("utf-8-sig", errors="replace") for line in form.cleaned_data["file"])
                try:
                    batch = code_batch_import(campaign=campaign, lines=lines, created_by=request.user.get_username())
                except CodesImportRefused as exc:
                    problems, refused = exc.problems, exc.message
                except ApplicationError as exc:
                    form.add_error(None, exc.message)
                else:
                    self.log_addition(request, batch, f"Imported {batch.inserted:,} codes into {campaign}.")
                    self.message_user(request, _("Imported %(count)s codes into %(campaign)s (batch %(batch)s).")
                                      % {"count": f"{batch.inserted:,}", "campaign": campaign, "batch": batch.pk},
                                      messages.SUCCESS)
                    return HttpResponseRedirect(batches_url([campaign]))
        else:
            form = ImportCodesForm()
        context = {**self.admin_site.each_context(request), "opts": self.model._meta,
                   "title": _("Import unique codes into %(campaign)s") % {"campaign": campaign},
                   "campaign": campaign, "form": form,
                   "refused": refused, "problems": problems[:PROBLEMS_SHOWN], "more": max(0, len(problems) -
                                                                                           PROBLEMS_SHOWN)}
        return TemplateResponse(request, "admin/coupons/codebatch/import.html", context)
