"""Django's WSGI application for the project: the API's routes through the middleware they need, every other
path (the console, the storefront's pages, the service endpoints) through the whole stack. An API request's
statements each wait for PostgreSQL at most API_STATEMENT_SECONDS (core/postgresql/base.py).

A request to /api/v1/ carries a shopper's token (or nothing, for the public reads) and answers JSON: it has no use
for sessions, the console's language, messages, CSRF (DRF's views are exempt), the auth user or frame options,
and each of those cost it time on every request (half of Django's JSON 404, measured). settings.API_MIDDLEWARE
names what it does run: forwarded headers, the request id, the Host check, the database-down answer and Django's
security headers. Both handlers are Django's own; only the list of middleware differs.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from django.conf import settings
from django.core.handlers.exception import convert_exception_to_response
from django.core.handlers.wsgi import WSGIHandler
from django.core.wsgi import get_wsgi_application
from django.http import HttpRequest, HttpResponseBase
from django.utils.module_loading import import_string

from .postgresql.base import API_STATEMENT_SECONDS, statements_bounded

API_PREFIX = "/api/v1/"
PRIVATE_CACHE_CONTROL = "private, no-store"


class PrivateByDefaultMiddleware:
    """An API answer that says nothing of caching is `Cache-Control: private, no-store` (docs/api.md: whatever a
    shopper's token reads or changes; errors too): only the public reads say otherwise (core/public_cache.py).
    In both stacks (Django's test client runs the whole one): outside /api/v1/ it does nothing."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        response = self.get_response(request)
        if request.path_info.startswith(API_PREFIX) and not response.has_header("Cache-Control"):
            response["Cache-Control"] = PRIVATE_CACHE_CONTROL
        return response


class ApiHandler(WSGIHandler):
    """Django's WSGI handler with settings.API_MIDDLEWARE instead of settings.MIDDLEWARE (synchronous
    middleware only, as all of those are: the chain is built as BaseHandler.load_middleware builds it)."""

    def load_middleware(self, is_async: bool = False) -> None:
        self._view_middleware: list[Callable[..., Any]] = []
        self._template_response_middleware: list[Callable[..., Any]] = []
        self._exception_middleware: list[Callable[..., Any]] = []
        handler = convert_exception_to_response(self._get_response)  # type: ignore[attr-defined]
        for path in reversed(settings.API_MIDDLEWARE):
            middleware = import_string(path)(handler)
            if hasattr(middleware, "process_view"):
                self._view_middleware.insert(0, middleware.process_view)
            if hasattr(middleware, "process_template_response"):
                self._template_response_middleware.append(middleware.process_template_response)
            if hasattr(middleware, "process_exception"):
                self._exception_middleware.append(middleware.process_exception)
            handler = convert_exception_to_response(middleware)
        self._middleware_chain = handler


def django_application() -> Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]:
    """The WSGI application: /api/v1/ through ApiHandler, everything else through Django's whole stack."""
    whole = get_wsgi_application()  # sets Django up first
    api = ApiHandler()

    def application(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ["PATH_INFO"].startswith(API_PREFIX):  # PEP 3333: always there
            with statements_bounded(API_STATEMENT_SECONDS):  # a hung PostgreSQL is a 503, not a hang
                return api(environ, start_response)
        return whole(environ, start_response)

    return application
