"""A campaign's state in Redis as a whole: loaded (preheat), rebuilt from PostgreSQL, restocked, extended,
paused; its remaining stock read; its drain trigger cleared."""
from __future__ import annotations

import enum
from collections.abc import Sequence
from datetime import datetime

import redis

from core.errors import StoreUnavailable

from .buckets import bucket_counts, buckets_of, remember_buckets
from .clients import redis_client
from .keys import DRAIN_GROUP, campaign_keys, remember_group
from .lua import scripts


def clear_drain_trigger(campaign_id: int) -> None:
    """Forget that a drain trigger is pending (the drain starts): the next claim sends one again (claim.lua);
    every bucket's."""
    try:
        pipe = redis_client().pipeline(transaction=False)
        for bucket in range(buckets_of(campaign_id)):
            pipe.hdel(campaign_keys(campaign_id, bucket).meta, "drain")
        pipe.execute()
    except redis.RedisError as exc:
        raise StoreUnavailable(str(exc)) from exc


def to_ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def audience_list(names: Sequence[str] | frozenset[str]) -> str:
    """A list of audience tags or channels as claim.lua reads it: ",a,b," ("" for none)."""
    return f",{','.join(sorted(names))}," if names else ""


def load_state(
    *,
    campaign_id: int,
    starts_at: datetime,
    ends_at: datetime,
    paused: bool,
    per_user_limit: int,
    total_stock: int,
    expire_at: datetime,
    initial_stock: int | None,
    last_ledger_id: str = "0-0",
    rate_limit: int = 1000,
    codes: bool = False,
    bucket: int = 0,
    buckets: int = 1,
    share: int | None = None,
    grant_only: bool = False,
    group: str = "",
    group_limit: int = 0,
    audience_tags: Sequence[str] = (),
    channels: Sequence[str] = (),
) -> tuple[bool, int | None]:
    """Write a campaign's settings (and its stock, if missing and given) and move every key's expiry. A codes
    campaign's (codes=True) stock is its shared code's uses. Of a campaign split into `buckets`, one `bucket`'s:
    `initial_stock` is its part, `share` its share when not that part (a rebuild), `rate_limit` its part.

    Of a campaign of a `group` (with its `group_limit`): its home first (keys.home_of: where its keys are), then
    its state in the group's slot, with the group's hash. `audience_tags` and `channels`: whom the claim admits.

    Return (stock_created, stock) where stock is None when Redis holds none. Raise StoreUnavailable.
    """
    remember_group(campaign_id, group or None, group_limit)  # from PostgreSQL: fixed once in Redis
    keys = campaign_keys(campaign_id, bucket)
    try:
        if group:
            pipe = redis_client().pipeline(transaction=False)
            pipe.hset(keys.home, mapping={"group": group, "group_limit": group_limit})
            pipe.pexpireat(keys.home, to_ms(expire_at))
            pipe.execute()
        created, stock = scripts().load_state(
            keys=keys.state_of(codes=codes) + ([] if codes else keys.move_keys) + ([keys.group] if group else []),
            args=[
                to_ms(starts_at),
                to_ms(ends_at),
                "1" if paused else "0",
                per_user_limit,
                total_stock,
                to_ms(expire_at),
                "" if initial_stock is None else initial_stock,
                DRAIN_GROUP,
                last_ledger_id,
                rate_limit,
                buckets,
                "" if share is None else share,
                "1" if grant_only else "0",
                "1" if group else "0",
                audience_list(audience_tags),
                audience_list(channels),
            ],
        )
    except redis.RedisError as exc:
        raise StoreUnavailable(str(exc)) from exc
    remember_buckets(campaign_id, buckets)
    return bool(created), (None if int(stock) < 0 else int(stock))


def replace_claim_records(
    campaign_id: int, counts: dict[str, int], cancelled: list[str], *, chunk: int = 1000, codes: bool = False,
    bucket: int = 0,
) -> None:
    """Replace the per-user claim counts and the given-back claims (rebuild from PostgreSQL); of a codes
    campaign (codes=True), the per-user uses and the takes; of a bucket, its own (and its moves forgotten).

    Call while the stock key is missing, so that no claim or cancel runs meanwhile.
    """
    keys = campaign_keys(campaign_id, bucket)
    members = keys.takes if codes else keys.cancelled
    try:
        client = redis_client()
        client.delete(keys.users, members)
        client.delete(*keys.move_keys)
        items = list(counts.items())
        for start in range(0, len(items), chunk):
            client.hset(keys.users, mapping=dict(items[start : start + chunk]))
        for start in range(0, len(cancelled), chunk):
            client.sadd(members, *cancelled[start : start + chunk])
    except redis.RedisError as exc:
        raise StoreUnavailable(str(exc)) from exc


def restore_answers(campaign_id: int, answers: list[tuple[str, str, str, int]], *, chunk: int = 1000,
                    bucket: int = 0) -> int:
    """Store again the answer of claims made with an Idempotency-Key: (user id, key digest, ledger id, ms to
    keep it), of one bucket's shoppers. A key already present is left alone. Return how many were stored
    (rebuild from PostgreSQL)."""
    keys = campaign_keys(campaign_id, bucket)
    stored = 0
    try:
        for start in range(0, len(answers), chunk):
            pipe = redis_client().pipeline(transaction=False)
            for user_id, digest, ledger_id, keep_ms in answers[start : start + chunk]:
                pipe.set(keys.idempotency_of_digest(user_id, digest), f"0:{ledger_id}", px=keep_ms, nx=True)
            stored += sum(1 for done in pipe.execute() if done)
    except redis.RedisError as exc:
        raise StoreUnavailable(str(exc)) from exc
    return stored


class RestockResult(enum.IntEnum):
    RESTOCKED = 1
    ALREADY = 0
    NO_STATE = -1


def run_restock(*, campaign_id: int, claim_id: str, user_id: str, bucket: int = 0) -> RestockResult:
    """Give one cancelled claim's coupon back to the stock of its bucket (the one it was claimed on, its
    shopper's), once per claim id. Raise StoreUnavailable."""
    keys = campaign_keys(campaign_id, bucket)
    try:
        result = scripts().cancel(keys=[keys.stock, keys.users, keys.cancelled, *([keys.group] if keys.group else [])],
                                  args=[claim_id, user_id])
    except redis.RedisError as exc:
        raise StoreUnavailable(str(exc)) from exc
    return RestockResult(int(result))


def compare_and_set(*, key: str, field: str | None, expected: int | None, new: int) -> bool:
    """Set a stock (field None) or a per-user count to `new` if it still holds `expected` (None: missing)."""
    try:
        done = scripts().compare_and_set(
            keys=[key], args=[field or "", "" if expected is None else expected, new]
        )
    except redis.RedisError as exc:
        raise StoreUnavailable(str(exc)) from exc
    return bool(int(done))


def run_add_stock(*, campaign_id: int, quantity: int, codes: bool = False) -> int | None:
    """Add coupons (a codes campaign's uses) to a loaded campaign's stock; return the new stock, None when Redis
    holds none."""
    keys = campaign_keys(campaign_id)
    try:
        stock = int(scripts().add_stock(keys=[keys.meta, keys.left(codes=codes)], args=[quantity]))
    except redis.RedisError as exc:
        raise StoreUnavailable(str(exc)) from exc
    return None if stock < 0 else stock


def set_paused(*, campaign_id: int, paused: bool) -> bool:
    """Set the paused flag of a loaded campaign (every bucket's); return False when Redis holds no state for it."""
    try:
        if not redis_client().exists(campaign_keys(campaign_id).meta):
            return False
        for bucket in range(buckets_of(campaign_id)):
            redis_client().hset(campaign_keys(campaign_id, bucket).meta, "paused", "1" if paused else "0")
    except redis.RedisError as exc:
        raise StoreUnavailable(str(exc)) from exc
    return True


def remaining_many(campaign_ids: list[int], codes: frozenset[int] | set[int] = frozenset()
                   ) -> dict[int, int | None]:
    """Return the live remaining stock of several campaigns in one pipelined round trip (of those in `codes`,
    codes campaigns, the uses left); of a campaign split into buckets, the sum of its buckets' (None when one
    holds none), stock in transit between buckets left out (docs/design.md, "Buckets")."""
    if not campaign_ids:
        return {}
    counts = bucket_counts(campaign_ids)
    try:
        pipe = redis_client().pipeline(transaction=False)
        for campaign_id in campaign_ids:
            for bucket in range(counts[campaign_id]):
                pipe.get(campaign_keys(campaign_id, bucket).left(codes=campaign_id in codes))
        values = iter(pipe.execute())
    except redis.RedisError as exc:
        raise StoreUnavailable(str(exc)) from exc
    remaining: dict[int, int | None] = {}
    for campaign_id in campaign_ids:
        parts = [next(values) for _ in range(counts[campaign_id])]
        remaining[campaign_id] = None if any(v is None for v in parts) else sum(int(v) for v in parts)
    return remaining


def run_extend(
    *, campaign_id: int, old_ends_at: datetime, new_ends_at: datetime, expire_at: datetime, codes: bool = False
) -> tuple[int, int]:
    """Move a loaded campaign's end and every state key's expiry (extend.lua). Raise StoreUnavailable.

    Return (code, ends_ms) as extend.lua documents them: 1 extended, 0 already, -1 no state, -2 conflict
    (Redis holds another end, ends_ms), -3 the new end is not later than the old; only 1 and 0 change Redis.
    """
    answers = []
    try:
        for bucket in range(buckets_of(campaign_id)):  # bucket 0 first: the campaign's own answer
            keys = campaign_keys(campaign_id, bucket)
            answers.append(scripts().extend(keys=[*keys.state_of(codes=codes), *keys.move_keys],
                                            args=[to_ms(old_ends_at), to_ms(new_ends_at), to_ms(expire_at)]))
            if int(answers[0][0]) not in (0, 1):
                break  # refused on bucket 0: nothing changed anywhere
    except redis.RedisError as exc:
        raise StoreUnavailable(str(exc)) from exc
    code, ends_ms = answers[0]
    if int(code) == 1 and keys.group:  # its home and its group's hash live as long (the hash: never shorter)
        try:
            pipe = redis_client().pipeline(transaction=False)
            pipe.pexpireat(keys.home, to_ms(expire_at))
            pipe.pexpireat(keys.group, to_ms(expire_at), gt=True)
            pipe.execute()
        except redis.RedisError as exc:
            raise StoreUnavailable(str(exc)) from exc
    return int(code), int(ends_ms)
