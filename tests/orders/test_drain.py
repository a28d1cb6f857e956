"""The ledger drain: Redis stream -> Claim + Coupon + 'issued' event, exactly once, whatever happens."""
from __future__ import annotations

import subprocess
import sys
import threading
import time
from datetime import timedelta

import psycopg
import pytest
from django.conf import settings
from django.db import connections
from django.utils import timezone

from campaigns.redis_state import DRAIN_GROUP, campaign_keys, redis_client, run_claim
from coupons.codes import CODE_RE
from coupons.models import Coupon, CouponEvent, CouponEventType, CouponStatus
from orders import ledger
from orders.drain import drain_campaign, persist_entries
from orders.models import Claim, ClaimStatus
from orders.verify import campaign_verify

from ..conftest import ROOT, process_env, unacknowledged


def claim_many(campaign, users: list[str]) -> list[str]:
    ids = []
    for user in users:
        result = run_claim(campaign_id=campaign.pk, user_id=user, idempotency_key=None)
        assert result.code == 0
        ids.append(f"{campaign.pk}-{result.ledger_id}")
    return ids


@pytest.mark.django_db
def test_drain_turns_every_claim_into_one_issued_coupon_with_its_event(live_campaign) -> None:
    campaign = live_campaign(total_stock=5, valid_days=7)
    claim_ids = claim_many(campaign, ["alice", "bob", "carol"])

    report = drain_campaign(campaign_id=campaign.pk)

    assert (report.read, report.persisted, report.caught_up) == (3, 3, True)
    claims = {c.claim_id: c for c in Claim.objects.filter(campaign=campaign)}
    assert set(claims) == set(claim_ids)
    assert {c.status for c in claims.values()} == {ClaimStatus.ISSUED}
    for coupon in Coupon.objects.filter(campaign=campaign):
        assert coupon.claim_id in claims and coupon.user_id == claims[coupon.claim_id].user_id
        assert coupon.status == CouponStatus.ACTIVE and CODE_RE.fullmatch(coupon.code)
        assert coupon.valid_from == claims[coupon.claim_id].claimed_at
        assert coupon.expires_at == (coupon.valid_from + timedelta(days=7)).replace(microsecond=0)
        [event] = CouponEvent.objects.filter(coupon=coupon)
        assert (event.type, event.source, event.data["claim_id"]) == (CouponEventType.ISSUED, "drain", coupon.claim_id)
    assert unacknowledged(campaign) == 0
    assert campaign_verify(campaign=campaign).balanced


@pytest.mark.django_db
def test_absolute_validity_comes_from_the_rule(live_campaign) -> None:
    until = (timezone.now() + timedelta(days=3)).replace(microsecond=0)
    campaign = live_campaign(valid_days=None, valid_until=until)
    claim_many(campaign, ["alice"])

    drain_campaign(campaign_id=campaign.pk)

    assert Coupon.objects.get(campaign=campaign).expires_at == until


@pytest.mark.django_db
def test_the_same_entries_persisted_twice_give_one_claim_and_one_coupon(live_campaign) -> None:
    campaign = live_campaign(total_stock=5)
    claim_many(campaign, ["alice", "bob"])
    entries = ledger.read_new(campaign.pk, consumer="c1", count=10)

    first, second = persist_entries(campaign, entries), persist_entries(campaign, entries)

    assert (first, second) == (2, 0)
    assert Claim.objects.filter(campaign=campaign).count() == 2
    assert Coupon.objects.filter(campaign=campaign).count() == 2
    assert CouponEvent.objects.filter(campaign=campaign).count() == 2


@pytest.mark.django_db
def test_drain_in_several_batches_and_again_finds_nothing(live_campaign) -> None:
    campaign = live_campaign(total_stock=25)
    claim_many(campaign, [f"u{i}" for i in range(25)])

    report = drain_campaign(campaign_id=campaign.pk, batch_size=10)
    again = drain_campaign(campaign_id=campaign.pk, batch_size=10)

    assert (report.read, report.batches) == (25, 3)
    assert (again.read, again.persisted) == (0, 0)
    assert Coupon.objects.filter(campaign=campaign).count() == 25


@pytest.mark.django_db(transaction=True)
def test_concurrent_drains_of_one_campaign_persist_each_claim_once(live_campaign) -> None:
    campaign = live_campaign(total_stock=600, per_user_limit=600)
    claim_ids = claim_many(campaign, ["alice"] * 600)
    reports = []

    def drain(name: str) -> None:
        try:
            reports.append(drain_campaign(campaign_id=campaign.pk, consumer=name, batch_size=25))
        finally:
            connections.close_all()  # this thread's own connection

    threads = [threading.Thread(target=drain, args=(f"w{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert sum(r.read for r in reports) == 600 and sum(r.persisted for r in reports) == 600
    assert sorted(Claim.objects.filter(campaign=campaign).values_list("claim_id", flat=True)) == sorted(claim_ids)
    assert Coupon.objects.filter(campaign=campaign).count() == 600


def _db_connect() -> psycopg.Connection:
    db = settings.DATABASES["default"]
    return psycopg.connect(
        dbname=db["NAME"], user=db.get("USER") or None, password=db.get("PASSWORD") or None,
        host=db.get("HOST") or None, port=db.get("PORT") or None, autocommit=False,
    )


def _pending_of(campaign, consumer: str) -> int:
    info = redis_client().xpending(campaign_keys(campaign.pk).ledger, DRAIN_GROUP)
    return next((int(c["pending"]) for c in info["consumers"] if c["name"].decode() == consumer), 0)


def _start_doomed_drain(campaign) -> subprocess.Popen:
    code = (
        "import django; django.setup();"
        "from orders.drain import drain_campaign;"
        f"drain_campaign(campaign_id={campaign.pk}, consumer='doomed', batch_size=100, max_seconds=120)"
    )
    return subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=process_env())


def _wait_for(condition, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_drain_worker_killed_mid_batch_loses_nothing_and_duplicates_nothing(live_campaign) -> None:
    # Given 150 claims and a drain worker that has read a batch of 100 but is stuck inserting it
    campaign = live_campaign(total_stock=150, per_user_limit=150)
    claim_ids = claim_many(campaign, ["alice"] * 150)
    blocker = _db_connect()
    blocker.execute(f"LOCK TABLE {Claim._meta.db_table} IN EXCLUSIVE MODE")
    worker = _start_doomed_drain(campaign)
    try:
        _wait_for(lambda: _pending_of(campaign, "doomed") == 100)
        # When it is killed with SIGKILL mid-batch
        worker.kill()
        worker.wait(10)
    finally:
        blocker.rollback()
        blocker.close()
    assert Claim.objects.filter(campaign=campaign).count() == 0
    # Then the next drain takes its entries over and every claim is persisted exactly once
    report = drain_campaign(campaign_id=campaign.pk, consumer="survivor", reclaim_idle_ms=0)
    assert report.reclaimed == 100 and report.read == 150
    assert sorted(Claim.objects.filter(campaign=campaign).values_list("claim_id", flat=True)) == sorted(claim_ids)
    assert Coupon.objects.filter(campaign=campaign).count() == 150
    assert unacknowledged(campaign) == 0
    assert campaign_verify(campaign=campaign).balanced


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_drain_worker_killed_after_commit_before_ack_is_persisted_once(live_campaign) -> None:
    # Given a drain worker that committed its batch to PostgreSQL but could not acknowledge it in Redis
    campaign = live_campaign(total_stock=100, per_user_limit=100)
    claim_ids = claim_many(campaign, ["alice"] * 100)
    blocker = _db_connect()
    blocker.execute(f"LOCK TABLE {Claim._meta.db_table} IN EXCLUSIVE MODE")
    worker = _start_doomed_drain(campaign)
    try:
        _wait_for(lambda: _pending_of(campaign, "doomed") == 100)
        redis_client().execute_command("CLIENT", "PAUSE", 20000, "WRITE")  # XACK now waits
        blocker.rollback()
        _wait_for(lambda: Claim.objects.filter(campaign=campaign).count() == 100)
        # When it is killed before the acknowledgement
        worker.kill()
        worker.wait(10)
    finally:
        redis_client().execute_command("CLIENT", "UNPAUSE")
        blocker.close()
    assert _pending_of(campaign, "doomed") == 100
    # Then the reclaimed entries are acknowledged without a second claim or coupon
    report = drain_campaign(campaign_id=campaign.pk, consumer="survivor", reclaim_idle_ms=0)
    assert (report.reclaimed, report.persisted) == (100, 0)
    assert sorted(Claim.objects.filter(campaign=campaign).values_list("claim_id", flat=True)) == sorted(claim_ids)
    assert Coupon.objects.filter(campaign=campaign).count() == 100
    assert CouponEvent.objects.filter(campaign=campaign).count() == 100
    assert campaign_verify(campaign=campaign).balanced


@pytest.mark.django_db
def test_stale_entries_are_not_taken_from_a_live_worker_before_the_idle_time(live_campaign) -> None:
    campaign = live_campaign(total_stock=5)
    claim_many(campaign, ["alice", "bob"])
    ledger.read_new(campaign.pk, consumer="busy", count=10)

    report = drain_campaign(campaign_id=campaign.pk, consumer="other")

    assert report.reclaimed == 0 and Claim.objects.count() == 0
    assert _pending_of(campaign, "busy") == 2


@pytest.mark.django_db(transaction=True)
def test_verify_while_the_drain_commits_never_counts_an_entry_twice(live_campaign) -> None:
    # PostgreSQL's side of the balance is one statement: a batch committed between two queries used to be
    # counted as persisted and as still missing, which reconciliation then "repaired" into wrong counts.
    campaign = live_campaign(total_stock=3000, per_user_limit=3)
    claim_many(campaign, [f"s{n % 1000}" for n in range(3000)])
    done = threading.Event()

    def drain() -> None:
        try:
            while drain_campaign(campaign_id=campaign.pk, batch_size=20, max_seconds=30).read:
                pass
        finally:
            done.set()
            connections.close_all()

    thread = threading.Thread(target=drain)
    thread.start()
    balances = []
    while not done.is_set():
        balances.append(campaign_verify(campaign=campaign))
    thread.join()
    balances.append(campaign_verify(campaign=campaign))

    assert len(balances) > 3
    bad = [(b.persisted_claims, b.ledger_only_claims, b.users_drift)
           for b in balances if not b.balanced or b.users_drift]
    assert bad == []
    assert balances[-1].persisted_claims == 3000 and balances[-1].ledger_only_claims == 0
