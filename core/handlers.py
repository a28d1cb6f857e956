"""Django's WSGI application for the project: the API's routes through the middleware they need, every other
path (the console, the storefront's pages, the service endpoints) through the whole stack. An API request's
statements each wait for PostgreSQL at most API_STATEMENT_SECONDS (core/postgresql/base.py).

A request to /api/v1/ carries a shopper's token (or nothing, for the public reads) and answers JSON: it has no use
for sessions, the console's language, messages, CSRF (DRF's views are exempt), the auth user or frame options,
and each of those cost it time on every request (half of Django's JSON 404, measured). settings.API_MIDDLEWARE
names what it does run: forwarded headers, the request id, the Host check, the database-down answer and Django's
security headers. Both handlers are Django's own; only the list of middleware differs, and the API's resolves its
paths over only the URL patterns that could match them (ApiRoutes: the same match, found sooner).
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from django.conf import settings
from django.core.handlers.exception import convert_exception_to_response
from django.core.handlers.wsgi import WSGIHandler
from django.core.wsgi import get_wsgi_application
from django.http import HttpRequest, HttpResponseBase
from django.urls import Resolver404, ResolverMatch, URLResolver, get_resolver
from django.urls.resolvers import RegexPattern, RoutePattern
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


_API_PATH = API_PREFIX[1:]  # "api/v1/": the path as the root resolver's patterns see it (its ^/ consumed)


def _route_text(pattern: Any) -> tuple[str, bool, bool] | None:
    """What a pattern tells of the paths it matches: (the text they start with, whether they are that text and
    no more, whether the pattern consumes just that text); None when it can't tell (a regular expression, a
    translated route)."""
    route = getattr(pattern, "_route", None)  # path()'s route
    if type(pattern) is not RoutePattern or not isinstance(route, str):
        return None
    text, converter, _ = route.partition("<")  # a RoutePattern matches its literal text, then its converters
    return text, bool(getattr(pattern, "_is_endpoint", False)) and not converter, not converter


def _first_segment(text: str, whole: bool) -> str | None:
    """The first segment after api/v1/ of every path that starts with `text` (is `text` when `whole`): "me/"
    (with the slash after it) or "me" (the path's end); None when `text` does not fix it."""
    if not text.startswith(_API_PATH):
        return None
    head, slash, _ = text[len(_API_PATH):].partition("/")
    return head + slash if slash or whole else None


class ApiRoutes:
    """Django's URL resolution of the API's paths, over only the URL patterns that could match each one.

    Django's resolver tries the root URLconf's patterns in their order, an include's in turn, raising and catching
    a Resolver404 for each that does not match and building a ResolverMatch at each level: /api/v1/nope, which
    only core.urls' catch-all matches, went through every API route first (50 us of the JSON 404's 300 in
    process), and every route through the storefront's and the routes before it. Here a path's first segment
    after /api/v1/ ("me/", "coupons/", "campaigns" ...; any other one alike) picks a root resolver holding the
    root's patterns less those that cannot match a path that starts so (a RoutePattern's text before its first
    converter tells; a pattern of any other kind is kept, and all of an include it can't see into), in their
    order, in copies of the includes that lost some: Django's resolver, resolving the same path over them, finds
    the same pattern with the same match (view, args, kwargs, url name, route, namespaces). Only
    ResolverMatch.tried, the patterns tried before it, lists fewer: DEBUG's 404 page shows it, so with DEBUG on
    the API's paths resolve over the whole URLconf. Made again when the root resolver changes (clear_url_caches,
    another ROOT_URLCONF)."""

    def __init__(self, root: URLResolver) -> None:
        self.root = root
        self.segments = self._segments(root.url_patterns, "", set())
        self.by_segment = {segment: self._resolver(segment) for segment in self.segments}
        self.other = self._resolver(None)

    def resolve(self, path_info: str) -> ResolverMatch:
        head, slash, _ = path_info[len(API_PREFIX):].partition("/")
        return self.by_segment.get(head + slash, self.other).resolve(path_info)

    def _resolver(self, segment: str | None) -> URLResolver:
        return URLResolver(RegexPattern(r"^/"), self._could_match(self.root.url_patterns, "", segment))

    def _segments(self, patterns: list[Any], consumed: str | None, found: set[str]) -> set[str]:
        """The first segments the patterns fix (a route's literal text says them)."""
        for pattern in patterns:
            told = _route_text(getattr(pattern, "pattern", None))
            if consumed is None or told is None:
                continue
            text, whole, plain = told
            text = consumed + text
            segment = _first_segment(text, whole)
            if segment is not None:
                found.add(segment)
            if isinstance(pattern, URLResolver) and (text.startswith(_API_PATH) or _API_PATH.startswith(text)):
                self._segments(pattern.url_patterns, text if plain else None, found)
        return found

    def _could_match(self, patterns: list[Any], consumed: str | None, segment: str | None) -> list[Any]:
        """Those of `patterns` (after `consumed`, the text the includes above them consumed; None: unknown) that
        could match a path under api/v1/ whose first segment is `segment` (None: none of self.segments)."""
        kept = []
        for pattern in patterns:
            told = _route_text(getattr(pattern, "pattern", None))
            if consumed is None or told is None:
                kept.append(pattern)
                continue
            text, whole, plain = told
            text = consumed + text
            if segment is not None and not segment.endswith("/"):  # the path is api/v1/<segment>, no more
                start = _API_PATH + segment
                possible = text == start if whole else start.startswith(text)
            else:  # the path starts with api/v1/<segment>
                start = _API_PATH + (segment or "")
                possible = text.startswith(start) or (not whole and start.startswith(text))
                if segment is None:  # ... its first segment none the patterns fix
                    possible = possible and _first_segment(text, whole) not in self.segments
            if not possible:
                continue
            if isinstance(pattern, URLResolver):
                inner = self._could_match(pattern.url_patterns, text if plain else None, segment)
                if not inner:
                    continue
                if len(inner) != len(pattern.url_patterns) or any(
                        a is not b for a, b in zip(inner, pattern.url_patterns, strict=True)):
                    pattern = URLResolver(pattern.pattern, inner, pattern.default_kwargs, pattern.app_name,
                                          pattern.namespace)
            kept.append(pattern)
        return kept


class ApiHandler(WSGIHandler):
    """Django's WSGI handler with settings.API_MIDDLEWARE instead of settings.MIDDLEWARE (synchronous
    middleware only, as all of those are: the chain is built as BaseHandler.load_middleware builds it), resolving
    its paths with ApiRoutes."""

    _routes: ApiRoutes | None = None

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

    def resolve_request(self, request: HttpRequest) -> ResolverMatch:
        if hasattr(request, "urlconf") or settings.DEBUG or not request.path_info.startswith(API_PREFIX):
            return super().resolve_request(request)  # type: ignore[no-any-return]
        root = get_resolver()
        routes = self._routes
        if routes is None or routes.root is not root:
            routes = self._routes = ApiRoutes(root)
        try:
            match = routes.resolve(request.path_info)
        except Resolver404:  # nothing matched (core.urls' catch-all did until now): Django's own 404, its `tried`
            return super().resolve_request(request)  # type: ignore[no-any-return]
        request.resolver_match = match
        return match


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
