"""WSGI entry point for Django alone (`config.wsgi:application` under any WSGI server): the claim is Django's
view there (orders.apis.campaign_claim), through the same implementation as every other way in."""
import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.dev")

application = get_wsgi_application()
django_application = application
