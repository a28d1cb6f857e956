"""A ledger entry that can never be persisted holds back no other claim: the drain parks it (once, with its raw
fields and the error), acknowledges it and persists the rest; verify leaves it out of the balance; the admin
retries or discards it, both recorded."""
from __future__ import annotations

import threading
import time

import pytest
from django.contrib.admin.models import LogEntry
from prometheus_client import REGISTRY

from campaigns.redis_state import campaign_keys, redis_client, run_claim
from coupons.models import Coupon
from orders import ledger
from orders.drain import drain_campaign
from orders.models import Claim, ClaimStatus, ParkedLedgerEntry, ParkedState
from orders.verify import campaign_verify

from ..conftest import unacknowledged

pytestmark = pytest.mark.django_db

SHOPPERS, THREADS = 400, 4
LONG_USER = "x" * 200  # the claim path never writes such a user id; something else put it in the ledger
CHANGELIST = "/admin/orders/parkedledgerentry/"


def parked_metric(campaign) -> float:
    return REGISTRY.get_sample_value("couponrush_ledger_parked_total", {"campaign": str(campaign.pk)}) or 0.0


def claim_load_with_a_malformed_entry(campaign) -> tuple[set[str], str]:
    """Four threads claim for 400 shoppers while the drain runs; halfway a malformed entry is XADDed into the
    ledger. Return the claim ids answered 'claimed' and the malformed entry's id."""
    claimed: set[str] = set()
    lock = threading.Lock()
    halfway = threading.Event()

    def shoppers(n: int) -> None:
        for i in range(n, SHOPPERS, THREADS):
            result = run_claim(campaign_id=campaign.pk, user_id=f"p{i:04d}", idempotency_key=None)
            assert result.code == 0
            with lock:
                claimed.add(f"{campaign.pk}-{result.ledger_id}")
                if len(claimed) == SHOPPERS // 2:
                    halfway.set()

    threads = [threading.Thread(target=shoppers, args=(n,)) for n in range(THREADS)]
    for t in threads:
        t.start()
    halfway.wait(30)
    bad_id = redis_client().xadd(campaign_keys(campaign.pk).ledger, {"u": LONG_USER}).decode()
    while any(t.is_alive() for t in threads):  # the drain runs meanwhile, batch after batch
        drain_campaign(campaign_id=campaign.pk, batch_size=50, max_seconds=0.2)
        time.sleep(0.01)
    for t in threads:
        t.join()
    return claimed, bad_id


def assert_parked_once_and_the_rest_issued(campaign, claimed: set[str], bad_id: str, error_says: str) -> None:
    for _ in range(3):  # later drains find nothing to park again
        drain_campaign(campaign_id=campaign.pk, batch_size=50)
    assert set(Claim.objects.filter(campaign=campaign).values_list("claim_id", flat=True)) == claimed
    assert set(Claim.objects.filter(campaign=campaign).values_list("status", flat=True)) == {ClaimStatus.ISSUED}
    assert Coupon.objects.filter(campaign=campaign).count() == SHOPPERS
    [parked] = ParkedLedgerEntry.objects.filter(campaign=campaign)
    assert (parked.entry_id, parked.state, parked.attempts) == (bad_id, ParkedState.PARKED, 1)
    assert parked.fields == {"u": LONG_USER} and error_says in parked.error
    assert unacknowledged(campaign) == 0
    balance = campaign_verify(campaign=campaign)
    assert balance.balanced, balance
    assert (balance.parked, balance.persisted_claims, balance.ledger_only_claims) == (1, SHOPPERS, 0)


def test_a_malformed_entry_during_a_claim_load_is_parked_once_and_every_other_claim_is_issued(
    live_campaign,
) -> None:
    campaign = live_campaign(total_stock=SHOPPERS + 50, per_user_limit=1)
    before = parked_metric(campaign)

    claimed, bad_id = claim_load_with_a_malformed_entry(campaign)

    assert len(claimed) == SHOPPERS
    assert_parked_once_and_the_rest_issued(campaign, claimed, bad_id, "not a user id")
    assert parked_metric(campaign) - before == 1


def test_an_entry_postgresql_refuses_is_found_in_its_batch_and_parked(live_campaign, monkeypatch) -> None:
    # The same entry, with the check before PostgreSQL switched off: the batch fails on it (DataError, the user
    # id is too long for its column) and is halved until it stands alone.
    monkeypatch.setattr(ledger, "entry_problem", lambda entry: None)
    campaign = live_campaign(total_stock=SHOPPERS + 50, per_user_limit=1)

    claimed, bad_id = claim_load_with_a_malformed_entry(campaign)

    assert_parked_once_and_the_rest_issued(campaign, claimed, bad_id, "DataError")


def test_retry_after_fixing_nothing_parks_it_again_and_discard_records_it(admin_client, live_campaign) -> None:
    campaign = live_campaign(total_stock=5)
    assert run_claim(campaign_id=campaign.pk, user_id="ann", idempotency_key=None).code == 0
    bad_id = redis_client().xadd(campaign_keys(campaign.pk).ledger, {"u": LONG_USER}).decode()
    drain_campaign(campaign_id=campaign.pk)
    parked = ParkedLedgerEntry.objects.get(campaign=campaign)
    assert parked.entry_id == bad_id
    assert CHANGELIST in admin_client.get(CHANGELIST).content.decode()  # the list shows it

    admin_client.post(CHANGELIST, {"action": "retry", "_selected_action": [parked.pk]})

    parked.refresh_from_db()
    assert ParkedLedgerEntry.objects.filter(campaign=campaign).count() == 1  # still the one row
    assert (parked.state, parked.attempts) == (ParkedState.PARKED, 2)
    assert [(h["action"], h["outcome"], h["actor"]) for h in parked.history] == [("retry", "parked again", "admin")]
    assert not Claim.objects.filter(claim_id=parked.claim_id).exists()
    assert campaign_verify(campaign=campaign).balanced

    admin_client.post(CHANGELIST, {"action": "discard", "_selected_action": [parked.pk]})

    parked.refresh_from_db()
    assert parked.state == ParkedState.DISCARDED
    assert [h["action"] for h in parked.history] == ["retry", "discard"]
    assert [e.change_message for e in LogEntry.objects.filter(object_id=str(parked.pk)).order_by("pk")] == [
        f"Retried: parked ({parked.error}) (admin action).", "Discarded (admin action)."]
    assert campaign_verify(campaign=campaign).balanced
    assert Claim.objects.filter(campaign=campaign).count() == 1
