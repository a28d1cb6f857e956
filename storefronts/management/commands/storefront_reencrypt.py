"""manage.py storefront_reencrypt: every storefront secret encrypted again with the first of
COUPONS_STOREFRONT_ENCRYPTION_KEYS (docs/deployment.md: rotating the encryption key)."""
from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand

from storefronts.services import storefront_secrets_reencrypt


class Command(BaseCommand):
    help = "Encrypt every storefront key's secret again with the first COUPONS_STOREFRONT_ENCRYPTION_KEYS key."

    def handle(self, *args: Any, **options: Any) -> None:
        self.stdout.write(json.dumps({"reencrypted": storefront_secrets_reencrypt()}))
