"""python manage.py reconcile [--campaign C] [--repair]: compare Redis with PostgreSQL, repair what is safe."""
from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from campaigns.models import Campaign
from campaigns.redis_state import StoreUnavailable
from core.commands import OperatorCommand
from core.errors import Unavailable
from orders.reconciliation import campaign_reconcile, campaigns_to_reconcile


class Command(OperatorCommand):
    help = _("Compare each live or recently ended campaign (or --campaign) with PostgreSQL and record it; "
             "--repair persists lost claims, rebuilds a lost Redis state and sets wrong counters right.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--campaign", type=int, help=gettext("only this campaign (its id)"))
        parser.add_argument("--repair", action="store_true", help=gettext("repair what is safe to repair"))

    def handle(self, *args: Any, **opts: Any) -> None:
        if opts["campaign"]:
            campaigns = list(Campaign.objects.filter(pk=opts["campaign"]))
            if not campaigns:
                raise CommandError(gettext("No campaign #%(id)s.") % {"id": opts["campaign"]})
        else:
            campaigns = campaigns_to_reconcile()
        unbalanced = 0
        for campaign in campaigns:
            try:
                record = campaign_reconcile(campaign=campaign, repair=opts["repair"], source="command")
            except (StoreUnavailable, Unavailable) as exc:
                raise CommandError(gettext("Redis unavailable: %(error)s") % {"error": exc}) from exc
            if record is None:
                self.stdout.write(gettext("campaign %(id)s: another reconciliation is running; skipped")
                                  % {"id": campaign.pk})
                continue
            unbalanced += not record.balanced
            for repair in record.repairs:
                self.stdout.write(gettext("campaign %(id)s: repaired: %(repair)s")
                                  % {"id": campaign.pk, "repair": repair})
            outcome = gettext("balanced") if record.balanced else gettext("DRIFT: %(problems)s") % {
                "problems": "; ".join(record.problems)}
            self.stdout.write(
                gettext("campaign %(id)s: total %(total)s = remaining %(remaining)s + claims %(claims)s - restocked "
                        "%(restocked)s -> %(outcome)s")
                % {"id": campaign.pk, "total": record.total_stock, "remaining": record.remaining,
                   "claims": record.claims, "restocked": record.restocked, "outcome": outcome}
            )
        if unbalanced:
            sys.exit(1)
