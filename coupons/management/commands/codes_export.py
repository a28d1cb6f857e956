"""python manage.py codes_export CAMPAIGN [--batch B]: a campaign's unique codes as CSV on stdout."""
from __future__ import annotations

import time
from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from campaigns.models import Campaign
from core.commands import OperatorCommand
from core.errors import ApplicationError
from coupons.code_batches import check_codes_campaign, unique_codes_csv
from coupons.models import CodeBatch


class Command(OperatorCommand):
    help = _("Write a codes campaign's unique codes (or one batch's) as CSV on stdout: code,status,holder,batch; "
             "status is 'unused' while nobody holds a code, else its coupon's status. Streams in constant memory; "
             "progress on stderr.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("campaign", type=int, help=gettext("campaign id"))
        parser.add_argument("--batch", type=int, help=gettext("only this batch's codes"))

    def handle(self, *args: Any, **opts: Any) -> None:
        campaign = Campaign.objects.filter(pk=opts["campaign"]).first()
        if campaign is None:
            raise CommandError(gettext("No campaign #%(id)s.") % {"id": opts["campaign"]})
        try:
            check_codes_campaign(campaign)  # a grab campaign or a shared code has no unique codes to export
        except ApplicationError as exc:
            raise CommandError(exc.message) from exc
        if opts["batch"] is not None and not CodeBatch.objects.filter(pk=opts["batch"], campaign=campaign).exists():
            raise CommandError(gettext("--batch: campaign #%(campaign)s has no batch #%(batch)s.")
                               % {"campaign": campaign.pk, "batch": opts["batch"]})
        rows, start, last = 0, time.monotonic(), time.monotonic()
        for part in unique_codes_csv(campaign_id=campaign.pk, batch_id=opts["batch"]):
            self.stdout.write(part, ending="")
            rows += part.count("\n")
            if time.monotonic() - last >= 2.0:
                last = time.monotonic()
                self.stderr.write(gettext("%(count)s codes written (%(rate)s/s)")
                                  % {"count": f"{rows - 1:,}", "rate": f"{(rows - 1) / (last - start):,.0f}"})
        self.stdout.flush()
        self.stderr.write(gettext("%(count)s codes of %(campaign)s")
                          % {"count": f"{max(rows - 1, 0):,}", "campaign": campaign})
