"""Fault: Redis frozen (SIGSTOP) mid-claim. The shopper gets a 503 within a second, and when Redis resumes
and runs the queued script, the claim must not happen: nobody was told it did."""
from __future__ import annotations

import os
import signal
import time

import pytest

from campaigns.redis_state import campaign_keys, redis_client, reset_redis_client
from campaigns.services import campaign_preheat
from core.errors import Unavailable
from orders.claim import claim_create

from ..conftest import claims_in_threads
from ..factories import CampaignFactory

pytestmark = [pytest.mark.slow, pytest.mark.django_db]


def test_a_claim_sent_to_a_frozen_redis_is_a_fast_503_and_never_happens_after_it_resumes(client, private_redis):
    campaign = CampaignFactory(total_stock=10, per_user_limit=5)
    campaign_preheat(campaign=campaign)
    assert claim_create(campaign_id=campaign.pk, user_id="warm", idempotency_key=None).status == "claimed"
    keys = campaign_keys(campaign.pk)
    pid = private_redis._process.pid
    answers: list[object] = []

    os.kill(pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        for t in claims_in_threads(campaign.pk, 5, answers):
            t.join()
        elapsed = time.monotonic() - started
        health = client.get("/healthz")
    finally:
        os.kill(pid, signal.SIGCONT)
    time.sleep(0.5)  # Redis runs whatever was queued while it was frozen

    assert all(isinstance(a, Unavailable) for a in answers) and elapsed < 1.0
    assert health.status_code == 200
    reset_redis_client()
    assert int(redis_client().get(keys.stock)) == 9  # only the claim made before the freeze
    assert redis_client().xlen(keys.ledger) == 1
    assert redis_client().hget(keys.users, "s0") is None
    assert not any(redis_client().exists(keys.idempotency(f"s{n}", f"k{n}")) for n in range(5))
    assert claim_create(campaign_id=campaign.pk, user_id="after", idempotency_key=None).status == "claimed"
