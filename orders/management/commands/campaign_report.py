"""manage.py campaign_report CAMPAIGN [--format json|csv]: a campaign's figures by day (orders/report.py)."""
from __future__ import annotations

import json
from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from campaigns.models import Campaign
from core.commands import OperatorCommand
from orders.report import campaign_report, report_csv_lines


class Command(OperatorCommand):
    help = _("A campaign's claims, issued, reserved, redeemed, released, expired, revoked and discount given, by day "
             "in the operator's zone, with totals and the redemption rate (from the event log).")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("campaign", type=int, help=gettext("campaign id"))
        parser.add_argument("--format", choices=["json", "csv"], default="json",
                            help=gettext("json (one line) or csv (a header, a row a day, the totals)"))

    def handle(self, *args: Any, **options: Any) -> None:
        campaign = Campaign.objects.filter(pk=options["campaign"]).first()
        if campaign is None:
            raise CommandError(gettext("No campaign #%(id)s.") % {"id": options["campaign"]})
        report = campaign_report(campaign=campaign)
        if options["format"] == "csv":
            for line in report_csv_lines(report):
                self.stdout.write(line, ending="")
        else:
            self.stdout.write(json.dumps(report.as_json()))
