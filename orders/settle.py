"""Settle claims in Redis once PostgreSQL holds them: acknowledge their ledger entries and write their settled
records (campaigns/claim_settled.py) in one MULTI, then PUBLISH their ids so that long polls wake.

Called right after the drain's commit (orders/drain.py) with the batch just persisted, or persisted before (a
redelivery after a settle that failed: persisting again is a no-op, the records are still written), so it reads
the batch's claims and coupons back in one statement. A claim issued with its coupon unchanged gets the answer
GET /claims/{id} gives (claim_status.claim_body: the same bytes as the view's); one cancelled, or whose coupon
changed already, "?" (PostgreSQL answers it); an entry without a claim (parked: it can never be persisted) no
record, as before (the entry itself says pending).
"""
from __future__ import annotations

import logging

import redis

from campaigns.claim_settled import ASK_POSTGRES, CHANNEL, answer_record, keep_ms, record_keys
from campaigns.models import Campaign
from campaigns.redis_state import DRAIN_GROUP, StoreUnavailable, campaign_keys, redis_client, to_ms
from coupons.models import Coupon, CouponStatus

from . import ledger
from .claim_status import claim_body
from .models import Claim, ClaimStatus

log = logging.getLogger(__name__)


def settled_records(campaign: Campaign, entries: list[ledger.LedgerEntry]) -> dict[str, bytes]:
    """Each entry's settled record by its ledger entry id (entries without a claim left out), from PostgreSQL."""
    claim_ids = [e.claim_id for e in entries]
    claims = dict(Claim.objects.filter(claim_id__in=claim_ids).values_list("claim_id", "status"))
    coupons = {c.claim_id: c for c in Coupon.objects.filter(claim_id__in=claim_ids)}
    records: dict[str, bytes] = {}
    for entry in entries:
        status = claims.get(entry.claim_id)
        if status is None:
            continue  # parked: no claim, no record
        coupon = coupons.get(entry.claim_id)
        if status != ClaimStatus.ISSUED or coupon is None or coupon.version != 1 \
                or coupon.status != CouponStatus.ACTIVE:
            records[entry.entry_id] = ASK_POSTGRES.encode()
            continue
        coupon.campaign = campaign
        body = claim_body(claim_id=entry.claim_id, campaign_id=campaign.pk, status=status,
                          claimed_at=entry.claimed_at, coupon=coupon)
        records[entry.entry_id] = answer_record(entry.user_id, to_ms(coupon.expires_at), body)
    return records


def settle(campaign: Campaign, entries: list[ledger.LedgerEntry]) -> None:
    """Acknowledge a batch persisted in PostgreSQL (entries of one bucket) and write its settled records in one
    MULTI, then PUBLISH the claims' ids. A failure before the MULTI leaves the entries unacknowledged (redelivered,
    settled then); a lost PUBLISH only lets its long polls run to their end. Raise StoreUnavailable."""
    if not entries:
        return
    records = settled_records(campaign, entries)
    bucket = entries[0].bucket
    keep = keep_ms()
    try:
        pipe = redis_client().pipeline(transaction=True)
        pipe.xack(campaign_keys(campaign.pk, bucket).ledger, DRAIN_GROUP, *[e.entry_id for e in entries])
        for entry in entries:
            record = records.get(entry.entry_id)
            if record is None:
                continue
            key = record_keys(campaign.pk, entry.ref)[0]
            # An answer never replaces a "?": a coupon changed since the read above marked it first.
            pipe.set(key, record, px=keep, nx=record != ASK_POSTGRES.encode())
        pipe.execute()
    except redis.RedisError as exc:
        raise StoreUnavailable(str(exc)) from exc
    publish([e.claim_id for e in entries if e.entry_id in records])


def publish(claim_ids: list[str]) -> None:
    """Tell the long polls of every process that these claims settled (best effort: they time out otherwise)."""
    if not claim_ids:
        return
    try:
        redis_client().publish(CHANNEL, " ".join(claim_ids))
    except redis.RedisError as exc:
        log.warning("claims settled, not published (their long polls run to their end): %r", exc)
