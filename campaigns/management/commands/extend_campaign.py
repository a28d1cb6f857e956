"""python manage.py extend_campaign CAMPAIGN (--to ISO|+2h | --by +2h): move a campaign's end later."""
from __future__ import annotations

import json
import re
from datetime import datetime, timedelta
from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.utils import timezone
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from campaigns.extension import campaign_extend_end, operator_time
from campaigns.models import Campaign
from core.commands import OperatorCommand
from core.errors import ApplicationError

from .campaign_create import RELATIVE_RE, UNIT_SECONDS, parse_moment

NUMBER_RE = re.compile(r"[+-]?[0-9]+(\.[0-9]+)?")


def refuse_bare_number(text: str, *, flag: str) -> None:
    """Refuse a number without a unit: seconds, milliseconds or hours can't be told apart."""
    if not NUMBER_RE.fullmatch(text):
        return
    digits = len(text.lstrip("+-").split(".")[0])
    if digits == 13:
        raise CommandError(
            gettext("%(flag)s: %(text)s looks like epoch milliseconds; give an ISO 8601 time (naive = operator's "
                    "zone, %(zone)s) or +N[smhd].")
            % {"flag": flag, "text": text, "zone": timezone.get_default_timezone_name()}
        )
    if digits == 10:
        raise CommandError(
            gettext("%(flag)s: %(text)s looks like epoch seconds; give an ISO 8601 time (naive = operator's "
                    "zone, %(zone)s) or +N[smhd].")
            % {"flag": flag, "text": text, "zone": timezone.get_default_timezone_name()}
        )
    raise CommandError(gettext("%(flag)s: a bare number (%(text)s) has no unit; give +N[smhd], e.g. +30m, +2h, +7d.")
                       % {"flag": flag, "text": text})


def parse_new_end(*, to: str | None, by: str | None, current_end: datetime) -> datetime:
    """Return the new end from --to (ISO, 'now' or +N[smhd] from now) or --by (+N[smhd] after the end)."""
    if by is not None:
        refuse_bare_number(by, flag="--by")
        if by.startswith("-"):
            raise CommandError(gettext("--by: an extension moves the end later; give +N[smhd], got %(text)s")
                               % {"text": repr(by)})
        match = RELATIVE_RE.fullmatch(by if by.startswith("+") else f"+{by}")
        if not match:
            raise CommandError(gettext("--by: expected +N[smhd] (e.g. +30m, +2h, +7d), got %(text)s")
                               % {"text": repr(by)})
        return current_end + timedelta(seconds=int(match.group(1)) * UNIT_SECONDS[match.group(2)])
    assert to is not None
    refuse_bare_number(to, flag="--to")
    return parse_moment(to, relative_to=timezone.now(), flag="--to")


class Command(OperatorCommand):
    help = _("Move a published, not yet ended campaign's end later (PostgreSQL and Redis). Prints one JSON line.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("campaign", type=int, help=gettext("campaign id"))
        target = parser.add_mutually_exclusive_group(required=True)
        target.add_argument("--to",
                            help=gettext("the new end: ISO 8601 (naive = operator's zone) or +N[smhd] from now"))
        target.add_argument("--by", help=gettext("how much later than the current end: +N[smhd], e.g. +2h"))
        parser.add_argument("--actor", default="manage.py extend_campaign", help=gettext("who asked (audit event)"))

    def handle(self, *args: Any, **opts: Any) -> None:
        campaign = Campaign.objects.filter(pk=opts["campaign"]).first()
        if campaign is None:
            raise CommandError(gettext("No campaign #%(id)s.") % {"id": opts["campaign"]})
        old_end = campaign.ends_at
        new_end = parse_new_end(to=opts["to"], by=opts["by"], current_end=old_end)
        try:
            campaign = campaign_extend_end(campaign=campaign, new_end=new_end, actor=opts["actor"])
        except ApplicationError as exc:
            raise CommandError(exc.message) from exc
        self.stdout.write(json.dumps({
            "id": campaign.pk,
            "extended": campaign.ends_at != old_end,
            "from": operator_time(old_end),
            "ends_at": operator_time(campaign.ends_at),
        }))
