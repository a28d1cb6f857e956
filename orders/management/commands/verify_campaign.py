"""python manage.py verify_campaign CAMPAIGN: exact accounting of a campaign; exit 0 only if it balances."""
from __future__ import annotations

import json
import sys
from dataclasses import asdict
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from campaigns.models import Campaign
from campaigns.redis_state import StoreUnavailable
from orders.verify import Balance, campaign_verify


def balance_lines(b: Balance) -> list[str]:
    right = "unknown" if b.right_side is None else str(b.right_side)
    return [
        f"campaign {b.campaign_id}",
        f"  total stock                         {b.total_stock:>10}",
        f"  Redis remaining                     {'missing' if b.remaining is None else b.remaining:>10}",
        f"+ claims persisted in PostgreSQL      {b.persisted_claims:>10}",
        f"+ claims still only in the ledger     {b.ledger_only_claims:>10}",
        f"- claims cancelled and restocked      {b.restocked:>10}",
        f"= {right:>44}",
        f"  coupons {b.coupons}, claims issued {b.issued_claims}, shoppers above the limit "
        f"{len(b.users_over_limit)}, per-user counts wrong in Redis {len(b.users_drift)}, ledger entries parked "
        f"(never persisted, not claims) {b.parked}",
        *[f"  problem: {p}" for p in b.problems],
        "BALANCED" if b.balanced else "NOT BALANCED",
    ]


class Command(BaseCommand):
    help = "Check total stock == Redis remaining + claims (persisted and in the ledger) - restocked."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("campaign", type=int)
        parser.add_argument("--json", action="store_true", help="print one JSON line instead of a table")

    def handle(self, *args: Any, **opts: Any) -> None:
        campaign = Campaign.objects.filter(pk=opts["campaign"]).first()
        if campaign is None:
            raise CommandError(f"no campaign {opts['campaign']}")
        try:
            balance = campaign_verify(campaign=campaign)
        except StoreUnavailable as exc:
            raise CommandError(f"Redis unavailable: {exc}") from exc
        if opts["json"]:
            summary = {**asdict(balance), "missing_entries": len(balance.missing_entries),
                       "given_back": sorted(balance.given_back)}  # a set: not JSON
            self.stdout.write(json.dumps({**summary, "right_side": balance.right_side, "balanced": balance.balanced}))
        else:
            self.stdout.write("\n".join(balance_lines(balance)))
        if not balance.balanced:
            sys.exit(1)
