"""python manage.py mint_token USER [--ttl S] [--tags a,b]: print a valid X-Token for a shopper (with --tags, one
signed with the tags the storefront sends as X-Shopper-Tags)."""
from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from core.auth import mint_token
from core.commands import OperatorCommand


class Command(OperatorCommand):
    help = _("Print a valid X-Token for USER (send it with X-User-Id: USER).")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("user", help=gettext("the shopper's id (X-User-Id)"))
        parser.add_argument("--ttl", type=int, default=600, help=gettext("seconds the token stays valid (max 3600)"))
        parser.add_argument("--tags", default=None,
                            help=gettext("the shopper's tags, sent as X-Shopper-Tags (e.g. vip,gold)"))

    def handle(self, *args: Any, **opts: Any) -> None:
        try:
            self.stdout.write(mint_token(opts["user"], ttl=opts["ttl"], tags=opts["tags"]))
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
