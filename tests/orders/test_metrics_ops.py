"""The operational counters move by exactly what happened: drains, expiry sweeps, coupon uses, claim outcomes,
the Celery queue; and a prefork worker serves its pool processes' counters on its own port."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.test import override_settings
from django.utils import timezone
from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram
from prometheus_client.parser import text_string_to_metric_families

from campaigns.redis_state import ClaimCode, redis_client, run_claim
from config.celery import app
from core.metrics import celery_queue_names
from coupons.compensation import expire_and_lapse_due
from coupons.models import CouponStatus
from orders import drain
from orders.drain import drain_campaign
from orders.metrics import CLAIM_TALLY, ClaimTally

from ..conftest import ROOT, free_port, in_one_second, process_env, shopper_headers, unacknowledged
from ..coupons.helpers import issued_coupon

pytestmark = pytest.mark.django_db


def value(name: str, **labels: str) -> float:
    """The current value of a sample of this process's registry (0 when it was never touched), with the claims
    this process answered so far (the claim path adds up its counts and hands them over every 0.2 s)."""
    CLAIM_TALLY.flush()
    return REGISTRY.get_sample_value(name, labels) or 0.0


def claim(campaign: Any, *users: str) -> None:
    for user in users:
        assert run_claim(campaign_id=campaign.pk, user_id=user, idempotency_key=None).code == ClaimCode.CLAIMED


# --- the drain ---------------------------------------------------------------------------------------------


def test_a_drain_counts_its_batches_the_entries_read_and_the_claims_it_wrote(live_campaign) -> None:
    campaign = live_campaign(total_stock=10)
    label = str(campaign.pk)
    claim(campaign, "a", "b", "c", "d", "e")
    batches, rows, read = (value(f"couponrush_drain_{m}_total", campaign=label) for m in ("batches", "rows", "read"))

    report = drain_campaign(campaign_id=campaign.pk, batch_size=2)

    assert (report.batches, report.persisted) == (3, 5)
    assert value("couponrush_drain_batches_total", campaign=label) == batches + 3
    assert value("couponrush_drain_rows_total", campaign=label) == rows + 5
    assert value("couponrush_drain_read_total", campaign=label) == read + 5
    drain_campaign(campaign_id=campaign.pk)  # nothing new: nothing counted
    assert value("couponrush_drain_rows_total", campaign=label) == rows + 5


def test_a_drain_that_fails_counts_one_failure_and_leaves_its_entries_pending(live_campaign, monkeypatch) -> None:
    campaign = live_campaign(total_stock=10)
    label = str(campaign.pk)
    claim(campaign, "a", "b")
    failures, rows = value("couponrush_drain_failures_total", campaign=label), \
        value("couponrush_drain_rows_total", campaign=label)

    def broken(*args: Any) -> int:
        raise RuntimeError("PostgreSQL went away")

    monkeypatch.setattr(drain, "persist_entries", broken)
    with pytest.raises(RuntimeError):
        drain_campaign(campaign_id=campaign.pk)

    assert value("couponrush_drain_failures_total", campaign=label) == failures + 1
    assert value("couponrush_drain_rows_total", campaign=label) == rows
    assert unacknowledged(campaign) == 2


# --- the expiry compensation ---------------------------------------------------------------------------------


def test_an_expiry_sweep_counts_one_run_and_every_hold_lapsed_and_coupon_expired(live_campaign) -> None:
    from coupons.models import Coupon

    campaign = live_campaign(total_stock=10, per_user_limit=5)
    coupons = [issued_coupon(lambda **_: campaign, user) for user in ("a", "b", "c")]
    past = timezone.now() - timedelta(minutes=5)
    due = Coupon.objects.filter(pk__in=[coupons[0].pk, coupons[1].pk])
    due.update(valid_from=past - timedelta(days=1), expires_at=past)
    Coupon.objects.filter(pk=coupons[2].pk).update(status=CouponStatus.HELD, order_id="A-9", hold_until=past)
    runs, expired, lapsed = (value(f"couponrush_{m}_total") for m in ("expiry_runs", "coupons_expired", "holds_lapsed"))

    report = expire_and_lapse_due()

    assert (report.expired, report.lapsed) == (2, 1)
    assert value("couponrush_expiry_runs_total") == runs + 1
    assert value("couponrush_coupons_expired_total") == expired + 2
    assert value("couponrush_holds_lapsed_total") == lapsed + 1
    expire_and_lapse_due()
    assert value("couponrush_expiry_runs_total") == runs + 2
    assert value("couponrush_coupons_expired_total") == expired + 2


# --- coupon uses ---------------------------------------------------------------------------------------------


def post(client: Any, code: str, action: str, body: dict[str, Any], key: str | None = None) -> dict[str, Any]:
    headers = shopper_headers("alice", **({"HTTP_IDEMPOTENCY_KEY": key} if key else {}))
    return client.post(f"/api/v1/coupons/{code}/{action}", json.dumps(body), "application/json", **headers).json()


def test_every_coupon_use_is_counted_by_operation_and_outcome(client, live_campaign) -> None:
    first = issued_coupon(live_campaign, "alice")
    second = issued_coupon(live_campaign, "alice")
    order = {"order_id": "A-1", "order_amount": "350.00", "currency": "CNY"}
    uses = {(op, outcome): value("couponrush_coupon_uses_total", operation=op, outcome=outcome) for op, outcome in (
        ("redeem", "redeemed"), ("redeem", "min_spend_not_met"), ("redeem", "already_redeemed"),
        ("redeem", "invalid_request"), ("redeem", "not_found"), ("reserve", "reserved"), ("confirm", "redeemed"),
        ("release", "released"))}

    assert post(client, first.code, "redeem", {**order, "order_amount": "100.00"}, "k1")["status"] == \
        "min_spend_not_met"
    assert post(client, first.code, "redeem", order, "k2")["status"] == "redeemed"
    assert post(client, first.code, "redeem", order, "k2")["status"] == "redeemed"  # a replay is an answer too
    assert post(client, first.code, "redeem", {**order, "order_id": "B-2"}, "k3")["status"] == "already_redeemed"
    assert post(client, first.code, "redeem", order)["status"] == "invalid_request"  # no Idempotency-Key
    assert post(client, "ZZZZ-ZZZZ-ZZZZ", "redeem", order, "k4")["status"] == "not_found"
    assert post(client, second.code, "reserve", {**order, "order_id": "C-3"}, "k5")["status"] == "reserved"
    assert post(client, second.code, "confirm", {"order_id": "C-3"})["status"] == "redeemed"
    assert post(client, second.code, "release", {"order_id": "C-3"})["status"] == "released"

    moved = {k: value("couponrush_coupon_uses_total", operation=k[0], outcome=k[1]) - v for k, v in uses.items()}
    assert moved == {("redeem", "redeemed"): 2, ("redeem", "min_spend_not_met"): 1,
                     ("redeem", "already_redeemed"): 1, ("redeem", "invalid_request"): 1, ("redeem", "not_found"): 1,
                     ("reserve", "reserved"): 1, ("confirm", "redeemed"): 1, ("release", "released"): 1}


# --- claim outcomes --------------------------------------------------------------------------------------------


def claim_over_http(client: Any, campaign_id: int, user: str) -> Any:
    return client.post(f"/api/v1/campaigns/{campaign_id}/claim", "{}", "application/json", **shopper_headers(user))


@override_settings(COUPONS_RATE_LIMIT_SHOPPER_PER_SECOND=1)
def test_claims_refused_by_a_rate_limit_or_a_lost_redis_state_are_counted_as_rate_limited_and_unavailable(
    client, live_campaign
) -> None:
    campaign = live_campaign(total_stock=20, per_user_limit=20)  # room for a run again
    label = str(campaign.pk)
    unavailable = value("couponrush_claims_total", campaign=label, outcome="unavailable", storefront="default")

    limited, answers = in_one_second(lambda _: (  # a retried run's own 429s are not this run's
        value("couponrush_claims_total", campaign=label, outcome="rate_limited", storefront="default"),
        [claim_over_http(client, campaign.pk, "ann").status_code for _ in range(3)]))
    redis_client().flushdb()  # Redis lost the campaign's state: 503 until it is rebuilt
    lost = claim_over_http(client, campaign.pk, "bob")

    assert answers == [200, 429, 429] and lost.status_code == 503
    assert value("couponrush_claims_total", campaign=label, outcome="rate_limited", storefront="default") \
        == limited + 2
    assert value("couponrush_claims_total", campaign=label, outcome="unavailable", storefront="default") \
        == unavailable + 1


def test_the_claim_tally_hands_every_count_from_many_threads_to_prometheus_within_its_period() -> None:
    registry = CollectorRegistry()
    bounds = (0.001, 0.005, 0.01)
    counter = Counter("t_claims", "", ["campaign", "outcome", "storefront"], registry=registry)
    tallied = Histogram("t_seconds", "", buckets=bounds, registry=registry)
    observed = Histogram("t_reference", "", buckets=bounds, registry=registry)  # observe(), one by one
    tally = ClaimTally(counter, tallied, every=0.05)
    samples = [0.0, 0.0005, 0.001, 0.0010001, 0.005, 0.007, 0.01, 0.5]  # on and beside every bound
    for seconds in samples * 1000:  # 1,000 of each, as the threads below add them
        observed.observe(seconds)

    def add(thread: int) -> None:
        for i in range(1000):
            for seconds in samples[thread::4]:
                tally.add("7", "claimed" if i % 2 else "sold_out", seconds)

    threads = [threading.Thread(target=add, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    time.sleep(0.3)  # no flush() here: the tally's thread hands the counts over

    def sample(name: str, **labels: str) -> float:
        return registry.get_sample_value(name, labels) or 0.0

    assert sample("t_claims_total", campaign="7", outcome="claimed", storefront="default") == 4000
    assert sample("t_claims_total", campaign="7", outcome="sold_out", storefront="default") == 4000
    for le in ("0.001", "0.005", "0.01", "+Inf"):
        assert sample("t_seconds_bucket", le=le) == sample("t_reference_bucket", le=le)
    assert sample("t_seconds_bucket", le="0.001") == 3000 and sample("t_seconds_count") == 8000
    assert sample("t_seconds_sum") == pytest.approx(sum(samples) * 1000)


CLAIMED_7 = {"campaign": "7", "outcome": "claimed", "storefront": "default"}


def test_a_forked_child_hands_over_only_its_own_claims_and_counts_with_a_thread_of_its_own() -> None:
    registry = CollectorRegistry()
    counter = Counter("f_claims", "", ["campaign", "outcome", "storefront"], registry=registry)
    tally = ClaimTally(counter, Histogram("f_seconds", "", registry=registry), every=0.05)
    for _ in range(3):
        tally.add("7", "claimed", 0.001)  # the parent's, not handed over yet
    with tally.lock:  # held at the fork, as another thread of a granian worker may hold it
        read, write = os.pipe()
        child = os.fork()
    if child == 0:  # pragma: no cover (the child reports through the pipe)
        try:
            tally.add("7", "claimed", 0.001)
            time.sleep(0.3)  # no flush(): the child's own thread hands it over
            os.write(write, str(registry.get_sample_value("f_claims_total", CLAIMED_7)).encode())
        finally:
            os._exit(0)
    os.close(write)
    reported = os.read(read, 100).decode()
    os.waitpid(child, 0)
    tally.flush()
    assert reported == "1.0"
    assert registry.get_sample_value("f_claims_total", CLAIMED_7) == 3


# --- scrape-time figures ---------------------------------------------------------------------------------------


def scraped(text: str, name: str, **labels: str) -> float | None:
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
    return None


def test_metrics_show_the_length_of_the_celery_queue_in_the_redis_broker(client, monkeypatch) -> None:
    import core.metrics

    assert celery_queue_names() == [app.conf.task_default_queue]  # "celery": where every task goes
    queue = f"test-{uuid.uuid4().hex}"  # a queue of this test's own: drain triggers of other tests go elsewhere
    monkeypatch.setattr(core.metrics, "celery_queue_names", lambda: [queue])
    assert scraped(client.get("/metrics").content.decode(), "couponrush_celery_queue_length", queue=queue) == 0
    try:
        with app.producer_or_acquire() as producer:
            for priority in (0, 0, 9):  # kombu keeps each priority step in a list of its own
                app.send_task("couponrush.test.nothing", producer=producer, queue=queue, priority=priority,
                              expires=30)

        text = client.get("/metrics").content.decode()

        assert scraped(text, "couponrush_celery_queue_length", queue=queue) == 3
        assert scraped(text, "couponrush_celery_broker_up") == 1.0
    finally:
        with app.connection_for_write() as conn:
            conn.default_channel.client.delete(queue, *(f"{queue}\x06\x16{step}" for step in (3, 6, 9)))


# --- a prefork worker's own metrics port -----------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_prefork_worker_serves_its_pool_processes_drain_counters_on_its_metrics_port(live_campaign, tmp_path
                                                                                       ) -> None:
    # Given a prefork worker with its own metrics port (as in docker-compose.yml)
    campaign = live_campaign(total_stock=20, per_user_limit=1)
    claim(campaign, *(f"s{i}" for i in range(7)))
    port = free_port()
    env = {**process_env(), "PROMETHEUS_MULTIPROC_DIR": str(tmp_path), "COUPONRUSH_WORKER_METRICS_PORT": str(port)}
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "config", "worker", "--concurrency", "1", "--pool", "prefork",
         "-l", "warning", "--without-gossip", "--without-mingle", "--without-heartbeat"],
        cwd=ROOT, env=env,
    )
    try:
        # When a drain task runs in its pool process
        from orders.tasks import drain_campaign as drain_task

        drain_task.apply_async(args=[campaign.pk], expires=60)
        # Then the worker's main process serves the pool's counters
        deadline, rows = time.monotonic() + 60, None
        while rows != 7.0:
            assert time.monotonic() < deadline, f"the worker's metrics never showed the drain (last: {rows})"
            time.sleep(0.3)
            try:
                text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
            except OSError:
                continue
            rows = scraped(text, "couponrush_drain_rows_total", campaign=str(campaign.pk))
        assert scraped(text, "couponrush_drain_batches_total", campaign=str(campaign.pk)) == 1.0
    finally:
        worker.terminate()
        worker.wait(30)
    assert unacknowledged(campaign) == 0
    assert os.listdir(tmp_path)  # the pool process wrote its counters to the shared folder



def test_every_series_the_grafana_dashboard_queries_is_exported_by_metrics(client) -> None:
    import re

    dashboard = json.loads((ROOT / "deploy" / "grafana" / "couponrush-sale.json").read_text())
    queried = {name for panel in dashboard["panels"] for target in panel["targets"]
               for name in re.findall(r"couponrush_[a-z_]+", target["expr"])}
    def family(name: str) -> str:
        return re.sub(r"_(total|bucket|sum|count)$", "", name)

    text = client.get("/metrics").content.decode()
    exported = {family(name) for name in re.findall(r"^# TYPE (couponrush_[a-z_]+) ", text, re.M)}

    missing = {name for name in queried if family(name) not in exported}
    assert len(queried) > 15 and missing == set()
