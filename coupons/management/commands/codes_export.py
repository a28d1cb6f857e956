"""python manage.py codes_export CAMPAIGN [--batch B]: a campaign's unique codes as CSV on stdout."""
from __future__ import annotations

import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from campaigns.models import Campaign
from coupons.code_batches import unique_codes_csv
from coupons.models import CodeBatch


class Command(BaseCommand):
    help = ("Write a codes campaign's unique codes (or one batch's) as CSV on stdout: code,status,holder,batch; "
            "status is 'unused' while nobody holds a code, else its coupon's status. Streams in constant memory; "
            "progress on stderr.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("campaign", type=int, help="campaign id")
        parser.add_argument("--batch", type=int, help="only this batch's codes")

    def handle(self, *args: Any, **opts: Any) -> None:
        campaign = Campaign.objects.filter(pk=opts["campaign"]).first()
        if campaign is None:
            raise CommandError(f"No campaign #{opts['campaign']}.")
        if opts["batch"] is not None and not CodeBatch.objects.filter(pk=opts["batch"], campaign=campaign).exists():
            raise CommandError(f"--batch: campaign #{campaign.pk} has no batch #{opts['batch']}.")
        rows, start, last = 0, time.monotonic(), time.monotonic()
        for part in unique_codes_csv(campaign_id=campaign.pk, batch_id=opts["batch"]):
            self.stdout.write(part, ending="")
            rows += part.count("\n")
            if time.monotonic() - last >= 2.0:
                last = time.monotonic()
                self.stderr.write(f"{rows - 1:,} codes written ({(rows - 1) / (last - start):,.0f}/s)")
        self.stdout.flush()
        self.stderr.write(f"{max(rows - 1, 0):,} codes of {campaign}")
