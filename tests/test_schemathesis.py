"""Schemathesis against our own OpenAPI schema, in process, with a valid shopper token: no generated request
ever gets a 500, and every answer conforms to the schema (status codes, content type, body)."""
from __future__ import annotations

from collections.abc import Iterator

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from schemathesis.specs.openapi.checks import negative_data_rejection

from config.wsgi import application
from core.auth import mint_token

schema = schemathesis.openapi.from_wsgi("/api/schema/", application)


@pytest.fixture
def test_transaction_kept() -> Iterator[None]:
    """Call the WSGI app the way Django's test client does: its request signals must not close the test's
    connection (and with it the test transaction)."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.mark.slow
@pytest.mark.django_db
@schema.parametrize()
@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.filter_too_much])
def test_no_generated_request_gets_a_server_error_and_answers_conform(case, test_transaction_kept, live_campaign
                                                                    ) -> None:
    headers = {"X-User-Id": "fuzzer", "X-Token": mint_token("fuzzer", ttl=600)}
    response = case.call(headers=headers)
    assert response.status_code < 500, (response.status_code, response.text[:500])
    # Unknown query parameters are ignored, as HTTP APIs do: not a rejection this API owes.
    case.validate_response(response, headers=headers, excluded_checks=[negative_data_rejection])
