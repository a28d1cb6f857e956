"""python manage.py replay_events --check [--campaign C]: every coupon row must equal the fold of its events."""
from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from coupons.models import Coupon
from coupons.replay import disagreements


class Command(BaseCommand):
    help = "Fold the event log of every coupon and report each coupon whose row disagrees (exit 1)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--check", action="store_true", help="report only (the only mode so far)")
        parser.add_argument("--campaign", type=int, help="only this campaign's coupons")

    def handle(self, *args: Any, **opts: Any) -> None:
        if not opts["check"]:
            raise CommandError("say --check: replay_events only reports (repair comes with reconcile --repair)")
        coupons = Coupon.objects.all()
        if opts["campaign"]:
            coupons = coupons.filter(campaign_id=opts["campaign"])
        total = coupons.count()
        bad = 0
        for d in disagreements(coupons):
            bad += 1
            self.stdout.write(f"coupon {d.code} (#{d.coupon_id}): row {d.row} but its events say {d.events}")
        self.stdout.write(f"{total} coupons checked, {bad} disagree with their events")
        if bad:
            sys.exit(1)
