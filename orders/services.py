"""Claims: the claim itself, the ledger drain into PostgreSQL, rebuild of a lost Redis state, verify."""
from __future__ import annotations

import asyncio
import contextvars
import json
import logging
import os
import socket
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple, NoReturn

from django.conf import settings
from django.db import DatabaseError, IntegrityError, close_old_connections, connection, transaction
from django.db.models import Count
from django.utils import timezone

from campaigns import redis_state
from campaigns.errors import CampaignStateLost
from campaigns.models import Campaign, CampaignEvent, CampaignEventType
from campaigns.redis_state import ClaimCode, ClaimOutcomeUnknown, StoreUnavailable
from campaigns.services import campaign_preheat
from core.errors import NotFound, RateLimited, Unavailable
from core.hot import hot
from core.tracing import span
from coupons.codes import new_codes
from coupons.models import Coupon, CouponEvent, CouponEventType, CouponStatus
from coupons.outcomes import UseCode, UseOutcome, done, refused
from coupons.services import coupon_revoke

from . import ledger, metrics
from .models import Claim, ClaimStatus
from .sold_out import SOLD_OUT_FOR_SECONDS, forget_sold_out, sold_out_until

log = logging.getLogger(__name__)

CLAIM_STATUSES = {
    ClaimCode.CLAIMED: "claimed",
    ClaimCode.LIMIT_REACHED: "limit_reached",
    ClaimCode.SOLD_OUT: "sold_out",
    ClaimCode.NOT_STARTED: "not_started",
    ClaimCode.ENDED: "ended",
    ClaimCode.PAUSED: "paused",
}


class ClaimOutcome(NamedTuple):  # a tuple: built on every claim, 4x cheaper than a frozen dataclass
    code: int
    status: str
    campaign_id: int
    claim_id: str | None
    replayed: bool = False


# --- the claim ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _CampaignFacts:
    """What the claim path needs to know of a campaign whose state is not in Redis."""

    exists: bool
    ends_at: datetime | None = None
    preheated: bool = False


# The request path reads PostgreSQL only when Redis has no state for a campaign, and remembers the answer
# for a few seconds per process, so a storm on an unknown or lost campaign does not reach the database.
_FACTS_TTL_SECONDS = 5.0
_facts: dict[int, tuple[float, _CampaignFacts]] = {}


def _campaign_facts(campaign_id: int) -> _CampaignFacts:
    now = time.monotonic()
    cached = _facts.get(campaign_id)
    if cached is not None and now - cached[0] < _FACTS_TTL_SECONDS:
        return cached[1]
    # The claim's fast path skips Django's request cycle, which would retire broken or stale connections.
    if not connection.in_atomic_block:
        close_old_connections()
    row = Campaign.objects.published().filter(pk=campaign_id).values("ends_at", "preheated_at").first()
    facts = (
        _CampaignFacts(exists=False)
        if row is None
        else _CampaignFacts(exists=True, ends_at=row["ends_at"], preheated=row["preheated_at"] is not None)
    )
    if len(_facts) > 10_000:
        _facts.clear()
    _facts[campaign_id] = (now, facts)
    return facts


def forget_campaign_facts() -> None:
    _facts.clear()
    sold_out_until.clear()


class ClaimsRateLimited(RateLimited):
    message = "Too many claims this second (campaign, shopper or address); retry after a second."


def claim_create(
    *, campaign_id: int, user_id: str, idempotency_key: str | None, client_ip: str | None = None
) -> ClaimOutcome:
    """Claim one coupon for a shopper: one Lua script in Redis; the drain persists it later.

    Raise NotFound (unknown or unpublished campaign), RateLimited, or Unavailable (Redis down, or the
    campaign's state lost from Redis and not yet rebuilt). Ids and the IP must be validated by the caller.
    """
    known = known_sold_out(campaign_id, idempotency_key)
    if known is not None:
        return known
    try:
        result: redis_state.ClaimResult | None = redis_state.run_claim(
            campaign_id=campaign_id, user_id=user_id, idempotency_key=idempotency_key, client_ip=client_ip
        )
        if result is not None and result.code == ClaimCode.NO_STATE:
            result = _claim_without_state(campaign_id, user_id, idempotency_key, client_ip)
    except StoreUnavailable as exc:
        _unavailable(campaign_id, exc)
    return _claim_outcome(campaign_id, result)


def _unavailable(campaign_id: int, exc: StoreUnavailable) -> NoReturn:
    if isinstance(exc, ClaimOutcomeUnknown):
        claim_voider.request(exc)
    else:
        log.warning("claim on campaign %s: Redis unavailable: %s", campaign_id, exc)
    raise Unavailable() from exc


async def claim_create_async(
    *, campaign_id: int, user_id: str, idempotency_key: str | None, client_ip: str | None = None
) -> ClaimOutcome:
    """claim_create() on an event loop (the claim's fast path, config/asgi.py): the same steps, the script
    through the loop's auto-pipelined connection. The rare steps that read PostgreSQL (a campaign Redis does
    not know) run in a thread; on Redis Cluster the whole claim does (the pipelined client speaks to one node).
    """
    if hot().redis_cluster:
        return await asyncio.to_thread(claim_create, campaign_id=campaign_id, user_id=user_id,
                                       idempotency_key=idempotency_key, client_ip=client_ip)
    known = known_sold_out(campaign_id, idempotency_key)
    if known is not None:
        return known
    try:
        result: redis_state.ClaimResult | None = await redis_state.run_claim_async(
            campaign_id=campaign_id, user_id=user_id, idempotency_key=idempotency_key, client_ip=client_ip
        )
        if result is not None and result.code == ClaimCode.NO_STATE:
            result = await asyncio.to_thread(_claim_without_state, campaign_id, user_id, idempotency_key, client_ip)
    except StoreUnavailable as exc:
        _unavailable(campaign_id, exc)
    return _claim_outcome(campaign_id, result)


def known_sold_out(campaign_id: int, idempotency_key: str | None) -> ClaimOutcome | None:
    """The sold_out outcome when this process saw the campaign sold out less than SOLD_OUT_FOR_SECONDS ago
    (answered without Redis); None otherwise, and always for a claim with an Idempotency-Key (whose repeat
    must get its first answer, which only Redis knows)."""
    if idempotency_key is None and sold_out_until.get(campaign_id, 0.0) > time.monotonic():
        return ClaimOutcome(ClaimCode.SOLD_OUT, CLAIM_STATUSES[ClaimCode.SOLD_OUT], campaign_id, None)
    return None


def _claim_outcome(campaign_id: int, result: redis_state.ClaimResult | None) -> ClaimOutcome:
    """Turn the script's result (None: the campaign has ended) into the outcome, or raise."""
    if result is None:
        return ClaimOutcome(ClaimCode.ENDED, CLAIM_STATUSES[ClaimCode.ENDED], campaign_id, None)
    if result.code == ClaimCode.RATE_LIMITED:
        raise ClaimsRateLimited()
    if result.code == ClaimCode.TOO_LATE:
        log.warning("claim on campaign %s ran after its deadline (Redis was stalled): refused, nothing changed",
                    campaign_id)
        raise Unavailable()
    if result.trigger_drain:
        drain_trigger.request(campaign_id)
    if result.code == ClaimCode.SOLD_OUT:
        if len(sold_out_until) > 10_000:
            sold_out_until.clear()
        sold_out_until[campaign_id] = time.monotonic() + SOLD_OUT_FOR_SECONDS
    claimed = result.code == ClaimCode.CLAIMED
    return ClaimOutcome(
        code=int(result.code),
        status=CLAIM_STATUSES[result.code],
        campaign_id=campaign_id,
        claim_id=ledger.claim_id_of(campaign_id, result.ledger_id) if claimed else None,
        replayed=result.replayed,
    )


def _claim_without_state(
    campaign_id: int, user_id: str, key: str | None, client_ip: str | None
) -> redis_state.ClaimResult | None:
    """Handle a campaign Redis knows nothing of; return None when it has ended."""
    facts = _campaign_facts(campaign_id)
    if not facts.exists:
        raise NotFound("No such campaign.")
    assert facts.ends_at is not None
    if timezone.now() >= facts.ends_at:
        return None
    if facts.preheated:
        # Loaded once and now gone (Redis lost its data): never guess the stock; wait for the rebuild.
        raise CampaignStateLost()
    campaign = Campaign.objects.get(pk=campaign_id)
    campaign_preheat(campaign=campaign)
    _facts.pop(campaign_id, None)
    result = redis_state.run_claim(campaign_id=campaign_id, user_id=user_id, idempotency_key=key,
                                   client_ip=client_ip)
    if result.code == ClaimCode.NO_STATE:
        raise CampaignStateLost()
    return result


class _InBackground:
    """Work handed to a thread of this process (started on first use, and again in a forked child), so that
    the request that hands it over never waits for it."""

    thread_name = "background"

    def __init__(self) -> None:
        self._pending: list[Any] = []
        self._cond = threading.Condition()
        self._pid = 0

    def _submit(self, items: list[Any]) -> None:
        with self._cond:
            if self._pid != os.getpid():
                self._pid = os.getpid()
                self._pending = []
                threading.Thread(target=self._run, name=self.thread_name, daemon=True).start()
            self._pending.extend(items)
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending:
                    self._cond.wait()
                work, self._pending = self._pending, []
            self._handle(work)

    def _handle(self, work: list[Any]) -> None:
        raise NotImplementedError


class DrainTrigger(_InBackground):
    """Send drain tasks from a background thread, so a slow or absent broker never delays a claim.

    The claim script already debounces (at most one pending trigger per campaign); if a send fails, the
    beat sweep drains the ledger a few seconds later anyway.
    """

    thread_name = "drain-trigger"

    def request(self, campaign_id: int) -> None:
        self._submit([campaign_id])

    def _handle(self, work: list[Any]) -> None:
        from .tasks import drain_campaign

        for campaign_id in set(work):
            try:
                drain_campaign.apply_async(args=[campaign_id], retry=False, expires=60)
            except Exception:  # the broker is down: the beat sweep will drain
                log.warning("could not send a drain trigger for campaign %s", campaign_id, exc_info=True)


drain_trigger = DrainTrigger()


class ClaimVoider(_InBackground):
    """Take back, in the background, the claims whose requests were answered 503 without knowing whether
    they ran (redis_state.ClaimOutcomeUnknown: the reply lost and Redis still unreachable at the deadline).

    Once Redis answers again, void.lua marks the answer void, unless a repeat of the Idempotency-Key was told
    'claimed' meanwhile (then the claim stands, and that shopper knows), and the claim is cancelled through
    claim_cancel (coupon revoked if issued, stock returned once). Tried every half second for 15 minutes.
    Kept in the process's memory: a web process that dies meanwhile leaves such a claim in place (logged).
    """

    thread_name = "claim-voider"
    RETRY_SECONDS, GIVE_UP_SECONDS = 0.5, 900.0

    def request(self, unknown: ClaimOutcomeUnknown) -> None:
        log.warning("claim on campaign %s by %s: outcome unknown (Redis unreachable after the deadline), "
                    "answered 503; it will be taken back if it ran", unknown.campaign_id, unknown.user_id)
        unknown.__cause__ = unknown.__context__ = unknown.__traceback__ = None  # keep no frames alive
        self._submit([(time.monotonic(), unknown)])

    def _handle(self, work: list[Any]) -> None:
        waiting = []
        for n, (since, unknown) in enumerate(work):
            try:
                void_claim(unknown)
            except (StoreUnavailable, Unavailable, DatabaseError):
                if time.monotonic() - since < self.GIVE_UP_SECONDS:
                    waiting.append((since, unknown))
                else:
                    log.error("gave up taking back the claim under %s (campaign %s, %s): it stands",
                              unknown.answer_key, unknown.campaign_id, unknown.user_id)
                waiting.extend(work[n + 1:])  # the store is still away: the rest waits for the next round
                break
            except Exception:
                log.exception("could not take back the claim under %s", unknown.answer_key)
        connection.close()  # this thread's own; rare work, no connection kept
        if waiting:
            time.sleep(self.RETRY_SECONDS)
            self._submit(waiting)


def void_claim(unknown: ClaimOutcomeUnknown) -> str | None:
    """Take back the claim of a request answered 503 (ClaimVoider); return its claim id if it was cancelled.
    Raise StoreUnavailable or Unavailable (try again later: a claim marked void is remembered on `unknown`,
    so a retry goes on to cancel it)."""
    if unknown.claim_id is None:
        ledger_id = redis_state.run_void(unknown.answer_key, unknown.token)
        if ledger_id is None:
            return None
        unknown.claim_id = ledger.claim_id_of(unknown.campaign_id, ledger_id)
    claim_id = unknown.claim_id
    outcome = claim_cancel(user_id=unknown.user_id, claim_id=claim_id)
    log.warning("took back claim %s: its request had been answered 503 (%s)", claim_id, outcome.status,
                extra={"claim_id": claim_id, "campaign": unknown.campaign_id})
    return claim_id


claim_voider = ClaimVoider()


# --- the drain ---------------------------------------------------------------------------------------


def consumer_name() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


@dataclass
class DrainReport:
    campaign_id: int
    read: int = 0
    persisted: int = 0
    batches: int = 0
    reclaimed: int = 0
    caught_up: bool = False  # the ledger had nothing new when the drain stopped


# One statement per batch: insert the claims, then coupons for the claims that were new, then their
# 'issued' events. ON CONFLICT DO NOTHING on the claim id makes a second delivery of an entry harmless.
# The batch travels as two JSON parameters that PostgreSQL unpacks: the distinct moments of the batch,
# [[claimed at, valid from, expires at], ...] (ISO 8601; claims of one millisecond share them: at storm rates a
# few dozen), and the claims in ledger order, [[claim id, user id, position of its moments from 1, key digest,
# code], ...]; the moments are parsed once into arrays that each claim indexes. psycopg's per-element
# adaptation of six arrays cost more than PostgreSQL's whole insert of the claim; three ISO times per claim
# doubled the JSON's encoding in Python and parsed three timestamptz per claim in PostgreSQL.
_PERSIST_SQL = f"""
WITH moments AS (
    SELECT array_agg((m->>0)::timestamptz ORDER BY i) AS claimed_at,
           array_agg((m->>1)::timestamptz ORDER BY i) AS valid_from,
           array_agg((m->>2)::timestamptz ORDER BY i) AS expires_at
    FROM jsonb_array_elements(%s::jsonb) WITH ORDINALITY AS t(m, i)
), batch AS (
    SELECT r->>0 AS claim_id, r->>1 AS user_id, m.claimed_at[(r->>2)::int] AS claimed_at,
           m.valid_from[(r->>2)::int] AS valid_from, m.expires_at[(r->>2)::int] AS expires_at,
           r->>3 AS key_digest, r->>4 AS code
    FROM moments m, jsonb_array_elements(%s::jsonb) AS r
), new_claims AS (
    INSERT INTO {Claim._meta.db_table}
        (claim_id, campaign_id, user_id, status, key_digest, claimed_at, created_at, updated_at)
    SELECT claim_id, %s, user_id, %s, key_digest, claimed_at, now(), now() FROM batch
    ON CONFLICT (claim_id) DO NOTHING
    RETURNING claim_id
), new_coupons AS (
    INSERT INTO {Coupon._meta.db_table}
        (code, campaign_id, user_id, claim_id, status, valid_from, expires_at, version, created_at, updated_at)
    SELECT b.code, %s, b.user_id, b.claim_id, %s, b.valid_from, b.expires_at, 1, now(), now()
    FROM batch b JOIN new_claims n USING (claim_id)
    RETURNING id, claim_id, user_id
)
INSERT INTO {CouponEvent._meta.db_table} (coupon_id, campaign_id, type, data, source, created_at)
SELECT id, %s, %s, jsonb_build_object('claim_id', claim_id, 'user_id', user_id), 'drain', clock_timestamp()
FROM new_coupons
"""


def persist_entries(campaign: Campaign, entries: list[ledger.LedgerEntry]) -> int:
    """Insert claims, coupons and 'issued' events for ledger entries; return how many were new."""
    if not entries:
        return 0
    # Claims of the same millisecond share their times: at storm rates a few dozen per computation.
    index_of_ms: dict[str, int] = {}
    moments: list[tuple[str, str, str]] = []
    rows: list[list[str | int]] = []
    for e in entries:
        ms = e.entry_id.partition("-")[0]
        i = index_of_ms.get(ms)
        if i is None:
            claimed_at = e.claimed_at
            valid_from, expires_at = campaign.coupon_validity(claimed_at)
            i = index_of_ms[ms] = len(moments) + 1  # a PostgreSQL array's first position
            moments.append((claimed_at.isoformat(), valid_from.isoformat(), expires_at.isoformat()))
        rows.append([e.claim_id, e.user_id, i, e.key_digest, ""])
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
                return cursor.rowcount
        except IntegrityError:
            if attempt == 2:
                raise
            log.warning("coupon code collision in a batch of campaign %s; retrying with new codes", campaign.pk)
    return 0


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
    reclaiming = True
    label = str(campaign_id)
    helper: _DrainHelper | None = None
    with span("couponrush.drain", campaign_id=campaign_id) as traced, \
            metrics.DRAIN_FAILURES.labels(label).count_exceptions():
        try:
            while time.monotonic() < deadline:
                if reclaiming:
                    entries = ledger.reclaim_stale(campaign_id, consumer=consumer, min_idle_ms=idle,
                                                   count=batch_size)
                    report.reclaimed += len(entries)
                    if not entries:
                        reclaiming = False
                        continue
                else:
                    entries = ledger.read_new(campaign_id, consumer=consumer, count=batch_size)
                    if not entries:
                        report.caught_up = True
                        break
                _drain_batch(campaign, entries, report)
                if helper is None and not reclaiming and len(entries) == batch_size and DRAIN_CONNECTIONS > 1 \
                        and not connection.in_atomic_block:
                    helper = _DrainHelper(campaign, consumer, batch_size, deadline)  # a backlog: a second hand
        finally:
            if helper is not None:
                helper.join()
        if helper is not None:
            helper.merge_into(report)
        traced.set(read=report.read, persisted=report.persisted, batches=report.batches, reclaimed=report.reclaimed)
    return report


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
        persisted = persist_entries(campaign, entries)
        ledger.acknowledge(campaign.pk, [e.entry_id for e in entries])
    report.persisted += persisted
    report.read += len(entries)
    report.batches += 1
    metrics.DRAIN_BATCHES.labels(label).inc()
    metrics.DRAIN_READ.labels(label).inc(len(entries))
    metrics.DRAIN_ROWS.labels(label).inc(persisted)


class _DrainHelper:
    """drain_campaign's second connection: a thread (in the caller's context, for the trace) that drains new
    entries until there are none or the deadline passes, on a database connection of its own."""

    def __init__(self, campaign: Campaign, consumer: str, batch_size: int, deadline: float) -> None:
        self.report = DrainReport(campaign.pk)
        self.error: BaseException | None = None
        context = contextvars.copy_context()
        self.thread = threading.Thread(target=context.run, args=(self._run, campaign, consumer, batch_size,
                                                                 deadline), name="drain-helper", daemon=True)
        self.thread.start()

    def _run(self, campaign: Campaign, consumer: str, batch_size: int, deadline: float) -> None:
        try:
            while time.monotonic() < deadline:
                entries = ledger.read_new(campaign.pk, consumer=consumer, count=batch_size)
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
        report.batches += self.report.batches
        report.caught_up = report.caught_up and self.report.caught_up


# --- verify ------------------------------------------------------------------------------------


@dataclass
class Balance:
    """DESIGN.md's accounting: total == remaining + claims (persisted and in the ledger) - restocked.

    `restocked` counts the claims Redis gave back (cancel.lua's set), read in the same cut as the stock.
    Per-user counts in Redis are checked against the claims too (claims given back excluded).
    """

    campaign_id: int
    total_stock: int
    remaining: int | None
    persisted_claims: int
    ledger_only_claims: int
    restocked: int
    coupons: int
    issued_claims: int
    users_over_limit: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    # What reconciliation may repair: ledger entries PostgreSQL lacks, per-user counts Redis has wrong.
    missing_entries: list[ledger.LedgerEntry] = field(default_factory=list, repr=False)
    users_drift: dict[str, tuple[int, int]] = field(default_factory=dict)  # user -> (in Redis, expected)
    given_back: set[str] = field(default_factory=set, repr=False)  # claim ids Redis restocked

    @property
    def claims(self) -> int:
        return self.persisted_claims + self.ledger_only_claims

    @property
    def right_side(self) -> int | None:
        if self.remaining is None:
            return None
        return self.remaining + self.claims - self.restocked

    @property
    def drift(self) -> int | None:
        return None if self.right_side is None else self.total_stock - self.right_side

    @property
    def balanced(self) -> bool:
        return (self.right_side == self.total_stock and not self.users_over_limit and not self.users_drift
                and not self.problems)


@dataclass(frozen=True, slots=True)
class _PersistedSide:
    per_user: dict[str, int]  # claims up to the cut, by shopper
    persisted: int  # claims up to the cut
    persisted_ledger_ids: set[str]  # which of the cut's ledger entries PostgreSQL holds
    cancelled: list[str]  # claims up to the cut that are cancelled
    given_back_owners: dict[str, str]  # claim id -> shopper, for the claims Redis gave back
    coupons: int
    issued: int  # claims no longer pending
    orphans: int  # issued claims without a coupon
    misfiled_events: int  # events of the campaign's coupons filed under another campaign, or the reverse


def _persisted_side(campaign: Campaign, snap: ledger.LedgerSnapshot) -> _PersistedSide:
    """PostgreSQL's side of the balance in one statement, so one snapshot: a drain committing meanwhile is
    seen by all of it or by none (separate queries counted such an entry twice, as persisted and as missing)."""
    ms, seq = (int(part) for part in snap.last_id.split("-"))
    claims, coupons, events = Claim._meta.db_table, Coupon._meta.db_table, CouponEvent._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            WITH c AS (SELECT claim_id, user_id, status FROM {claims} WHERE campaign_id = %(campaign)s),
                 upto AS (SELECT * FROM c WHERE (split_part(claim_id, '-', 2)::bigint,
                                                 split_part(claim_id, '-', 3)::bigint) <= (%(ms)s, %(seq)s))
            SELECT
              (SELECT coalesce(json_object_agg(user_id, n), '{{}}')
                 FROM (SELECT user_id, count(*) AS n FROM upto GROUP BY user_id) AS per_user),
              (SELECT count(*) FROM upto),
              (SELECT coalesce(array_agg(claim_id), '{{}}') FROM c WHERE claim_id = ANY(%(ledger)s)),
              (SELECT coalesce(array_agg(claim_id), '{{}}') FROM upto WHERE status = %(cancelled)s),
              (SELECT coalesce(json_object_agg(claim_id, user_id), '{{}}') FROM c WHERE claim_id = ANY(%(given)s)),
              (SELECT count(*) FROM {coupons} WHERE campaign_id = %(campaign)s),
              (SELECT count(*) FROM c WHERE status <> %(pending)s),
              (SELECT count(*) FROM c WHERE status = %(issued)s AND NOT EXISTS (
                 SELECT 1 FROM {coupons} AS k WHERE k.campaign_id = %(campaign)s AND k.claim_id = c.claim_id)),
              (SELECT count(*) FROM {events} AS e JOIN {coupons} AS k ON k.id = e.coupon_id
                 WHERE e.campaign_id = %(campaign)s AND k.campaign_id <> %(campaign)s)
              + (SELECT count(*) FROM {coupons} AS k JOIN {events} AS e ON e.coupon_id = k.id
                 WHERE k.campaign_id = %(campaign)s AND e.campaign_id <> %(campaign)s)
            """,
            {"campaign": campaign.pk, "ms": ms, "seq": seq, "ledger": [e.claim_id for e in snap.entries],
             "given": sorted(snap.cancelled), "cancelled": ClaimStatus.CANCELLED, "pending": ClaimStatus.PENDING,
             "issued": ClaimStatus.ISSUED},
        )
        per_user, persisted, in_ledger, cancelled, owners, coupon_count, issued, orphans, misfiled = cursor.fetchone()
    return _PersistedSide(per_user=per_user, persisted=persisted, persisted_ledger_ids=set(in_ledger),
                          cancelled=list(cancelled), given_back_owners=owners, coupons=coupon_count, issued=issued,
                          orphans=orphans, misfiled_events=misfiled)


def campaign_verify(*, campaign: Campaign) -> Balance:
    """Compute both sides of the campaign's balance from one consistent cut of Redis, then PostgreSQL.

    Exact under load: only claims Redis had issued at the moment of the cut are counted from PostgreSQL.
    """
    snap = ledger.snapshot(campaign.pk)
    side = _persisted_side(campaign, snap)
    missing = [e for e in snap.entries if e.claim_id not in side.persisted_ledger_ids]
    # Per user: every claim up to the cut (PostgreSQL, plus the ledger's own), less those given back.
    expected: dict[str, int] = dict(side.per_user)
    for entry in missing:
        expected[entry.user_id] = expected.get(entry.user_id, 0) + 1
    owners = dict(side.given_back_owners)
    owners.update({e.claim_id: e.user_id for e in missing if e.claim_id in snap.cancelled})
    for claim_id in snap.cancelled:
        if claim_id in owners:
            expected[owners[claim_id]] -= 1
    balance = Balance(
        campaign_id=campaign.pk,
        total_stock=campaign.total_stock,
        remaining=snap.remaining,
        persisted_claims=side.persisted,
        ledger_only_claims=len(missing),
        restocked=len(snap.cancelled),
        coupons=side.coupons,
        issued_claims=side.issued,
        users_over_limit=sorted(u for u, n in expected.items() if n > campaign.per_user_limit),
        missing_entries=missing,
        given_back=snap.cancelled,
    )
    if snap.remaining is None:
        balance.problems.append("Redis holds no stock for this campaign (never loaded, expired or lost)")
        return balance
    if snap.remaining < 0:
        balance.problems.append(f"Redis stock is negative ({snap.remaining})")
    redis_users = {u: n for u, n in snap.users.items() if u}
    balance.users_drift = {
        u: (redis_users.get(u, 0), expected.get(u, 0))
        for u in set(redis_users) | set(expected)
        if redis_users.get(u, 0) != expected.get(u, 0)
    }
    if side.orphans:
        balance.problems.append(f"{side.orphans} issued claims have no coupon")
    if side.misfiled_events:
        balance.problems.append(f"{side.misfiled_events} coupon events name another campaign than their coupon's")
    cancelled_in_db = set(side.cancelled)
    if cancelled_in_db != snap.cancelled:
        balance.problems.append(
            f"claims given back in Redis but not cancelled in PostgreSQL: {sorted(snap.cancelled - cancelled_in_db)}; "
            f"cancelled in PostgreSQL without their stock back: {sorted(cancelled_in_db - snap.cancelled)}"
        )
    return balance


# --- cancel: give an unused coupon back --------------------------------------------------------------


def _restock(claim: Claim) -> None:
    """Return the claim's coupon to the stock (cancel.lua, once per claim id). Call inside atomic."""
    try:
        result = redis_state.run_restock(campaign_id=claim.campaign_id, claim_id=claim.claim_id, user_id=claim.user_id)
    except StoreUnavailable as exc:
        raise Unavailable() from exc
    if result == redis_state.RestockResult.NO_STATE:
        raise CampaignStateLost()
    forget_sold_out(claim.campaign_id)  # this process sells it again at once (others within 0.5 s)


def _insert_cancelled_claim(entry: ledger.LedgerEntry) -> bool:
    """Persist a still-pending claim directly as cancelled; False if the drain persisted it first."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {Claim._meta.db_table} (claim_id, campaign_id, user_id, status, key_digest, claimed_at, "
            "created_at, updated_at) VALUES (%s, %s, %s, %s, %s, %s, now(), now()) ON CONFLICT (claim_id) DO NOTHING",
            [entry.claim_id, entry.campaign_id, entry.user_id, ClaimStatus.CANCELLED, entry.key_digest,
             entry.claimed_at],
        )
        return cursor.rowcount == 1


def claim_cancel(*, user_id: str, claim_id: str) -> UseOutcome:
    """Give a claim's unused coupon back: coupon revoked, stock and the shopper's count returned.

    Idempotent by claim id. A claim still pending in the ledger is recorded as cancelled at once, so the
    drain never issues its coupon. Raise NotFound (unknown, or another shopper's) or Unavailable.
    """
    parsed = ledger.parse_claim_id(claim_id)
    if parsed is None:
        raise NotFound("No such claim.")
    campaign_id, entry_id = parsed
    campaign = Campaign.objects.filter(pk=campaign_id).first()
    if campaign is None:
        raise NotFound("No such claim.")
    over = timezone.now() >= campaign.ends_at
    ended = UseOutcome(int(ClaimCode.ENDED), "ended", "The campaign has ended; stock can't be returned.")
    with transaction.atomic():
        claim = Claim.objects.select_for_update().filter(claim_id=claim_id).first()
        if claim is None:
            try:
                entry = ledger.pending_entry(campaign_id, entry_id)
            except StoreUnavailable as exc:
                raise Unavailable() from exc
            if entry is not None and entry.user_id == user_id:
                if over:
                    return ended
                if _insert_cancelled_claim(entry):  # still pending: the drain will never issue it
                    _restock(Claim.objects.get(claim_id=claim_id))
                    return done("cancelled", claim_id=claim_id)
            # Persisted meanwhile by the drain (it commits before it deletes the entry), or unknown.
            claim = Claim.objects.select_for_update().filter(claim_id=claim_id).first()
        if claim is None or claim.user_id != user_id:
            raise NotFound("No such claim.")
        if claim.status == ClaimStatus.CANCELLED:
            _restock(claim)  # a no-op unless an earlier cancel lost its restock
            return done("cancelled", claim_id=claim_id)
        if over:
            return ended
        coupon = Coupon.objects.select_related("campaign").get(claim_id=claim_id)
        if coupon.status == CouponStatus.REVOKED:
            return refused(UseCode.REVOKED)
        outcome = coupon_revoke(coupon=coupon, source="cancel", reason="claim cancelled", restocked=True)
        if outcome.code != 0:
            return outcome
        Claim.objects.filter(pk=claim.pk).update(status=ClaimStatus.CANCELLED, updated_at=timezone.now())
        _restock(claim)
    return done("cancelled", claim_id=claim_id)


# --- the end of a campaign ---------------------------------------------------------------------------


def campaign_close(*, campaign: Campaign) -> CampaignEvent | None:
    """Record an ended campaign's final figures once (a CLOSED event); None if not ready or done before.

    Ready when the campaign ended and its ledger is fully in PostgreSQL. Its Redis keys expire by
    themselves at the end plus the grace period (PEXPIREAT).
    """
    if timezone.now() < campaign.ends_at:
        return None
    with transaction.atomic():
        locked = Campaign.objects.select_for_update().get(pk=campaign.pk)
        if CampaignEvent.objects.filter(campaign=locked, type=CampaignEventType.CLOSED).exists():
            return None
        try:
            if ledger.backlog_sizes([campaign.pk]).get(campaign.pk, 0):
                return None
            balance = campaign_verify(campaign=locked)
        except StoreUnavailable:
            return None
        coupons = dict(Coupon.objects.filter(campaign=locked).values_list("status").annotate(n=Count("id"))
                       .values_list("status", "n"))
        figures = {"total_stock": locked.total_stock, "remaining": balance.remaining, "claims": balance.claims,
                   "given_back": balance.restocked, "balanced": balance.balanced, "coupons": coupons}
        return CampaignEvent.objects.create(campaign=locked, type=CampaignEventType.CLOSED, actor="housekeeping",
                                            data=figures)
