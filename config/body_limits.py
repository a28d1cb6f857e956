"""The largest body each route takes: one table (webserver.interface.BodyLimits) that every layer reading a body
asks, the web server at a request's head (a larger Content-Length is a 413, its body never read), the ASGI
adapter and DjangoThreads (core/web.py). Every route takes DATA_UPLOAD_MAX_MEMORY_SIZE (64 KiB), but:

    POST /api/v1/campaigns/{id}/grants       grants.apis.MAX_BODY_BYTES, 1 MiB (10,000 ids a call)
    the console's grant upload               COUPONS_GRANTS_MAX_FILE_BYTES + 64 KiB (the form's other fields and
    ({DJANGO_ADMIN_URL}grants/grantbatch/     multipart's boundaries around the file)
     upload/{campaign id}/)

The routes' paths come from the URLconf (reverse), so they follow a moved console. The TLS proxy takes the same
(deploy/nginx/templates/nginx.conf.template). The claim's door takes the stack's own limit (orders/door.py).
"""
from __future__ import annotations

import re

from django.conf import settings
from django.urls import reverse

from grants.apis import MAX_BODY_BYTES as GRANTS_MAX_BODY_BYTES
from webserver.interface import BodyLimits

UPLOAD_FORM_BYTES = 64 * 1024  # an upload's bytes besides its file: the CSRF token, the batch's name, boundaries
_HOLE = "7654321"  # stands for an id in a reversed route


def body_limits() -> BodyLimits:
    return BodyLimits(settings.DATA_UPLOAD_MAX_MEMORY_SIZE, [
        (route_pattern("campaign-grants", "campaign_id", "[^/]+"), GRANTS_MAX_BODY_BYTES),
        (route_pattern("admin:grants_grantbatch_upload", "campaign_id", "[0-9]+"),
         settings.COUPONS_GRANTS_MAX_FILE_BYTES + UPLOAD_FORM_BYTES),
    ])


def route_pattern(name: str, argument: str, matches: str) -> str:
    """The regular expression of a named route's whole path, its one argument matching `matches`."""
    before, after = reverse(name, kwargs={argument: _HOLE}).split(_HOLE)
    return re.escape(before) + matches + re.escape(after)
