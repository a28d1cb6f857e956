"""python manage.py preheat CAMPAIGN: load a campaign into Redis, or rebuild its lost state from PostgreSQL."""
from __future__ import annotations

import json
from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from campaigns.errors import CampaignStateLost
from campaigns.models import Campaign
from campaigns.services import campaign_preheat
from core.commands import OperatorCommand
from core.errors import ApplicationError
from orders.rebuild import campaign_rebuild


class Command(OperatorCommand):
    help = _("Load stock, limits and window of a campaign into Redis (rebuilding from PostgreSQL if lost).")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("campaign", type=int, help=gettext("campaign id"))

    def handle(self, *args: Any, **opts: Any) -> None:
        campaign = Campaign.objects.filter(pk=opts["campaign"]).first()
        if campaign is None:
            raise CommandError(gettext("No campaign #%(id)s.") % {"id": opts["campaign"]})
        try:
            try:
                result = campaign_preheat(campaign=campaign)
                summary = {"id": campaign.pk, "action": "loaded" if result.stock_created else "refreshed",
                           "remaining": result.remaining}
            except CampaignStateLost:
                self.stderr.write(gettext("Redis holds no stock for this campaign: rebuilding from PostgreSQL ..."))
                summary = {"id": campaign.pk, "action": "rebuilt", "remaining": campaign_rebuild(campaign=campaign)}
        except ApplicationError as exc:
            raise CommandError(exc.message) from exc
        self.stdout.write(json.dumps(summary))
