"""A Redis that does not answer: the claim fails fast with 503 and changes nothing."""
from __future__ import annotations

import socket
import time

import pytest
from django.test import override_settings

from campaigns.redis_state import reset_redis_client
from orders.models import Claim

from ..conftest import shopper_headers


@pytest.mark.django_db
def test_claim_against_a_redis_that_accepts_but_never_answers_is_a_503_within_a_second(client, live_campaign) -> None:
    campaign = live_campaign()
    with socket.socket() as blackhole:  # the kernel accepts connections; nobody ever reads or answers
        blackhole.bind(("127.0.0.1", 0))
        blackhole.listen(64)
        port = blackhole.getsockname()[1]
        with override_settings(REDIS_URL=f"redis://127.0.0.1:{port}/0"):
            reset_redis_client()
            started = time.monotonic()
            response = client.post(
                f"/api/v1/campaigns/{campaign.pk}/claim", "{}", "application/json", **shopper_headers("alice")
            )
            elapsed = time.monotonic() - started
            reset_redis_client()

    assert response.status_code == 503 and response["Retry-After"] == "1"
    assert response.json()["status"] == "unavailable"
    assert elapsed < 1.0
    assert Claim.objects.count() == 0
