"""A claim's settled record: what Redis knows of a claim once it left the ledger's pending state, beside the
ledger (same hash tag, so it is written in the ledger's MULTI on a Redis Cluster too).

GET /claims/{id} is answered from Redis while Redis knows the answer exactly (orders/claim_status.py): an entry in
the ledger without a record is pending; a record holds the answer the drain built when it issued the coupon, or
"?" (ask PostgreSQL) when PostgreSQL alone knows it: a cancel, a coupon changed since it was issued (the record's
answer showed it as issued). Whoever settles a claim writes its record in the step that acknowledges its entry
(orders/settle.py); whoever changes a claim's coupon first marks it "?" before its change commits
(claims_changed), so a reader between the two reads PostgreSQL's truth, never a record older than it.

A record lives COUPONS_LEDGER_RETENTION_SECONDS (keep_ms()): older claims are PostgreSQL's to answer.
"""
from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import redis
from django.conf import settings

from .redis_state import StoreUnavailable, campaign_keys, redis_client, split_ref

# <campaign>-<ms>-<seq>, and beyond bucket 0 -<bucket> (1-63: campaigns.models.MAX_BUCKETS). Each number in its
# one decimal form, never zero-padded: Redis reads 01-0 as the entry 1-0, so a padded alias would find a claim
# it does not name (a pending answer for an issued claim, a cancel of a claim its id does not name).
CLAIM_ID_RE = re.compile(r"([1-9][0-9]{0,17})-(0|[1-9][0-9]{0,14})-(0|[1-9][0-9]{0,9})(?:-([1-9]|[1-5][0-9]|6[0-3]))?")

ASK_POSTGRES = "?"
CHANNEL = "cpn:claims-settled"  # PUBLISHed: the claim ids just settled, space-separated (the long polls wake)
STATUS_SCRIPT = (Path(__file__).resolve().parent / "lua" / "claim_status.lua").read_text()


def keep_ms() -> int:
    """How long a record is kept, and so how old a claim may be for Redis to answer it (at least a minute)."""
    return max(60, settings.COUPONS_LEDGER_RETENTION_SECONDS) * 1000


def parse_claim_id(text: str) -> tuple[int, str] | None:
    """Return (campaign id, ledger_ref: the entry id and its bucket) of a claim id, or None when `text` is not
    one (a typed code's use, a unique code's coupon)."""
    match = CLAIM_ID_RE.fullmatch(text)
    if match is None:
        return None
    return int(match.group(1)), text[len(match.group(1)) + 1:]


def record_keys(campaign_id: int, ref: str) -> tuple[str, str, str]:
    """(settled key, ledger key, entry id) of a claim's ledger_ref: claim_status.lua's keys and argument."""
    entry_id, bucket = split_ref(ref)
    keys = campaign_keys(campaign_id, bucket)
    return f"{keys.tag}settled:{entry_id}", keys.ledger, entry_id


def answer_record(user_id: str, stale_after_ms: int, body: bytes) -> bytes:
    """A record that answers: the claim's shopper, the ms from which the answer may be stale by time alone (a
    coupon's expiry: the sweep changes it without a word here; 0 never) and the answer's body."""
    return b"%s\n%d\n%s" % (user_id.encode(), stale_after_ms, body)


def claims_changed(claim_ids: Iterable[str]) -> None:
    """Mark claims' records "ask PostgreSQL": call before a change of their coupons commits (inside its
    transaction), so that no reader is answered the record's older coupon once the change is visible. Ids that
    are no claim's are left out. Raise StoreUnavailable (the change must not commit: the record would lie)."""
    keys = [record_keys(*parsed)[0] for text in claim_ids if (parsed := parse_claim_id(text)) is not None]
    if not keys:
        return
    try:
        pipe = redis_client().pipeline(transaction=False)
        for key in keys:
            pipe.set(key, ASK_POSTGRES, px=keep_ms())
        pipe.execute()
    except redis.RedisError as exc:
        raise StoreUnavailable(str(exc)) from exc


_scripts: dict[int, Any] = {}


def _status_script() -> Any:
    """claim_status.lua registered with the process's client (EVALSHA, the text again after a SCRIPT FLUSH)."""
    client = redis_client()
    script = _scripts.get(id(client))
    if script is None:
        _scripts.clear()
        script = _scripts[id(client)] = client.register_script(STATUS_SCRIPT)
    return script


def read_record(campaign_id: int, ref: str) -> tuple[bytes | None, str | None]:
    """(the claim's record or None, the shopper of its unsettled ledger entry or None), in one step. Raise
    StoreUnavailable."""
    settled, ledger, entry_id = record_keys(campaign_id, ref)
    try:
        record, user = _status_script()(keys=[settled, ledger], args=[entry_id])
    except redis.RedisError as exc:
        raise StoreUnavailable(str(exc)) from exc
    return (record or None), (user.decode() if isinstance(user, bytes) else user) or None
