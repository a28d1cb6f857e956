"""Service endpoints: liveness, readiness, the OpenAPI schema and its docs page, JSON 404s."""
from __future__ import annotations

import json
import time

import pytest
from django.test import override_settings

from campaigns.redis_state import CLAIM_STATUSES, reset_redis_client
from tests.conftest import shopper_headers

pytestmark = pytest.mark.django_db

CLAIM_PATH = "/api/v1/campaigns/{campaign_id}/claim"


def test_healthz_says_the_process_is_alive(client) -> None:
    # when
    response = client.get("/healthz")

    # then
    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    assert response.json() == {"code": 0, "status": "ok"}


def test_readyz_is_ok_when_database_redis_and_broker_answer(client) -> None:
    # when
    response = client.get("/readyz")

    # then
    assert response.status_code == 200
    assert response.json() == {
        "code": 0, "status": "ok", "checks": {"database": "ok", "redis": "ok", "broker": "ok"},
    }
    assert "Retry-After" not in response


def test_readyz_is_503_and_names_redis_when_redis_is_unreachable(client) -> None:
    # given: the real client pointed at a closed port
    with override_settings(REDIS_URL="redis://127.0.0.1:1/0"):
        reset_redis_client()
        try:
            # when
            started = time.monotonic()
            response = client.get("/readyz")
            elapsed = time.monotonic() - started
        finally:
            reset_redis_client()

    # then
    assert response.status_code == 503
    assert response["Retry-After"] == "1"
    body = response.json()
    assert body["code"] == 503 and body["status"] == "unavailable"
    assert body["checks"]["database"] == "ok" and body["checks"]["broker"] == "ok"
    assert body["checks"]["redis"].startswith("unavailable")
    assert elapsed < 2.0


def openapi_schema(client) -> dict:
    response = client.get("/api/schema/", {"format": "json"})
    assert response.status_code == 200, response.content[:500]
    return json.loads(response.content)


def test_schema_is_openapi_3(client) -> None:
    # when
    response = client.get("/api/schema/")

    # then
    assert response.status_code == 200
    assert b"openapi: 3." in response.content
    assert openapi_schema(client)["openapi"].startswith("3.")


def test_schema_documents_the_claim_with_its_answers(client) -> None:
    # when
    paths = openapi_schema(client)["paths"]

    # then
    claim = paths[CLAIM_PATH]["post"]
    assert {"200", "400", "401", "404", "503"} <= set(claim["responses"])
    shapes = claim["responses"]["200"]["content"]["application/json"]["schema"]["oneOf"]
    statuses = [status for shape in shapes for status in shape["properties"]["status"]["enum"]]
    # every answer the claim script gives (its codes' slugs, the registry's), generated from them: a code a
    # campaign's rules add to the script is documented with it
    assert statuses == list(CLAIM_STATUSES.values())
    assert statuses[:6] == ["claimed", "limit_reached", "sold_out", "not_started", "ended", "paused"]
    headers = {p["name"] for p in claim["parameters"] if p["in"] == "header"}
    assert {"X-User-Id", "X-Token", "Idempotency-Key"} <= headers


def test_schema_documents_every_storefront_read(client) -> None:
    # when
    paths = openapi_schema(client)["paths"]

    # then
    for path in ("/api/v1/campaigns", "/api/v1/campaigns/{campaign_id}", "/api/v1/claims/{claim_id}",
                 "/api/v1/me/coupons"):
        assert {"200", "400", "401", "404", "503"} <= set(paths[path]["get"]["responses"]), path


def test_api_docs_page_is_served(client) -> None:
    # when
    response = client.get("/api/docs/")

    # then
    assert response.status_code == 200
    assert b"swagger" in response.content.lower() and b"/api/schema/" in response.content


@pytest.mark.parametrize("path", ["/api/v1/nope", "/api/v1/campaigns/1/nope", "/nope", "/api/v1/claims/"])
def test_an_unknown_url_is_a_json_404(client, path) -> None:
    # when
    response = client.get(path)

    # then
    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert response.json() == {"code": 404, "status": "not_found", "detail": "Not found."}


@override_settings(DEBUG=True)  # the run command's settings: Django's own 404 there is an HTML page of patterns
@pytest.mark.parametrize(("method", "path"), [("get", "/api/v1/nope"), ("post", "/api/v1/campaigns/1/claim/"),
                                              ("post", "/api/v1/coupons/SAVE%2F50/redeem"), ("get", "/api/v2/x")])
def test_an_unknown_api_url_is_the_json_404_with_debug_on_too(client, method, path) -> None:
    # when
    response = getattr(client, method)(path)

    # then
    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert response.json() == {"code": 404, "status": "not_found", "detail": "Not found."}


def test_openapi_schema_validates_without_a_single_warning(tmp_path) -> None:
    from django.core.management import call_command

    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(tmp_path / "schema.yaml"))
    assert "ShopperToken" in (tmp_path / "schema.yaml").read_text()


def _terminate_backends(only_pid: int | None = None) -> None:
    import psycopg
    from django.db import connection

    db = connection.settings_dict
    with psycopg.connect(dbname=db["NAME"], user=db.get("USER") or None, host=db.get("HOST") or None,
                         port=db.get("PORT") or None, password=db.get("PASSWORD") or None, autocommit=True) as admin:
        connection.ensure_connection()  # this process's own connection is left alone unless named
        own = connection.connection.info.backend_pid
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() "
                      "AND pid NOT IN (pg_backend_pid(), %(own)s) OR pid = %(pid)s", {"pid": only_pid, "own": own})


@pytest.mark.django_db(transaction=True)
def test_a_database_connection_lost_under_a_view_is_a_503_not_a_500(client) -> None:
    from django.db import close_old_connections, connection

    from tests.factories import CampaignFactory

    campaign = CampaignFactory()
    connection.ensure_connection()
    _terminate_backends(connection.connection.info.backend_pid)

    lost = client.get(f"/api/v1/campaigns/{campaign.pk}")
    close_old_connections()  # what the server does after every request (the test client does not)
    again = client.get(f"/api/v1/campaigns/{campaign.pk}")

    assert (lost.status_code, lost.json()["status"], lost["Retry-After"]) == (503, "unavailable", "1")
    assert again.status_code == 200 and again.json()["id"] == campaign.pk


def test_a_served_request_after_the_database_dropped_every_connection_reconnects(http_server) -> None:
    import urllib.error
    import urllib.request

    from tests.factories import CampaignFactory

    campaign = CampaignFactory()

    def get() -> int:
        try:
            with urllib.request.urlopen(f"{http_server}/api/v1/campaigns/{campaign.pk}", timeout=5) as response:
                return response.status
        except urllib.error.HTTPError as exc:
            return exc.code

    assert [get() for _ in range(40)] == [200] * 40  # every thread of both workers holds a connection now
    _terminate_backends()
    after = [get() for _ in range(80)]

    assert set(after) <= {200, 503} and after[-20:] == [200] * 20, after


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/metrics"])
@pytest.mark.parametrize("method", ["post", "put", "patch", "delete", "trace"])
def test_a_service_endpoint_answers_other_methods_than_get_with_the_json_405(client, path, method) -> None:
    # when (it was Django's HTML CSRF page, and TRACE answered as GET)
    response = getattr(client, method)(path)

    # then
    assert (response.status_code, response["Content-Type"]) == (405, "application/json")
    assert response.json()["status"] == "method_not_allowed" and response["Allow"] == "GET, HEAD"


@pytest.mark.parametrize("host", ["a b", "x,y", "a/b", "é.com", "elsewhere.example"])
@pytest.mark.parametrize("debug", [False, True])
@pytest.mark.parametrize("path", ["/api/v1/campaigns", "/readyz", "/api/nope"])
def test_a_host_that_is_no_host_of_ours_is_the_json_400(client, settings, host, debug, path) -> None:
    # given: the hosts production would allow (a name that is no host name is refused whatever they are)
    settings.ALLOWED_HOSTS, settings.DEBUG = ["testserver", "127.0.0.1"], debug

    # when (Django answered with its HTML 400 page, in DEBUG its debug page)
    response = client.get(path, HTTP_HOST=host)

    # then
    assert (response.status_code, response["Content-Type"]) == (400, "application/json")
    assert response.json()["status"] == "invalid_request"


@pytest.mark.parametrize("path", ["/api/v1/coupons/SAVE50/redeem", "/api/v1/coupons/SAVE50/reserve",
                                  "/api/v1/coupons/SAVE50/confirm", "/api/v1/coupons/SAVE50/release",
                                  "/api/v1/carts/validate", "/api/v1/me/coupons", "/api/v1/campaigns"])
def test_options_is_the_json_405_on_every_api_route(client, path) -> None:
    # when (DRF answered 200 with its metadata, a body without code and status)
    response = client.options(path, **shopper_headers("ann"))

    # then: as on the claim's route
    assert (response.status_code, response["Content-Type"]) == (405, "application/json")
    assert response.json()["status"] == "method_not_allowed"
