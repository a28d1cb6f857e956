"""A claim's settled record: what Redis knows of a claim once it left the ledger's pending state, beside the
ledger (same hash tag, so it is written in the ledger's MULTI on a Redis Cluster too).

GET /claims/{id} is answered from Redis while Redis knows the answer exactly (orders/claim_status.py): an entry in
the ledger without a record is pending; a record holds what varies per claim of the coupon the drain issued (its
shopper, code and times: ~70 bytes, not the ~0.5 KB answer), or "?" (ask PostgreSQL) when PostgreSQL alone knows
it: a cancel, a coupon changed since it was issued (the record's answer showed it as issued). The answer is
rendered at read time from the record and the bucket's coupon template (what every coupon of the campaign shows
alike: its rule, the issued state), which the drain writes in the same MULTI as the records (orders/settle.py).
The template cannot be stale: a published campaign's rule fields are locked (campaigns/admin.py, LIVE_LOCKED),
and no claim exists before it is published. Whoever settles a claim writes its record in the step that
acknowledges its entry (orders/settle.py); whoever changes a claim's coupon first marks it "?" before its change
commits (claims_changed), so a reader between the two reads PostgreSQL's truth, never a record older than it.

A record lives COUPONS_LEDGER_RETENTION_SECONDS (keep_ms()): older claims are PostgreSQL's to answer.
"""
from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, NamedTuple

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
SETTLE_SCRIPT = (Path(__file__).resolve().parent / "lua" / "claims_settle.lua").read_text()


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


def record_keys(campaign_id: int, ref: str, *, learn: bool = True) -> tuple[str, str, str, str]:
    """(settled key, ledger key, coupon template key, entry id) of a claim's ledger_ref: claim_status.lua's keys
    and argument. `learn`: False on an event loop (keys.campaign_keys: a grouped campaign this process never met is
    read where it is not, found nowhere, and handed on to Django's view, which learns it)."""
    entry_id, bucket = split_ref(ref)
    keys = campaign_keys(campaign_id, bucket, learn=learn)
    return f"{keys.tag}settled:{entry_id}", keys.ledger, f"{keys.tag}settled-coupon", entry_id


def template_key(campaign_id: int, bucket: int) -> str:
    """The bucket's coupon template: the JSON of what an issued coupon of the campaign shows alike."""
    return f"{campaign_keys(campaign_id, bucket).tag}settled-coupon"


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class Issued(NamedTuple):
    """What an answering record holds: the claim's shopper, its coupon's code and times (times_of's text)."""

    user_id: str
    code: str
    times: str

    @property
    def valid_from(self) -> datetime:
        return _EPOCH + timedelta(microseconds=int(self.times.partition("\n")[0]))

    @property
    def expires_at(self) -> datetime:
        return _EPOCH + timedelta(microseconds=int(self.times.partition("\n")[2]))

    @property
    def stale_after_ms(self) -> int:
        """The ms from which the answer may be stale by time alone (the coupon's expiry: the sweep changes it
        without a word here)."""
        return int(self.times.partition("\n")[2]) // 1000


def _us(moment: datetime) -> int:
    delta = moment - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def answer_record(user_id: str, code: str, times: str) -> bytes:
    """A record that answers: shopper, code, valid from and expires at (times_of: us since the epoch, exact as
    PostgreSQL keeps them), a line each."""
    return f"{user_id}\n{code}\n{times}".encode()


def times_of(valid_from: datetime, expires_at: datetime) -> str:
    """A record's last two lines (claims of one millisecond share them: the drain computes them once)."""
    return f"{_us(valid_from)}\n{_us(expires_at)}"


def parse_record(record: bytes) -> Issued:
    """answer_record()'s fields back."""
    user_id, code, times = record.decode().split("\n", 2)
    return Issued(user_id, code, times)


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


_scripts: dict[tuple[int, str], Any] = {}


def _script(text: str) -> Any:
    """A script registered with the process's client (EVALSHA, the text again after a SCRIPT FLUSH)."""
    client = redis_client()
    script = _scripts.get((id(client), text))
    if script is None:
        if any(key[0] != id(client) for key in _scripts):
            _scripts.clear()
        script = _scripts[id(client), text] = client.register_script(text)
    return script


def settle_records(campaign_id: int, bucket: int, group: str, template: bytes,
                   records: list[tuple[str, str, bytes | None]]) -> None:
    """Acknowledge entries of one bucket's ledger, write their records and renew the bucket's coupon template, in
    one step (claims_settle.lua). records: (entry id, ledger_ref, record or None: none). Raise redis.RedisError."""
    keys = campaign_keys(campaign_id, bucket)
    written = [(f"{keys.tag}settled:{entry_id}", record) for entry_id, _, record in records if record is not None]
    _script(SETTLE_SCRIPT)(
        keys=[keys.ledger, template_key(campaign_id, bucket), *[key for key, _ in written]],
        args=[group, keep_ms(), template, len(records), *[entry_id for entry_id, _, _ in records],
              *[record for _, record in written]])


class Read(NamedTuple):
    """What claim_status.lua read: the claim's record, the shopper of its unsettled ledger entry, the bucket's
    coupon template (read only when the record answers); each None when absent."""

    record: bytes | None
    entry_user: str | None
    template: bytes | None


def read_of(reply: list[Any]) -> Read:
    record, user, *template = reply
    return Read(record or None, (user.decode() if isinstance(user, bytes) else user) or None,
                (template[0] or None) if template else None)


def read_record(campaign_id: int, ref: str) -> Read:
    """The claim's record, the shopper of its unsettled entry and the template, in one step. Raise
    StoreUnavailable."""
    settled, ledger, template, entry_id = record_keys(campaign_id, ref)
    try:
        return read_of(_script(STATUS_SCRIPT)(keys=[settled, ledger, template], args=[entry_id]))
    except redis.RedisError as exc:
        raise StoreUnavailable(str(exc)) from exc
