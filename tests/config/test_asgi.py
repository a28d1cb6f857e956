"""The web application (config/asgi.py) over real HTTP, served both ways the project offers: by its own server
(webserver/ through config/server.py, what `make run` serves) and as the contract's ASGI process
`config.asgi:application` under an ASGI server (uvicorn, httptools + uvloop: the documented alternative). The
claim answers exactly as the Django view does, and every other request is
Django's, as a WSGI server would hand it over."""
from __future__ import annotations

import http.client
import json
import sys
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest

from campaigns.redis_state import campaign_keys, redis_client
from config.wsgi import django_application
from core.auth import mint_token
from devstack import resolve, web_command

from ..conftest import free_port, run_coroutine, serving
from ..orders.claim_cases import CASES, call, campaign_id_of, codes_campaign_for

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(params=["config.server", "uvicorn-asgi"])
def http_server(request: pytest.FixtureRequest, transactional_db: Any) -> Iterator[str]:
    """Each test of this file runs against both servers."""
    port = free_port()
    if request.param == "config.server":
        argv = resolve(web_command(port))
    else:
        argv = [sys.executable, "-m", "uvicorn", "config.asgi:application", "--http", "httptools", "--loop",
                "uvloop", "--host", "127.0.0.1", "--port", str(port), "--workers", "1", "--no-access-log"]
    with serving(argv, port) as url:
        yield url


def send(url: str, method: str, path: str, *, headers: dict[str, str] | None = None, body: bytes | None = None,
         chunked: bool = False) -> tuple[int, http.client.HTTPMessage, bytes]:
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    try:
        conn.request(method, path, body=iter([body]) if chunked and body is not None else body,
                     headers=headers or {}, encode_chunked=chunked)
        response = conn.getresponse()
        return response.status, response.headers, response.read()
    finally:
        conn.close()


def as_http_headers(meta: dict[str, str]) -> dict[str, str]:
    return {key[5:].replace("_", "-").title(): value for key, value in meta.items() if key.startswith("HTTP_")}


@pytest.mark.parametrize(("case", "campaign_id", "headers", "body"), CASES, ids=[c[0] for c in CASES])
def test_the_served_claim_and_the_django_view_give_the_same_answer(http_server, live_campaign, case, campaign_id,
                                                                 headers, body) -> None:
    served, view_campaign = live_campaign(total_stock=5), live_campaign(total_stock=5)
    codes = codes_campaign_for(campaign_id, live_campaign)
    meta = headers()

    status, response_headers, payload = send(
        http_server, "POST", f"/api/v1/campaigns/{campaign_id_of(campaign_id, served, codes)}/claim",
        headers={**as_http_headers(meta), "Content-Type": "application/json"}, body=body)
    view = call(django_application, f"/api/v1/campaigns/{campaign_id_of(campaign_id, view_campaign, codes)}/claim",
                headers=meta, body=body)

    answer = json.loads(payload)
    assert str(status) == view[0]
    strip = {"claim_id", "campaign_id"}
    assert {k: v for k, v in answer.items() if k not in strip} == {k: v for k, v in view[2].items() if k not in strip}
    for header in ("content-type", "idempotent-replayed", "retry-after"):
        assert response_headers.get(header) == view[1].get(header), header
    assert response_headers.get("x-request-id")


def test_a_claim_served_changes_redis_once_and_a_repeat_replays_it(http_server, live_campaign) -> None:
    campaign = live_campaign(total_stock=3, per_user_limit=1)
    headers = {"X-User-Id": "ann", "X-Token": mint_token("ann", ttl=600), "Idempotency-Key": "k-1"}
    first = send(http_server, "POST", f"/api/v1/campaigns/{campaign.pk}/claim", headers=headers)
    again = send(http_server, "POST", f"/api/v1/campaigns/{campaign.pk}/claim", headers=headers)

    assert first[0] == again[0] == 200
    assert json.loads(first[2])["status"] == "claimed"
    assert json.loads(again[2]) == json.loads(first[2]) and again[1]["Idempotent-Replayed"] == "true"
    assert int(redis_client().get(campaign_keys(campaign.pk).stock)) == 2


def test_a_header_with_an_underscore_never_passes_for_the_shoppers_id(http_server, live_campaign) -> None:
    campaign = live_campaign()
    token = mint_token("ann", ttl=600)
    status, _, payload = send(http_server, "POST", f"/api/v1/campaigns/{campaign.pk}/claim",
                              headers={"X_User_Id": "ann", "X-Token": token})
    assert (status, json.loads(payload)["status"]) == (401, "unauthenticated")


def test_a_chunked_claim_body_is_read_and_one_too_large_is_refused(http_server, live_campaign) -> None:
    campaign = live_campaign()
    headers = {"X-User-Id": "ann", "X-Token": mint_token("ann", ttl=600), "Content-Type": "application/json"}
    path = f"/api/v1/campaigns/{campaign.pk}/claim"

    assert json.loads(send(http_server, "POST", path, headers=headers, body=b"[1]", chunked=True)[2])["code"] == 400
    big = send(http_server, "POST", path, headers=headers, body=b'{"a":"' + b"x" * 40_000 + b'"}', chunked=True)
    assert (big[0], json.loads(big[2])["status"]) == (413, "payload_too_large")
    assert int(redis_client().get(campaign_keys(campaign.pk).stock)) == campaign.total_stock


def django_answer(url: str, method: str, path: str, **kwargs: Any) -> tuple[int, Any]:
    status, headers, payload = send(url, method, path, **kwargs)
    return status, json.loads(payload) if headers.get("content-type", "").startswith("application/json") else payload


def test_every_other_request_is_djangos(http_server, live_campaign, django_user_model) -> None:
    campaign = live_campaign()
    assert django_answer(http_server, "GET", "/readyz")[0] == 200
    status, body = django_answer(http_server, "GET", f"/api/v1/campaigns/{campaign.pk}/claim")
    assert (status, body["status"]) == (405, "method_not_allowed")
    status, body = django_answer(http_server, "GET", "/api/v1/nowhere/%E4%B8%AD?x=%20y")
    assert (status, body["status"]) == (404, "not_found")
    status, body = django_answer(http_server, "GET", "/api/v1/me/coupons", headers={
        "X-User-Id": "ann", "X-Token": mint_token("ann", ttl=600)})
    assert status == 200 and body["results"] == []


def test_django_sees_the_query_the_body_and_sets_every_cookie(http_server, django_user_model) -> None:
    django_user_model.objects.create_superuser("op", "op@example.com", "a-long-password-1")
    status, headers, _ = send(http_server, "GET", "/admin/login/?next=/admin/")
    assert status == 200
    cookie = headers.get_all("Set-Cookie")[0].split(";")[0]
    token = cookie.split("=", 1)[1]
    form = urllib.parse.urlencode({"username": "op", "password": "a-long-password-1", "next": "/admin/",
                                   "csrfmiddlewaretoken": token}).encode()
    status, headers, _ = send(http_server, "POST", "/admin/login/?next=/admin/", body=form, headers={
        "Content-Type": "application/x-www-form-urlencoded", "Cookie": cookie,
        "Referer": "http://127.0.0.1/admin/login/"})
    assert status == 302 and headers["Location"] == "/admin/"
    assert any(c.startswith("sessionid=") for c in headers.get_all("Set-Cookie"))


def test_a_body_django_would_refuse_is_refused_unread(http_server) -> None:
    status, body = django_answer(http_server, "POST", "/api/v1/coupons/ABC/redeem", headers={
        "X-User-Id": "ann", "X-Token": mint_token("ann", ttl=600), "Idempotency-Key": "r1",
        "Content-Type": "application/json"}, body=b'{"a":"' + b"x" * 100_000 + b'"}')
    assert (status, body["status"]) == (413, "payload_too_large")
    status, body = django_answer(http_server, "POST", "/api/v1/coupons/ABC/redeem", headers={
        "X-User-Id": "ann", "X-Token": mint_token("ann", ttl=600), "Idempotency-Key": "r1",
        "Content-Type": "application/json"}, body=b'{"a":"' + b"x" * 100_000 + b'"}', chunked=True)
    assert (status, body["status"]) == (413, "payload_too_large")


def test_healthz_is_answered_on_the_event_loop_with_the_django_views_body(http_server, client) -> None:
    status, headers, payload = send(http_server, "GET", "/healthz", headers={"X-Request-ID": "lb-0000000042"})
    view = client.get("/healthz")
    assert (status, json.loads(payload)) == (view.status_code, view.json()) == (200, {"code": 0, "status": "ok"})
    assert headers["X-Request-ID"] == "lb-0000000042" and headers["Content-Type"] == "application/json"


def scripted_receive(*messages: dict[str, Any]) -> Any:
    """An ASGI receive() that hands over these messages and fails the test if asked for one more."""
    pending = list(messages)

    async def receive() -> dict[str, Any]:
        assert pending, "read past the message that completed the body"
        return pending.pop(0)

    return receive


@pytest.mark.parametrize(("meta", "messages", "body"), [
    # some servers' way (granian's): the body with more_body=True, then an empty last message, which is never waited for
    ({"CONTENT_LENGTH": "2"}, [{"body": b"{}", "more_body": True}], b"{}"),
    ({"CONTENT_LENGTH": "4"}, [{"body": b"{}", "more_body": True}, {"body": b"{}", "more_body": True}], b"{}{}"),
    ({"CONTENT_LENGTH": "0"}, [], b""),
    # no length, or a chunked one: up to the last message
    ({}, [{"body": b"{", "more_body": True}, {"body": b"}", "more_body": True}, {"body": b"", "more_body": False}],
     b"{}"),
    ({"CONTENT_LENGTH": "2", "HTTP_TRANSFER_ENCODING": "chunked"},
     [{"body": b"{}", "more_body": True}, {"body": b"", "more_body": False}], b"{}"),
    # larger than the limit (10 here): refused unread by its length, or cut at limit + 1 when chunked
    ({"CONTENT_LENGTH": "11"}, [], b""),
    ({}, [{"body": b"x" * 8, "more_body": True}, {"body": b"x" * 8, "more_body": True}], b"x" * 11),
])
def test_a_body_is_read_to_its_length_without_waiting_for_the_servers_last_message(meta, messages, body) -> None:
    from core.web import read_body

    headers = [(key.removeprefix("HTTP_").lower().replace("_", "-").encode(), value.encode())
               for key, value in meta.items()]
    assert run_coroutine(read_body(scripted_receive(*messages), headers, 10)) == body


@pytest.fixture
def grants_key(monkeypatch: pytest.MonkeyPatch) -> str:
    """An operator's API key for the grants API, in the environment of the server the test then starts."""
    key = "asgi-" + "k" * 32
    monkeypatch.setenv("COUPONS_SERVICE_API_KEYS", key)
    return key


def test_each_route_reads_a_body_up_to_its_own_limit(grants_key, http_server, live_campaign) -> None:
    """config/body_limits.py through both servers (the ASGI adapter reads to the route's limit too): the grants
    API reads 650 KB (more ids than a call may send: its own 400, the body parsed whole), over 1 MiB is a 413;
    another route is still refused over 64 KiB."""
    campaign = live_campaign()
    headers = {"Authorization": f"Bearer {grants_key}", "Content-Type": "application/json"}
    path = f"/api/v1/campaigns/{campaign.pk}/grants"
    ids = [f"{i:060d}" for i in range(10_001)]
    body = json.dumps({"batch": "b", "user_ids": ids}).encode()
    assert 600_000 < len(body) < 1024 * 1024
    for chunked in (False, True):
        status, answer = django_answer(http_server, "POST", path, headers=headers, body=body, chunked=chunked)
        assert (status, answer["status"]) == (400, "invalid_request") and "10000" in answer["detail"], answer
        status, answer = django_answer(http_server, "POST", path, headers=headers, chunked=chunked,
                                       body=b'{"batch":"b","user_ids":["' + b"a" * 1024 * 1024 + b'"]}')
        assert (status, answer["status"]) == (413, "payload_too_large")
        status, answer = django_answer(http_server, "POST", "/api/v1/carts/validate", chunked=chunked, headers={
            "X-User-Id": "ann", "X-Token": mint_token("ann", ttl=600), "Content-Type": "application/json"},
            body=b'{"lines":"' + b"x" * 100_000 + b'"}')
        assert (status, answer["status"]) == (413, "payload_too_large")
    assert int(redis_client().get(campaign_keys(campaign.pk).stock)) == campaign.total_stock
