"""manage.py storefront_revoke KEY_ID: its tokens (401) and api_key are refused on every web worker within 2 s."""
from __future__ import annotations

import json
from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from core.commands import OperatorCommand
from storefronts.services import StorefrontRefused, storefront_key_revoke


class Command(OperatorCommand):
    help = _("Revoke a storefront key: its tokens and api_key are refused by every worker within 2 seconds.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("key_id", help=gettext("the key's id, as storefront_add or storefront_rotate printed it"))

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            key = storefront_key_revoke(key_id=options["key_id"])
        except StorefrontRefused as exc:
            raise CommandError(str(exc)) from exc
        assert key.revoked_at is not None
        self.stdout.write(json.dumps({"key_id": key.key_id, "revoked_at": key.revoked_at.isoformat()}))
