"""manage.py storefront_revoke KEY_ID: its tokens (401) and api_key are refused on every web worker within 2 s."""
from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from storefronts.services import StorefrontRefused, storefront_key_revoke


class Command(BaseCommand):
    help = "Revoke a storefront key: its tokens and api_key are refused by every worker within 2 seconds."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("key_id")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            key = storefront_key_revoke(key_id=options["key_id"])
        except StorefrontRefused as exc:
            raise CommandError(str(exc)) from exc
        assert key.revoked_at is not None
        self.stdout.write(json.dumps({"key_id": key.key_id, "revoked_at": key.revoked_at.isoformat()}))
