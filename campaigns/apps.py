from django.apps import AppConfig


class CampaignsConfig(AppConfig):
    name = "campaigns"
    verbose_name = "Campaigns"

    def ready(self) -> None:
        from core.health import register_check

        from .redis_state import redis_client

        register_check("redis", lambda: redis_client().ping())
