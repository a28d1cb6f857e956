"""A group's hash in Redis (docs/design.md, "Groups"): user id -> coupons held of all the group's campaigns, in the
group's slot ({g<group>}, keys.py), counted by claim.lua, cancel.lua, code_take.lua and code_give_back.lua in the
same step as each campaign's own count; read (verify), restored from PostgreSQL when lost (the rebuild), and a
shopper's count set again (reconcile --repair)."""
from __future__ import annotations

from datetime import datetime

import redis

from core.errors import StoreUnavailable

from .clients import redis_client
from .keys import campaign_keys, home_of, remember_group
from .lua import text
from .state import to_ms


def group_key(campaign_id: int, group: str, group_limit: int) -> str:
    """The group's hash of a campaign of `group` (told from PostgreSQL: the process may never have met it)."""
    remember_group(campaign_id, group, group_limit)
    return campaign_keys(campaign_id).group


def group_home(campaign_id: int) -> tuple[str, int] | None:
    """What the campaign's home says (keys.home_of): (group, limit), None when it names none. Raise
    StoreUnavailable."""
    try:
        group, limit = redis_client().hmget(home_of(campaign_id), "group", "group_limit")
    except redis.RedisError as exc:
        raise StoreUnavailable(str(exc)) from exc
    return None if group is None else (text(group), int(limit or 0))


def group_held(key: str) -> dict[str, int] | None:
    """The group's hash: user id -> coupons held (None when Redis holds none). Raise StoreUnavailable."""
    try:
        raw = redis_client().hgetall(key)
    except redis.RedisError as exc:
        raise StoreUnavailable(str(exc)) from exc
    if not raw:
        return None
    return {text(user): int(count) for user, count in raw.items() if text(user)}


def group_restore(key: str, counts: dict[str, int], expire_at: datetime, *, chunk: int = 1000) -> bool:
    """Load a lost group hash from `counts` (PostgreSQL's) whole or not at all: written apart under another key of
    the same slot, then renamed into place only if the hash is still missing (RENAMENX); until then the group's
    claims and code uses find no state. Return whether it was restored (False: another rebuild did it first).
    Raise StoreUnavailable."""
    loading = f"{key}:loading"
    try:
        client = redis_client()
        client.delete(loading)
        client.hset(loading, "", 0)
        items = [(user, count) for user, count in counts.items() if count > 0]
        for start in range(0, len(items), chunk):
            client.hset(loading, mapping=dict(items[start:start + chunk]))
        client.pexpireat(loading, to_ms(expire_at))
        restored = bool(client.renamenx(loading, key))
        if not restored:
            client.delete(loading)
    except redis.RedisError as exc:
        raise StoreUnavailable(str(exc)) from exc
    return restored


def group_snapshot(key: str, users_keys: list[str]) -> tuple[dict[str, int] | None, list[dict[str, int] | None]]:
    """One consistent cut of a group (one MULTI: the group's campaigns share its slot): its hash and each campaign's
    per-user counts (`users_keys`, None where Redis holds none), user id -> count. Raise StoreUnavailable."""
    try:
        pipe = redis_client().pipeline(transaction=True)
        for name in (key, *users_keys):
            pipe.hgetall(name)
        replies = pipe.execute()
    except redis.RedisError as exc:
        raise StoreUnavailable(str(exc)) from exc
    counts = [{text(user): int(count) for user, count in raw.items() if text(user)} if raw else None
              for raw in replies]
    return counts[0], counts[1:]
