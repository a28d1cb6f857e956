"""Schemathesis against our own OpenAPI schema, in process, with a valid shopper token: no generated request
ever gets a 500, and every answer conforms to the schema (status codes, content type, body)."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

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


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_sequences_of_calls_that_follow_the_answers_links_conform(live_campaign) -> None:
    """Schemathesis's stateful phase: calls chained by the links it infers from the answers (a claim's claim_id
    into GET /api/v1/claims/{claim_id} and its cancel); a refused claim's claim_id is null, and the schema says
    so only for refusals, so no call is made with a value the schema does not give."""
    from schemathesis.specs.openapi.checks import ignored_auth

    live_campaign(total_stock=1)  # claimed once, then sold out
    headers = {"X-User-Id": "fuzzer", "X-Token": mint_token("fuzzer", ttl=600)}

    class Calls(schema.as_state_machine()):  # type: ignore[misc]
        def get_call_kwargs(self, case: Any) -> dict[str, Any]:
            return {"headers": headers}

        def validate_response(self, response: Any, case: Any, additional_checks: Any = (), **kwargs: Any) -> None:
            # every call carries the shopper's valid token: "accepts invalid auth" does not apply
            case.validate_response(response, headers=headers,
                                   excluded_checks=[ignored_auth, negative_data_rejection])

    Calls.TestCase.settings = settings(max_examples=40, stateful_step_count=6, deadline=None, derandomize=True,
                                       suppress_health_check=list(HealthCheck))
    Calls.TestCase().runTest()


def _as_json_schema(node: Any) -> Any:
    """OpenAPI 3.0's `nullable` as JSON Schema: `{"nullable": true, "enum": [null]}` is null only."""
    if isinstance(node, list):
        return [_as_json_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    node = {key: _as_json_schema(value) for key, value in node.items()}
    if not node.pop("nullable", False):
        return node
    return {"enum": [None]} if node.get("enum") == [None] else {"anyOf": [node, {"type": "null"}]}


@pytest.mark.parametrize(("answer", "valid"), [
    ({"code": 0, "status": "claimed", "claim_id": "42-1764470000000-0", "campaign_id": 42}, True),
    ({"code": 2, "status": "sold_out", "claim_id": None, "campaign_id": 42}, True),
    ({"code": 0, "status": "claimed", "claim_id": None, "campaign_id": 42}, False),  # claimed carries its id
    ({"code": 2, "status": "sold_out", "claim_id": "42-1764470000000-0", "campaign_id": 42}, False),
])
def test_the_claims_answer_has_a_claim_id_exactly_when_it_claimed(answer, valid) -> None:
    import jsonschema

    document = schema.raw_schema
    answer_schema = document["paths"]["/api/v1/campaigns/{campaign_id}/claim"]["post"]["responses"]["200"][
        "content"]["application/json"]["schema"]
    assert jsonschema.Draft7Validator(_as_json_schema(answer_schema)).is_valid(answer) is valid
