"""The console's grants: a campaign's upload, the batch's progress and counts, its rejected lines (grants/admin.py)."""
from __future__ import annotations

from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from campaigns.services import campaign_pause, campaign_resume
from grants import tasks
from grants.models import GrantBatch, GrantStatus

from .conftest import drained_and_balanced, remaining

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def sent(monkeypatch: Any) -> list[int]:
    """The batches whose next chunk was sent to Celery (run by run_sent)."""
    queue: list[int] = []
    monkeypatch.setattr(tasks.grant_batch_continue, "delay", queue.append)
    return queue


def run_sent(queue: list[int]) -> None:
    while queue:
        tasks.grant_batch_continue(queue.pop(0))


def upload(client: Client, campaign_id: int, content: bytes, batch: str = "") -> Any:
    return client.post(f"/admin/grants/grantbatch/upload/{campaign_id}/",
                       {"file": SimpleUploadedFile("shoppers.csv", content), "batch": batch})


def test_an_upload_on_the_campaigns_page_grants_in_celery_with_progress_counts_and_rejected_lines(
        admin_client: Client, live_campaign: Any, sent: list[int], monkeypatch: Any) -> None:
    from grants import services
    monkeypatch.setattr(services, "CHUNK_SIZE", 2)
    campaign = live_campaign(total_stock=4, per_user_limit=1)
    page = admin_client.get(f"/admin/campaigns/campaign/{campaign.pk}/change/")
    assert b'id="grant-link"' in page.content
    response = upload(admin_client, campaign.pk, b"user_id\na\nb\na\nnot valid\nc\nd\ne\n", "gift")
    batch = GrantBatch.objects.get()
    assert response.status_code == 302 and response["Location"].endswith(f"/grantbatch/{batch.pk}/change/")
    assert (batch.status, batch.chunks, batch.chunks_done, batch.invalid, batch.duplicate) == (
        GrantStatus.RUNNING, 3, 0, 1, 1)
    page = admin_client.get(response["Location"])
    assert b'http-equiv="refresh"' in page.content and b"0 of 3 chunks" in page.content
    run_sent(sent)  # a task a chunk, each sending the next
    batch.refresh_from_db()
    assert (batch.status, batch.chunks_done, batch.granted, batch.sold_out) == (GrantStatus.DONE, 3, 4, 1)
    page = admin_client.get(response["Location"])
    assert b"granted 4, limit reached 0, sold out 1, invalid 1, duplicate 1" in page.content
    assert b'http-equiv="refresh"' not in page.content
    rejected = admin_client.get(f"/admin/grants/grantbatch/{batch.pk}/rejected.csv")
    assert rejected["Content-Type"].startswith("text/csv")
    assert rejected.content.decode().splitlines() == ["line,reason,text", "4,duplicate,a", "5,invalid,not valid"]
    assert remaining(campaign) == 0
    drained_and_balanced(campaign)


def test_an_upload_of_another_encoding_or_too_large_is_refused_and_nothing_is_granted(
        admin_client: Client, live_campaign: Any, sent: list[int], settings: Any) -> None:
    campaign = live_campaign(total_stock=4)
    page = upload(admin_client, campaign.pk, "alice\nJosé\n".encode("utf-16"))
    assert page.status_code == 200 and b"not UTF-8" in page.content
    settings.COUPONS_GRANTS_MAX_FILE_BYTES = 5
    page = upload(admin_client, campaign.pk, b"alice\nbob\n")
    assert b"more than the 5 bytes" in page.content
    assert not GrantBatch.objects.exists() and not sent and remaining(campaign) == 4


def test_a_batch_stopped_by_a_pause_is_resumed_from_its_page(
        admin_client: Client, live_campaign: Any, sent: list[int], monkeypatch: Any) -> None:
    from grants import services
    monkeypatch.setattr(services, "CHUNK_SIZE", 1)
    campaign = live_campaign(total_stock=4)
    upload(admin_client, campaign.pk, b"a\nb\nc\n", "b")
    tasks.grant_batch_continue(sent.pop())
    campaign_pause(campaign=campaign)
    run_sent(sent)
    batch = GrantBatch.objects.get()
    assert (batch.status, batch.chunks_done) == (GrantStatus.STOPPED, 1) and "is paused" in batch.error
    assert b"Resume" in admin_client.get(f"/admin/grants/grantbatch/{batch.pk}/change/").content
    campaign_resume(campaign=campaign)
    admin_client.post(f"/admin/grants/grantbatch/{batch.pk}/resume/")
    run_sent(sent)
    batch.refresh_from_db()
    assert (batch.status, batch.granted) == (GrantStatus.DONE, 3) and remaining(campaign) == 1


def test_a_running_batch_whose_runner_died_goes_on_from_the_beat_sweep(
        admin_client: Client, live_campaign: Any, sent: list[int], monkeypatch: Any) -> None:
    from datetime import timedelta

    from django.utils import timezone

    from grants import services
    monkeypatch.setattr(services, "CHUNK_SIZE", 1)
    campaign = live_campaign(total_stock=4)
    upload(admin_client, campaign.pk, b"a\nb\nc\n", "b")
    tasks.grant_batch_continue(sent.pop())  # one chunk, then the worker dies with the task it sent
    sent.clear()
    tasks.grant_batches_sweep()
    assert not sent  # a minute has not passed: its runner may be alive
    GrantBatch.objects.update(updated_at=timezone.now() - timedelta(seconds=services.STALE_SECONDS + 1))
    tasks.grant_batches_sweep()
    run_sent(sent)
    batch = GrantBatch.objects.get()
    assert (batch.status, batch.granted, batch.chunks_done) == (GrantStatus.DONE, 3, 3) and remaining(campaign) == 1
