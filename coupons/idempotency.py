"""Idempotency-Key for the coupon and cancel endpoints, per the IETF draft, kept in PostgreSQL.

The first request with a key claims it (a committed 'in flight' row, so a concurrent twin sees it and gets
409), runs, and stores its answer in the same transaction as its effect, by the statement that writes the use
where it can (a shared code's first use: its batch's statement, coupons.services.first_uses; a coupon's redeem,
reserve or confirm: its change's, coupons.services.transitions; told the key by `answer_pending()`), else right
after it (run_idempotent's `apart`: a reserve or redeem commits its own transaction). A repeat with the same request
replays the answer; with a different request it is 422. Answers that failed before anything was decided
(400, 401, 404, 503: exceptions) are not stored: the key is free again; but after a 503 whose outcome is not
known yet (core.errors.OutcomeUnknown) the key stays in flight.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from contextlib import nullcontext
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from core.db import prepared_cursor
from core.errors import ApplicationError, OutcomeUnknown

from .models import IdempotencyRecord

RETENTION = timedelta(hours=24)
# A request that has been 'in flight' this long died with its process: its key may be taken over.
STALE_IN_FLIGHT = timedelta(seconds=60)


class IdempotencyInFlight(ApplicationError):
    http_status = 409
    code = 409
    status = "idempotency_in_flight"
    message = "A request with this Idempotency-Key is still being processed; retry shortly."
    retry_after = 1


class IdempotencyMismatch(ApplicationError):
    http_status = 422
    code = 422
    status = "idempotency_mismatch"
    message = "This Idempotency-Key was used with a different request."


@dataclass(frozen=True)
class Answer:
    status: int
    body: dict[str, Any]
    replayed: bool = False


@dataclass
class PendingAnswer:
    """The key of the use running in this thread under run_idempotent: the statement that writes the use may
    store its answer too (`answer_text`, the bytes a replay sends) and set `stored`; `answered` once that is
    committed. run_idempotent then stores nothing more (`apart`: once committed; else in its own transaction)."""

    user_id: str
    endpoint: str
    key: str
    stored: bool = False
    answered: bool = False

    @staticmethod
    def answer_text(body: dict[str, Any]) -> str:
        return json.dumps(body)  # as run_idempotent stores it

    def written(self) -> None:
        """The use's statement stored the answer: answered when its transaction commits."""
        self.stored = True
        transaction.on_commit(self._committed)

    def _committed(self) -> None:
        self.answered = True


_pending: ContextVar[PendingAnswer | None] = ContextVar("idempotency_pending", default=None)


def answer_pending() -> PendingAnswer | None:
    """The Idempotency-Key whose answer the use running in this thread may store with its effect, if any."""
    return _pending.get()


def fingerprint(payload: dict[str, Any]) -> str:
    """Return the SHA-256 of the validated request, so that formatting differences do not matter."""
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


# A key's statements on every request that sends one: prepared (core.db), not compiled by Django's ORM each time.
_TABLE = IdempotencyRecord._meta.db_table
_CLAIM = (f"INSERT INTO {_TABLE} (user_id, endpoint, key, fingerprint, in_flight, created_at) "
          "VALUES (%s, %s, %s, %s, true, %s) ON CONFLICT (user_id, endpoint, key) DO NOTHING")
_ANSWERED = (f"UPDATE {_TABLE} SET in_flight = false, response_status = %s, response_body = %s "
             "WHERE user_id = %s AND endpoint = %s AND key = %s")
_FREED = f"DELETE FROM {_TABLE} WHERE user_id = %s AND endpoint = %s AND key = %s AND in_flight"


def _claim_key(user_id: str, endpoint: str, key: str, digest: str) -> bool:
    """Insert the key as 'in flight' (committed at once); False when it already exists."""
    with prepared_cursor() as cursor:
        cursor.execute(_CLAIM, [user_id, endpoint, key, digest, timezone.now()])
        return cursor.rowcount == 1


def _take_over(record: IdempotencyRecord, digest: str) -> bool:
    """Take a key whose holder died or whose answer is past retention; False if someone else did first."""
    return bool(
        IdempotencyRecord.objects.filter(pk=record.pk, created_at=record.created_at).update(
            fingerprint=digest, in_flight=True, response_status=None, response_body=None, created_at=timezone.now()
        )
    )


def run_idempotent(
    *, user_id: str, endpoint: str, key: str | None, payload: dict[str, Any], execute: Callable[[], Answer],
    apart: bool = False,
) -> Answer:
    """Run `execute` at most once per (user, endpoint, key); replay its stored answer for a repeat. `apart`:
    `execute` commits its effect itself (a reserve or redeem: a shared code's first use is written together
    with other requests' uses, coupons.services._first_shared_use) and the answer is stored right after it; a
    process that dies in between leaves the key in flight, and the repeat after STALE_IN_FLIGHT decides again,
    which for a use gives the same answer (a use is the order's: the same order gets its use back). So does an
    `execute` that raises OutcomeUnknown (its use handed to a batch that ran past the request's wait,
    core.together): the key stays in flight, and the use is decided once, by that batch."""
    if key is None:
        return execute()
    digest = fingerprint(payload)
    if not _claim_key(user_id, endpoint, key, digest):
        record = IdempotencyRecord.objects.get(user_id=user_id, endpoint=endpoint, key=key)
        now = timezone.now()
        expired = record.created_at < now - RETENTION
        dead = record.in_flight and record.created_at < now - STALE_IN_FLIGHT
        if not (expired or dead):
            if record.fingerprint != digest:
                raise IdempotencyMismatch()
            if record.in_flight:
                raise IdempotencyInFlight()
            assert record.response_status is not None and record.response_body is not None
            return Answer(record.response_status, json.loads(record.response_body), replayed=True)
        if not _take_over(record, digest):
            raise IdempotencyInFlight()
    pending = PendingAnswer(user_id, endpoint, key)
    try:
        with nullcontext() if apart else transaction.atomic():
            token = _pending.set(pending)
            try:
                answer = execute()
            finally:
                _pending.reset(token)
            if not (pending.answered if apart else pending.stored):
                with prepared_cursor() as cursor:
                    cursor.execute(_ANSWERED, [answer.status, PendingAnswer.answer_text(answer.body), user_id,
                                               endpoint, key])
    except BaseException as exc:
        if not isinstance(exc, OutcomeUnknown):  # else its effect may yet commit: the key stays in flight
            with prepared_cursor() as cursor:
                cursor.execute(_FREED, [user_id, endpoint, key])
        raise
    return answer


def purge_expired(*, batch_size: int = 5000, max_batches: int = 200) -> int:
    """Delete records past the 24 h retention, a batch per statement; return how many went."""
    cutoff = timezone.now() - RETENTION
    deleted = 0
    for _ in range(max_batches):
        with connection.cursor() as cursor:
            cursor.execute(
                f"DELETE FROM {IdempotencyRecord._meta.db_table} WHERE id IN (SELECT id FROM "
                f"{IdempotencyRecord._meta.db_table} WHERE created_at < %s ORDER BY created_at LIMIT %s)",
                [cutoff, batch_size],
            )
            deleted += cursor.rowcount
            if cursor.rowcount < batch_size:
                break
    return deleted
