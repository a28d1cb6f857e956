"""A campaign's buckets: how many it has, each one's share of the stock, and the moves of stock between them.

A bucket that runs dry takes stock from the others (move_stock: two scripts, one per slot, never a cross-slot
one); a move cut short after its first half is finished later (finish_moves). docs/design.md, "Buckets"."""
from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import redis

from core.errors import StoreUnavailable
from core.hot import unique_hex

from .clients import redis_client
from .keys import campaign_keys, forget_groups, home_of, known_groups, remember_group
from .lua import scripts, text
from .recovery import redis_now_ms

log = logging.getLogger(__name__)

# The bucket count of each campaign this process met (it never changes once a campaign is in Redis): the claim
# assumes 1 for a campaign it does not know, and claim.lua corrects it (-4) once.
known_buckets: dict[int, int] = {}


def buckets_of(campaign_id: int) -> int:
    """A loaded campaign's bucket count, as its bucket 0 says (1 when Redis holds none). Raise StoreUnavailable."""
    known = known_buckets.get(campaign_id)
    if known is not None:
        return known
    return bucket_counts([campaign_id])[campaign_id]


def bucket_counts(campaign_ids: list[int]) -> dict[int, int]:
    """buckets_of() of several campaigns, those not known yet read in one pipelined round trip, which learns their
    groups too (keys.learn_group: a grouped campaign has one bucket)."""
    unknown = [cid for cid in campaign_ids if cid not in known_buckets]
    for campaign_id in unknown:
        group = known_groups.get(campaign_id, False)
        if group:  # a grouped campaign has one bucket (Campaign.clean)
            remember_buckets(campaign_id, 1)
    unknown = [cid for cid in unknown if cid not in known_buckets]
    if unknown:
        try:
            pipe = redis_client().pipeline(transaction=False)
            for campaign_id in unknown:
                pipe.hmget(home_of(campaign_id), "buckets", "group", "group_limit")
            for campaign_id, (count, group, limit) in zip(unknown, pipe.execute(), strict=True):
                if group is not None:
                    remember_group(campaign_id, text(group), int(limit or 0))
                    remember_buckets(campaign_id, 1)
                elif count is not None:
                    remember_group(campaign_id, None)
                    remember_buckets(campaign_id, int(count))
        except redis.RedisError as exc:
            raise StoreUnavailable(str(exc)) from exc
    return {cid: known_buckets.get(cid, 1) for cid in campaign_ids}


def forget_empty_buckets(campaign_id: int) -> None:
    """Forget which buckets of the campaign this process found empty (stock came back: drawn on at once)."""
    for key in [key for key in empty_until if key[0] == campaign_id]:
        empty_until.pop(key, None)


def forget_bucket_counts() -> None:
    """Forget the bucket counts and groups this process met, and which buckets it found empty."""
    known_buckets.clear()
    empty_until.clear()
    forget_groups()


def remember_buckets(campaign_id: int, buckets: int) -> None:
    if len(known_buckets) > 10_000:
        known_buckets.clear()
    known_buckets[campaign_id] = buckets


def split_stock(stock: int, buckets: int) -> list[int]:
    """Each bucket's share of `stock`: equal, the first ones one more."""
    return [stock // buckets + (1 if b < stock % buckets else 0) for b in range(buckets)]


# The donors this process found empty, not asked again for a moment (only their move counters are read again,
# ClaimFlow.quiet: stock moved into one since is asked for): after a sell-out, a claim on an empty bucket (one with
# an Idempotency-Key, which the sold-out flag never answers) costs two scripts and one read, not a script per
# bucket. As short as the sold-out flag (orders/sold_out.py): stock given back to a bucket is drawn on within the
# second.
EMPTY_FOR_SECONDS = 0.5
empty_until: dict[tuple[int, int], tuple[float, int]] = {}  # (campaign, bucket) -> (until, its move counter)


def move_stock(campaign_id: int, donor: int, to: int) -> tuple[int, int]:
    """Move stock of a campaign from bucket `donor` to bucket `to` (move_out.lua, then move_in.lua, then the
    pending record deleted); return (the units moved, 0 when the donor had none, -1 when it has no state; the
    donor's move counter). A move cut short after its first half stays pending at the donor (in transit) until
    finish_moves(). Raise StoreUnavailable."""
    move_id = unique_hex()
    donor_keys, to_keys = campaign_keys(campaign_id, donor), campaign_keys(campaign_id, to)
    try:
        units, moved = (int(v) for v in scripts().move_out(
            keys=[donor_keys.meta, donor_keys.stock, donor_keys.moves, donor_keys.sent], args=[move_id, to]))
        if units > 0:
            scripts().move_in(keys=[to_keys.meta, to_keys.stock, to_keys.received], args=[move_id, units])
            redis_client().hdel(donor_keys.moves, move_id)
    except redis.RedisError as exc:
        raise StoreUnavailable(str(exc)) from exc
    return units, moved


def pending_moves(campaign_id: int, buckets: int) -> dict[int, dict[str, tuple[int, int, int]]]:
    """Each bucket's pending moves out: move id -> (to bucket, units, ms taken). Raise StoreUnavailable."""
    try:
        pipe = redis_client().pipeline(transaction=False)
        for bucket in range(buckets):
            pipe.hgetall(campaign_keys(campaign_id, bucket).moves)
        replies = pipe.execute()
    except redis.RedisError as exc:
        raise StoreUnavailable(str(exc)) from exc
    return {bucket: {text(move_id): _move(value) for move_id, value in reply.items()}
            for bucket, reply in enumerate(replies)}


def _move(value: Any) -> tuple[int, int, int]:
    to, units, ms = text(value).split(":")
    return int(to), int(units), int(ms)


def finish_moves(campaign_id: int, buckets: int, *, older_than_ms: int = 5000) -> int:
    """Finish the moves of stock cut in half (their process died between move_out and move_in) pending for more
    than `older_than_ms`: receive each (once, by its id), then delete its record. Return how many were pending
    (reconciliation and the drain sweep run it). Raise StoreUnavailable."""
    if buckets == 1:
        return 0
    finished = 0
    now_ms = redis_now_ms()
    for donor, moves in pending_moves(campaign_id, buckets).items():
        for move_id, (to, units, ms) in moves.items():
            if now_ms - ms < older_than_ms:
                continue
            to_keys = campaign_keys(campaign_id, to)
            try:
                received = int(scripts().move_in(keys=[to_keys.meta, to_keys.stock, to_keys.received],
                                                 args=[move_id, units]))
                if received >= 0:
                    redis_client().hdel(campaign_keys(campaign_id, donor).moves, move_id)
            except redis.RedisError as exc:
                raise StoreUnavailable(str(exc)) from exc
            finished += received >= 0
            log.warning("campaign %s: finished a move of %s units from bucket %s to %s cut in half (%s)",
                        campaign_id, units, donor, to, "received now" if received == 1 else
                        "received before" if received == 0 else "the receiver has no state: left pending")
    return finished


def bucket_shares(campaign_id: int, buckets: int, *, tries: int = 20) -> tuple[dict[int, int | None], int]:
    """Each bucket's share of the stock (None for a bucket without stock: lost) and the stock in transit between
    buckets, read while no move ran (each bucket's move counter the same before and after). Raise
    StoreUnavailable."""
    for _ in range(tries):
        before = move_counts(campaign_id, buckets)
        try:
            pipe = redis_client().pipeline(transaction=False)
            for bucket in range(buckets):
                keys = campaign_keys(campaign_id, bucket)
                pipe.exists(keys.stock)
                pipe.hget(keys.meta, "share")
            replies = pipe.execute()
        except redis.RedisError as exc:
            raise StoreUnavailable(str(exc)) from exc
        shares = {bucket: int(replies[2 * bucket + 1] or 0) if replies[2 * bucket] else None
                  for bucket in range(buckets)}
        pending = [(to, move_id, units) for moves in pending_moves(campaign_id, buckets).values()
                   for move_id, (to, units, _) in moves.items()]
        received = received_moves(campaign_id, [(to, move_id) for to, move_id, _ in pending])
        if move_counts(campaign_id, buckets) == before:
            break
    return shares, sum(units for _, move_id, units in pending if move_id not in received)


def move_counts(campaign_id: int, buckets: int) -> list[int]:
    """Each bucket's move counter (meta's "moved": moves out and in). Raise StoreUnavailable."""
    return move_counts_of(campaign_id, range(buckets))


def move_counts_of(campaign_id: int, buckets: Iterable[int]) -> list[int]:
    """The move counters of those buckets, in one pipelined round trip. Raise StoreUnavailable."""
    try:
        pipe = redis_client().pipeline(transaction=False)
        for bucket in buckets:
            pipe.hget(campaign_keys(campaign_id, bucket).meta, "moved")
        return [int(v or 0) for v in pipe.execute()]
    except redis.RedisError as exc:
        raise StoreUnavailable(str(exc)) from exc


def received_moves(campaign_id: int, wanted: list[tuple[int, str]]) -> set[str]:
    """Which of the moves (to bucket, move id) their receiver holds. Raise StoreUnavailable."""
    if not wanted:
        return set()
    try:
        pipe = redis_client().pipeline(transaction=False)
        for to, move_id in wanted:
            pipe.hexists(campaign_keys(campaign_id, to).received, move_id)
        return {move_id for (_, move_id), held in zip(wanted, pipe.execute(), strict=True) if held}
    except redis.RedisError as exc:
        raise StoreUnavailable(str(exc)) from exc
