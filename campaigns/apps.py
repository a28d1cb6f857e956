from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class CampaignsConfig(AppConfig):
    name = "campaigns"
    verbose_name = _("Campaigns")

    def ready(self) -> None:
        from core.health import register_check

        from .redis_state import redis_client

        register_check("redis", lambda: redis_client().ping())
