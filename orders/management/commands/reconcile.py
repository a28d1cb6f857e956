"""python manage.py reconcile [--campaign C] [--repair]: compare Redis with PostgreSQL, repair what is safe."""
from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from campaigns.models import Campaign
from campaigns.redis_state import StoreUnavailable
from core.errors import Unavailable
from orders.reconciliation import campaign_reconcile, campaigns_to_reconcile


class Command(BaseCommand):
    help = ("Compare each live or recently ended campaign (or --campaign) with PostgreSQL and record it; "
            "--repair persists lost claims, rebuilds a lost Redis state and sets wrong counters right.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--campaign", type=int)
        parser.add_argument("--repair", action="store_true")

    def handle(self, *args: Any, **opts: Any) -> None:
        if opts["campaign"]:
            campaigns = list(Campaign.objects.filter(pk=opts["campaign"]))
            if not campaigns:
                raise CommandError(f"no campaign {opts['campaign']}")
        else:
            campaigns = campaigns_to_reconcile()
        unbalanced = 0
        for campaign in campaigns:
            try:
                record = campaign_reconcile(campaign=campaign, repair=opts["repair"], source="command")
            except (StoreUnavailable, Unavailable) as exc:
                raise CommandError(f"Redis unavailable: {exc}") from exc
            if record is None:
                self.stdout.write(f"campaign {campaign.pk}: another reconciliation is running; skipped")
                continue
            unbalanced += not record.balanced
            for repair in record.repairs:
                self.stdout.write(f"campaign {campaign.pk}: repaired: {repair}")
            self.stdout.write(
                f"campaign {campaign.pk}: total {record.total_stock} = remaining {record.remaining} + claims "
                f"{record.claims} - restocked {record.restocked} -> "
                + ("balanced" if record.balanced else "DRIFT: " + "; ".join(record.problems))
            )
        if unbalanced:
            sys.exit(1)
