"""manage.py storefront_rotate KEY_ID: a new key for the same storefront, printed once; the old stays valid until
storefront_revoke."""
from __future__ import annotations

import json
from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from core.commands import OperatorCommand
from storefronts.services import StorefrontRefused, storefront_key_rotate


class Command(OperatorCommand):
    help = _("Add a new key to the storefront of KEY_ID; print its key_id, secret and api_key (shown once).")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("key_id", help=gettext("the id of one of the storefront's keys"))

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            issued = storefront_key_rotate(key_id=options["key_id"])
        except StorefrontRefused as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(json.dumps(issued.as_dict()))
