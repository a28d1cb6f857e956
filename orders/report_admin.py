"""The campaign report in the operator's console: a page per campaign (figures by day, a chart) and its CSV,
streamed. Mixed into campaigns.admin.CampaignAdmin (CampaignReportMixin).

The page's column headers and the chart's series are in the operator's language (COLUMN_LABELS); the CSV keeps
the contract's English field names (day,claims,issued,...), like campaign_report --format csv: it is read by
spreadsheets and scripts that match the header, whatever language the operator reads the page in."""
from __future__ import annotations

from django.contrib import admin
from django.http import Http404, HttpRequest, StreamingHttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path
from django.utils.translation import gettext as _
from django.utils.translation import pgettext_lazy

from campaigns.charts import daily_bars_svg
from campaigns.models import Campaign

from .report import COUNTS, campaign_report, report_csv_lines

# A campaign's report: its figures of a day (orders/report.py COUNTS), as the page and the chart name them.
COLUMN_LABELS = {
    "claims": pgettext_lazy("report column", "claims"),
    "issued": pgettext_lazy("report column", "issued"),
    "reserved": pgettext_lazy("report column", "reserved"),
    "redeemed": pgettext_lazy("report column", "redeemed"),
    "released": pgettext_lazy("report column", "released"),
    "expired": pgettext_lazy("report column", "expired"),
    "revoked": pgettext_lazy("report column", "revoked"),
}
CHART_SERIES = ("issued", "redeemed", "released", "expired")


class CampaignReportMixin(admin.ModelAdmin):
    """Adds <id>/report/ and <id>/report.csv to a campaign admin."""

    def get_urls(self) -> list[URLPattern]:
        wrap = self.admin_site.admin_view
        return [
            path("<int:campaign_id>/report/", wrap(self.report_view), name="campaigns_campaign_report"),
            path("<int:campaign_id>/report.csv", wrap(self.report_csv_view), name="campaigns_campaign_report_csv"),
            *super().get_urls(),
        ]

    def _campaign(self, request: HttpRequest, campaign_id: int) -> Campaign:
        campaign = Campaign.objects.filter(pk=campaign_id).first()
        if campaign is None or not self.has_view_permission(request, campaign):
            raise Http404(_("No such campaign."))
        return campaign

    def report_view(self, request: HttpRequest, campaign_id: int) -> TemplateResponse:
        campaign = self._campaign(request, campaign_id)
        report = campaign_report(campaign=campaign)
        data = report.as_json()
        days = [d["day"] for d in data["days"]]
        series = {str(COLUMN_LABELS[name]): [d[name] for d in data["days"]] for name in CHART_SERIES}
        chart = daily_bars_svg(days=days, series=series)
        context = {**self.admin_site.each_context(request), "title": _("Report: %(name)s") % {"name": campaign.name},
                   "campaign": campaign, "report": data, "columns": [COLUMN_LABELS[name] for name in COUNTS],
                   "chart": chart,
                   "opts": self.model._meta, "original": campaign}
        return TemplateResponse(request, "admin/campaigns/campaign/report.html", context)

    def report_csv_view(self, request: HttpRequest, campaign_id: int) -> StreamingHttpResponse:
        campaign = self._campaign(request, campaign_id)
        response = StreamingHttpResponse(report_csv_lines(campaign_report(campaign=campaign)),
                                         content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="campaign-{campaign.pk}-report.csv"'
        return response
