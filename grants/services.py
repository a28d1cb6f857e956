"""Grant batches: start one (its ids in chunks), run its chunks through the claim script, resume it after a
crash or a stop. The command, the admin's upload (through a Celery task a chunk) and the API call these."""
from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from campaigns.models import Campaign, CampaignKind
from campaigns.redis_state import StoreUnavailable, key_digest
from campaigns.redis_state.recovery import redis_now_ms
from campaigns.services import campaign_preheat
from core.codes import Code
from core.errors import ApplicationError, NotFound, Unavailable
from orders.claim import drain_trigger
from orders.models import Claim

from .claims import ChunkCounts, GrantStopped, grant_chunk, grant_key
from .lines import ReadIds
from .models import UNFINISHED, GrantBatch, GrantChunk, GrantSource, GrantStatus

log = logging.getLogger(__name__)

# Ids a chunk: one pipeline of claim script calls and one transaction counting it. A chunk of 1,000 costs Redis
# ~10 ms and this process ~15 ms (bench/grants_bench.py); a resumed chunk repeats at most that much work.
CHUNK_SIZE = 1000
STALE_SECONDS = 60  # a running batch with no chunk counted for this long is taken as dead (grant_batch_start)


class GrantRefused(ApplicationError):
    """The campaign cannot be granted now: a business outcome of a well-formed request (each kind an HTTP 200 with
    its business code; the base itself answers nothing, so it keeps ApplicationError's status and slug)."""


class CampaignEnded(GrantRefused):
    http_status = 200
    code = int(Code.ENDED)
    status = "ended"


class CampaignPaused(GrantRefused):
    http_status = 200
    code = int(Code.PAUSED)
    status = "paused"


class BatchInFlight(ApplicationError):
    http_status = code = 409
    status = "idempotency_in_flight"
    retry_after = 5
    message = "A run of this batch is still going on; try again once it ends."


class BatchFileMismatch(ApplicationError):
    message = "An unfinished run of this batch was started with another file: resume it with that file."


def grantable_campaign(campaign_id: int) -> Campaign:
    """The campaign if it may be granted now (published, a grab or grant campaign, not ended, not paused; before
    its window opens too), loaded into Redis if it never was. Raise NotFound, GrantRefused, Unavailable."""
    campaign = (Campaign.objects.published().filter(pk=campaign_id)
                .exclude(kind=CampaignKind.CODES).first())
    if campaign is None:
        raise NotFound("No such campaign to grant (a published campaign whose coupons are claimed or granted).")
    if campaign.ends_at <= timezone.now():
        raise CampaignEnded(f"Campaign {campaign.pk} has ended: its coupons can no longer be granted.")
    if campaign.paused:
        raise CampaignPaused(f"Campaign {campaign.pk} is paused: resume it to grant its coupons.")
    if campaign.preheated_at is None:
        campaign_preheat(campaign=campaign)
    return campaign


def grant_batch_start(*, campaign: Campaign, name: str, source: GrantSource, read: ReadIds, actor: str = ""
                      ) -> GrantBatch:
    """Start a run of batch `name` on a grantable campaign: the batch and its chunks in one transaction (counted
    invalid and duplicate lines and the rejected lines kept). The chunks are run by grant_batch_run or the
    Celery task. Raise BatchInFlight (an unfinished run of that batch exists), Unavailable (Redis)."""
    try:
        started_ms = redis_now_ms()
    except StoreUnavailable as exc:
        raise Unavailable() from exc
    chunks = [read.user_ids[i:i + CHUNK_SIZE] for i in range(0, len(read.user_ids), CHUNK_SIZE)]
    for attempt in range(2):
        try:
            return _batch_created(campaign, name, source, read, actor, started_ms, chunks)
        except IntegrityError as exc:
            if "grant_batch_one_unfinished" not in str(exc):
                raise
            # A run that made no progress for STALE_SECONDS died with its process: stopped, so this one starts.
            stale = timezone.now() - timedelta(seconds=STALE_SECONDS)
            if attempt or not GrantBatch.objects.filter(
                    campaign=campaign, name=name, status=GrantStatus.RUNNING, updated_at__lt=stale).update(
                    status=GrantStatus.STOPPED, error=f"no progress for {STALE_SECONDS} s: its process died"):
                raise BatchInFlight() from exc
    raise AssertionError("unreachable")


def _batch_created(campaign: Campaign, name: str, source: GrantSource, read: ReadIds, actor: str, started_ms: int,
                   chunks: list[list[str]]) -> GrantBatch:
    with transaction.atomic():
        batch = GrantBatch.objects.create(
            campaign=campaign, name=name, source=source, actor=actor, started_ms=started_ms,
            file_digest=read.digest, lines=read.lines, chunks=len(chunks), invalid=read.invalid,
            duplicate=read.duplicate, rejected=read.rejected_csv() if read.rejected else "",
            status=GrantStatus.RUNNING if chunks else GrantStatus.DONE)
        GrantChunk.objects.bulk_create(
            [GrantChunk(batch=batch, index=n, user_ids="\n".join(ids)) for n, ids in enumerate(chunks)],
            batch_size=100)
    return batch


def unfinished_batch(*, campaign: Campaign, name: str) -> GrantBatch | None:
    return GrantBatch.objects.filter(campaign=campaign, name=name, status__in=UNFINISHED).first()


def grant_batch_resume(*, batch: GrantBatch) -> GrantBatch:
    """Mark a stopped run running again (its campaign grantable again: grantable_campaign)."""
    grantable_campaign(batch.campaign_id)
    GrantBatch.objects.filter(pk=batch.pk, status=GrantStatus.STOPPED).update(status=GrantStatus.RUNNING, error="")
    batch.refresh_from_db()
    return batch


def grant_chunk_run(*, batch: GrantBatch, chunk: GrantChunk) -> ChunkCounts | None:
    """Grant one chunk and count it once: its `done` and the batch's counts change in one transaction, only if
    it was not done (two runners of one chunk: the script replays the second's, which is not counted). A crash
    before that transaction leaves it to run again: its grants replay, counted granted (this run's ledger
    entries). Return its counts, None when it was done already. Raise GrantStopped (the batch is stopped),
    StoreUnavailable."""
    ids = chunk.user_ids.split("\n") if chunk.user_ids else []
    held: set[str] = set()
    if _rerun(batch):
        # An earlier run of the batch: its drained grants are known past their Idempotency-Key's 24 h in Redis.
        held = set(Claim.objects.filter(campaign_id=batch.campaign_id, key_digest=key_digest(grant_key(batch.name)),
                                        user_id__in=ids).values_list("user_id", flat=True))
    try:
        counts = grant_chunk(campaign_id=batch.campaign_id, user_ids=[i for i in ids if i not in held],
                             batch=batch.name, started_ms=batch.started_ms, buckets=batch.campaign.buckets)
    except GrantStopped as exc:
        GrantBatch.objects.filter(pk=batch.pk, status=GrantStatus.RUNNING).update(
            status=GrantStatus.STOPPED, error=str(exc), updated_at=timezone.now())
        raise
    counts.already_granted += len(held)
    if counts.trigger_drain:
        drain_trigger.request(batch.campaign_id)
    with transaction.atomic():
        if not GrantChunk.objects.filter(pk=chunk.pk, done=False).update(done=True):
            return None
        GrantBatch.objects.filter(pk=batch.pk).update(
            chunks_done=F("chunks_done") + 1, granted=F("granted") + counts.granted,
            limit_reached=F("limit_reached") + counts.limit_reached, sold_out=F("sold_out") + counts.sold_out,
            already_granted=F("already_granted") + counts.already_granted, updated_at=timezone.now())
        GrantBatch.objects.filter(pk=batch.pk, chunks_done=F("chunks"), status=GrantStatus.RUNNING).update(
            status=GrantStatus.DONE)
    return counts


def _rerun(batch: GrantBatch) -> bool:
    """Whether an earlier run of the batch exists (asked once a batch object)."""
    rerun = getattr(batch, "_rerun", None)
    if rerun is None:
        rerun = batch._rerun = GrantBatch.objects.filter(  # type: ignore[attr-defined]
            campaign_id=batch.campaign_id, name=batch.name, pk__lt=batch.pk).exists()
    return rerun


def next_chunk(batch: GrantBatch) -> GrantChunk | None:
    return GrantChunk.objects.filter(batch=batch, done=False).order_by("index").first()


def grant_batch_step(*, batch: GrantBatch) -> bool:
    """Grant the batch's next chunk not done yet; return whether another remains. Raise GrantStopped (the batch
    stopped: resume it once the campaign may be granted), Unavailable (Redis: the batch stopped; resume it)."""
    chunk = next_chunk(batch)
    if chunk is None:
        return False
    try:
        grant_chunk_run(batch=batch, chunk=chunk)
    except StoreUnavailable as exc:
        log.warning("grant batch %s stopped: Redis unavailable: %s", batch.pk, exc)
        GrantBatch.objects.filter(pk=batch.pk, status=GrantStatus.RUNNING).update(
            status=GrantStatus.STOPPED, error=f"Redis unavailable: {exc}", updated_at=timezone.now())
        raise Unavailable() from exc
    return chunk.index + 1 < batch.chunks or GrantChunk.objects.filter(batch=batch, done=False).exists()


def grant_batch_run(*, batch: GrantBatch, progress: Callable[[GrantBatch], Any] | None = None) -> GrantBatch:
    """Run a batch's chunks not done yet, in order, here (the command, the API); `progress` is called with the
    batch after each. Raise GrantStopped, Unavailable (grant_batch_step)."""
    more = True
    while more:
        more = grant_batch_step(batch=batch)
        if progress is not None:
            progress(batch)
    batch.refresh_from_db()
    return batch


def stale_batches() -> list[int]:
    """The running batches no chunk was counted of for STALE_SECONDS (their runner died): the sweep goes on."""
    stale = timezone.now() - timedelta(seconds=STALE_SECONDS)
    return list(GrantBatch.objects.filter(status=GrantStatus.RUNNING, updated_at__lt=stale)
                .values_list("pk", flat=True))
