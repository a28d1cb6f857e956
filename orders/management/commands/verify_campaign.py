"""python manage.py verify_campaign CAMPAIGN: exact accounting of a campaign; exit 0 only if it balances."""
from __future__ import annotations

import json
import sys
from dataclasses import asdict
from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from campaigns.models import Campaign
from campaigns.redis_state import StoreUnavailable
from core.commands import OperatorCommand
from orders.verify import Balance, campaign_verify


def balance_lines(b: Balance) -> list[str]:
    right = gettext("unknown") if b.right_side is None else str(b.right_side)
    remaining = gettext("missing") if b.remaining is None else b.remaining

    def row(sign: str, label: str, value: object) -> str:
        return f"{sign} {label:<36}{value:>10}"

    return [
        gettext("campaign %(id)s") % {"id": b.campaign_id},
        row(" ", gettext("total stock"), b.total_stock),
        row(" ", gettext("Redis remaining"), remaining),
        *([row("+", gettext("in transit between buckets"), b.in_transit),
           "  " + gettext("remaining per bucket: %(remaining)s") % {"remaining": b.bucket_remaining}]
          if b.bucket_remaining else []),
        row("+", gettext("claims persisted in PostgreSQL"), b.persisted_claims),
        row("+", gettext("claims still only in the ledger"), b.ledger_only_claims),
        row("-", gettext("claims cancelled and restocked"), b.restocked),
        f"= {right:>44}",
        "  " + gettext("coupons %(coupons)s, claims issued %(issued)s, shoppers above the limit %(over)s, per-user "
                       "counts wrong in Redis %(drift)s, ledger entries parked (never persisted, not claims) "
                       "%(parked)s")
        % {"coupons": b.coupons, "issued": b.issued_claims, "over": len(b.users_over_limit),
           "drift": len(b.users_drift), "parked": b.parked},
        *(["  " + gettext("budget %(budget)s = left in Redis %(left)s + used (held and redeemed) %(used)s")
            % {"budget": b.money["budget"], "left": b.money["left"] or gettext("not loaded"), "used": b.money["used"]}]
          if b.money else []),
        *["  " + gettext("problem: %(problem)s") % {"problem": p} for p in b.problems],
        gettext("BALANCED") if b.balanced else gettext("NOT BALANCED"),
    ]


class Command(OperatorCommand):
    help = _("Check total stock == Redis remaining + claims (persisted and in the ledger) - restocked.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("campaign", type=int, help=gettext("campaign id"))
        parser.add_argument("--json", action="store_true", help=gettext("print one JSON line instead of a table"))

    def handle(self, *args: Any, **opts: Any) -> None:
        campaign = Campaign.objects.filter(pk=opts["campaign"]).first()
        if campaign is None:
            raise CommandError(gettext("No campaign #%(id)s.") % {"id": opts["campaign"]})
        try:
            balance = campaign_verify(campaign=campaign)
        except StoreUnavailable as exc:
            raise CommandError(gettext("Redis unavailable: %(error)s") % {"error": exc}) from exc
        if opts["json"]:
            summary = {**asdict(balance), "missing_entries": len(balance.missing_entries),
                       "given_back": sorted(balance.given_back)}  # a set: not JSON
            self.stdout.write(json.dumps({**summary, "right_side": balance.right_side, "balanced": balance.balanced}))
        else:
            self.stdout.write("\n".join(balance_lines(balance)))
        if not balance.balanced:
            sys.exit(1)
