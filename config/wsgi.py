"""WSGI entry point: `granian --interface wsgi config.wsgi:application`.

The claim route is answered by config.fastpath before Django's request cycle; everything else is Django.
"""
import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.dev")

django_application = get_wsgi_application()

from .fastpath import ClaimFastPath  # noqa: E402  (after Django is set up: it imports the apps)

application = ClaimFastPath(django_application)
