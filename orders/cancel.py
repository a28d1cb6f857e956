"""Cancel a claim: give its unused coupon back (coupon revoked, stock and the shopper's count returned), once."""
from __future__ import annotations

from django.db import connection, transaction
from django.utils import timezone

from campaigns import redis_state
from campaigns.claim_settled import claims_changed
from campaigns.errors import CampaignStateLost
from campaigns.models import Campaign
from campaigns.redis_state import ClaimCode, StoreUnavailable
from core.errors import SLUGS, NotFound, Unavailable
from coupons.models import Coupon, CouponStatus
from coupons.outcomes import UseCode, UseOutcome, done, refused
from coupons.services import coupon_revoke
from storefronts.models import Storefront

from . import ledger
from .models import Claim, ClaimStatus
from .sold_out import forget_sold_out


def _restock(claim: Claim) -> None:
    """Return the claim's coupon to the stock (cancel.lua, once per claim id). Call inside atomic."""
    try:
        parsed = ledger.parse_claim_id(claim.claim_id)
        bucket = redis_state.split_ref(parsed[1])[1] if parsed else 0  # the bucket it was claimed on, its shopper's
        result = redis_state.run_restock(campaign_id=claim.campaign_id, claim_id=claim.claim_id, user_id=claim.user_id,
                                         bucket=bucket)
    except StoreUnavailable as exc:
        raise Unavailable() from exc
    if result == redis_state.RestockResult.NO_STATE:
        raise CampaignStateLost()
    forget_sold_out(claim.campaign_id)  # this process sells it again at once (others within 0.5 s)


def persist_cancelled_entry(entry: ledger.LedgerEntry) -> bool:
    """Persist a still-pending claim directly as cancelled (with its storefront, as the drain would: one no longer
    there is none); False if the drain persisted it first."""
    storefront = int(entry.storefront) if ledger.STOREFRONT_ID_RE.fullmatch(entry.storefront) else None
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {Claim._meta.db_table} (claim_id, campaign_id, user_id, status, key_digest, claimed_at, "
            f"storefront_id, created_at, updated_at) VALUES (%s, %s, %s, %s, %s, %s, "
            f"(SELECT id FROM {Storefront._meta.db_table} WHERE id = %s), now(), now()) "
            "ON CONFLICT (claim_id) DO NOTHING",
            [entry.claim_id, entry.campaign_id, entry.user_id, ClaimStatus.CANCELLED, entry.key_digest,
             entry.claimed_at, storefront],
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
    ended = UseOutcome(int(ClaimCode.ENDED), SLUGS[ClaimCode.ENDED], "The campaign has ended; stock can't be returned.")
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
                claims_changed([claim_id])  # GET /claims/{id} asks PostgreSQL from now on (before the commit)
                if persist_cancelled_entry(entry):  # still pending: the drain will never issue it
                    _restock(Claim.objects.get(claim_id=claim_id))
                    return done("cancelled", claim_id=claim_id)
            # Persisted meanwhile by the drain (it commits before it acknowledges the entry), or unknown.
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
