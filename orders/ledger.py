"""The campaign's claim ledger in Redis, seen from the drain: read, reclaim, acknowledge, snapshot, trim.

A ledger entry is a stream entry {u: user id}; its id "<ms>-<seq>" is the claim's time and, prefixed with
the campaign id, the claim id. A campaign split into buckets has a ledger per bucket: the claim id of bucket
b >= 1 ends in "-<b>" (redis_state.ledger_ref), and every function here takes the bucket.
The drain acknowledges entries once they are in PostgreSQL; they stay in the
stream for COUPONS_LEDGER_RETENTION_SECONDS more (so reconciliation can see a persisted claim PostgreSQL
lost since), then the housekeeping trims them (never an entry not yet delivered or still pending).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import redis

from campaigns.redis_state import (
    DRAIN_GROUP,
    StoreUnavailable,
    bucket_counts,
    campaign_keys,
    claim_id_of,  # noqa: F401  (orders.ledger.claim_id_of: a claim's id is made in campaigns.redis_state.keys)
    ledger_ref,
    redis_client,
    replicated,
    split_ref,
)
from core.auth import USER_ID_RE

# <campaign>-<ms>-<seq>, and beyond bucket 0 -<bucket> (1-63: campaigns.models.MAX_BUCKETS). Each number in its
# one decimal form, never zero-padded: Redis reads 01-0 as the entry 1-0, so a padded alias would find a claim
# it does not name (a pending answer for an issued claim, a cancel of a claim its id does not name).
CLAIM_ID_RE = re.compile(r"([1-9][0-9]{0,17})-(0|[1-9][0-9]{0,14})-(0|[1-9][0-9]{0,9})(?:-([1-9]|[1-5][0-9]|6[0-3]))?")


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    campaign_id: int
    entry_id: str
    user_id: str
    key_digest: str = ""  # of the shopper's Idempotency-Key, when the claim came with one
    raw: dict[str, str] = field(default_factory=dict, compare=False, repr=False)  # every field, as Redis held it
    bucket: int = 0
    storefront: str = ""  # the id of the storefront whose key signed the shopper's token (field s), "" for none

    @property
    def storefront_id(self) -> int | None:
        return int(self.storefront) if self.storefront else None

    @property
    def ref(self) -> str:
        """The entry across the campaign's buckets (redis_state.ledger_ref)."""
        return ledger_ref(self.entry_id, self.bucket)

    @property
    def claim_id(self) -> str:
        return f"{self.campaign_id}-{self.ref}"

    @property
    def claimed_at(self) -> datetime:
        return datetime.fromtimestamp(int(self.entry_id.split("-")[0]) / 1000, tz=UTC)


def parse_claim_id(text: str) -> tuple[int, str] | None:
    """Return (campaign id, ledger_ref: the entry id and its bucket) of a claim id, or None when `text` is not
    one."""
    match = CLAIM_ID_RE.fullmatch(text)
    if match is None:
        return None
    return int(match.group(1)), text[len(match.group(1)) + 1:]


def _decode(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _text(value: bytes | str) -> str:
    """A field's value as text: bytes that are not UTF-8 escaped (such an entry then fails entry_problem)."""
    return value.decode(errors="backslashreplace") if isinstance(value, bytes) else value


def _entries(campaign_id: int, raw: Any, bucket: int = 0) -> list[LedgerEntry]:
    entries = []
    for entry_id, fields in raw:
        if fields is None:  # deleted while pending
            continue
        text = {_text(k): _text(v) for k, v in fields.items()}
        entries.append(LedgerEntry(campaign_id, _decode(entry_id), text.get("u", ""), text.get("k", ""), text,
                                   bucket, text.get("s", "")))
    return entries


KEY_DIGEST_RE = re.compile(r"[0-9a-f]{32}")
STOREFRONT_ID_RE = re.compile(r"[1-9][0-9]{0,17}")  # a storefront's id (bigint), as claim.lua writes it
_LAST_MS = int(datetime(9000, 1, 1, tzinfo=UTC).timestamp() * 1000)  # room for any coupon validity after it


def entry_problem(entry: LedgerEntry) -> str | None:
    """Why an entry can never be a claim (the claim script writes none such; something else put it there), or
    None: a user id the API would accept, a key digest or none, a claim time a coupon's validity can follow."""
    if USER_ID_RE.fullmatch(entry.user_id) is None:
        return f"not a user id: {entry.user_id[:80]!r}" + ("..." if len(entry.user_id) > 80 else "")
    if entry.key_digest and KEY_DIGEST_RE.fullmatch(entry.key_digest) is None:
        return f"not a key digest: {entry.key_digest[:80]!r}"
    if entry.storefront and STOREFRONT_ID_RE.fullmatch(entry.storefront) is None:
        return f"not a storefront id: {entry.storefront[:80]!r}"
    if int(entry.entry_id.partition("-")[0]) >= _LAST_MS:
        return f"claim time out of range: {entry.entry_id}"
    return None


def read_new(campaign_id: int, *, consumer: str, count: int, bucket: int = 0) -> list[LedgerEntry]:
    """Read up to `count` entries never delivered to any consumer of the drain group."""
    keys = campaign_keys(campaign_id, bucket)
    try:
        pipe = redis_client().pipeline(transaction=False)
        pipe.xreadgroup(DRAIN_GROUP, consumer, {keys.ledger: ">"}, count=count)
        reply: Any = replicated(pipe)[0]  # with replicas: only entries they hold (a failover loses none)
    except redis.ResponseError as exc:
        if "NOGROUP" in str(exc):
            return []  # no stream: the campaign was never loaded, or its keys expired
        raise StoreUnavailable(str(exc)) from exc
    except redis.RedisError as exc:
        raise StoreUnavailable(str(exc)) from exc
    if not reply:
        return []
    return _entries(campaign_id, reply[0][1], bucket)


def reclaim_stale(campaign_id: int, *, consumer: str, min_idle_ms: int, count: int, bucket: int = 0
                  ) -> list[LedgerEntry]:
    """Take over up to `count` entries another consumer read but has not acknowledged for `min_idle_ms`."""
    keys = campaign_keys(campaign_id, bucket)
    try:
        pipe = redis_client().pipeline(transaction=False)
        pipe.xautoclaim(keys.ledger, DRAIN_GROUP, consumer, min_idle_ms, "0-0", count=count)
        reply = replicated(pipe)[0]
    except redis.ResponseError as exc:
        if "NOGROUP" in str(exc) or "no such key" in str(exc).lower():
            return []
        raise StoreUnavailable(str(exc)) from exc
    except redis.RedisError as exc:
        raise StoreUnavailable(str(exc)) from exc
    return _entries(campaign_id, reply[1], bucket)


def acknowledge(campaign_id: int, entry_ids: list[str], bucket: int = 0) -> None:
    """Acknowledge entries persisted in PostgreSQL (they leave the group's pending list)."""
    if not entry_ids:
        return
    try:
        redis_client().xack(campaign_keys(campaign_id, bucket).ledger, DRAIN_GROUP, *entry_ids)
    except redis.RedisError as exc:
        raise StoreUnavailable(str(exc)) from exc


def _id_tuple(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def trim(campaign_id: int, *, retention_ms: int, now_ms: int) -> int:
    """trim_bucket() of every bucket of the campaign."""
    return sum(trim_bucket(campaign_id, retention_ms=retention_ms, now_ms=now_ms, bucket=bucket)
               for bucket in range(bucket_counts([campaign_id])[campaign_id]))


def _drain_group(groups: Any) -> dict[str, Any] | None:
    """The drain's consumer group among a ledger's XINFO GROUPS reply (None when it has none)."""
    return next((g for g in groups if _decode(g["name"]) == DRAIN_GROUP), None)


def trim_bucket(campaign_id: int, *, retention_ms: int, now_ms: int, bucket: int = 0) -> int:
    """Delete acknowledged entries older than the retention; return how many went.

    The cut is the oldest of: now - retention, the first entry still pending, the first entry not yet
    delivered to the drain. Entries delivered later have larger ids, so they are never below the cut.
    """
    keys = campaign_keys(campaign_id, bucket)
    try:
        client = redis_client()
        group = _drain_group(client.xinfo_groups(keys.ledger))
        if group is None:
            return 0
        cut = (now_ms - retention_ms, 0)
        delivered_ms, delivered_seq = _id_tuple(_decode(group["last-delivered-id"]))
        cut = min(cut, (delivered_ms, delivered_seq + 1))
        pending: Any = client.xpending(keys.ledger, DRAIN_GROUP)
        if pending["pending"]:
            cut = min(cut, _id_tuple(_decode(pending["min"])))
        if cut <= (0, 0):
            return 0
        return int(client.xtrim(keys.ledger, minid=f"{cut[0]}-{cut[1]}", approximate=False))
    except redis.ResponseError as exc:
        if "no such key" in str(exc).lower():
            return 0
        raise StoreUnavailable(str(exc)) from exc
    except redis.RedisError as exc:
        raise StoreUnavailable(str(exc)) from exc


def pending_entry(campaign_id: int, ref: str) -> LedgerEntry | None:
    """Return the entry (its ledger_ref) if it still waits in the ledger (not yet persisted and deleted)."""
    entry_id, bucket = split_ref(ref)
    keys = campaign_keys(campaign_id, bucket)
    try:
        raw = redis_client().xrange(keys.ledger, entry_id, entry_id)
    except redis.RedisError as exc:
        raise StoreUnavailable(str(exc)) from exc
    entries = _entries(campaign_id, raw, bucket)
    return entries[0] if entries else None


@dataclass(frozen=True)
class LedgerSnapshot:
    remaining: int | None
    entries: list[LedgerEntry]
    last_id: str  # the last id the stream ever issued ("0-0" if none)
    cancelled: set[str]  # claim ids whose stock was given back
    users: dict[str, int]  # per-user claim counts ("" is the key's placeholder)
    bucket: int = 0
    share: int | None = None  # the bucket's share of the stock (meta's "share"; None: not recorded)
    sent: dict[str, int] = field(default_factory=dict)  # every move of stock out: move id -> units
    received: dict[str, int] = field(default_factory=dict)  # every move of stock in: move id -> units


def snapshot(campaign_id: int, *, chunk: int = 5000, bucket: int = 0) -> LedgerSnapshot:
    """A consistent cut of the campaign (of one bucket) in Redis: stock, share, per-user counts, given-back
    claims, moves of stock sent and received and the stream's last id in one MULTI; then the entries up to
    that id, read in chunks so Redis never stalls on a big stream (entries below the cut never appear later;
    trimmed ones are acknowledged, so in PostgreSQL)."""
    keys = campaign_keys(campaign_id, bucket)
    try:
        pipe = redis_client().pipeline(transaction=True)
        pipe.get(keys.stock)
        pipe.xinfo_stream(keys.ledger)
        pipe.smembers(keys.cancelled)
        pipe.hgetall(keys.users)
        pipe.hget(keys.meta, "share")
        pipe.hgetall(keys.sent)
        pipe.hgetall(keys.received)
        stock, info, cancelled, users, share, sent, received = pipe.execute(raise_on_error=False)
        for reply in (stock, cancelled, users, share, sent, received):
            if isinstance(reply, Exception):
                raise StoreUnavailable(str(reply))
        last_id = "0-0" if isinstance(info, Exception) else _decode(info["last-generated-id"])
        entries: list[LedgerEntry] = []
        start = "-"
        while last_id != "0-0":
            raw: Any = redis_client().xrange(keys.ledger, start, last_id, count=chunk)
            entries.extend(_entries(campaign_id, raw, bucket))
            if len(raw) < chunk:
                break
            start = "(" + _decode(raw[-1][0])
    except redis.RedisError as exc:
        raise StoreUnavailable(str(exc)) from exc
    return LedgerSnapshot(
        remaining=None if stock is None else int(stock),
        entries=entries,
        last_id=last_id,
        cancelled={_decode(m) for m in cancelled} - {""},
        users={_decode(k): int(v) for k, v in users.items()} if users else {},
        bucket=bucket,
        share=None if share is None else int(share),
        sent={_decode(k): int(v) for k, v in sent.items()} if sent else {},
        received={_decode(k): int(v) for k, v in received.items()} if received else {},
    )


@dataclass(frozen=True)
class CampaignSnapshot:
    """Every bucket's cut (snapshot()) of a campaign, one after the other, and the stock in transit between
    those cuts: the units of the moves one cut saw sent and no cut saw received, less those of the moves a cut
    saw received and no cut saw sent (sent after its donor's cut, received before its receiver's). Then the
    total is exactly the buckets' shares plus that, whatever ran between the cuts (docs/design.md, "Buckets")."""

    buckets: list[LedgerSnapshot]
    in_transit: int


def campaign_snapshot(campaign_id: int, buckets: int) -> CampaignSnapshot:
    """The cuts of every bucket and the stock in transit between them. Raise StoreUnavailable."""
    cuts = [snapshot(campaign_id, bucket=b) for b in range(buckets)]
    sent = {move_id: units for cut in cuts for move_id, units in cut.sent.items()}
    received = {move_id: units for cut in cuts for move_id, units in cut.received.items()}
    return CampaignSnapshot(cuts, sum(u for m, u in sent.items() if m not in received)
                            - sum(u for m, u in received.items() if m not in sent))


def backlog_sizes(campaign_ids: list[int]) -> dict[int, int]:
    """Return how many entries of each campaign's ledger are not yet acknowledged (never read by the drain,
    or read and not acknowledged), in one pipelined round trip; a campaign without a ledger (of a campaign split
    into buckets: a bucket without one) is left out: the drain sweep rebuilds it."""
    if not campaign_ids:
        return {}
    counts = bucket_counts(campaign_ids)
    try:
        pipe = redis_client().pipeline(transaction=False)
        for campaign_id in campaign_ids:
            for bucket in range(counts[campaign_id]):
                pipe.xinfo_groups(campaign_keys(campaign_id, bucket).ledger)
        replies = iter(pipe.execute(raise_on_error=False))
    except redis.RedisError as exc:
        raise StoreUnavailable(str(exc)) from exc
    sizes: dict[int, int] = {}
    for campaign_id in campaign_ids:
        size: int | None = 0
        for _ in range(counts[campaign_id]):  # of a campaign split into buckets: the sum of its ledgers'
            groups = next(replies)
            group = None if isinstance(groups, Exception) else _drain_group(groups)
            if group is None:
                size = None  # a bucket without its ledger: the campaign is left out, as one without its own
            elif size is not None:
                lag = group.get("lag")
                size += int(group["pending"]) + (int(lag) if lag is not None else 1)
        if size is not None:
            sizes[campaign_id] = size
    return sizes


def oldest_unacknowledged_ms(campaign_id: int) -> int | None:
    """Return the claim time (ms) of the oldest ledger entry not yet in PostgreSQL, None when there is none
    (of every bucket's ledger)."""
    oldest = [ms for bucket in range(bucket_counts([campaign_id])[campaign_id])
              if (ms := _oldest_of_bucket(campaign_id, bucket)) is not None]
    return min(oldest) if oldest else None


def _oldest_of_bucket(campaign_id: int, bucket: int) -> int | None:
    keys = campaign_keys(campaign_id, bucket)
    try:
        client = redis_client()
        group = _drain_group(client.xinfo_groups(keys.ledger))
        if group is None:
            return None
        pending: Any = client.xpending(keys.ledger, DRAIN_GROUP)
        if pending["pending"]:
            return _id_tuple(_decode(pending["min"]))[0]
        after: Any = client.xrange(keys.ledger, "(" + _decode(group["last-delivered-id"]), "+", count=1)
        return _id_tuple(_decode(after[0][0]))[0] if after else None
    except redis.ResponseError:
        return None
    except redis.RedisError as exc:
        raise StoreUnavailable(str(exc)) from exc
