"""Ledger entries the drain could never persist (orders.drain.persist_or_park parks them): retry or discard.

A parked entry is acknowledged in the ledger, so it holds back no other claim, and it is no claim: verify leaves
it out of the balance (orders/verify.py). An operator retries it (after fixing what made it fail, say a column
widened) or discards it, from the admin; both are recorded in the entry's history and the admin's log. A retry
that fails again leaves the one row parked, with one more attempt and the new error.
"""
from __future__ import annotations

import logging
from typing import Any

from django.db import transaction
from django.utils import timezone

from campaigns.claim_settled import claims_changed
from campaigns.redis_state import split_ref

from . import ledger
from .drain import UNPERSISTABLE, persist_entries
from .models import ParkedLedgerEntry, ParkedState

log = logging.getLogger(__name__)


def _note(parked: ParkedLedgerEntry, action: str, actor: str, outcome: str, **more: Any) -> None:
    parked.history = [*parked.history, {"at": timezone.now().isoformat(), "action": action, "actor": actor,
                                        "outcome": outcome, **more}]


def parked_retry(*, parked: ParkedLedgerEntry, actor: str) -> bool:
    """Try to persist a parked entry again; return whether it is a claim now (state retried). A failure leaves
    it parked with the new error, one attempt more. Entries no longer parked are left alone (False)."""
    with transaction.atomic():
        parked = ParkedLedgerEntry.objects.select_for_update().select_related("campaign").get(pk=parked.pk)
        if parked.state != ParkedState.PARKED:
            return False
        fields = {str(k): str(v) for k, v in parked.fields.items()}
        entry_id, bucket = split_ref(parked.entry_id)  # its ledger_ref
        entry = ledger.LedgerEntry(parked.campaign_id, entry_id, fields.get("u", ""), fields.get("k", ""),
                                   fields, bucket, fields.get("s", ""))
        error = ledger.entry_problem(entry)
        if error is None:
            try:
                with transaction.atomic():  # a savepoint: a refused insert leaves the row's update possible
                    persist_entries(parked.campaign, [entry])
                claims_changed([entry.claim_id])  # its entry says pending: GET /claims/{id} asks PostgreSQL
            except UNPERSISTABLE as exc:
                error = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:500]}"
        if error is None:
            parked.state = ParkedState.RETRIED
            _note(parked, "retry", actor, "persisted")
        else:
            parked.attempts += 1
            parked.error = error
            _note(parked, "retry", actor, "parked again", error=error)
        parked.save(update_fields=["state", "attempts", "error", "history", "updated_at"])
    log.warning("parked ledger entry %s retried by %s: %s", parked.claim_id, actor,
                "persisted" if error is None else f"parked again ({error})")
    return error is None


def parked_discard(*, parked: ParkedLedgerEntry, actor: str, reason: str = "") -> bool:
    """Mark a parked entry discarded (it will never be a claim); False when it was no longer parked."""
    with transaction.atomic():
        parked = ParkedLedgerEntry.objects.select_for_update().get(pk=parked.pk)
        if parked.state != ParkedState.PARKED:
            return False
        parked.state = ParkedState.DISCARDED
        _note(parked, "discard", actor, "discarded", **({"reason": reason} if reason else {}))
        parked.save(update_fields=["state", "history", "updated_at"])
    log.warning("parked ledger entry %s discarded by %s", parked.claim_id, actor)
    return True
