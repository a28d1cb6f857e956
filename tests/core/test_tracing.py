"""Optional OpenTelemetry tracing: off and free by default, on by environment, spans around the drain and
the sweeps with campaign and claim ids (the SDK's in-memory exporter)."""
from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from campaigns.redis_state import ClaimCode, run_claim
from core import tracing
from coupons.compensation import expire_and_lapse_due, repair_drift
from coupons.models import Coupon
from orders import ledger
from orders.drain import drain_campaign

from ..conftest import ROOT
from ..coupons.helpers import issued_coupon


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """Trace into memory for the test (a provider of its own: the global one can be set only once)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.use_tracer(provider.get_tracer("test"))
    yield exporter
    tracing.reset()


def named(exporter: InMemorySpanExporter, name: str) -> list[Any]:
    return [s for s in exporter.get_finished_spans() if s.name == name]


@pytest.mark.parametrize("environ, on", [
    ({}, False),
    ({"COUPONS_TRACING": "1"}, True),
    ({"COUPONS_TRACING": "false", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, False),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, True),
    ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, True),
    ({"COUPONS_TRACING": "1", "OTEL_SDK_DISABLED": "true"}, False),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "OTEL_TRACES_EXPORTER": "none"}, False),
])
def test_tracing_is_on_only_when_the_environment_asks_for_it(environ, on) -> None:
    assert tracing.tracing_requested(environ) is on


def test_off_a_span_is_one_shared_object_and_opentelemetry_is_never_imported() -> None:
    code = (
        "import sys; from core import tracing\n"
        "a = tracing.span('x', campaign_id=1); b = tracing.span('y')\n"
        "with a as s: s.set(rows=3)\n"
        "assert a is b and not any(m.startswith('opentelemetry') for m in sys.modules), sorted(sys.modules)\n"
        "print('ok')\n"
    )
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=60)
    assert result.stdout.strip() == "ok", result.stderr


def test_on_by_environment_spans_go_to_the_configured_exporter() -> None:
    code = (
        "from core import tracing\n"
        "with tracing.span('couponrush.drain', campaign_id=42, claim_ids=['42-1-0']) as s: s.set(rows=1)\n"
        "from opentelemetry import trace; trace.get_tracer_provider().shutdown()\n"
    )
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "COUPONS_TRACING": "1",
           "OTEL_TRACES_EXPORTER": "console", "OTEL_SERVICE_NAME": "couponrush-test"}
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    assert '"name": "couponrush.drain"' in result.stdout
    assert '"couponrush.campaign_id": 42' in result.stdout and '"couponrush.rows": 1' in result.stdout
    assert '"service.name": "couponrush-test"' in result.stdout


@pytest.mark.django_db
def test_a_drain_is_traced_with_its_campaign_and_the_claim_ids_of_each_batch(spans, live_campaign) -> None:
    campaign = live_campaign(total_stock=10)
    claim_ids = []
    for user in ("a", "b", "c"):
        result = run_claim(campaign_id=campaign.pk, user_id=user, idempotency_key=None)
        assert result.code == ClaimCode.CLAIMED
        claim_ids.append(ledger.claim_id_of(campaign.pk, result.ledger_id))

    drain_campaign(campaign_id=campaign.pk, batch_size=2)

    [drain] = named(spans, "couponrush.drain")
    batches = named(spans, "couponrush.drain.batch")
    assert drain.attributes["couponrush.campaign_id"] == campaign.pk
    assert (drain.attributes["couponrush.read"], drain.attributes["couponrush.persisted"]) == (3, 3)
    assert [list(b.attributes["couponrush.claim_ids"]) for b in batches] == [claim_ids[:2], claim_ids[2:]]
    assert all(b.parent is not None and b.parent.span_id == drain.context.span_id for b in batches)


@pytest.mark.django_db
def test_the_expiry_sweep_and_the_drift_repair_are_traced_with_what_they_did(spans, live_campaign) -> None:
    coupon = issued_coupon(live_campaign, "alice")
    past = timezone.now() - timedelta(minutes=5)
    Coupon.objects.filter(pk=coupon.pk).update(valid_from=past - timedelta(days=1), expires_at=past)

    expire_and_lapse_due()
    repair_drift()

    [sweep] = named(spans, "couponrush.expiry_sweep")
    assert (sweep.attributes["couponrush.expired"], sweep.attributes["couponrush.lapsed"]) == (1, 0)
    assert sweep.attributes["couponrush.finished"] is True
    assert len(named(spans, "couponrush.drift_repair")) == 1


def test_a_claim_is_traced_with_its_campaign_outcome_and_claim_id_through_both_doors(spans, live_campaign) -> None:

    from orders.apis import claim_answer

    from ..conftest import shopper_headers
    from ..orders.claim_cases import door_claim

    campaign = live_campaign(total_stock=1, per_user_limit=1)
    outcome = claim_answer(shopper_headers("ann"), str(campaign.pk), lambda: b"")  # Django's view
    status2, body2 = door_claim(shopper_headers("bob"), campaign.pk)  # the event loop's door

    claims = named(spans, "couponrush.claim")
    assert (outcome.status, status2, body2["status"]) == ("claimed", 200, "sold_out")
    assert [dict(s.attributes) for s in claims] == [
        {"couponrush.campaign_id": campaign.pk, "couponrush.outcome": "claimed",
         "couponrush.claim_id": outcome.claim_id},
        {"couponrush.campaign_id": campaign.pk, "couponrush.outcome": "sold_out"},
    ]
