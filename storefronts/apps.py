from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class StorefrontsConfig(AppConfig):
    name = "storefronts"
    verbose_name = _("Storefront clients")

    def ready(self) -> None:
        from core.auth import use_storefront_keys

        from .keyring import KEYRING

        # core.auth checks "<key id>.<expires>.<sig>" tokens against this worker's keys
        use_storefront_keys(KEYRING.key)
