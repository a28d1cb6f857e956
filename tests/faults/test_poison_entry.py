"""A ledger entry that can never be persisted (a 200-character user id, put into the ledger with XADD) under an
HTTP claim load with the whole system running: every other claim is issued within the usual time, the entry is
parked once however many drains and sweeps see it, and the campaign balances (I1-I7, zero tolerance)."""
from __future__ import annotations

import time

import pytest

from campaigns.redis_state import campaign_keys
from orders.models import ParkedLedgerEntry

from .harness import Load, Window, run_fault

pytestmark = [pytest.mark.slow]


def test_a_malformed_ledger_entry_is_parked_once_and_holds_back_no_claim(fault_stack) -> None:
    campaign = fault_stack.boot(stock=450)
    window = Window()

    def inject(load: Load) -> None:
        window.open()
        bad = fault_stack.redis.admin().xadd(campaign_keys(campaign.id).ledger, {"u": "x" * 200})
        window.notes["bad_entry"] = bad.decode()
        time.sleep(4)  # the trigger's drains and two beat sweeps meet it
        window.close()

    load, problems = run_fault(fault_stack, campaign, window, inject, fault="malformed ledger entry (XADD)")

    assert not problems
    parked = fault_stack.sql(f"SELECT entry_id, state, attempts FROM {ParkedLedgerEntry._meta.db_table} "
                             "WHERE campaign_id = %s", (campaign.id,))
    assert parked == [(window.notes["bad_entry"], "parked", 1)]
    assert fault_stack.backlog(campaign) == 0
