"""Settle claims in Redis once PostgreSQL holds them: acknowledge their ledger entries and write their settled
records (campaigns/claim_settled.py) in one step (campaigns/lua/claims_settle.lua), then PUBLISH their ids so
that long polls wake.

Called right after the drain's commit (orders/drain.py) with the batch just persisted: the claims its statement
created are known (their codes and times are the drain's own, the statement's RETURNING names them); the others (a
redelivery after a settle that failed: persisting again is a no-op, the records are still written; another
drain's) are read back in one statement. A claim issued with its coupon unchanged gets its coupon's code and times
(the answer is rendered from them and the campaign's coupon template, written in the same MULTI: claim_status.
issued_body); one cancelled, or whose coupon changed already, "?" (PostgreSQL answers it); an entry without a
claim (parked: it can never be persisted) no record, as before (the entry itself says pending).
"""
from __future__ import annotations

import logging

import redis

from campaigns.claim_settled import ASK_POSTGRES, CHANNEL, answer_record, settle_records, times_of
from campaigns.models import Campaign
from campaigns.redis_state import DRAIN_GROUP, StoreUnavailable, redis_client
from coupons.models import Coupon, CouponStatus

from . import ledger
from .claim_status import coupon_template
from .models import Claim, ClaimStatus

log = logging.getLogger(__name__)


# A new claim's coupon as the drain's statement created it: (code, its times as the record writes them:
# claim_settled.times_of), by claim id.
NewCoupons = dict[str, tuple[str, str]]


def settled_records(campaign: Campaign, entries: list[ledger.LedgerEntry], created: NewCoupons | None = None
                    ) -> dict[str, bytes]:
    """Each entry's settled record by its ledger entry id (entries without a claim left out): the claims the
    drain's statement just created from `created`, the others from PostgreSQL."""
    created = created or {}
    records: dict[str, bytes] = {}
    others: list[ledger.LedgerEntry] = []
    for entry in entries:
        new = created.get(entry.claim_id)
        if new is None:
            others.append(entry)
        else:
            records[entry.entry_id] = answer_record(entry.user_id, *new)
    if not others:
        return records
    claim_ids = [e.claim_id for e in others]
    claims = dict(Claim.objects.filter(claim_id__in=claim_ids).values_list("claim_id", "status"))
    coupons = {c.claim_id: c for c in Coupon.objects.filter(claim_id__in=claim_ids)}
    for entry in others:
        status = claims.get(entry.claim_id)
        if status is None:
            continue  # parked: no claim, no record
        coupon = coupons.get(entry.claim_id)
        if status != ClaimStatus.ISSUED or coupon is None or coupon.version != 1 \
                or coupon.status != CouponStatus.ACTIVE:
            records[entry.entry_id] = ASK_POSTGRES.encode()
            continue
        records[entry.entry_id] = answer_record(entry.user_id, coupon.code,
                                                times_of(coupon.valid_from, coupon.expires_at))
    return records


def settle(campaign: Campaign, entries: list[ledger.LedgerEntry], created: NewCoupons | None = None) -> None:
    """Acknowledge a batch persisted in PostgreSQL (entries of one bucket), write its settled records and renew
    the bucket's coupon template in one step (claims_settle.lua), then PUBLISH the claims' ids. `created`: the
    coupons the batch's statement created (persist_entries). A failure before that step leaves the entries
    unacknowledged (redelivered, settled then); a lost PUBLISH only lets its long polls run to their end. Raise
    StoreUnavailable."""
    if not entries:
        return
    records = settled_records(campaign, entries, created)
    try:
        settle_records(campaign.pk, entries[0].bucket, DRAIN_GROUP, coupon_template(campaign),
                       [(e.entry_id, e.ref, records.get(e.entry_id)) for e in entries])
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
