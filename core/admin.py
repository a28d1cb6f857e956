"""What every app's admin shares: records the console shows but never lets an operator add or delete (events,
ledgers, deliveries), or change at all; and the operators' sessions' end (AdminSessionMiddleware)."""
from __future__ import annotations

import time
from collections.abc import Callable

from django.conf import settings
from django.contrib.auth import SESSION_KEY, logout
from django.http import HttpRequest, HttpResponse

SINCE = "_couponrush_admin_since"  # the session's first console page after its login (seconds)
SEEN = "_couponrush_admin_seen"  # its latest console page, written at most every SEEN_EVERY seconds
SEEN_EVERY = 60


class NoAddNoDeleteMixin:
    def has_add_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


class ReadOnlyAdminMixin(NoAddNoDeleteMixin):
    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


class AdminSessionMiddleware:
    """End an operator's session ADMIN_SESSION_SECONDS (12 h) after its login, or ADMIN_IDLE_SECONDS (30 min)
    after its latest console page: a console left open, or a cookie taken, is not good for Django's two weeks.
    The admin then asks for the login again.

    Only the console's paths (ADMIN_URL) read the session: the API, the claim and the storefront never load one,
    whatever cookie a browser sends. The latest page is written at most once a minute, so the idle time is
    counted to the minute and a busy operator's pages do not each write the session."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path_info.startswith(f"/{settings.ADMIN_URL}") and SESSION_KEY in request.session:
            session, now = request.session, int(time.time())
            since, seen = session.get(SINCE, now), session.get(SEEN, now)
            if now - since > settings.ADMIN_SESSION_SECONDS or now - seen > settings.ADMIN_IDLE_SECONDS:
                logout(request)  # the session deleted, its cookie with it; request.user is anonymous
            else:
                if SINCE not in session:
                    session[SINCE] = now
                if SEEN not in session or now - seen >= SEEN_EVERY:
                    session[SEEN] = now
        return self.get_response(request)
