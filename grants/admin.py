"""Grants in the operator's console: on a campaign's page a link to upload a file of shoppers (grant_upload_view),
the batch's page with its progress (reloaded while it runs), its counts, its rejected lines as CSV and a resume
of a stopped batch. The chunks run in Celery (grants.tasks), one task a chunk."""
from __future__ import annotations

import re
from typing import Any

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.db import transaction
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from campaigns.models import Campaign
from core.admin import ReadOnlyAdminMixin
from core.errors import ApplicationError

from .lines import FileRefused, read_file
from .models import BATCH_NAME_PATTERN, GrantBatch, GrantSource, GrantStatus
from .services import grant_batch_resume, grant_batch_start, grantable_campaign, unfinished_batch
from .tasks import grant_batch_continue


class GrantUploadForm(forms.Form):
    file = forms.FileField(label=_("Shoppers"), help_text=_(
        "UTF-8 text: one shopper id a line, or a CSV with a user_id column."))
    batch = forms.RegexField(regex=rf"^{BATCH_NAME_PATTERN}\Z", required=False, label=_("Batch"), help_text=_(
        "The same batch again grants nothing twice (empty: named after the file's content)."))

    def clean_file(self) -> Any:
        upload = self.cleaned_data["file"]
        limit = settings.COUPONS_GRANTS_MAX_FILE_BYTES
        if upload.size > limit:  # refused before it is read
            raise forms.ValidationError(gettext("The file has more than the %(limit)s bytes a grant takes.")
                                        % {"limit": f"{limit:,}"})
        try:
            return read_file(upload.read(), max_bytes=limit)
        except FileRefused as exc:
            raise forms.ValidationError(gettext("Refused, nothing granted: %(reason)s") % {"reason": exc}) from exc


@admin.register(GrantBatch)
class GrantBatchAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ["name", "campaign", "source", "status", "progress_display", "granted", "limit_reached",
                    "sold_out", "invalid", "duplicate", "already_granted", "created_at"]
    list_filter = ["status", "source"]
    search_fields = ["name"]
    list_select_related = ["campaign"]
    exclude = ["rejected"]
    change_form_template = "admin/grants/grantbatch/change_form.html"

    @admin.display(description=_("progress"))
    def progress_display(self, batch: GrantBatch) -> str:
        return f"{batch.progress:.0%}"

    def get_urls(self) -> list[URLPattern]:
        view = self.admin_site.admin_view
        return [
            path("upload/<int:campaign_id>/", view(self.upload_view), name="grants_grantbatch_upload"),
            path("<int:batch_id>/rejected.csv", view(self.rejected_view), name="grants_grantbatch_rejected"),
            path("<int:batch_id>/resume/", view(self.resume_view), name="grants_grantbatch_resume"),
            *super().get_urls(),
        ]

    def _may_grant(self, request: HttpRequest) -> bool:
        return request.user.has_perm("grants.add_grantbatch")  # type: ignore[union-attr]

    def upload_view(self, request: HttpRequest, campaign_id: int) -> HttpResponse:
        """The campaign's upload: a file of shoppers read, refused whole or started as a batch (its chunks sent to
        Celery), then the batch's page; and the campaign's latest batches."""
        campaign = get_object_or_404(Campaign, pk=campaign_id)
        if not self._may_grant(request):
            raise Http404
        form = GrantUploadForm(request.POST or None, request.FILES or None)
        if request.method == "POST" and form.is_valid():
            read = form.cleaned_data["file"]
            name = form.cleaned_data["batch"] or f"file-{read.digest[:16]}"
            try:
                batch = self._started(request, campaign, name, read)
            except ApplicationError as exc:
                form.add_error(None, exc.message)
            else:
                return HttpResponseRedirect(reverse("admin:grants_grantbatch_change", args=[batch.pk]))
        context = {**self.admin_site.each_context(request), "opts": self.model._meta, "campaign": campaign,
                   "form": form, "title": gettext("Grant coupons of %(campaign)s") % {"campaign": campaign},
                   "batches": GrantBatch.objects.filter(campaign=campaign)[:20],
                   "max_bytes": settings.COUPONS_GRANTS_MAX_FILE_BYTES}
        return TemplateResponse(request, "admin/grants/upload.html", context)

    def _started(self, request: HttpRequest, campaign: Campaign, name: str, read: Any) -> GrantBatch:
        grantable_campaign(campaign.pk)
        batch = unfinished_batch(campaign=campaign, name=name)
        if batch is not None and (batch.status == GrantStatus.RUNNING or batch.file_digest != read.digest):
            raise ApplicationError(gettext("Batch %(batch)s is unfinished (%(status)s): resume it from its page, "
                                           "or name this one otherwise.")
                                   % {"batch": name, "status": batch.get_status_display()})
        if batch is not None:
            batch = grant_batch_resume(batch=batch)
        else:
            batch = grant_batch_start(campaign=campaign, name=name, source=GrantSource.ADMIN, read=read,
                                      actor=request.user.get_username())  # type: ignore[union-attr]
        if batch.status == GrantStatus.RUNNING:
            transaction.on_commit(lambda: grant_batch_continue.delay(batch.pk))
        messages.success(request, gettext("Batch %(batch)s: %(lines)s lines read, %(valid)s shoppers to grant.")
                         % {"batch": name, "lines": read.lines, "valid": len(read.user_ids)})
        return batch

    def rejected_view(self, request: HttpRequest, batch_id: int) -> HttpResponse:
        """The batch's rejected lines (invalid, duplicate) as CSV: line,reason,text."""
        batch = get_object_or_404(GrantBatch, pk=batch_id)
        if not self.has_view_permission(request, batch):
            raise Http404
        response = HttpResponse(batch.rejected or "line,reason,text\n", content_type="text/csv; charset=utf-8")
        filename = re.sub(r"[^A-Za-z0-9_.-]", "_", f"grant-{batch.campaign_id}-{batch.name}-rejected.csv")
        response["Content-Disposition"] = f'attachment; filename="{filename}"'
        return response

    def resume_view(self, request: HttpRequest, batch_id: int) -> HttpResponse:
        """Resume a stopped batch (POST): its chunks not done go on in Celery."""
        batch = get_object_or_404(GrantBatch, pk=batch_id)
        if request.method != "POST" or not self._may_grant(request):
            raise Http404
        try:
            batch = grant_batch_resume(batch=batch)
        except ApplicationError as exc:
            messages.error(request, exc.message)
        else:
            if batch.status == GrantStatus.RUNNING:
                transaction.on_commit(lambda: grant_batch_continue.delay(batch.pk))
        return HttpResponseRedirect(reverse("admin:grants_grantbatch_change", args=[batch.pk]))
