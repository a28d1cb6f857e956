"""Reconciliation and housekeeping: injected drift is found and repaired in one cycle, safely."""
from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection, connections
from django.utils import timezone

from campaigns.models import CampaignEvent, CampaignEventType
from campaigns.redis_state import ClaimCode, campaign_keys, redis_client, run_claim
from core.errors import Unavailable
from coupons.idempotency import Answer, run_idempotent
from coupons.models import Coupon, CouponEvent, IdempotencyRecord
from orders import ledger, tasks
from orders.cancel import claim_cancel
from orders.claim import claim_create
from orders.drain import drain_campaign
from orders.models import Claim, Reconciliation
from orders.reconciliation import campaign_reconcile
from orders.verify import campaign_verify

from ..conftest import run_twice_at_once


def claim_many(campaign, users: list[str]) -> list[str]:
    ids = []
    for user in users:
        result = run_claim(campaign_id=campaign.pk, user_id=user, idempotency_key=None)
        assert result.code == ClaimCode.CLAIMED
        ids.append(ledger.claim_id_of(campaign.pk, result.ledger_id))
    return ids


def lose_from_postgres(claim_ids: list[str]) -> None:
    """PostgreSQL loses these claims, their coupons and events (as a restore from an older backup would)."""
    with connection.cursor() as cursor:
        cursor.execute("SET session_replication_role = replica")  # the append-only triggers step aside
        cursor.execute("DELETE FROM coupons_couponevent WHERE coupon_id IN "
                       "(SELECT id FROM coupons_coupon WHERE claim_id = ANY(%s))", [claim_ids])
        cursor.execute("DELETE FROM coupons_coupon WHERE claim_id = ANY(%s)", [claim_ids])
        cursor.execute("DELETE FROM orders_claim WHERE claim_id = ANY(%s)", [claim_ids])
        cursor.execute("SET session_replication_role = origin")


@pytest.mark.django_db
def test_ten_claims_lost_by_postgres_are_persisted_again_from_the_ledger_in_one_cycle(live_campaign) -> None:
    campaign = live_campaign(total_stock=30)
    claim_ids = claim_many(campaign, [f"s{i}" for i in range(25)])
    drain_campaign(campaign_id=campaign.pk)
    lose_from_postgres(claim_ids[:10])
    assert not campaign_verify(campaign=campaign).balanced or Claim.objects.count() == 15

    record = campaign_reconcile(campaign=campaign, repair=True, source="test")

    assert record is not None and record.balanced
    assert record.repairs == ["persisted 10 ledger entries missing from PostgreSQL"]
    assert set(Claim.objects.values_list("claim_id", flat=True)) == set(claim_ids)
    assert Coupon.objects.filter(campaign=campaign).count() == 25
    assert campaign_verify(campaign=campaign).balanced
    again = campaign_reconcile(campaign=campaign, repair=True, source="test")
    assert again is not None and again.repairs == [] and again.balanced


@pytest.mark.django_db
def test_a_campaign_whose_redis_keys_vanish_mid_sale_is_closed_until_rebuilt_then_sells_the_right_stock(
    live_campaign,
) -> None:
    campaign = live_campaign(total_stock=10, per_user_limit=1)
    claim_many(campaign, ["a", "b", "c"])
    drain_campaign(campaign_id=campaign.pk)
    claim_many(campaign, ["d"])  # still only in the ledger when Redis loses everything
    drain_campaign(campaign_id=campaign.pk)
    redis_client().delete(*campaign_keys(campaign.pk).state)

    with pytest.raises(Unavailable):
        claim_create(campaign_id=campaign.pk, user_id="e", idempotency_key=None)
    record = campaign_reconcile(campaign=campaign, repair=True, source="test")

    assert record is not None and record.balanced
    assert record.repairs[0] == "rebuilt the Redis state from PostgreSQL: 6 left"
    assert claim_create(campaign_id=campaign.pk, user_id="a", idempotency_key=None).status == "limit_reached"
    assert claim_create(campaign_id=campaign.pk, user_id="e", idempotency_key=None).status == "claimed"
    assert int(redis_client().get(campaign_keys(campaign.pk).stock)) == 5
    assert CampaignEvent.objects.filter(campaign=campaign, type=CampaignEventType.REBUILT).count() == 1
    assert campaign_verify(campaign=campaign).balanced


@pytest.mark.django_db
def test_tampered_per_user_counts_are_set_back_to_the_shoppers_claims(live_campaign) -> None:
    campaign = live_campaign(total_stock=10, per_user_limit=2)
    claim_many(campaign, ["ann", "ann", "bob"])
    drain_campaign(campaign_id=campaign.pk)
    users = campaign_keys(campaign.pk).users
    redis_client().hset(users, "ann", 0)  # ann could claim two more: over her limit
    redis_client().hset(users, "bob", 2)  # bob is blocked for nothing
    assert set(campaign_verify(campaign=campaign).users_drift) == {"ann", "bob"}

    record = campaign_reconcile(campaign=campaign, repair=True, source="test")

    assert record is not None and record.balanced and record.users_drift == 0
    assert redis_client().hget(users, "ann") == b"2" and redis_client().hget(users, "bob") == b"1"
    assert run_claim(campaign_id=campaign.pk, user_id="ann", idempotency_key=None).code == ClaimCode.LIMIT_REACHED


@pytest.mark.django_db
def test_a_per_user_count_after_a_cancel_is_not_mistaken_for_drift(live_campaign) -> None:
    campaign = live_campaign(total_stock=5)
    [claim_id] = claim_many(campaign, ["ann"])
    drain_campaign(campaign_id=campaign.pk)
    assert claim_cancel(user_id="ann", claim_id=claim_id).code == 0

    record = campaign_reconcile(campaign=campaign, repair=True, source="test")

    assert record is not None and record.balanced and record.repairs == []


@pytest.mark.django_db
def test_stock_above_what_is_left_is_lowered_but_stock_below_it_is_only_reported(live_campaign) -> None:
    campaign = live_campaign(total_stock=10)
    claim_many(campaign, ["a", "b"])
    drain_campaign(campaign_id=campaign.pk)
    stock = campaign_keys(campaign.pk).stock
    redis_client().set(stock, 12)  # would sell 4 coupons that do not exist

    lowered = campaign_reconcile(campaign=campaign, repair=True, source="test")
    redis_client().set(stock, 5)  # 3 coupons missing: raising could sell a coupon a shopper already has
    reported = campaign_reconcile(campaign=campaign, repair=True, source="test")

    assert lowered is not None and lowered.balanced
    assert lowered.repairs == ["lowered the stock from 12 to 8 (total - claims)"]
    assert reported is not None and not reported.balanced and reported.drift == 3 and reported.repairs == []
    assert int(redis_client().get(stock)) == 5
    assert Reconciliation.objects.filter(campaign=campaign).count() == 2


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_two_reconciliations_at_once_repair_once(live_campaign) -> None:
    campaign = live_campaign(total_stock=40)
    claim_ids = claim_many(campaign, [f"s{i}" for i in range(30)])
    drain_campaign(campaign_id=campaign.pk)
    lose_from_postgres(claim_ids[:10])
    barrier = threading.Barrier(2)
    records: list = []

    def reconcile() -> None:
        barrier.wait()
        try:
            records.append(campaign_reconcile(campaign=campaign, repair=True, source="test"))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=reconcile) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    done = [r for r in records if r is not None]
    assert sum(len(r.repairs) for r in done) == 1
    assert Coupon.objects.filter(campaign=campaign).count() == 30
    assert CouponEvent.objects.filter(campaign=campaign, type="issued").count() == 30
    assert campaign_verify(campaign=campaign).balanced


@pytest.mark.django_db
def test_the_beat_job_reconciles_live_campaigns_and_records_each(live_campaign) -> None:
    first, second = live_campaign(total_stock=3), live_campaign(total_stock=3)
    claim_many(first, ["a"])

    result = tasks.reconcile_campaigns()

    assert result == {first.pk: {"balanced": True, "repairs": 1}, second.pk: {"balanced": True, "repairs": 0}}
    assert Reconciliation.objects.get(campaign=first).repairs == ["persisted 1 ledger entries missing from PostgreSQL"]


@pytest.mark.django_db
def test_housekeeping_trims_only_acknowledged_entries_past_retention(live_campaign, settings) -> None:
    campaign = live_campaign(total_stock=10, per_user_limit=10)
    claim_many(campaign, ["a"] * 4)
    drain_campaign(campaign_id=campaign.pk)
    claim_many(campaign, ["a"] * 2)
    ledger.read_new(campaign.pk, consumer="slow", count=1)  # one delivered, not acknowledged; one undelivered
    settings.COUPONS_LEDGER_RETENTION_SECONDS = 0

    result = tasks.housekeeping()

    assert result["trimmed"] == 4
    assert redis_client().xlen(campaign_keys(campaign.pk).ledger) == 2
    drain_campaign(campaign_id=campaign.pk, reclaim_idle_ms=0)
    assert campaign_verify(campaign=campaign).balanced and Coupon.objects.count() == 6


@pytest.mark.django_db
def test_housekeeping_purges_idempotency_records_past_24_hours_and_closes_ended_campaigns(live_campaign) -> None:
    for key in ("old", "new"):
        run_idempotent(user_id="u", endpoint="e", key=key, payload={}, execute=lambda: Answer(200, {"code": 0}))
    IdempotencyRecord.objects.filter(key="old").update(created_at=timezone.now() - timedelta(hours=25))
    campaign = live_campaign(total_stock=5)
    claim_many(campaign, ["a", "b"])
    drain_campaign(campaign_id=campaign.pk)
    campaign.__class__.objects.filter(pk=campaign.pk).update(ends_at=timezone.now() - timedelta(minutes=1))

    first, second = tasks.housekeeping(), tasks.housekeeping()

    assert first["idempotency_purged"] == 1 and list(IdempotencyRecord.objects.values_list("key", flat=True)) == ["new"]
    assert first["closed"] == [campaign.pk] and second["closed"] == []
    closed = CampaignEvent.objects.get(campaign=campaign, type=CampaignEventType.CLOSED)
    assert closed.data["claims"] == 2 and closed.data["remaining"] == 3 and closed.data["coupons"] == {"active": 2}


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_two_housekeeping_runs_at_once_close_a_campaign_once_and_trim_once(live_campaign, settings) -> None:
    campaign = live_campaign(total_stock=20, per_user_limit=20)
    claim_many(campaign, ["a"] * 12)
    drain_campaign(campaign_id=campaign.pk)
    campaign.__class__.objects.filter(pk=campaign.pk).update(ends_at=timezone.now() - timedelta(minutes=1))
    settings.COUPONS_LEDGER_RETENTION_SECONDS = 0

    results = run_twice_at_once(tasks.housekeeping)

    assert sum(r["trimmed"] for r in results) == 12
    assert sorted(len(r["closed"]) for r in results) == [0, 1]
    assert CampaignEvent.objects.filter(campaign=campaign, type=CampaignEventType.CLOSED).count() == 1


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_two_drain_sweeps_and_two_preheats_at_once_do_what_one_does(live_campaign) -> None:
    from tests.factories import CampaignFactory

    campaign = live_campaign(total_stock=300, per_user_limit=300)
    claim_many(campaign, ["a"] * 300)
    soon = CampaignFactory(starts_at=timezone.now() + timedelta(minutes=5), total_stock=7)

    run_twice_at_once(tasks.drain_sweep)
    preheats = run_twice_at_once(tasks.preheat_due_campaigns)

    assert Claim.objects.filter(campaign=campaign).count() == 300
    assert CouponEvent.objects.filter(campaign=campaign, type="issued").count() == 300
    assert sorted(p["preheated"] for p in preheats)[-1] == [soon.pk]
    assert int(redis_client().get(campaign_keys(soon.pk).stock)) == 7
    assert campaign_verify(campaign=campaign).balanced


@pytest.mark.django_db
def test_the_last_reconciliation_of_each_campaign_is_exported_as_metrics(client, live_campaign) -> None:
    campaign = live_campaign(total_stock=10)
    claim_many(campaign, ["a"])
    redis_client().set(campaign_keys(campaign.pk).stock, 5)  # 4 missing: reported, not repaired
    campaign_reconcile(campaign=campaign, repair=True, source="test")

    response = client.get("/metrics")

    text = response.content.decode()
    assert response.status_code == 200 and response["Content-Type"].startswith("text/plain")
    assert f'couponrush_reconciliation_drift{{campaign="{campaign.pk}"}} 4.0' in text
    assert f'couponrush_reconciliation_balanced{{campaign="{campaign.pk}"}} 0.0' in text
    assert f'couponrush_reconciliation_repairs{{campaign="{campaign.pk}"}} 1.0' in text


@pytest.mark.django_db
def test_a_campaign_redis_lost_is_rebuilt_by_the_next_drain_sweep_within_seconds(live_campaign) -> None:
    campaign = live_campaign(total_stock=10, per_user_limit=1)
    claim_many(campaign, ["a", "b"])
    drain_campaign(campaign_id=campaign.pk)
    redis_client().flushdb()  # Redis restarted without its data
    with pytest.raises(Unavailable):
        claim_create(campaign_id=campaign.pk, user_id="c", idempotency_key=None)

    result = tasks.drain_sweep()

    assert result["rebuilt"] == [campaign.pk]
    assert claim_create(campaign_id=campaign.pk, user_id="a", idempotency_key=None).status == "limit_reached"
    assert claim_create(campaign_id=campaign.pk, user_id="c", idempotency_key=None).status == "claimed"
    assert int(redis_client().get(campaign_keys(campaign.pk).stock)) == 7
    assert campaign_verify(campaign=campaign).balanced


def test_a_claims_idempotency_key_survives_redis_losing_its_data(live_campaign) -> None:
    # The key's digest travels with the claim (ledger entry, then PostgreSQL), so a rebuilt Redis answers a
    # repeat with the first answer, not with a new decision; the key itself is stored nowhere.
    campaign = live_campaign(total_stock=10, per_user_limit=1)
    first = claim_create(campaign_id=campaign.pk, user_id="ann", idempotency_key="order-7")
    keyless = claim_create(campaign_id=campaign.pk, user_id="bob", idempotency_key=None)
    drain_campaign(campaign_id=campaign.pk)
    digests = dict(Claim.objects.filter(campaign=campaign).values_list("user_id", "key_digest"))
    redis_client().flushdb()  # Redis restarted without its data

    result = tasks.drain_sweep()
    again = claim_create(campaign_id=campaign.pk, user_id="ann", idempotency_key="order-7")
    other_key = claim_create(campaign_id=campaign.pk, user_id="ann", idempotency_key="order-8")

    assert result["rebuilt"] == [campaign.pk]
    assert digests["bob"] == "" and len(digests["ann"]) == 32 and "order-7" not in digests["ann"]
    assert (again.status, again.claim_id, again.replayed) == ("claimed", first.claim_id, True)
    assert other_key.status == "limit_reached" and keyless.status == "claimed"
    rebuilt = CampaignEvent.objects.get(campaign=campaign, type=CampaignEventType.REBUILT)
    assert rebuilt.data["answers_restored"] == 1
    assert campaign_verify(campaign=campaign).balanced


def test_claims_are_counted_by_campaign_and_outcome_in_metrics(client, live_campaign) -> None:
    from tests.conftest import shopper_headers

    campaign = live_campaign(total_stock=1, per_user_limit=1)
    for user in ("ann", "bob"):
        client.post(f"/api/v1/campaigns/{campaign.pk}/claim", "{}", "application/json", **shopper_headers(user))
    client.post("/api/v1/campaigns/424242/claim", "{}", "application/json", **shopper_headers("cid"))

    text = client.get("/metrics").content.decode()

    assert f'couponrush_claims_total{{campaign="{campaign.pk}",outcome="claimed",storefront="default"}}' in text
    assert f'couponrush_claims_total{{campaign="{campaign.pk}",outcome="sold_out",storefront="default"}}' in text
    assert 'couponrush_claims_total{campaign="-",outcome="not_found",storefront="default"}' in text
    assert "couponrush_claim_seconds_bucket" in text


def test_metrics_show_remaining_stock_backlog_and_its_age_per_live_campaign(client, live_campaign) -> None:
    campaign = live_campaign(total_stock=10)
    claim_many(campaign, ["a", "b", "c"])

    text = client.get("/metrics").content.decode()

    label = f'{{campaign="{campaign.pk}"}}'
    assert f"couponrush_remaining_stock{label} 7.0" in text
    assert f"couponrush_ledger_backlog{label} 3.0" in text
    assert f"couponrush_ledger_oldest_age_seconds{label}" in text and "couponrush_redis_up 1.0" in text
    drain_campaign(campaign_id=campaign.pk)
    assert f"couponrush_ledger_backlog{label} 0.0" in client.get("/metrics").content.decode()


@pytest.mark.django_db
def test_an_event_filed_under_another_campaign_than_its_coupons_unbalances_both(live_campaign) -> None:
    campaign, other = live_campaign(total_stock=5), live_campaign(total_stock=5)
    claim_many(campaign, ["s1", "s2"])
    drain_campaign(campaign_id=campaign.pk)
    assert campaign_verify(campaign=campaign).balanced and campaign_verify(campaign=other).balanced
    coupon = Coupon.objects.filter(campaign=campaign).first()
    assert coupon is not None

    # No foreign key of its own checks an event's campaign (coupons.models.CouponEvent.campaign): verify does.
    CouponEvent.objects.create(coupon=coupon, campaign=other, type="extended", source="test")

    mine, theirs = campaign_verify(campaign=campaign), campaign_verify(campaign=other)
    assert not mine.balanced and not theirs.balanced
    assert mine.problems == theirs.problems == ["1 coupon events name another campaign than their coupon's"]
    assert mine.right_side == mine.total_stock  # the stock itself balances
