"""python manage.py reconcile [--campaign C] [--repair]: verify every loaded campaign; rebuild lost state."""
from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from campaigns.models import Campaign
from campaigns.redis_state import StoreUnavailable
from orders.services import campaign_rebuild, campaign_verify, campaigns_to_drain


class Command(BaseCommand):
    help = "Compare Redis with PostgreSQL for each loaded campaign; --repair rebuilds a campaign Redis lost."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--campaign", type=int)
        parser.add_argument("--repair", action="store_true")

    def handle(self, *args: Any, **opts: Any) -> None:
        ids = [opts["campaign"]] if opts["campaign"] else campaigns_to_drain()
        unbalanced = 0
        for campaign in Campaign.objects.filter(pk__in=ids).order_by("pk"):
            try:
                balance = campaign_verify(campaign=campaign)
                if not balance.balanced and balance.remaining is None and opts["repair"]:
                    self.stdout.write(f"campaign {campaign.pk}: Redis lost its state; rebuilding")
                    campaign_rebuild(campaign=campaign)
                    balance = campaign_verify(campaign=campaign)
            except StoreUnavailable as exc:
                raise CommandError(f"Redis unavailable: {exc}") from exc
            unbalanced += not balance.balanced
            self.stdout.write(
                f"campaign {campaign.pk}: total {balance.total_stock} = remaining {balance.remaining} + claims "
                f"{balance.claims} - restocked {balance.restocked} -> "
                f"{'balanced' if balance.balanced else 'DRIFT ' + '; '.join(balance.problems)}"
            )
        if unbalanced:
            sys.exit(1)
