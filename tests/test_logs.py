"""Structured logs: JSON lines carrying the request id, which answers also carry; no tokens in logs."""
from __future__ import annotations

import json
import logging

import pytest

from config.logs import JsonFormatter, RequestIdFilter, request_id_var

from .conftest import shopper_headers

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


def test_the_claim_fast_path_answers_with_a_request_id_and_logs_no_token(live_campaign, caplog) -> None:
    from config.wsgi import application
    from tests.test_fastpath import call

    campaign = live_campaign()
    headers = shopper_headers("ann", HTTP_X_REQUEST_ID="lb-0000000042")
    caplog.set_level(logging.DEBUG)

    status, answer_headers, _ = call(application, f"/api/v1/campaigns/{campaign.pk}/claim", headers=headers)

    assert status == "200" and answer_headers["x-request-id"] == "lb-0000000042"
    assert headers["HTTP_X_TOKEN"] not in caplog.text
