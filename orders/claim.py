"""The claim: one Lua script in Redis decides it and appends it to the ledger (the hot path); the drain
persists it later.

What the claim keeps in this process is here too: the facts of campaigns Redis does not know (for a few
seconds), and the background threads that send drain triggers and take back claims answered 503 without
knowing whether they ran (void_claim).
"""
from __future__ import annotations

import asyncio
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NoReturn

from celery import current_app
from django.db import DatabaseError, close_old_connections, connection
from django.utils import timezone

from campaigns import redis_state
from campaigns.errors import CampaignStateLost
from campaigns.models import Campaign, CampaignKind
from campaigns.redis_state import (
    CLAIM_STATUSES,
    ClaimCode,
    ClaimFlow,
    ClaimOutcome,
    ClaimOutcomeUnknown,
    StoreUnavailable,
    VoidNotConfirmed,
)
from campaigns.services import campaign_preheat
from core.background import InBackground
from core.errors import NotFound, RateLimited, Unavailable

from . import ledger
from .cancel import claim_cancel
from .sold_out import SOLD_OUT_FOR_SECONDS, sold_out_until

log = logging.getLogger(__name__)

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
    # A codes campaign can't be claimed (its codes are typed at checkout), nor a grant campaign (only operators
    # give it out, grants/): the same 404 as an unknown campaign. Redis holds no stock for the first (its shared
    # code's uses are another key), and claim.lua answers the second's shoppers as a campaign it does not know.
    row = (Campaign.objects.published().filter(pk=campaign_id)
           .exclude(kind__in=[CampaignKind.CODES, CampaignKind.GRANT])
           .values("ends_at", "preheated_at").first())
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
    """Forget all this process remembers of campaigns: their facts and which sold out."""
    _facts.clear()
    redis_state.forget_bucket_counts()
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
    return claim_in_redis(ClaimFlow(campaign_id, user_id, idempotency_key, client_ip))


def claim_in_redis(flow: ClaimFlow) -> ClaimOutcome:
    """claim_create() past known_sold_out(), for a caller that asked it already (orders.apis: once a claim), of the
    checked claim (its flow). The script; of a campaign Redis does not know, the lookup (and load) and the script
    again."""
    campaign_id = flow.campaign_id
    try:
        outcome: ClaimOutcome | None
        outcome = redis_state.run_flow(flow)
        if outcome.code == ClaimCode.NO_STATE:
            outcome = redis_state.run_flow(flow.again()) if _loaded_for_claim(campaign_id) else None
    except StoreUnavailable as exc:
        _unavailable(campaign_id, exc)
    return _claim_outcome(campaign_id, outcome)


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
    through the loop's auto-pipelined connection (on Redis Cluster, its connection to the campaign's master).
    The rare steps that read PostgreSQL (a campaign Redis does not know) run in a thread.
    """
    known = known_sold_out(campaign_id, idempotency_key)
    if known is not None:
        return known
    return await claim_in_redis_async(ClaimFlow(campaign_id, user_id, idempotency_key, client_ip))


async def claim_in_redis_async(flow: ClaimFlow) -> ClaimOutcome:
    """claim_in_redis() on an event loop: the same steps, the same decisions (_claim_outcome)."""
    campaign_id = flow.campaign_id
    try:
        outcome: ClaimOutcome | None
        outcome = await redis_state.run_flow_async(flow)
        if outcome.code == ClaimCode.NO_STATE:
            outcome = await redis_state.run_flow_async(flow.again()) if await _loaded_in_time(campaign_id) else None
    except StoreUnavailable as exc:
        _unavailable(campaign_id, exc)
    return _claim_outcome(campaign_id, outcome)


# A campaign Redis knows nothing of is looked up in PostgreSQL (and loaded into Redis if it never was) in a thread
# of this pool; the event loop waits for it at most LOOKUP_SECONDS and answers 503 (PostgreSQL down or hung:
# a new connection to a hung server waits DATABASE_CONNECT_TIMEOUT, 3 s, one already open forever). The thread
# carries on alone meanwhile, and only reads and loads: the claim itself runs on the loop after it, or not at
# all, so a claim answered 503 never happens. A pool of its own: threads stuck on a hung PostgreSQL hold no
# other work of the loop (asyncio.to_thread's pool: the moves of stock between buckets). Rare work: its threads
# keep no connection (as the claim voider's), so a stuck one is freed by the next connect's timeout.
LOOKUP_SECONDS = 1.0
_lookup_pool: ThreadPoolExecutor | None = None


def _forget_lookup_pool() -> None:
    global _lookup_pool
    _lookup_pool = None


os.register_at_fork(after_in_child=_forget_lookup_pool)  # a forked worker starts threads of its own


async def _loaded_in_time(campaign_id: int) -> bool:
    """_loaded_for_claim() in a thread, waited for at most LOOKUP_SECONDS. Raise Unavailable past that."""
    global _lookup_pool
    if _lookup_pool is None:
        _lookup_pool = ThreadPoolExecutor(2, thread_name_prefix="claim-lookup")
    lookup = asyncio.get_running_loop().run_in_executor(_lookup_pool, _looked_up, campaign_id)
    try:
        return await asyncio.wait_for(lookup, LOOKUP_SECONDS)
    except TimeoutError:
        log.warning("claim on campaign %s: PostgreSQL did not answer within %s s: answered 503", campaign_id,
                    LOOKUP_SECONDS)
        raise Unavailable() from None


def known_sold_out(campaign_id: int, idempotency_key: str | None) -> ClaimOutcome | None:
    """The sold_out outcome when this process saw the campaign sold out less than SOLD_OUT_FOR_SECONDS ago
    (answered without Redis); None otherwise, and always for a claim with an Idempotency-Key (whose repeat
    must get its first answer, which only Redis knows)."""
    if idempotency_key is None and sold_out_until.get(campaign_id, 0.0) > time.monotonic():
        outcome = _sold_out_outcomes.get(campaign_id)
        if outcome is None:
            if len(_sold_out_outcomes) > 10_000:
                _sold_out_outcomes.clear()
            outcome = _sold_out_outcomes[campaign_id] = ClaimOutcome(
                ClaimCode.SOLD_OUT, CLAIM_STATUSES[ClaimCode.SOLD_OUT], campaign_id, None)
        return outcome
    return None


_sold_out_outcomes: dict[int, ClaimOutcome] = {}  # one per campaign: a tuple, the same for every answer


def _claim_outcome(campaign_id: int, result: ClaimOutcome | None) -> ClaimOutcome:
    """What the script's outcome means, for the thread and the event loop alike: the outcome itself, or raise.
    None: a campaign Redis did not know has ended; NO_STATE here is the script's after the campaign was loaded (it
    went again at once: CampaignStateLost)."""
    if result is None:
        return ClaimOutcome(ClaimCode.ENDED, CLAIM_STATUSES[ClaimCode.ENDED], campaign_id, None)
    if result.code == ClaimCode.NO_STATE:
        raise CampaignStateLost()
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
    return result


def _looked_up(campaign_id: int) -> bool:
    """_loaded_for_claim() in a lookup thread, which keeps no connection."""
    try:
        return _loaded_for_claim(campaign_id)
    finally:
        connection.close()


def _loaded_for_claim(campaign_id: int) -> bool:
    """Make a campaign Redis knows nothing of claimable: False when it has ended; loaded into Redis when it never
    was (published while Redis was away). Raise NotFound (no such campaign), CampaignStateLost (loaded once and
    gone: never guess the stock; wait for the rebuild)."""
    facts = _campaign_facts(campaign_id)
    if not facts.exists:
        raise NotFound("No such campaign.")
    assert facts.ends_at is not None
    if timezone.now() >= facts.ends_at:
        return False
    if facts.preheated:
        raise CampaignStateLost()
    campaign_preheat(campaign=Campaign.objects.get(pk=campaign_id))
    _facts.pop(campaign_id, None)
    return True


DRAIN_TASK = "orders.tasks.drain_campaign"


class DrainTrigger(InBackground):
    """Send drain tasks from a background thread, so a slow or absent broker never delays a claim.

    The claim script already debounces (at most one pending trigger per campaign); if a send fails, the
    beat sweep drains the ledger a few seconds later anyway.
    """

    thread_name = "drain-trigger"

    def request(self, campaign_id: int) -> None:
        self._submit([campaign_id])

    def _handle(self, work: list[Any]) -> None:
        for campaign_id in set(work):
            try:  # by name: a service never imports a task (docs/design.md, The layering)
                current_app.send_task(DRAIN_TASK, args=[campaign_id], retry=False, expires=60, ignore_result=True)
            except Exception:  # the broker is down: the beat sweep will drain
                log.warning("could not send a drain trigger for campaign %s", campaign_id, exc_info=True)


drain_trigger = DrainTrigger()


class ClaimVoider(InBackground):
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
    so a retry goes on to cancel it). With replica acks the claim is cancelled only once a run of void.lua was
    confirmed (VoidNotConfirmed: tried again): a failover that lost the void would leave the claim's answer
    telling a repeat of its key 'claimed' for a claim PostgreSQL holds cancelled. The confirmed run decides."""
    if not unknown.voided:
        try:
            ledger_id = redis_state.run_void(unknown.answer_key, unknown.token, unknown.unconfirmed_void,
                                             unknown.bucket)
        except VoidNotConfirmed as exc:
            unknown.unconfirmed_void = exc.ledger_id or unknown.unconfirmed_void
            raise
        if ledger_id is not None:
            unknown.claim_id = ledger.claim_id_of(unknown.campaign_id, ledger_id)
        unknown.voided = True
    if unknown.claim_id is None:
        return None
    claim_id = unknown.claim_id
    outcome = claim_cancel(user_id=unknown.user_id, claim_id=claim_id)
    log.warning("took back claim %s: its request had been answered 503 (%s)", claim_id, outcome.status,
                extra={"claim_id": claim_id, "campaign": unknown.campaign_id})
    return claim_id


claim_voider = ClaimVoider()
