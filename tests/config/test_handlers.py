"""The API's routes run only settings.API_MIDDLEWARE (core/handlers.py), over real HTTP with the run command's
server: no session, CSRF or frame-options work on token-authenticated JSON, while the console keeps all of it and
the API keeps its Host check, request ids and security headers."""
from __future__ import annotations

import http.client
import io
import urllib.parse
from typing import Any

import pytest
from django.conf import settings

from config.wsgi import application
from core.handlers import ApiHandler
from tests.conftest import shopper_headers

pytestmark = pytest.mark.django_db(transaction=True)


def get(url: str, path: str, headers: dict[str, str] | None = None) -> http.client.HTTPResponse:
    parts = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    connection.request("GET", path, headers=headers or {})
    answer = connection.getresponse()
    answer.read()
    connection.close()
    return answer


def test_api_routes_run_the_api_middleware_and_the_console_the_whole_stack(http_server: str, live_campaign) -> None:
    campaign = live_campaign()
    for path, headers in [(f"/api/v1/campaigns/{campaign.pk}", {}), ("/api/v1/nope", {}),
                          ("/api/v1/me/coupons", {k.removeprefix("HTTP_").replace("_", "-"): v
                                                  for k, v in shopper_headers("ann").items()})]:
        answer = get(http_server, path, headers)
        assert answer.status in (200, 404), path
        assert answer.getheader("X-Frame-Options") is None, path  # XFrameOptionsMiddleware did not run
        assert "Cookie" not in (answer.getheader("Vary") or ""), path  # nor sessions, CSRF or the console's language
        assert answer.getheader("Set-Cookie") is None, path
        assert answer.getheader("X-Content-Type-Options") == "nosniff", path  # SecurityMiddleware did
        assert answer.getheader("X-Request-Id"), path  # RequestIdMiddleware did

    login = get(http_server, f"/{settings.ADMIN_URL}login/")
    assert login.status == 200
    assert login.getheader("X-Frame-Options") == "DENY"
    assert "csrftoken" in (login.getheader("Set-Cookie") or "")


def test_the_api_handler_builds_its_chain_from_api_middleware_only() -> None:
    """Under any WSGI server too (config.wsgi): Django's handler with the API's list, nothing of the console's."""
    handler = ApiHandler()
    names = []
    layer: Any = handler._middleware_chain
    while layer is not None:
        inner = getattr(layer, "__wrapped__", layer)
        names.append(f"{type(inner).__module__}.{type(inner).__qualname__}")
        layer = getattr(inner, "get_response", None)
    assert [n for n in names if "Middleware" in n] == settings.API_MIDDLEWARE

    seen: list[str] = []
    body = b"".join(application({
        "REQUEST_METHOD": "GET", "PATH_INFO": "/api/v1/nope", "SERVER_NAME": "testserver", "SERVER_PORT": "80",
        "HTTP_HOST": "testserver", "wsgi.input": io.BytesIO(), "wsgi.url_scheme": "http", "REMOTE_ADDR": "127.0.0.1",
        "QUERY_STRING": "", "SERVER_PROTOCOL": "HTTP/1.1"}, lambda status, headers, exc=None: seen.append(status)))
    assert seen == ["404 Not Found"] and b'"not_found"' in body


def test_every_api_answer_but_the_public_reads_is_private_no_store(client, live_campaign) -> None:
    """docs/api.md: whatever a shopper's token reads or changes carries Cache-Control: private, no-store (its
    refusals too); the public reads are public."""
    campaign = live_campaign()
    ann = shopper_headers("ann")
    answers = [
        client.get("/api/v1/me/coupons", **ann),
        client.get("/api/v1/me/coupons"),  # 401
        client.post("/api/v1/carts/validate", data={"currency": "CNY", "lines": []}, content_type="application/json",
                    **ann),
        client.post("/api/v1/coupons/NOPE-NOPE/redeem", data={}, content_type="application/json", **ann),
        client.post(f"/api/v1/claims/{campaign.pk}-1-0/cancel", data={}, content_type="application/json", **ann),
        client.get("/api/v1/nope"),
    ]
    for answer in answers:
        assert answer["Cache-Control"] == "private, no-store", (answer.status_code, answer.content)
    assert client.get(f"/api/v1/campaigns/{campaign.pk}")["Cache-Control"] == "public, max-age=1"
    assert client.get("/healthz").get("Cache-Control") is None  # not an API route
