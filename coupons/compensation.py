"""Expiry compensation: what time did to coupons nobody touched, written down in bulk, plus drift repair.

Lazy settlement (coupons.services.coupon_settle) handles a coupon when it is read or used; this sweep
handles the rest. Both change a row only from the state they saw (conditional UPDATE), so a coupon never
gets two 'expired' events. Each batch is one statement: lock due rows with FOR UPDATE SKIP LOCKED (a
concurrent sweep takes the next rows instead of waiting), update them, insert one event per row.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from campaigns.claim_settled import claims_changed
from campaigns.models import Campaign
from campaigns.money import to_minor
from core.tracing import span

from . import budget, metrics
from .events_out import bulk_ctes
from .models import Coupon, CouponEvent, CouponEventType, CouponStatus, SweepCursor
from .replay import disagreements, fold

# Rows per statement. Measured (bench/expiry_sweep.py, local PostgreSQL 15): a batch of 2,000 expiries with
# their 2,000 events takes p50 45 ms, p95 80 ms on a quiet machine; worker RSS flat. PostgreSQL's CPU per coupon
# is the same from 1,000 to 10,000 rows per batch (200,000 coupons: 63-67 us); bigger batches only hold row
# locks longer (5,000: p95 274 ms).
BATCH_SIZE = 2000
# Connections expiring at once. A batch statement keeps one PostgreSQL backend busy on one core (~45-60 us of
# CPU per coupon on the bench machine: half the row's new version in 5 indexes (EXPLAIN: 24 buffers per row),
# then the event's insert and its 3 index entries, the foreign-key check of its coupon at commit (its
# campaign has no constraint of its own: 1.09x coupons/s without it), heap, WAL and row locks);
# a second connection works on the next due rows on the other core: 1.4x coupons/s on the 2-core bench
# machine (docs/benchmarks.md). Each batch stays one statement and one transaction; events stay exactly once.
SWEEP_CONNECTIONS = 2
DRIFT_SCAN_PER_RUN = 20_000
_COUPON = Coupon._meta.db_table
_EVENT = CouponEvent._meta.db_table
# Their webhooks (coupons.events_out): one outbox INSERT ... SELECT per batch, in the batch's statement.
_LAPSED_OUT = bulk_ctes("lapsed_out", event="hold_lapsed", source="lapsed l JOIN due d USING (id)", alias="l",
                        status="active", extra="|| jsonb_build_object('order_id', d.order_id, 'hold_until', "
                        "d.hold_until, 'reason', 'hold_lapsed')")
_EXPIRED_OUT = bulk_ctes("expired_out", event="expired", source="expired x", alias="x", status="expired")

_LAPSE_SQL = f"""
WITH due AS (
    SELECT id, order_id, hold_until, discount FROM {_COUPON}
    WHERE status = 'held' AND hold_until <= %(now)s AND (hold_until, id) > (%(after_at)s, %(after_id)s)
    ORDER BY hold_until, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), lapsed AS (
    UPDATE {_COUPON} c
    SET status = 'active', order_id = NULL, hold_until = NULL, discount = NULL, order_amount = NULL,
        version = c.version + 1, updated_at = now()
    WHERE c.id = ANY (ARRAY(SELECT id FROM due)) AND c.status = 'held'
    RETURNING c.id, c.campaign_id, c.code, c.user_id, c.valid_from, c.expires_at
), events AS (
    INSERT INTO {_EVENT} (coupon_id, campaign_id, type, data, source, created_at)
    SELECT l.id, l.campaign_id, 'hold_lapsed', jsonb_build_object('order_id', d.order_id, 'hold_until', d.hold_until),
           'compensation', clock_timestamp()
    FROM lapsed l JOIN due d USING (id)
){_LAPSED_OUT}
SELECT (SELECT count(*) FROM lapsed), (SELECT count(*) FROM due),
       (SELECT hold_until FROM due ORDER BY hold_until DESC, id DESC LIMIT 1),
       (SELECT id FROM due ORDER BY hold_until DESC, id DESC LIMIT 1),
       (SELECT json_agg(json_build_array(k.id, k.currency, g.amount::text)) FROM (
            SELECT l.campaign_id, sum(d.discount) AS amount FROM lapsed l JOIN due d USING (id)
            GROUP BY l.campaign_id) AS g
        JOIN {Campaign._meta.db_table} k ON k.id = g.campaign_id AND k.budget IS NOT NULL)
"""

# The UPDATE finds its rows by primary key (id = ANY of the locked ids): joined to the CTE instead, PostgreSQL
# may hash-join it against a sequential scan of the whole coupon table, once per batch (seen with 100k-200k
# coupons: two thirds of a batch's time, and it grows with the table).
_EXPIRE_SQL = f"""
WITH due AS (
    SELECT id, expires_at FROM {_COUPON}
    WHERE status = 'active' AND expires_at <= %(cutoff)s AND (expires_at, id) > (%(after_at)s, %(after_id)s)
    ORDER BY expires_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), expired AS (
    UPDATE {_COUPON} c SET status = 'expired', version = c.version + 1, updated_at = now()
    WHERE c.id = ANY (ARRAY(SELECT id FROM due)) AND c.status = 'active'
    RETURNING c.id, c.campaign_id, c.expires_at, c.code, c.user_id, c.valid_from
), events AS (
    INSERT INTO {_EVENT} (coupon_id, campaign_id, type, data, source, created_at)
    SELECT id, campaign_id, 'expired', jsonb_build_object('expires_at', expires_at), 'compensation', clock_timestamp()
    FROM expired
){_EXPIRED_OUT}
SELECT (SELECT count(*) FROM expired), (SELECT count(*) FROM due),
       (SELECT expires_at FROM due ORDER BY expires_at DESC, id DESC LIMIT 1),
       (SELECT id FROM due ORDER BY expires_at DESC, id DESC LIMIT 1)
"""

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass
class SweepReport:
    lapsed: int = 0
    expired: int = 0
    repaired: int = 0
    batches: int = 0
    finished: bool = True
    repairs: list[str] = field(default_factory=list)


def _run_batches(sql: str, params: dict[str, Any], deadline: float, report: SweepReport) -> tuple[int, bool]:
    """Run a batch statement over a keyset until nothing is due; return (rows changed, finished). A lapse
    batch's fifth column, the discounts its holds gave up per budgeted campaign, goes back to their budgets once
    the batch commits (coupons.budget)."""
    after_at, after_id, changed = _EPOCH, 0, 0
    while time.monotonic() < deadline:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(sql, {**params, "after_at": after_at, "after_id": after_id, "limit": BATCH_SIZE})
            done, seen, last_at, last_id, *given = cursor.fetchone()
            if given and given[0]:
                budget.give_back_after_commit({campaign_id: to_minor(Decimal(amount), currency)
                                               for campaign_id, currency, amount in given[0]})
        report.batches += 1
        changed += done
        if seen < BATCH_SIZE:
            return changed, True
        after_at, after_id = last_at, last_id
    return changed, False


def _run_batches_at_once(sql: str, params: dict[str, Any], deadline: float,
                         report: SweepReport) -> tuple[int, bool]:
    """_run_batches on SWEEP_CONNECTIONS connections at once, each in a thread with a connection of its own
    and its own keyset: SKIP LOCKED hands each statement the next due rows that no other one holds, so
    they leapfrog each other through the due rows. One connection inside a transaction (a second one
    could not see the rows it has not committed)."""
    if SWEEP_CONNECTIONS < 2 or connection.in_atomic_block:
        return _run_batches(sql, params, deadline, report)
    results: list[tuple[int, bool, int]] = []
    errors: list[BaseException] = []

    def helper() -> None:
        part = SweepReport()
        try:
            changed, finished = _run_batches(sql, params, deadline, part)
            results.append((changed, finished, part.batches))
        except BaseException as exc:  # re-raised in the calling thread
            errors.append(exc)
        finally:
            connection.close()  # this thread's own connection

    threads = [threading.Thread(target=helper, name=f"expiry-sweep-{i}", daemon=True)
               for i in range(1, SWEEP_CONNECTIONS)]
    for thread in threads:
        thread.start()
    changed, finished = _run_batches(sql, params, deadline, report)
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    for more, done, batches in results:
        changed += more
        finished = finished and done
        report.batches += batches
    return changed, finished


def expire_and_lapse_due(*, max_seconds: float = 50.0, now: datetime | None = None) -> SweepReport:
    """Lapse every hold past hold_until, then expire every active coupon past its validity, in batches.

    A hold that lapses on a coupon whose validity ended meanwhile is then expired in the same sweep (two
    events, as the lazy path writes). Constant queries per batch, constant memory. Safe to run twice.
    """
    now = now or timezone.now()
    deadline = time.monotonic() + max_seconds
    report = SweepReport()
    with span("couponrush.expiry_sweep") as traced:
        report.lapsed, lapse_done = _run_batches(_LAPSE_SQL, {"now": now}, deadline, report)
        cutoff = now - timedelta(seconds=1)  # expires_at is inclusive to the second
        report.expired, expire_done = _run_batches_at_once(_EXPIRE_SQL, {"cutoff": cutoff}, deadline, report)
        report.finished = lapse_done and expire_done
        traced.set(lapsed=report.lapsed, expired=report.expired, batches=report.batches, finished=report.finished)
    metrics.EXPIRY_RUNS.inc()
    metrics.HOLDS_LAPSED.inc(report.lapsed)
    metrics.COUPONS_EXPIRED.inc(report.expired)
    return report


def repair_drift(*, limit: int = DRIFT_SCAN_PER_RUN, report: SweepReport | None = None) -> SweepReport:
    """Check the next `limit` coupons (a cursor walks the table round after round) against their events.

    A row that disagrees is set to the fold of its events, with a 'compensated' event that names what was
    wrong. The decision is taken again under the row's lock, so a transition committing meanwhile is never
    mistaken for drift.
    """
    report = report or SweepReport()
    cursor_row, _ = SweepCursor.objects.get_or_create(name="drift")
    start = cursor_row.position
    with span("couponrush.drift_repair", after_id=start, limit=limit) as traced:
        found = [d.coupon_id for d in disagreements(Coupon.objects.all(), after_id=start, limit=limit)]
        for coupon_id in found:
            if _repair_one(coupon_id):
                report.repaired += 1
                report.repairs.append(str(coupon_id))
                metrics.COUPONS_REPAIRED.inc()
        traced.set(drifted_coupon_ids=found)
    last = list(Coupon.objects.filter(pk__gt=start).order_by("pk").values_list("pk", flat=True)[limit - 1 : limit])
    SweepCursor.objects.filter(name="drift").update(position=last[0] if last else 0)  # 0: start a new round
    return report


def _repair_one(coupon_id: int) -> bool:
    with transaction.atomic():
        coupon = Coupon.objects.select_for_update().filter(pk=coupon_id).first()
        if coupon is None:
            return False
        folded = fold(CouponEvent.objects.filter(coupon_id=coupon_id).order_by("id"))
        if folded is None:
            return False  # no 'issued' event: nothing to rebuild the row from; reported by replay_events
        was = {"status": coupon.status, "order_id": coupon.order_id, "version": coupon.version}
        if was == {"status": folded.status, "order_id": folded.order_id, "version": folded.version}:
            return False
        version = max(folded.version, coupon.version) + 1
        claims_changed([coupon.claim_id])  # its claim's settled record may show the row as it was
        held = folded.status == CouponStatus.HELD
        keeps_order = folded.status in (CouponStatus.HELD, CouponStatus.REDEEMED)
        Coupon.objects.filter(pk=coupon_id).update(
            status=folded.status, order_id=folded.order_id if keeps_order else None,
            hold_until=(folded.hold_until or coupon.hold_until or timezone.now()) if held else None,
            discount=coupon.discount if keeps_order else None,
            order_amount=coupon.order_amount if keeps_order else None,
            version=version, updated_at=timezone.now(),
        )
        CouponEvent.objects.create(
            coupon_id=coupon_id, campaign_id=coupon.campaign_id, type=CouponEventType.COMPENSATED,
            source="compensation",
            data={"was": was, "status": folded.status, "order_id": folded.order_id if keeps_order else None,
                  "hold_until": folded.hold_until if held else None, "version": version,
                  "reason": "the row disagreed with its events; set to their fold"},
        )
    return True
