"""manage.py storefront_reencrypt: every storefront secret encrypted again with the first of
COUPONS_STOREFRONT_ENCRYPTION_KEYS (docs/deployment.md: rotating the encryption key)."""
from __future__ import annotations

import json
from typing import Any

from django.utils.translation import gettext_lazy as _

from core.commands import OperatorCommand
from storefronts.services import storefront_secrets_reencrypt


class Command(OperatorCommand):
    help = _("Encrypt every storefront key's secret again with the first COUPONS_STOREFRONT_ENCRYPTION_KEYS key.")

    def handle(self, *args: Any, **options: Any) -> None:
        self.stdout.write(json.dumps({"reencrypted": storefront_secrets_reencrypt()}))
