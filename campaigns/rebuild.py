"""Rebuild a campaign's lost Redis state from PostgreSQL, one rebuild or repair of a campaign at a time.

The claims a rebuild starts from are orders' (imports run orders -> campaigns, never back), so this module reads
none of their tables: orders.rebuild drains the ledger into PostgreSQL, reads the claims and hands them in as
ClaimRecords; this module writes the Redis side from them (per-user counts, the claims given back, the answers of
claims made with an Idempotency-Key, then the stock and the ledger's last id) and records the REBUILT event.
The repair lock is here with what it guards; reconciliation (orders) takes the same lock to repair.
"""
from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from django.conf import settings
from django.utils import timezone

from core.errors import Unavailable
from core.locks import AdvisoryLock, session_lock

from . import redis_state
from .models import Campaign, CampaignEvent, CampaignEventType
from .services import campaign_state_load

log = logging.getLogger(__name__)


@contextlib.contextmanager
def campaign_repair_lock(campaign_id: int) -> Iterator[bool]:
    """Hold the campaign's repair lock (a session advisory lock, re-entrant) if free; yield whether taken."""
    with session_lock(AdvisoryLock.CAMPAIGN_REPAIR, campaign_id) as taken:
        yield taken


class RepairBusy(Unavailable):
    message = "Another rebuild or repair of this campaign is running; retry shortly."


@dataclass(frozen=True)
class ClaimRecords:
    """What PostgreSQL holds of a campaign's claims, all of the ledger drained into it: what a rebuild needs."""

    per_user: dict[str, int]  # claims not cancelled, by shopper
    cancelled: list[str]  # ids of the claims cancelled (their stock given back)
    last_ledger_id: str  # the ledger id of the latest claim, "0-0" when there is none
    # (shopper, key digest, ledger id) of the claims made with an Idempotency-Key within the answers' retention
    keyed: list[tuple[str, str, str]]
    # A codes campaign's: the members of its shared code's uses holding a unit (per_user: the uses by shopper)
    takes: list[str] = field(default_factory=list)


def campaign_state_rebuild(*, campaign: Campaign, claims: ClaimRecords, buckets: list[ClaimRecords] | None = None
                           ) -> int:
    """Load a campaign's lost Redis state again from its claims and return the stock it now has.

    Call holding campaign_repair_lock, once campaign_preheat raised CampaignStateLost (no stock in Redis, so no
    claim or cancel runs meanwhile), with the claims read after the ledger was drained. Of a campaign split into
    buckets, `buckets` holds each bucket's claims, and only the buckets Redis lost are rebuilt (_rebuild_buckets).
    Raise StoreUnavailable.
    """
    redis_state.remember_group(campaign.pk, campaign.group or None, campaign.group_limit or 0)  # its keys' names
    if buckets is not None and campaign.buckets > 1:
        return _rebuild_buckets(campaign, buckets)
    redis_state.replace_claim_records(campaign.pk, claims.per_user,
                                      claims.takes if campaign.is_codes else claims.cancelled, codes=campaign.is_codes)
    answers = _restore_answers(campaign, claims.keyed)  # before the stock exists: no claim is decided until then
    remaining = campaign.total_stock - sum(claims.per_user.values())
    _, stock = campaign_state_load(campaign, initial_stock=max(remaining, 0), last_ledger_id=claims.last_ledger_id)
    Campaign.objects.filter(pk=campaign.pk, preheated_at__isnull=True).update(preheated_at=timezone.now())
    figures = {"remaining": stock, "claims": sum(claims.per_user.values()), "given_back": len(claims.cancelled),
               "answers_restored": answers}
    CampaignEvent.objects.create(campaign=campaign, type=CampaignEventType.REBUILT, actor="rebuild", data=figures)
    log.warning("rebuilt campaign %s in Redis from PostgreSQL: %s left", campaign.pk, stock)
    return stock if stock is not None else 0


def _rebuild_buckets(campaign: Campaign, records: list[ClaimRecords]) -> int:
    """Rebuild the buckets Redis lost (no stock), the others selling on meanwhile: the lost ones share what the
    others' shares and the stock in transit between buckets leave of the total (docs/design.md, "Buckets"), each
    its own shoppers' claims plus an equal part of the rest. A move in transit to a lost bucket is received once
    it is rebuilt (redis_state.finish_moves): it was left out of the lost buckets' share."""
    shares, in_transit = redis_state.bucket_shares(campaign.pk, campaign.buckets)
    lost = [bucket for bucket, share in shares.items() if share is None]
    held = sum(sum(records[bucket].per_user.values()) for bucket in lost)
    left = campaign.total_stock - sum(share or 0 for share in shares.values()) - in_transit - held
    if left < 0:
        log.error("rebuild of campaign %s: its claims exceed its stock by %s; its lost buckets get none", campaign.pk,
                  -left)
    answers = 0
    for bucket, part in zip(lost, redis_state.split_stock(max(left, 0), len(lost)), strict=True):
        claims = records[bucket]
        redis_state.replace_claim_records(campaign.pk, claims.per_user, claims.cancelled, bucket=bucket)
        answers += _restore_answers(campaign, claims.keyed, bucket=bucket)
        campaign_state_load(campaign, initial_stock=part, share=part + sum(claims.per_user.values()),
                            last_ledger_id=claims.last_ledger_id, bucket=bucket)
    remaining = redis_state.remaining_many([campaign.pk]).get(campaign.pk)
    Campaign.objects.filter(pk=campaign.pk, preheated_at__isnull=True).update(preheated_at=timezone.now())
    figures = {"remaining": remaining, "claims": sum(sum(r.per_user.values()) for r in records),
               "given_back": sum(len(r.cancelled) for r in records), "answers_restored": answers,
               "buckets_rebuilt": lost}
    CampaignEvent.objects.create(campaign=campaign, type=CampaignEventType.REBUILT, actor="rebuild", data=figures)
    log.warning("rebuilt buckets %s of campaign %s in Redis from PostgreSQL: %s left", lost, campaign.pk, remaining)
    return remaining or 0


def _restore_answers(campaign: Campaign, keyed: list[tuple[str, str, str]], bucket: int = 0) -> int:
    """Store again the 'claimed' answer of every claim made with an Idempotency-Key in the last 24 hours."""
    keep_ms = settings.COUPONS_IDEMPOTENCY_TTL_SECONDS * 1000
    now_ms = int(time.time() * 1000)
    answers = []
    for user_id, digest, ledger_id in keyed:
        left_ms = keep_ms - (now_ms - int(ledger_id.partition("-")[0]))
        if left_ms > 0:
            answers.append((user_id, digest, ledger_id, left_ms))
    return redis_state.restore_answers(campaign.pk, answers, bucket=bucket)
