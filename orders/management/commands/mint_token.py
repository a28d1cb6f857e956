"""python manage.py mint_token USER [--ttl S]: print a valid X-Token for a shopper."""
from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from core.auth import mint_token


class Command(BaseCommand):
    help = "Print a valid X-Token for USER (send it with X-User-Id: USER)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("user")
        parser.add_argument("--ttl", type=int, default=600, help="seconds the token stays valid (max 3600)")

    def handle(self, *args: Any, **opts: Any) -> None:
        try:
            self.stdout.write(mint_token(opts["user"], ttl=opts["ttl"]))
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
