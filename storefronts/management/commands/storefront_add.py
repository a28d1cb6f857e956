"""manage.py storefront_add NAME [--channels web,app]: prints {"key_id", "secret", "api_key"} (shown once)."""
from __future__ import annotations

import json
from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from core.commands import OperatorCommand
from storefronts.services import StorefrontRefused, storefront_add


class Command(OperatorCommand):
    help = _("Register a storefront client; print its first key's key_id, secret and api_key (shown once).")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", help=gettext("the storefront's name (1-100 characters)"))
        parser.add_argument("--channels", default="", help=gettext("Its sales channels, comma-separated (web,app)."))

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            _, issued = storefront_add(name=options["name"], channels=options["channels"])
        except StorefrontRefused as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(json.dumps(issued.as_dict()))
