"""Structured logs: JSON lines carrying the request id, which answers also carry; no tokens in logs."""
from __future__ import annotations

import json
import logging

import pytest

from core.logs import JsonFormatter, RequestIdFilter, request_id_var

from ..conftest import shopper_headers

pytestmark = pytest.mark.django_db


def test_a_log_line_is_one_json_object_with_the_request_id_and_the_extras() -> None:
    record = logging.LogRecord("orders", logging.WARNING, __file__, 1, "drained %s", (3,), None)
    record.campaign = 42
    token = request_id_var.set("req-12345678")
    try:
        RequestIdFilter().filter(record)
    finally:
        request_id_var.reset(token)

    line = json.loads(JsonFormatter().format(record))

    assert line["msg"] == "drained 3" and line["level"] == "WARNING" and line["logger"] == "orders"
    assert line["request_id"] == "req-12345678" and line["campaign"] == 42


def test_every_answer_carries_a_request_id_and_a_sane_incoming_one_is_kept(client) -> None:
    made = client.get("/healthz")["X-Request-ID"]
    kept = client.get("/healthz", HTTP_X_REQUEST_ID="proxy-abcdef12")["X-Request-ID"]
    replaced = client.get("/healthz", HTTP_X_REQUEST_ID="bad id\r\n")["X-Request-ID"]

    assert len(made) == 32 and kept == "proxy-abcdef12" and replaced != "bad id\r\n" and len(replaced) == 32


def test_the_claim_view_answers_with_a_request_id_and_logs_no_token(live_campaign, caplog) -> None:
    from config.wsgi import application
    from tests.orders.claim_cases import call

    campaign = live_campaign()
    headers = shopper_headers("ann", HTTP_X_REQUEST_ID="lb-0000000042")
    caplog.set_level(logging.DEBUG)

    status, answer_headers, _ = call(application, f"/api/v1/campaigns/{campaign.pk}/claim", headers=headers)

    assert status == "200" and answer_headers["x-request-id"] == "lb-0000000042"
    assert headers["HTTP_X_TOKEN"] not in caplog.text


def test_the_lines_of_a_claim_carry_its_campaign_and_shopper_and_nothing_leaks_to_the_next(live_campaign,
                                                                                         caplog) -> None:
    import socket

    from django.test import override_settings

    from campaigns.redis_state import reset_redis_client
    from orders.apis import claim_answer

    from ..orders.claim_cases import door_claim

    campaign = live_campaign()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    caplog.set_level(logging.WARNING)
    with override_settings(REDIS_URL=f"redis://127.0.0.1:{closed}/0"):
        reset_redis_client()
        assert claim_answer(shopper_headers("ann"), str(campaign.pk), lambda: b"").http_status == 503  # Django's
        assert door_claim(shopper_headers("bob"), campaign.pk)[0] == 503  # the event loop's door
        logging.getLogger("orders").warning("after the claims")
    reset_redis_client()

    lines = [json.loads(JsonFormatter().format(r)) for r in caplog.records]
    unavailable = [line for line in lines if "Redis unavailable" in line["msg"]]
    assert [(line["campaign"], line["shopper"]) for line in unavailable] == [(campaign.pk, "ann"), (campaign.pk, "bob")]
    assert "campaign" not in lines[-1] and "shopper" not in lines[-1]
    assert not any("X-Token" in line["msg"] or "." in str(line.get("shopper", "")) for line in lines)


def test_the_lines_of_a_drain_task_carry_its_campaign(live_campaign, caplog) -> None:
    from orders.claim import claim_create
    from orders.tasks import drain_campaign

    campaign = live_campaign()
    claim_create(campaign_id=campaign.pk, user_id="ann", idempotency_key=None)
    caplog.set_level(logging.INFO)
    drain_campaign(campaign.pk)

    drained = [r for r in caplog.records if r.getMessage().startswith("drained campaign")]
    assert drained and json.loads(JsonFormatter().format(drained[0]))["campaign"] == campaign.pk
