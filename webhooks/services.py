"""Register webhook endpoints (admin and webhook_add): the URL checked (SSRF), the secret kept on the row only."""
from __future__ import annotations

import secrets
from collections.abc import Iterable

from django.utils.translation import gettext

from core.errors import BadRequest

from .addresses import check_url
from .models import EventType, WebhookEndpoint, all_event_types


def new_secret() -> str:
    """A fresh signing secret (shown once)."""
    return f"whsec_{secrets.token_urlsafe(32)}"


def event_types_of(names: Iterable[str] | None) -> list[str]:
    """Validate event type names (None or empty: all of them); raise BadRequest naming an unknown one."""
    chosen = [n.strip() for n in names or () if n.strip()]
    if not chosen:
        return all_event_types()
    unknown = sorted(set(chosen) - set(EventType.values))
    if unknown:
        raise BadRequest(gettext("Unknown event types: %(unknown)s (known: %(known)s).")
                         % {"unknown": ", ".join(unknown), "known": ", ".join(EventType.values)})
    return [t for t in EventType.values if t in chosen]


def endpoint_add(*, url: str, secret: str | None = None, event_types: Iterable[str] | None = None,
                 description: str = "", active: bool = True) -> WebhookEndpoint:
    """Register an endpoint. Raise addresses.Refused (a URL to a private address: SSRF) or BadRequest."""
    check_url(url)
    if secret is not None and not (8 <= len(secret) <= 200) or secret is not None and not secret.isprintable():
        raise BadRequest(gettext("The secret must be 8-200 printable characters."))
    return WebhookEndpoint.objects.create(url=url, secret=secret or new_secret(), event_types=event_types_of(
        event_types), description=description, active=active)
