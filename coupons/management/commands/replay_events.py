"""python manage.py replay_events --check [--campaign C]: every coupon row must equal the fold of its events."""
from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from core.commands import OperatorCommand
from coupons.models import Coupon
from coupons.replay import disagreements


class Command(OperatorCommand):
    help = _("Fold the event log of every coupon and report each coupon whose row disagrees (exit 1).")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--check", action="store_true", help=gettext("report only (the only mode so far)"))
        parser.add_argument("--campaign", type=int, help=gettext("only this campaign's coupons"))

    def handle(self, *args: Any, **opts: Any) -> None:
        if not opts["check"]:
            raise CommandError(
                gettext("say --check: replay_events only reports (repair comes with reconcile --repair)"))
        coupons = Coupon.objects.all()
        if opts["campaign"]:
            coupons = coupons.filter(campaign_id=opts["campaign"])
        total = coupons.count()
        bad = 0
        for d in disagreements(coupons):
            bad += 1
            self.stdout.write(gettext("coupon %(code)s (#%(id)s): row %(row)s but its events say %(events)s")
                              % {"code": d.code, "id": d.coupon_id, "row": d.row, "events": d.events})
        self.stdout.write(gettext("%(total)s coupons checked, %(bad)s disagree with their events")
                          % {"total": total, "bad": bad})
        if bad:
            sys.exit(1)
