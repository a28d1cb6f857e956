"""WSGI entry point for Django alone (`config.wsgi:application` under any WSGI server): the claim is Django's
view there (orders.apis.CampaignClaimApi), through the same implementation as every other way in; the API's routes
through the middleware they need (core/handlers.py)."""
import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.dev")

from core.handlers import django_application as _django_application  # noqa: E402  (after the settings module)

application = _django_application()
django_application = application
