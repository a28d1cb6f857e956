"""The Celery side of the drain: the trigger after claims, the beat sweep, preheat of due campaigns."""
from __future__ import annotations

import subprocess
import sys
import time
from datetime import timedelta

import pytest
from django.conf import settings
from django.utils import timezone

from campaigns.redis_state import campaign_keys, redis_client
from config.celery import app
from coupons.models import Coupon
from orders import tasks
from orders.claim import DRAIN_TASK, claim_create

from ..conftest import ROOT, process_env, unacknowledged
from ..factories import CampaignFactory


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_claims_become_coupons_through_the_trigger_and_a_real_celery_worker(live_campaign) -> None:
    # Given a running Celery worker on the test broker
    campaign = live_campaign(total_stock=50, per_user_limit=1)
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "config", "worker", "--concurrency", "1", "--pool", "solo",
         "-l", "warning", "--without-gossip", "--without-mingle", "--without-heartbeat"],
        cwd=ROOT, env=process_env(),
    )
    try:
        # When 30 shoppers claim (the first claim sends one debounced drain trigger)
        for i in range(30):
            assert claim_create(campaign_id=campaign.pk, user_id=f"s{i}", idempotency_key=None).code == 0
        # Then every claim becomes a coupon without anyone calling the drain by hand
        deadline = time.monotonic() + 60
        while Coupon.objects.filter(campaign=campaign).count() < 30:
            assert time.monotonic() < deadline, "the worker did not drain the ledger"
            time.sleep(0.2)
    finally:
        worker.terminate()
        worker.wait(30)
    assert Coupon.objects.filter(campaign=campaign).count() == 30
    assert unacknowledged(campaign) == 0


@pytest.mark.django_db
def test_drain_sweep_drains_every_loaded_campaign_with_a_backlog(live_campaign) -> None:
    first, second = live_campaign(total_stock=5), live_campaign(total_stock=5)
    for campaign in (first, second):
        for user in ("a", "b"):
            claim_create(campaign_id=campaign.pk, user_id=user, idempotency_key=None)

    result = tasks.drain_sweep()

    assert result == {"drained": {first.pk: 2, second.pk: 2}}
    assert Coupon.objects.count() == 4


@pytest.mark.django_db
def test_drain_task_clears_the_trigger_flag_and_drains(live_campaign) -> None:
    campaign = live_campaign(total_stock=5)
    claim_create(campaign_id=campaign.pk, user_id="a", idempotency_key=None)
    assert redis_client().hexists(campaign_keys(campaign.pk).meta, "drain")

    result = tasks.drain_campaign(campaign.pk)

    assert result["persisted"] == 1 and not redis_client().hexists(campaign_keys(campaign.pk).meta, "drain")


@pytest.mark.django_db
def test_preheat_due_campaigns_loads_published_campaigns_starting_within_the_hour() -> None:
    soon = CampaignFactory(starts_at=timezone.now() + timedelta(minutes=30))
    later = CampaignFactory(starts_at=timezone.now() + timedelta(hours=3))
    draft = CampaignFactory(starts_at=timezone.now() + timedelta(minutes=5), published_at=None)

    assert tasks.preheat_due_campaigns() == {"preheated": [soon.pk]}
    assert int(redis_client().get(campaign_keys(soon.pk).stock)) == soon.total_stock
    assert not redis_client().exists(campaign_keys(later.pk).stock, campaign_keys(draft.pk).stock)


def test_every_periodic_job_is_in_the_beat_schedule_once_and_registered() -> None:
    names = [entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()]
    assert len(names) == len(set(names))
    assert {"orders.tasks.drain_sweep", "orders.tasks.preheat_due_campaigns"} <= set(names)
    app.loader.import_default_modules()
    assert set(names) <= set(app.tasks)
    assert settings.CELERY_BEAT_SCHEDULER == "django_celery_beat.schedulers:DatabaseScheduler"


def test_the_drain_trigger_sends_a_task_the_worker_knows_by_that_name() -> None:
    app.loader.import_default_modules()

    assert DRAIN_TASK in app.tasks and DRAIN_TASK == tasks.drain_campaign.name
