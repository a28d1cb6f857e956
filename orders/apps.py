from django.apps import AppConfig
from django.db.models.signals import post_migrate
from django.utils.translation import gettext_lazy as _


class OrdersConfig(AppConfig):
    name = "orders"
    verbose_name = _("Claims (orders)")

    def ready(self) -> None:
        from core.metrics import before_scrape, register_scraped

        from . import metrics
        from .console import set_up_console

        post_migrate.connect(set_up_console, sender=self)
        before_scrape(metrics.CLAIM_TALLY.flush)
        register_scraped(metrics.ReconciliationCollector)
        register_scraped(metrics.LiveCampaignCollector)
