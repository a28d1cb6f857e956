"""Unique codes in the operator's console: generate (campaign action), the batches' progress, CSV downloads
(streamed), the all-or-nothing upload; staff only."""
from __future__ import annotations

import csv
import http.client
import io
import socket
import urllib.request

import pytest
from django.conf import settings
from django.contrib.auth.models import Group, Permission, User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.http import StreamingHttpResponse

from core.web import asgi
from coupons.code_batches import code_batch_create, code_batch_generate
from coupons.models import CodeBatch, CodeBatchState, UniqueCode
from coupons.unique_codes import forget_imported_codes
from orders.console import VIEWER_GROUP

from ..conftest import run_coroutine
from ..factories import CampaignFactory
from .code_helpers import batch_codes, codes_campaign

pytestmark = pytest.mark.django_db
CAMPAIGNS = "/admin/campaigns/campaign/"
BATCHES = "/admin/coupons/codebatch/"


@pytest.fixture(autouse=True)
def _fresh_imported_flag():
    forget_imported_codes()
    yield
    forget_imported_codes()


def test_the_generate_action_asks_count_and_prefix_then_sends_a_batch_and_shows_its_progress(
        admin_client, django_capture_on_commit_callbacks) -> None:
    campaign = codes_campaign(name="Spring codes")
    chosen = {"action": "generate_unique_codes", "_selected_action": [str(campaign.pk)]}

    form = admin_client.post(CAMPAIGNS, chosen).content.decode()
    with django_capture_on_commit_callbacks() as sent:  # not run here: the worker test sends for real
        answer = admin_client.post(CAMPAIGNS, {**chosen, "apply": "1", "count": "1200", "code_prefix": "spring"})

    assert 'name="count"' in form and 'name="code_prefix"' in form and "Spring codes" in form
    batch = CodeBatch.objects.get()
    assert (batch.requested, batch.prefix, batch.state, batch.created_by) == (1200, "SPRING", "pending", "admin")
    assert len(sent) == 1  # the send, once the batch is committed
    assert answer.status_code == 302 and answer["Location"] == f"{BATCHES}?campaign__id__exact={campaign.pk}"
    page = admin_client.get(answer["Location"]).content.decode()
    assert f'<progress value="0" max="1200" data-batch="{batch.pk}">' in page
    assert 'http-equiv="refresh"' in page  # reloads itself while a batch is pending or running

    code_batch_generate(batch_id=batch.pk)  # what the worker does

    page = admin_client.get(answer["Location"]).content.decode()
    assert f'<progress value="1200" max="1200" data-batch="{batch.pk}">' in page and "1,200 / 1,200" in page
    assert 'http-equiv="refresh"' not in page
    status = admin_client.get(f"{BATCHES}{batch.pk}/status/").json()
    assert status == {"id": batch.pk, "campaign": campaign.pk, "source": "generated", "state": "done",
                      "inserted": 1200, "requested": 1200, "error": ""}


def test_the_generate_action_refuses_a_grab_campaign_and_a_bad_count_and_creates_nothing(admin_client) -> None:
    grab = CampaignFactory(name="Flash sale")
    chosen = {"action": "generate_unique_codes", "_selected_action": [str(grab.pk)], "apply": "1"}

    refused = admin_client.post(CAMPAIGNS, {**chosen, "count": "10"}).content.decode()
    too_many = admin_client.post(CAMPAIGNS, {**chosen, "count": "10000001"}).content.decode()

    assert "grab campaign" in refused
    assert "less than or equal to 10000000" in too_many
    assert CodeBatch.objects.count() == 0


def test_the_downloads_stream_the_csv_of_a_batch_and_of_a_campaign(admin_client) -> None:
    campaign = codes_campaign()
    first = code_batch_create(campaign=campaign, count=30, created_by="ann")
    second = code_batch_create(campaign=campaign, count=20, created_by="ann")
    for batch in (first, second):
        code_batch_generate(batch_id=batch.pk)

    one = admin_client.get(f"{BATCHES}{first.pk}/codes.csv")
    every = admin_client.get(f"{BATCHES}campaign/{campaign.pk}/codes.csv")

    assert isinstance(one, StreamingHttpResponse) and isinstance(every, StreamingHttpResponse)
    assert one["Content-Type"].startswith("text/csv") and "attachment" in one["Content-Disposition"]
    rows = list(csv.reader(io.StringIO(b"".join(one.streaming_content).decode())))
    assert rows[0] == ["code", "status", "holder", "batch"]
    assert sorted(r[0] for r in rows[1:]) == sorted(batch_codes(first))
    assert all(r[1:] == ["unused", "", str(first.pk)] for r in rows[1:])
    assert len(b"".join(every.streaming_content).decode().splitlines()) == 51
    assert "codes.csv" in admin_client.get(BATCHES).content.decode()  # the list links to them


def test_codes_pages_are_for_staff_only(client, admin_client) -> None:
    campaign = codes_campaign()
    batch = code_batch_create(campaign=campaign, count=3, created_by="ann")
    User.objects.create_user("shopper", password="pw")
    client.login(username="shopper", password="pw")

    for url in (f"{BATCHES}{batch.pk}/codes.csv", f"{BATCHES}campaign/{campaign.pk}/codes.csv",
                f"{BATCHES}{batch.pk}/status/", f"{BATCHES}campaign/{campaign.pk}/import/"):
        answer = client.get(url)
        assert answer.status_code == 302 and "/admin/login/" in answer["Location"], url
        assert admin_client.get(url).status_code == 200, url


def staff(name: str, *codenames: str, group: str | None = None) -> User:
    """A staff user with these permissions (app_label.codename) or the group's: a real login, no superuser."""
    user = User.objects.create_user(name, password="pw", is_staff=True)
    for codename in codenames:
        app_label, _, name_ = codename.partition(".")
        user.user_permissions.add(Permission.objects.get(content_type__app_label=app_label, codename=name_))
    if group:
        user.groups.add(Group.objects.get(name=group))
    return user


def test_a_viewer_sees_the_batches_but_can_neither_download_nor_import_codes(client) -> None:
    """Who holds an unheld unique code can use it: the codes are the campaign's, and looking is not changing."""
    campaign = codes_campaign()
    batch = code_batch_create(campaign=campaign, count=3, created_by="ann")
    code_batch_generate(batch_id=batch.pk)
    client.force_login(staff("vera", group=VIEWER_GROUP))

    listed = client.get(BATCHES)
    assert listed.status_code == 200 and f'data-batch="{batch.pk}"' in listed.content.decode()
    assert "codes.csv" not in listed.content.decode()  # no links that would be refused
    assert client.get(f"{BATCHES}{batch.pk}/status/").json()["inserted"] == 3  # progress is for viewers too
    for url in (f"{BATCHES}{batch.pk}/codes.csv", f"{BATCHES}campaign/{campaign.pk}/codes.csv",
                f"{BATCHES}campaign/{campaign.pk}/import/"):
        assert client.get(url).status_code == 403, url
    refused = client.post(f"{BATCHES}campaign/{campaign.pk}/import/",
                          {"file": SimpleUploadedFile("codes.txt", b"VIEW-0001\n")})
    assert refused.status_code == 403 and not UniqueCode.objects.filter(code="VIEW-0001").exists()


def test_changing_code_batches_without_changing_the_campaign_imports_nothing(client) -> None:
    campaign = codes_campaign()
    client.force_login(staff("bea", "coupons.view_codebatch", "coupons.change_codebatch", "campaigns.view_campaign"))

    page = client.get(f"{BATCHES}campaign/{campaign.pk}/import/")
    upload = client.post(f"{BATCHES}campaign/{campaign.pk}/import/",
                         {"file": SimpleUploadedFile("codes.txt", b"BEA-0001\n")})
    download = client.get(f"{BATCHES}campaign/{campaign.pk}/codes.csv")

    assert (page.status_code, upload.status_code, download.status_code) == (403, 403, 403)
    assert CodeBatch.objects.count() == 0 and UniqueCode.objects.count() == 0


def test_who_may_change_the_campaign_downloads_and_imports_its_codes(client) -> None:
    campaign = codes_campaign()
    client.force_login(staff("cid", "campaigns.view_campaign", "campaigns.change_campaign",
                             "coupons.view_codebatch"))

    upload = client.post(f"{BATCHES}campaign/{campaign.pk}/import/",
                         {"file": SimpleUploadedFile("codes.txt", b"CID-0001\nCID-0002\n")})
    batch = CodeBatch.objects.get()
    one = client.get(f"{BATCHES}{batch.pk}/codes.csv")
    every = client.get(f"{BATCHES}campaign/{campaign.pk}/codes.csv")

    assert upload.status_code == 302 and batch.created_by == "cid"
    assert one.status_code == every.status_code == 200
    assert sorted(row.split(",")[0] for row in b"".join(every.streaming_content).decode().splitlines()[1:]) == [
        "CID-0001", "CID-0002"]
    assert "codes.csv" in client.get(BATCHES).content.decode()


def test_an_upload_with_bad_lines_lists_them_and_imports_nothing_then_a_good_one_imports_all(admin_client) -> None:
    campaign = codes_campaign()
    chosen = {"action": "import_unique_codes", "_selected_action": [str(campaign.pk)]}
    url = f"{BATCHES}campaign/{campaign.pk}/import/"

    go = admin_client.post(CAMPAIGNS, chosen)
    bad = admin_client.post(url, {"file": SimpleUploadedFile("codes.txt", b"OLD-0001\nx\nold-0001\n")})
    good = admin_client.post(url, {"file": SimpleUploadedFile("codes.txt", b"old-0001\nOLD-0002\n")})

    assert go.status_code == 302 and go["Location"] == url
    page = bad.content.decode()
    assert bad.status_code == 200 and "Nothing imported: 2 bad lines" in page
    assert "<td>2</td><td>x</td>" in page and "duplicate of line 1" in page
    assert good.status_code == 302
    batch = CodeBatch.objects.get()
    assert (batch.source, batch.state, batch.inserted, batch.created_by) == ("imported", CodeBatchState.DONE, 2,
                                                                             "admin")
    assert set(UniqueCode.objects.values_list("code", flat=True)) == {"OLD-0001", "OLD-0002"}


# ---------------------------------------------------------------------------------------------------------
# The download through the servers: sent in parts (chunked), not built whole in memory


def staff_cookie(db_client) -> str:
    user = User.objects.create_superuser("operator", password="pw")
    db_client.force_login(user)
    return f"{settings.SESSION_COOKIE_NAME}={db_client.cookies[settings.SESSION_COOKIE_NAME].value}"


@pytest.mark.django_db(transaction=True)
def test_the_download_comes_chunked_through_the_run_commands_server_and_the_connection_stays_usable(
        http_server, client) -> None:
    campaign = codes_campaign()
    batch = code_batch_create(campaign=campaign, count=30_000, created_by="ann")
    code_batch_generate(batch_id=batch.pk)
    cookie = staff_cookie(client)
    host, port = http_server.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)

    connection.request("GET", f"{BATCHES}campaign/{campaign.pk}/codes.csv", headers={"Cookie": cookie})
    answer = connection.getresponse()
    body = answer.read().decode()
    connection.request("HEAD", f"{BATCHES}{batch.pk}/codes.csv", headers={"Cookie": cookie})
    head = connection.getresponse()
    head.read()
    connection.request("GET", "/healthz")  # the same connection: the chunked framing ended where it should
    after = connection.getresponse()

    assert answer.status == 200 and answer.getheader("Transfer-Encoding") == "chunked"
    assert answer.getheader("Content-Length") is None and answer.getheader("Content-Type").startswith("text/csv")
    rows = list(csv.reader(io.StringIO(body)))
    assert rows[0] == ["code", "status", "holder", "batch"] and len(rows) == 30_001
    assert {r[0] for r in rows[1:]} == set(batch_codes(batch))
    assert head.status == 200 and head.getheader("Transfer-Encoding") == "chunked"
    assert after.status == 200 and after.read()
    connection.close()


@pytest.mark.django_db(transaction=True)
def test_a_client_leaving_mid_download_leaves_the_server_serving(http_server, client) -> None:
    campaign = codes_campaign()
    batch = code_batch_create(campaign=campaign, count=60_000, created_by="ann")
    code_batch_generate(batch_id=batch.pk)
    cookie = staff_cookie(client)
    host, port = http_server.removeprefix("http://").split(":")

    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(f"GET {BATCHES}campaign/{campaign.pk}/codes.csv HTTP/1.1\r\nHost: x\r\nCookie: {cookie}\r\n\r\n"
                     .encode())
        assert sock.recv(4096).startswith(b"HTTP/1.1 200")  # then gone, the rest unread

    for _ in range(3):
        assert urllib.request.urlopen(f"{http_server}/healthz", timeout=5).status == 200
    again = urllib.request.urlopen(urllib.request.Request(f"{http_server}{BATCHES}{batch.pk}/codes.csv",
                                                          headers={"Cookie": cookie}), timeout=30)
    assert len(again.read().decode().splitlines()) == 60_001


def test_the_asgi_adapter_sends_parts_as_more_body_messages_and_closes_them() -> None:
    closed: list[bool] = []

    class Parts:
        def __aiter__(self):
            return self.parts()

        async def parts(self):
            yield b"a,"
            yield b"b\n"

        async def aclose(self) -> None:
            closed.append(True)

    class App:
        body_limit = 10

        def answer(self, request):
            return 200, [(b"content-type", b"text/csv")], Parts()

        def close(self) -> None:
            pass

    sent: list[dict] = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": "GET", "path": "/x", "raw_path": b"/x", "query_string": b"", "headers": []}
    run_coroutine(asgi(App())(scope, receive, send))

    assert [m.get("body") for m in sent[1:]] == [b"a,", b"b\n", b""]
    assert [m.get("more_body", False) for m in sent[1:]] == [True, True, False] and closed == [True]


def test_an_upload_kept_on_disk_imports_the_same_way(admin_client, settings) -> None:
    settings.FILE_UPLOAD_MAX_MEMORY_SIZE = 100  # a larger file goes to a temporary file
    campaign = codes_campaign()
    data = "".join(f"DISK-{i:04d}\r\n" for i in range(200)).encode()

    answer = admin_client.post(f"{BATCHES}campaign/{campaign.pk}/import/",
                               {"file": SimpleUploadedFile("codes.txt", data)})

    assert answer.status_code == 302
    assert set(UniqueCode.objects.values_list("code", flat=True)) == {f"DISK-{i:04d}" for i in range(200)}
