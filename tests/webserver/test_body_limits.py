"""Each route's body limit (config/body_limits.py), through the project's own server in another process: the grants
API takes up to 1 MiB (10,000 ids a call), the console's grant upload up to COUPONS_GRANTS_MAX_FILE_BYTES, every
other route 64 KiB. A larger Content-Length is refused at the head, the body never read; a chunked body is cut at
its route's limit + 1."""
from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings
from django.test import Client as DjangoClient

from config.body_limits import UPLOAD_FORM_BYTES, body_limits
from grants.apis import MAX_BODY_BYTES, MAX_USER_IDS
from grants.models import GrantBatch, GrantStatus
from webserver.interface import BodyLimits, body_limit_of

from .harness import Client, Server, assert_error, request, shopper, stock

API_KEY = "body-limits-" + "k" * 32
GRANTS_LIMIT = MAX_BODY_BYTES  # 1 MiB
OTHER_LIMIT = settings.DATA_UPLOAD_MAX_MEMORY_SIZE  # 64 KiB


@pytest.fixture(scope="module")
def keyed(django_db_setup: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The run command's server, with an operator's API key for the grants API."""
    started = Server(tmp_path_factory.mktemp("log") / "server.log", env={"COUPONS_SERVICE_API_KEYS": API_KEY})
    yield started
    started.stop()


def grants_head(**extra: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json", **extra}


def chunked(data: bytes, size: int = 64 * 1024) -> bytes:
    return b"".join(b"%x\r\n%b\r\n" % (len(data[i:i + size]), data[i:i + size])
                    for i in range(0, len(data), size)) + b"0\r\n\r\n"


# ---------------------------------------------------------------------------------------------------------
# The table


def test_the_table_gives_each_route_its_limit() -> None:
    limits = body_limits()
    assert limits("/api/v1/campaigns/12/grants") == GRANTS_LIMIT == 1024 * 1024
    upload = f"/{settings.ADMIN_URL}grants/grantbatch/upload/12/"
    assert limits(upload) == settings.COUPONS_GRANTS_MAX_FILE_BYTES + UPLOAD_FORM_BYTES
    for other in ("/api/v1/carts/validate", "/api/v1/campaigns/12/claim", "/api/v1/campaigns/12/grants/",
                  "/api/v1/campaigns/12/grantsx", f"/{settings.ADMIN_URL}grants/grantbatch/upload/x/",
                  f"/{settings.ADMIN_URL}coupons/codebatch/campaign/12/import/", "/x" + upload, upload + "x"):
        assert limits(other) == OTHER_LIMIT == 64 * 1024, other
    assert limits("/api/v1/carts/validate", 100) == 100  # a layer's own default for the rest
    assert limits("/api/v1/campaigns/12/grants", 100) == GRANTS_LIMIT  # remembered, the same answer
    for n in range(3000):  # paths a client makes up are remembered in a bounded number
        assert limits(f"/api/v1/campaigns/{n}/grants") == GRANTS_LIMIT and limits(f"/made-up/{n}") == OTHER_LIMIT
    assert len(limits.known) <= 1024


def test_an_application_without_a_table_has_one_limit_for_every_path() -> None:
    class One:
        body_limit = 10

    class Routes(One):
        body_limit_for = BodyLimits(10, [("/big", 20)])

    assert body_limit_of(One())("/big") == 10  # type: ignore[arg-type]
    assert [body_limit_of(Routes())(path) for path in ("/big", "/other")] == [20, 10]  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------------------
# The grants API


@pytest.mark.django_db(transaction=True)
def test_a_call_of_10000_ids_is_granted_through_the_server(keyed, live_campaign) -> None:
    campaign = live_campaign(total_stock=MAX_USER_IDS - 10, per_user_limit=1)
    ids = [f"shopper-{i:05d}" for i in range(MAX_USER_IDS)]
    body = json.dumps({"batch": "crm-10k", "user_ids": ids}).encode()
    assert OTHER_LIMIT < len(body) <= GRANTS_LIMIT  # refused before this route had a limit of its own
    with Client(keyed.port, timeout=120) as client:
        client.send(request("POST", f"/api/v1/campaigns/{campaign.pk}/grants", grants_head(), body))
        reply = client.reply()
    assert (reply.status, reply.json()) == (200, {
        "code": 0, "status": "granted", "batch": "crm-10k", "granted": MAX_USER_IDS - 10, "limit_reached": 0,
        "sold_out": 10, "invalid": 0, "duplicate": 0})
    assert stock(campaign) == 0


@pytest.mark.parametrize("length", [2_000_000, GRANTS_LIMIT + 1])
def test_a_grants_body_over_1_mib_is_a_413_at_its_head_never_read(keyed, length) -> None:
    with Client(keyed.port) as client:
        client.send(request("POST", "/api/v1/campaigns/1/grants", grants_head(**{"Content-Length": str(length)})))
        assert_error(client.reply(), 413, "payload_too_large")  # the body is never sent
        client.assert_closed()


def test_a_chunked_grants_body_over_1_mib_is_cut_and_refused(keyed) -> None:
    body = b'{"batch":"b","user_ids":["' + b"a" * GRANTS_LIMIT + b'"]}'
    with Client(keyed.port) as client:
        client.send(request("POST", "/api/v1/campaigns/1/grants", grants_head(**{"Transfer-Encoding": "chunked"}))
                    + chunked(body))
        reply = client.reply()
    assert (reply.status, reply.json()["status"]) == (413, "payload_too_large")


@pytest.mark.django_db(transaction=True)
def test_a_chunked_grants_body_within_1_mib_is_read_whole(keyed, live_campaign) -> None:
    campaign = live_campaign(total_stock=5)
    body = json.dumps({"batch": "chunked", "user_ids": ["ann", "bob"], "pad": "x" * 200_000}).encode()
    with Client(keyed.port, timeout=60) as client:
        client.send(request("POST", f"/api/v1/campaigns/{campaign.pk}/grants",
                            grants_head(**{"Transfer-Encoding": "chunked"})) + chunked(body))
        reply = client.reply()
    assert (reply.status, reply.json()["granted"]) == (200, 2)


# ---------------------------------------------------------------------------------------------------------
# Every other route: 64 KiB, as before


@pytest.mark.parametrize("path", ["/api/v1/carts/validate", "/api/v1/campaigns/1/grants/"])
def test_a_100_kb_body_to_another_route_is_still_a_413_unread(keyed, path) -> None:
    with Client(keyed.port) as client:
        client.send(request("POST", path, shopper("ann", **{"Content-Length": "100000",
                                                            "Content-Type": "application/json"})))
        assert_error(client.reply(), 413, "payload_too_large")
        client.assert_closed()


def test_a_chunked_100_kb_body_to_another_route_is_still_a_413(keyed) -> None:
    body = b'{"lines":"' + b"x" * 100_000 + b'"}'
    with Client(keyed.port) as client:
        client.send(request("POST", "/api/v1/carts/validate", shopper("ann", **{
            "Transfer-Encoding": "chunked", "Content-Type": "application/json"})) + chunked(body))
        reply = client.reply()
    assert (reply.status, reply.json()["status"]) == (413, "payload_too_large")


# ---------------------------------------------------------------------------------------------------------
# The console's upload


def multipart(fields: dict[str, str], name: str, filename: str, content: bytes) -> tuple[str, bytes]:
    boundary = "----limits" + secrets.token_hex(8)
    parts = [f'--{boundary}\r\nContent-Disposition: form-data; name="{key}"\r\n\r\n{value}\r\n'.encode()
             for key, value in fields.items()]
    parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"; filename="{filename}"\r\n'
                 f"Content-Type: text/plain\r\n\r\n".encode() + content + b"\r\n")
    parts.append(f"--{boundary}--\r\n".encode())
    return f"multipart/form-data; boundary={boundary}", b"".join(parts)


@pytest.mark.django_db(transaction=True)
def test_an_upload_of_a_1_mb_file_through_the_server_starts_its_batch(keyed, live_campaign,
                                                                      django_user_model) -> None:
    campaign = live_campaign(total_stock=10)
    operator = django_user_model.objects.create_superuser("op", "op@example.com", "a-long-password-1")
    session = DjangoClient()
    session.force_login(operator)  # the session is in the database the server reads
    csrf = secrets.token_hex(16)  # a CSRF secret of 32 characters: as the cookie and as the form's token
    lines = 70_000
    content = "".join(f"shopper-{i:06d}\n" for i in range(lines)).encode()
    assert len(content) > 1_000_000
    content_type, body = multipart({"csrfmiddlewaretoken": csrf, "batch": "big-file"}, "file", "shoppers.txt",
                                   content)
    upload = f"/{settings.ADMIN_URL}grants/grantbatch/upload/{campaign.pk}/"
    with Client(keyed.port, timeout=120) as client:
        client.send(request("POST", upload, {
            "Content-Type": content_type,
            "Cookie": f"{settings.SESSION_COOKIE_NAME}={session.cookies[settings.SESSION_COOKIE_NAME].value}; "
                      f"{settings.CSRF_COOKIE_NAME}={csrf}"}, body))
        reply = client.reply()
    batch = GrantBatch.objects.get(campaign=campaign)
    assert reply.status == 302 and reply.header("location").endswith(f"/grantbatch/{batch.pk}/change/")
    assert (batch.name, batch.lines, batch.status) == ("big-file", lines, GrantStatus.RUNNING)


def test_an_upload_over_its_limit_is_a_413_at_its_head(keyed) -> None:
    upload = f"/{settings.ADMIN_URL}grants/grantbatch/upload/1/"
    limit = settings.COUPONS_GRANTS_MAX_FILE_BYTES + UPLOAD_FORM_BYTES
    with Client(keyed.port) as client:
        client.send(request("POST", upload, {"Content-Type": "multipart/form-data; boundary=x",
                                             "Content-Length": str(limit + 1)}))
        assert_error(client.reply(), 413, "payload_too_large")
        client.assert_closed()

