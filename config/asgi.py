"""The web application: what the project's web server (config/server.py) serves, and `application`, the same
stack as an ASGI application for any ASGI server (`uvicorn config.asgi:application --http httptools --loop
uvloop`).

    RouteBodyLimits  the routes' body limits, asked at each request's head (config/body_limits.py)
    ClaimDoor        POST /api/v1/campaigns/{id}/claim on the event loop   (orders/door.py)
    ClaimStatusDoor  GET /api/v1/claims/{id} from Redis, long polls too    (orders/status_door.py)
    ShopperDoors     POST /api/v1/carts/validate, GET /api/v1/me/coupons   (coupons/doors.py)
    UseDoor          POST /api/v1/coupons/{code}/{use} to Django's threads (coupons/use_door.py)
    HealthCheck      GET /healthz on the event loop                        (core/web.py)
    DjangoThreads    everything else: Django's WSGI handler in threads     (core/web.py; core/handlers.py)
"""
from __future__ import annotations

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.dev")

from core.handlers import django_application as _django_application  # noqa: E402  (after the settings module)

django_application = _django_application()  # the API's routes through the middleware they need

from config.body_limits import body_limits  # noqa: E402  (after Django is set up: the imports below load the apps)
from core.web import DjangoThreads, HealthCheck, RouteBodyLimits, asgi  # noqa: E402
from coupons.doors import ShopperDoors  # noqa: E402
from coupons.use_door import UseDoor  # noqa: E402
from orders.door import ClaimDoor  # noqa: E402
from orders.status_door import ClaimStatusDoor  # noqa: E402
from storefronts.keyring import KEYRING  # noqa: E402
from webserver.interface import Application  # noqa: E402


def make_application(threads: int) -> Application:
    """The project's stack of layers, with `threads` threads for Django."""
    limits = body_limits()
    django = DjangoThreads(django_application, threads, limits)
    KEYRING.start()  # this worker's storefront keys read by its own thread before the first keyed token comes
    return RouteBodyLimits(ClaimDoor(ClaimStatusDoor(ShopperDoors(UseDoor(HealthCheck(django), django)))), limits)


application = asgi(make_application(threads=int(os.environ.get("COUPONS_WEB_THREADS", "16"))))
