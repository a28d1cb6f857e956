"""This process's memory of the campaigns it saw sold out.

After a campaign sells out, claims without an Idempotency-Key are answered from this process's memory for a
moment (orders.claim.known_sold_out), without a Redis round trip (a storm goes on long after the last coupon).
Short-lived, so stock given back (a cancel, a restock) is sold again within the second; what gives stock back in
this process forgets the campaign at once. A claim with a key always asks Redis: its first answer may have been
'claimed', and a repeat must replay it.

A module of its own so that the claim, which remembers, and the cancel and the rebuild, which forget, share it
without importing each other. The claim reads and writes `sold_out_until` directly (it is on every request).
"""
from __future__ import annotations

from campaigns.redis_state import forget_empty_buckets

SOLD_OUT_FOR_SECONDS = 0.5
sold_out_until: dict[int, float] = {}  # campaign id -> time.monotonic() until which it is known sold out


def forget_sold_out(campaign_id: int) -> None:
    """Forget that the campaign sold out: stock came back, so this process sells it again at once (and draws on
    every bucket of a campaign split into buckets)."""
    sold_out_until.pop(campaign_id, None)
    forget_empty_buckets(campaign_id)
