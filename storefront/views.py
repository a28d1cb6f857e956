"""The demo storefront at "/" and, in development only, the endpoint that gives it a demo shopper.

The page (templates/storefront/index.html + static/storefront/) calls the public API like any storefront.
A real storefront mints tokens in its own backend for its logged-in shoppers; the demo has no backend of
its own, so POST /dev/demo-shopper mints one for a generated shopper `demo-<random>`. That route exists
only when demo tokens are allowed (`demo_tokens_allowed()`), decided once when the URL conf is imported:
never under config.settings.production, otherwise COUPONS_DEMO_TOKENS, which follows DEBUG when unset.
"""
from __future__ import annotations

import secrets
import sys
import time

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST
from django.views.generic import TemplateView

from core.auth import is_user_id, mint_token
from core.errors import ApplicationError, BadRequest
from core.http import application_error_response, body_of, json_object_body, json_response

PRODUCTION_SETTINGS = "config.settings.production"
DEMO_USER_PREFIX = "demo-"
DEMO_TOKEN_TTL = 1800  # seconds; capped by COUPONS_TOKEN_MAX_TTL. The page renews well before expiry.


class StorefrontView(TemplateView):
    template_name = "storefront/index.html"


def demo_tokens_allowed() -> bool:
    """True when the dev-only demo-shopper endpoint may exist: never with production settings."""
    module = getattr(settings, "SETTINGS_MODULE", "") or ""
    if module == PRODUCTION_SETTINGS or PRODUCTION_SETTINGS in sys.modules:
        return False  # production.py (or a module built on it) was loaded: whatever DEBUG or the flag say
    flag = getattr(settings, "COUPONS_DEMO_TOKENS", None)
    return bool(settings.DEBUG if flag is None else flag)


@csrf_exempt  # no session or cookie is involved: the answer is only readable by the page's own origin
@require_POST
def demo_shopper(request: HttpRequest) -> HttpResponse:
    """POST /dev/demo-shopper [{"user_id": "demo-..."}]: a token for a new demo shopper, or a renewed one.

    Only ids starting with "demo-" are renewed, so this can never speak for a real shopper.
    """
    try:
        data = json_object_body(request)
        user_id = data.get("user_id")
        if user_id is None:
            user_id = DEMO_USER_PREFIX + secrets.token_hex(6)
        elif not (isinstance(user_id, str) and user_id.startswith(DEMO_USER_PREFIX) and user_id != DEMO_USER_PREFIX
                  and is_user_id(user_id)):
            raise BadRequest('user_id must be a demo shopper\'s id: "demo-" and up to 59 of A-Z a-z 0-9 _ -.')
    except ApplicationError as exc:
        return application_error_response(exc)
    ttl = min(DEMO_TOKEN_TTL, settings.COUPONS_TOKEN_MAX_TTL)
    now = int(time.time())
    token = mint_token(user_id, ttl=ttl, now=now)
    return json_response(
        body_of(0, "ok", user_id=user_id, token=token, expires=int(token.split(".", 1)[0]), ttl=ttl),
        200,
        {"Cache-Control": "no-store"},
    )
