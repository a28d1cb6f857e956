"""The ledger drain: move a campaign's claims from its Redis ledger into PostgreSQL in batches (read, persist,
settle: acknowledge with the claims' settled records, orders/settle.py), creating each claim, its coupon and the
coupon's 'issued' event in one statement.

The one writer of claims and coupons in bulk: raw SQL on the tables of orders and coupons (_PERSIST_SQL),
named through their models.
"""
from __future__ import annotations

import contextvars
import json
import logging
import os
import socket
import threading
import time
from dataclasses import dataclass

from django.conf import settings
from django.db import DataError, IntegrityError, connection, transaction

from campaigns.claim_settled import times_of
from campaigns.events_out import campaign_sold_out_check
from campaigns.models import Campaign
from core.tracing import span
from coupons.codes import new_codes
from coupons.events_out import bulk_ctes
from coupons.models import Coupon, CouponEvent, CouponEventType, CouponStatus
from storefronts.models import Storefront

from . import ledger, metrics
from .models import Claim, ClaimStatus, ParkedLedgerEntry
from .settle import NewCoupons, settle

log = logging.getLogger(__name__)


def consumer_name() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


@dataclass
class DrainReport:
    campaign_id: int
    read: int = 0
    persisted: int = 0
    batches: int = 0
    reclaimed: int = 0
    parked: int = 0  # entries that can never be persisted, parked (orders.models.ParkedLedgerEntry) this time
    caught_up: bool = False  # the ledger had nothing new when the drain stopped


# The coupons' coupon.issued webhooks (coupons.events_out): one outbox INSERT ... SELECT in the batch's statement.
ISSUED_OUT = bulk_ctes("issued_out", event="issued", source="new_coupons n", alias="n", status="active",
                       extra="|| jsonb_build_object('claim_id', n.claim_id)")

# One statement per batch: insert the claims, then coupons for the claims that were new, then their
# 'issued' events. ON CONFLICT DO NOTHING on the claim id makes a second delivery of an entry harmless.
# The batch travels as two JSON parameters that PostgreSQL unpacks: the distinct moments of the batch,
# [[claimed at, valid from, expires at], ...] (ISO 8601; claims of one millisecond share them: at storm rates a
# few dozen), and the claims in ledger order, [[claim id, user id, position of its moments from 1, key digest,
# code(, storefront id)], ...] (the storefront's only for a storefront's claim: a storefront that is no longer
# there is none, never a failed batch); the moments are parsed once into arrays that each claim indexes.
# psycopg's per-element adaptation of six arrays cost more than PostgreSQL's whole insert of the claim; three ISO
# times per claim doubled the JSON's encoding in Python and parsed three timestamptz per claim in PostgreSQL. It
# returns the ids of the claims it created (their events' claim_id): their settled records need nothing read back
# (orders/settle.py).
_PERSIST_SQL = f"""
WITH moments AS (
    SELECT array_agg((m->>0)::timestamptz ORDER BY i) AS claimed_at,
           array_agg((m->>1)::timestamptz ORDER BY i) AS valid_from,
           array_agg((m->>2)::timestamptz ORDER BY i) AS expires_at
    FROM jsonb_array_elements(%s::jsonb) WITH ORDINALITY AS t(m, i)
), batch AS (
    SELECT r->>0 AS claim_id, r->>1 AS user_id, m.claimed_at[(r->>2)::int] AS claimed_at,
           m.valid_from[(r->>2)::int] AS valid_from, m.expires_at[(r->>2)::int] AS expires_at,
           r->>3 AS key_digest, r->>4 AS code,
           CASE WHEN r->>5 IS NOT NULL THEN (SELECT s.id FROM {Storefront._meta.db_table} s
                                             WHERE s.id = (r->>5)::bigint) END AS storefront_id
    FROM moments m, jsonb_array_elements(%s::jsonb) AS r
), new_claims AS (
    INSERT INTO {Claim._meta.db_table}
        (claim_id, campaign_id, user_id, status, key_digest, claimed_at, storefront_id, created_at, updated_at)
    SELECT claim_id, %s, user_id, %s, key_digest, claimed_at, storefront_id, now(), now() FROM batch
    ON CONFLICT (claim_id) DO NOTHING
    RETURNING claim_id
), new_coupons AS (
    INSERT INTO {Coupon._meta.db_table}
        (code, campaign_id, user_id, claim_id, status, valid_from, expires_at, version, created_at, updated_at)
    SELECT b.code, %s, b.user_id, b.claim_id, %s, b.valid_from, b.expires_at, 1, now(), now()
    FROM batch b JOIN new_claims n USING (claim_id)
    RETURNING id, claim_id, user_id, code, campaign_id, valid_from, expires_at
){ISSUED_OUT}
INSERT INTO {CouponEvent._meta.db_table} (coupon_id, campaign_id, type, data, source, created_at)
SELECT id, %s, %s, jsonb_build_object('claim_id', claim_id, 'user_id', user_id), 'drain', clock_timestamp()
FROM new_coupons
RETURNING data->>'claim_id'
"""


def persist_entries(campaign: Campaign, entries: list[ledger.LedgerEntry], created: NewCoupons | None = None
                    ) -> int:
    """Insert claims, coupons and 'issued' events for ledger entries; return how many were new. `created`, when
    given, gets each new claim's coupon (code, valid from, expires at) by claim id."""
    if not entries:
        return 0
    # Claims of the same millisecond share their times: at storm rates a few dozen per computation.
    index_of_ms: dict[str, int] = {}
    moments: list[tuple[str, str, str]] = []
    times: list[str] = []  # each moment's as a settled record writes them
    rows: list[list[str | int]] = []
    for e in entries:
        ms = e.entry_id.partition("-")[0]
        i = index_of_ms.get(ms)
        if i is None:
            claimed_at = e.claimed_at
            valid_from, expires_at = campaign.coupon_validity(claimed_at)
            i = index_of_ms[ms] = len(moments) + 1  # a PostgreSQL array's first position
            moments.append((claimed_at.isoformat(), valid_from.isoformat(), expires_at.isoformat()))
            times.append(times_of(valid_from, expires_at))
        rows.append([e.claim_id, e.user_id, i, e.key_digest, "", e.storefront] if e.storefront
                    else [e.claim_id, e.user_id, i, e.key_digest, ""])
    moments_json = json.dumps(moments, separators=(",", ":"))
    for attempt in range(3):
        for row, code in zip(rows, new_codes(len(rows)), strict=True):
            row[4] = code
        batch = json.dumps(rows, separators=(",", ":"))
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute(
                    _PERSIST_SQL,
                    [
                        moments_json,
                        batch,
                        campaign.pk,
                        ClaimStatus.ISSUED,
                        campaign.pk,
                        CouponStatus.ACTIVE,
                        campaign.pk,
                        CouponEventType.ISSUED,
                    ],
                )
                new = cursor.fetchall()
            if created is not None and new:
                by_id = {row[0]: row for row in rows}
                for (claim_id,) in new:
                    row = by_id[claim_id]
                    created[claim_id] = (str(row[4]), times[int(row[2]) - 1])
            return len(new)
        except IntegrityError:
            if attempt == 2:
                raise
            log.warning("coupon code collision in a batch of campaign %s; retrying with new codes", campaign.pk)
    return 0


# What an entry that can never be persisted raises in persist_entries beyond what ledger.entry_problem already
# refuses: PostgreSQL refused one of its values (a class 22 error). Anything else (PostgreSQL down, a lost
# connection) stops the drain as before: the entries stay pending and the next drain takes them over.
UNPERSISTABLE = (DataError,)


def persist_or_park(campaign: Campaign, entries: list[ledger.LedgerEntry], created: NewCoupons | None = None
                    ) -> tuple[int, int]:
    """persist_entries(), except that an entry which can never be persisted does not hold back the others: it
    is parked (ParkedLedgerEntry: its raw fields and the error, once however often it is delivered) and the
    rest is persisted. Return (claims persisted, entries parked now). The caller acknowledges them all."""
    bad = [(e, problem) for e in entries if (problem := ledger.entry_problem(e)) is not None]
    good = [e for e in entries if ledger.entry_problem(e) is None] if bad else entries
    try:
        persisted = persist_entries(campaign, good, created)
        failed: list[tuple[ledger.LedgerEntry, str]] = []
    except UNPERSISTABLE:
        persisted, failed = _persist_isolating(campaign, good, created)
        if len(failed) == len(good) > 1:
            raise  # every one alone fails too: the campaign's, not an entry's, problem; nothing parked
    return persisted, _park(campaign, bad + failed)


def _persist_isolating(campaign: Campaign, entries: list[ledger.LedgerEntry], created: NewCoupons | None = None
                       ) -> tuple[int, list[tuple[ledger.LedgerEntry, str]]]:
    """Persist entries of a batch that failed on an entry's data: halve it until the failing entries are alone
    (each attempt its own transaction or savepoint); return (persisted, [(entry, error)])."""
    if len(entries) == 1:
        try:
            return persist_entries(campaign, entries, created), []
        except UNPERSISTABLE as exc:
            return 0, [(entries[0], f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:500]}")]
    half = len(entries) // 2
    parts: list[tuple[int, list[tuple[ledger.LedgerEntry, str]]]] = []
    for part in (entries[:half], entries[half:]):
        try:
            parts.append((persist_entries(campaign, part, created), []))
        except UNPERSISTABLE:
            parts.append(_persist_isolating(campaign, part, created))
    return parts[0][0] + parts[1][0], parts[0][1] + parts[1][1]


def _park(campaign: Campaign, failed: list[tuple[ledger.LedgerEntry, str]]) -> int:
    """Record entries that can never be persisted; return how many were not parked before."""
    parked = 0
    for entry, error in failed:
        _, created = ParkedLedgerEntry.objects.get_or_create(
            campaign=campaign, entry_id=entry.ref, defaults={"fields": entry.raw, "error": error})
        if created:
            parked += 1
            metrics.LEDGER_PARKED.labels(str(campaign.pk)).inc()
            log.error("parked ledger entry %s of campaign %s (it can never be persisted): %s", entry.entry_id,
                      campaign.pk, error, extra={"claim_id": entry.claim_id, "campaign": campaign.pk})
    return parked


def drain_campaign(
    *,
    campaign_id: int,
    consumer: str | None = None,
    batch_size: int | None = None,
    max_seconds: float = 10.0,
    reclaim_idle_ms: int | None = None,
) -> DrainReport:
    """Move a campaign's ledger into PostgreSQL in batches: read, persist, then acknowledge.

    First takes over entries another consumer read but left unacknowledged for `reclaim_idle_ms`
    (default COUPONS_DRAIN_RECLAIM_IDLE_MS). Safe to run twice at once. Stops after `max_seconds`;
    report.read == batch_size * batches then means more may wait. Raise StoreUnavailable.
    """
    consumer = consumer or consumer_name()
    batch_size = batch_size or settings.COUPONS_DRAIN_BATCH
    idle = settings.COUPONS_DRAIN_RECLAIM_IDLE_MS if reclaim_idle_ms is None else reclaim_idle_ms
    report = DrainReport(campaign_id)
    campaign = Campaign.objects.filter(pk=campaign_id).first()
    if campaign is None:
        return report
    deadline = time.monotonic() + max_seconds
    label = str(campaign_id)
    with span("couponrush.drain", campaign_id=campaign_id) as traced, \
            metrics.DRAIN_FAILURES.labels(label).count_exceptions():
        caught_up = True
        for bucket in range(campaign.buckets):  # a campaign split into buckets: each bucket's ledger in turn
            report.caught_up = False
            _drain_ledger(campaign, bucket, consumer, batch_size, idle, deadline, report)
            caught_up = caught_up and report.caught_up
        report.caught_up = caught_up
        if report.persisted and report.caught_up:
            campaign_sold_out_check(campaign)  # campaign.sold_out, once, after the coupons' coupon.issued
        traced.set(read=report.read, persisted=report.persisted, batches=report.batches, reclaimed=report.reclaimed)
    return report


def _drain_ledger(campaign: Campaign, bucket: int, consumer: str, batch_size: int, idle: int, deadline: float,
                  report: DrainReport) -> None:
    """drain_campaign() of one ledger (one bucket's)."""
    reclaiming = True
    helper: _DrainHelper | None = None
    try:
        while time.monotonic() < deadline:
            if reclaiming:
                entries = ledger.reclaim_stale(campaign.pk, consumer=consumer, min_idle_ms=idle, count=batch_size,
                                               bucket=bucket)
                report.reclaimed += len(entries)
                if not entries:
                    reclaiming = False
                    continue
            else:
                entries = ledger.read_new(campaign.pk, consumer=consumer, count=batch_size, bucket=bucket)
                if not entries:
                    report.caught_up = True
                    break
            _drain_batch(campaign, entries, report)
            if helper is None and not reclaiming and len(entries) == batch_size and DRAIN_CONNECTIONS > 1 \
                    and not connection.in_atomic_block:
                helper = _DrainHelper(campaign, consumer, batch_size, deadline, bucket)  # a backlog: a second hand
    finally:
        if helper is not None:
            helper.join()
    if helper is not None:
        helper.merge_into(report)


# Connections draining one campaign at once when a backlog waits (a full batch came back). A batch keeps one
# PostgreSQL backend busy on one core (its claim, coupon and event rows, 14 index entries, 3 foreign-key
# checks); a second connection reads the next entries of the consumer group (XREADGROUP never hands one
# entry to both) and persists them on the other core. Each batch is still read, persisted in one
# transaction, then acknowledged, so a crash of either leaves its entries pending for the reclaim.
DRAIN_CONNECTIONS = 2


def _drain_batch(campaign: Campaign, entries: list[ledger.LedgerEntry], report: DrainReport) -> None:
    """Persist a batch, then acknowledge it; count it in the report and the metrics."""
    label = str(campaign.pk)
    with span("couponrush.drain.batch", campaign_id=campaign.pk, claim_ids=[e.claim_id for e in entries]):
        created: NewCoupons = {}
        persisted, parked = persist_or_park(campaign, entries, created)
        settle(campaign, entries, created)  # acknowledged with their settled records, in one MULTI; then published
    report.persisted += persisted
    report.parked += parked
    report.read += len(entries)
    report.batches += 1
    metrics.DRAIN_BATCHES.labels(label).inc()
    metrics.DRAIN_READ.labels(label).inc(len(entries))
    metrics.DRAIN_ROWS.labels(label).inc(persisted)


class _DrainHelper:
    """drain_campaign's second connection: a thread (in the caller's context, for the trace) that drains new
    entries until there are none or the deadline passes, on a database connection of its own."""

    def __init__(self, campaign: Campaign, consumer: str, batch_size: int, deadline: float, bucket: int = 0) -> None:
        self.report = DrainReport(campaign.pk)
        self.error: BaseException | None = None
        context = contextvars.copy_context()
        self.thread = threading.Thread(target=context.run, args=(self._run, campaign, consumer, batch_size,
                                                                 deadline, bucket), name="drain-helper", daemon=True)
        self.thread.start()

    def _run(self, campaign: Campaign, consumer: str, batch_size: int, deadline: float, bucket: int) -> None:
        try:
            while time.monotonic() < deadline:
                entries = ledger.read_new(campaign.pk, consumer=consumer, count=batch_size, bucket=bucket)
                if not entries:
                    self.report.caught_up = True
                    break
                _drain_batch(campaign, entries, self.report)
        except BaseException as exc:  # re-raised by the caller
            self.error = exc
        finally:
            connection.close()  # this thread's own connection

    def join(self) -> None:
        self.thread.join()

    def merge_into(self, report: DrainReport) -> None:
        if self.error is not None:
            raise self.error
        report.read += self.report.read
        report.persisted += self.report.persisted
        report.parked += self.report.parked
        report.batches += self.report.batches
        report.caught_up = report.caught_up and self.report.caught_up
