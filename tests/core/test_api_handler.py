"""The API's request cycle costs less than Django's and answers the same: its paths resolve over only the URL
patterns that could match them (core.handlers.ApiRoutes) to the same match, and DRF's content negotiation is
remembered per Accept header (core.negotiation.ApiContentNegotiation) to the same choice."""
from __future__ import annotations

import io
import itertools
from typing import Any

import pytest
from django.http import Http404, HttpResponse
from django.test import RequestFactory
from django.urls import Resolver404, ResolverMatch, URLResolver, get_resolver, include, path, re_path
from django.urls.resolvers import RegexPattern
from rest_framework import exceptions as drf_exceptions
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.renderers import BaseRenderer, JSONRenderer, TemplateHTMLRenderer
from rest_framework.request import Request

import core.negotiation
from config.wsgi import application
from core.api import ShopperApi
from core.handlers import ApiHandler, ApiRoutes
from core.negotiation import ApiContentNegotiation
from tests.conftest import shopper_headers


def _seen(m: ResolverMatch) -> tuple[Any, ...]:
    """What a view sees of a resolution: all of ResolverMatch but `tried`."""
    return (m.func, m.args, m.kwargs, m.url_name, m.route, m.app_names, m.namespaces, m.captured_kwargs,
            m.extra_kwargs, m.view_name, m._func_path)


def _match(resolver: Any, path_info: str) -> Any:
    try:
        return _seen(resolver.resolve(path_info))
    except Resolver404:
        return "404"


def _paths(segments: list[str], longest: int) -> list[str]:
    found = []
    for length in range(1, longest + 1):
        for parts in itertools.product(segments, repeat=length):
            found += ["/api/v1/" + "/".join(parts), "/api/v1/" + "/".join(parts) + "/"]
    return found


def test_every_api_path_resolves_as_over_the_whole_urlconf() -> None:
    root = get_resolver()
    routes = ApiRoutes(root)
    words = ["campaigns", "claims", "me", "coupons", "carts", "validate", "redeem", "reserve", "confirm", "release",
             "cancel", "grants", "claim", "42", "", "mee", "nope", "é", "api", "v1"]
    for path_info in _paths(words, 3) + ["/api/v1/", "/api/v1//", "/api/v1/me/coupons/x/y"]:
        assert _match(routes, path_info) == _match(root, path_info), path_info
    assert len(routes.other.url_patterns) < len(root.url_patterns)  # the storefront's include is not tried


def view(request: Any, **kwargs: Any) -> HttpResponse:
    return HttpResponse()


def other(request: Any, **kwargs: Any) -> HttpResponse:
    return HttpResponse()


EVERY_KIND = [  # a URLconf with every kind of pattern in an order that matters
    path("", include([path("", view, name="home"), path("api/v1/shadow", other, name="shadow")])),
    path("api/", include([path("v1/early/<int:n>", other, name="early")])),
    path("api/v1/", include([
        path("", include([path("me", view, name="me"), path("me/", other, name="me-slash")])),
        re_path(r"^me/(?P<n>[0-9]+)$", view, name="me-regex"),
        path("me/<int:n>", other, name="me-n"),
        path("<str:first>/any", view, name="any"),
        path("conv<int:n>/", include([path("x", view, name="conv-x")])),
        path("ns/", include(([path("a/<slug:s>", view, name="a")], "app"), namespace="ns")),
        path("kw/", include([path("k", view, name="k")]), {"extra": 1}),
        path("", view, name="root"),
        path("me/coupons", view, name="mine"),
        path("early/<int:n>", view, name="late"),
    ])),
    re_path(r"^api/v1/me/(?P<rest>.*)$", other, name="regex-after"),
    path("api/v1/me/coupons", other, name="shadowed"),
    re_path(r"^api/", other, name="catch-all"),
]


@pytest.mark.parametrize("catch_all", [True, False])
def test_a_urlconf_of_every_kind_resolves_alike(catch_all: bool) -> None:
    root = URLResolver(RegexPattern(r"^/"), EVERY_KIND if catch_all else EVERY_KIND[:-1])
    routes = ApiRoutes(root)
    words = ["me", "coupons", "shadow", "early", "7", "x", "conv", "conv3", "ns", "a", "b-c", "kw", "k", "any", ""]
    for path_info in _paths(words, 3):
        assert _match(routes, path_info) == _match(root, path_info), path_info


def test_the_handler_resolves_with_api_routes_and_leaves_a_miss_to_django(monkeypatch) -> None:
    handler = ApiHandler()
    request = RequestFactory().get("/api/v1/me/coupons")
    assert _seen(handler.resolve_request(request)) == _match(get_resolver(), "/api/v1/me/coupons")
    assert request.resolver_match is not None and len(request.resolver_match.tried) == 1  # me/coupons alone tried
    assert handler._routes is not None and handler._routes.root is get_resolver()

    def nothing(self: ApiRoutes, path_info: str) -> ResolverMatch:
        raise Resolver404({"path": path_info})

    monkeypatch.setattr(ApiRoutes, "resolve", nothing)
    request = RequestFactory().get("/api/v1/nope")
    assert handler.resolve_request(request).url_name is None  # Django's own resolution: core.urls' catch-all
    assert len(request.resolver_match.tried) > 1


class _Html(TemplateHTMLRenderer):
    media_type = "text/html"


ACCEPTS = [None, "*/*", "application/json", "application/json; indent=2", "application/*", "text/html",
           "text/html, application/json;q=0.5", "application/json, text/plain, */*", "image/png", "", ",,", "*/*;q=0",
           "application/json; indent=2; charset=utf-8", "x" * 300]


@pytest.mark.parametrize("query", ["", "format=json", "format=html", "format=", "page=2"])
def test_content_negotiation_chooses_as_drf_does(query: str) -> None:
    core.negotiation._CHOSEN.clear()

    def choice(negotiation: Any, accept: str | None, renderer_classes: list[type[BaseRenderer]]) -> Any:
        extra = {} if accept is None else {"HTTP_ACCEPT": accept}
        request = Request(RequestFactory().get("/api/v1/me/coupons", QUERY_STRING=query, **extra))
        renderers = [cls() for cls in renderer_classes]
        try:
            renderer, media_type = negotiation.select_renderer(request, renderers)
        except (drf_exceptions.NotAcceptable, Http404) as exc:  # DRF's refusals (a format no renderer has: 404)
            return type(exc).__name__
        assert renderer in renderers
        return renderers.index(renderer), media_type

    for _ in range(2):  # the second time, what was remembered
        for accept, renderer_classes in itertools.product(
                ACCEPTS, [[JSONRenderer], [JSONRenderer, _Html], [_Html, JSONRenderer], [_Html]]):
            drf = choice(DefaultContentNegotiation(), accept, renderer_classes)
            assert choice(ApiContentNegotiation(), accept, renderer_classes) == drf, (accept, renderer_classes)
    assert all(key[0] is None or len(key[0]) <= 200 for key in core.negotiation._CHOSEN)


@pytest.mark.django_db
def test_shopper_answers_are_the_same_with_drfs_negotiation(monkeypatch) -> None:
    def answers() -> list[tuple[str, list[tuple[str, str]], bytes]]:
        seen = []
        for accept, query in itertools.product(ACCEPTS, ["", "format=json", "format=xml"]):
            environ = {
                "REQUEST_METHOD": "POST", "PATH_INFO": "/api/v1/carts/validate", "QUERY_STRING": query,
                "SERVER_NAME": "testserver", "SERVER_PORT": "80", "HTTP_HOST": "testserver", "REMOTE_ADDR": "127.0.0.1",
                "wsgi.input": io.BytesIO(b"[]"), "CONTENT_LENGTH": "2", "CONTENT_TYPE": "application/json",
                "wsgi.url_scheme": "http", "SERVER_PROTOCOL": "HTTP/1.1", **shopper_headers("ann"),
                **({} if accept is None else {"HTTP_ACCEPT": accept})}
            started: dict[str, Any] = {}

            def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None,
                               started: dict[str, Any] = started) -> None:
                started.update(status=status, headers=headers)

            result = application(environ, start_response)
            body = b"".join(result)
            result.close()  # type: ignore[attr-defined]
            seen.append((started["status"], [h for h in started["headers"] if h[0] != "X-Request-ID"], body))
        return seen

    assert ShopperApi.content_negotiation_class is ApiContentNegotiation  # every DRF view's (the settings')
    ours = answers()
    monkeypatch.setattr(ShopperApi, "content_negotiation_class", DefaultContentNegotiation)
    assert answers() == ours
    assert {status for status, _, _ in ours} == {"400 Bad Request", "406 Not Acceptable", "404 Not Found"}
