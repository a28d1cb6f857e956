"""`remaining`, live on every public read (docs/api.md, "The reads around a sale"). The worker keeps the rest of a
campaign read's answer for half a second (core/public_cache.py); each answer asks Redis for the stock of the
live campaigns it shows, in one pipelined round trip, so the read a page makes right after its claim shows that
claim. Only a live campaign's stock moves with the shoppers' claims: an upcoming, paused or ended one's is the
kept answer's (an upcoming one is not in Redis yet, and asking for it would cost a lookup every time), as is a
live one's that Redis did not hold when the answer was kept."""
from __future__ import annotations

import re
from collections.abc import Callable

import orjson

from . import redis_state

# A JSON string holds no unescaped quote, so each match is a campaign's field, in the answer's order.
_REMAINING = re.compile(rb'"remaining":(-?\d+|null)')


def live_remaining(body: bytes) -> Callable[[], bytes] | None:
    """What makes a campaign read's answer (GET /campaigns: `results`; GET /campaigns/{id}: the campaign) current:
    the answer with each live campaign's `remaining` as Redis holds it now, or as the answer had it where Redis does
    not know it (unreachable: then the kept answer's value, at most half a second old). None: nothing live."""
    data = orjson.loads(body)
    campaigns = data.get("results", [data]) if isinstance(data, dict) else []
    fields = list(_REMAINING.finditer(body))
    if not campaigns or len(fields) != len(campaigns):
        return None
    live = {int(campaign["id"]): field for field, campaign in zip(fields, campaigns, strict=True)
            if campaign["state"] == "live"}  # campaign id -> its field, in the answer's order
    codes = {int(campaign["id"]) for campaign in campaigns if campaign["kind"] == "codes"}
    try:  # those Redis holds now: one Redis has lost would cost a lookup each time (rebuild_redis restores it)
        held = redis_state.remaining_many(list(live), codes)
    except redis_state.StoreUnavailable:
        held = {}
    live = {campaign_id: field for campaign_id, field in live.items() if held.get(campaign_id) is not None}
    if not live:
        return None

    def current() -> bytes:
        try:
            now = redis_state.remaining_many(list(live), codes)
        except redis_state.StoreUnavailable:
            return body
        parts, at = [], 0
        for campaign_id, field in live.items():
            value = now.get(campaign_id)
            if value is not None:
                parts += [body[at:field.start(1)], b"%d" % value]
                at = field.end(1)
        parts.append(body[at:])
        return b"".join(parts)

    return current
