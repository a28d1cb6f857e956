"""python manage.py extend_coupons CAMPAIGN --days N: extend the campaign's usable coupons by N days."""
from __future__ import annotations

import json
from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from campaigns.models import Campaign, CampaignEvent, CampaignEventType
from core.commands import OperatorCommand
from core.errors import ApplicationError
from coupons.extension import check_days, validity_extension_apply, validity_extension_begin


def parse_days(text: str) -> int:
    """Return --days as an int 1..365; refuse anything else (with a hint at a unit mix-up)."""
    try:
        days = int(text)
    except ValueError as exc:
        raise CommandError(gettext("--days: a whole number of days (1-365), got %(text)s")
                           % {"text": repr(text)}) from exc
    try:
        return check_days(days)
    except ApplicationError as exc:
        raise CommandError(f"--days: {exc.message}") from exc


class Command(OperatorCommand):
    help = _(
        "Extend the validity of a campaign's issued, still-usable coupons by N days, in batches, one event "
        "each. Prints one JSON line. --resume ID finishes an extension that was interrupted."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("campaign", type=int, help=gettext("campaign id"))
        what = parser.add_mutually_exclusive_group(required=True)
        # A string, so that a bad value gets our message (and hint) rather than argparse's.
        what.add_argument("--days", help=gettext("whole days to add to each coupon's expiry, 1-365"))
        what.add_argument("--resume", type=int, metavar="EXTENSION", help=gettext("finish this extension (its id)"))
        parser.add_argument("--batch-size", type=int, default=1000, help=gettext("coupons per transaction"))
        parser.add_argument("--actor", default="manage.py extend_coupons", help=gettext("who asked (audit event)"))

    def handle(self, *args: Any, **opts: Any) -> None:
        days = parse_days(opts["days"]) if opts["days"] is not None else None
        if opts["batch_size"] < 1:
            raise CommandError(gettext("%(flag)s: must be 1 or more") % {"flag": "--batch-size"})
        campaign = Campaign.objects.filter(pk=opts["campaign"]).first()
        if campaign is None:
            raise CommandError(gettext("No campaign #%(id)s.") % {"id": opts["campaign"]})
        try:
            if days is not None:
                extension = validity_extension_begin(campaign=campaign, days=days, actor=opts["actor"])
            else:
                found = CampaignEvent.objects.filter(
                    pk=opts["resume"], campaign=campaign, type=CampaignEventType.VALIDITY_EXTENDED
                ).first()
                if found is None:
                    raise CommandError(
                        gettext("--resume: campaign #%(campaign)s has no validity extension #%(extension)s.")
                        % {"campaign": campaign.pk, "extension": opts["resume"]}
                    )
                extension = found
            extended = validity_extension_apply(extension=extension, batch_size=opts["batch_size"])
        except ApplicationError as exc:
            raise CommandError(exc.message) from exc
        self.stdout.write(json.dumps({
            "campaign": campaign.pk,
            "extension": extension.pk,
            "days": extension.data["days"],
            "extended": extended,
        }))
