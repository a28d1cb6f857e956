"""The console's language: LocaleMiddleware for people, English for machines.

Operators and shoppers read the admin and the storefront in the language they pick (the switch in the page's
header, stored in a cookie by Django's set_language at /i18n/setlang/), else their browser's Accept-Language,
else settings.LANGUAGE_CODE (DJANGO_LANGUAGE_CODE). The API and the service endpoints answer in English
whatever the request says: `code` and `status` are fixed words anyway, and `detail` (ours and DRF's own
messages, which Django would otherwise translate) stays one language for the clients that log or match it
(docs/api.md, Languages).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from django.http import HttpRequest, HttpResponseBase
from django.middleware.locale import LocaleMiddleware
from django.utils import translation
from django.utils.functional import Promise

if TYPE_CHECKING:
    from django.utils.functional import _StrOrPromise as StrOrPromise
else:
    StrOrPromise = str | Promise  # a text that may be translated lazily (gettext_lazy), for type hints

MACHINE_LANGUAGE = "en"
# The paths that answer machines: the API (its docs page included), health, metrics, the demo's token endpoint.
MACHINE_PREFIXES = ("/api/", "/healthz", "/readyz", "/metrics", "/dev/")


def is_machine_path(path: str) -> bool:
    return path.startswith(MACHINE_PREFIXES)


class ConsoleLocaleMiddleware(LocaleMiddleware):
    """Django's LocaleMiddleware, except that machine paths are always English (and never vary by language)."""

    def process_request(self, request: HttpRequest) -> None:
        if is_machine_path(request.path_info):
            translation.activate(MACHINE_LANGUAGE)
            request.LANGUAGE_CODE = MACHINE_LANGUAGE
            return
        super().process_request(request)

    def process_response(self, request: HttpRequest, response: HttpResponseBase) -> HttpResponseBase:
        if is_machine_path(request.path_info):
            return response
        return super().process_response(request, response)
