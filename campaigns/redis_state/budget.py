"""A campaign's budget in Redis (docs/api.md, "Grants, budgets, groups"): the money left, in the currency's minor
units, in the campaign's hash slot ({c<id>}, beside its stock): taken by a use (budget_take.lua, whole or not at
all), given back (budget_give_back.lua), loaded (budget_load: only where Redis holds none) and read. What the
money is for and when it moves: coupons/budget.py."""
from __future__ import annotations

import enum
from datetime import datetime

import redis

from core.errors import StoreUnavailable

from .clients import redis_client
from .keys import campaign_keys
from .lua import scripts
from .state import to_ms


class BudgetTake(enum.IntEnum):
    """budget_take.lua's answers."""

    TAKEN = 1
    SHORT = 0  # the amount does not fit in what is left: nothing taken
    NO_STATE = -1  # Redis holds no budget for the campaign: nothing taken


def budget_key(campaign_id: int) -> str:
    return campaign_keys(campaign_id).budget


def run_budget_take(campaign_id: int, amount: int) -> tuple[BudgetTake, int]:
    """Take `amount` (minor units, > 0) from the campaign's budget if it fits: (the answer, what is left after).
    Raise StoreUnavailable (nothing was taken, or the take's reply was lost: the caller gives it back)."""
    try:
        answer, left = scripts().budget_take(keys=[budget_key(campaign_id)], args=[amount])
    except redis.RedisError as exc:
        raise StoreUnavailable(str(exc)) from exc
    return BudgetTake(int(answer)), int(left)


def run_budget_give_back(campaign_id: int, amount: int) -> int | None:
    """Give `amount` (minor units, > 0) back to the campaign's budget: what is left after, None when Redis holds
    no budget for it (nothing changed). Raise StoreUnavailable."""
    try:
        left = int(scripts().budget_give_back(keys=[budget_key(campaign_id)], args=[amount]))
    except redis.RedisError as exc:
        raise StoreUnavailable(str(exc)) from exc
    return None if left < 0 else left


def budget_load(campaign_id: int, left: int, expire_at: datetime) -> int:
    """Write what is left of the campaign's budget where Redis holds none (a budget there is never replaced: its
    takes are newer than any figure read from PostgreSQL) and move its expiry to `expire_at`; return what Redis
    holds. Raise StoreUnavailable."""
    key = budget_key(campaign_id)
    try:
        pipe = redis_client().pipeline(transaction=False)
        pipe.set(key, left, nx=True)
        pipe.pexpireat(key, to_ms(expire_at))
        pipe.get(key)
        held = pipe.execute()[2]
    except redis.RedisError as exc:
        raise StoreUnavailable(str(exc)) from exc
    return int(held)


def budget_left_many(campaign_ids: list[int]) -> dict[int, int | None]:
    """What is left of each campaign's budget in Redis (minor units; None: none held), one round trip. Raise
    StoreUnavailable."""
    if not campaign_ids:
        return {}
    try:
        pipe = redis_client().pipeline(transaction=False)  # not MGET: the keys are in as many hash slots
        for campaign_id in campaign_ids:
            pipe.get(budget_key(campaign_id))
        values = pipe.execute()
    except redis.RedisError as exc:
        raise StoreUnavailable(str(exc)) from exc
    return {c: None if v is None else int(v) for c, v in zip(campaign_ids, values, strict=True)}
