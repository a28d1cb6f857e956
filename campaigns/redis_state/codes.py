"""A codes campaign's shared code in Redis: its uses taken (code_take.lua) and given back (code_give_back.lua)."""
from __future__ import annotations

import asyncio
import enum
from typing import Any

import redis

from core.errors import Code, StoreUnavailable

from .clients import async_client, redis_client
from .keys import CampaignKeys, campaign_keys
from .lua import scripts
from .state import RestockResult


class TakeCode(enum.IntEnum):
    """code_take.lua's answers: the registry's business codes (core.errors, the script's numbers checked against it
    by tests/core/test_errors.py) and the script's own (ALREADY, NO_STATE), never answered as they are."""

    TAKEN = int(Code.DONE)
    LIMIT_REACHED = int(Code.LIMIT_REACHED)
    SOLD_OUT = int(Code.SOLD_OUT)
    NOT_STARTED = int(Code.NOT_STARTED)
    ENDED = int(Code.ENDED)
    PAUSED = int(Code.PAUSED)
    GROUP_LIMIT_REACHED = int(Code.GROUP_LIMIT_REACHED)
    ALREADY = 6  # this use held its unit already (a request that died before its coupon was written)
    NO_STATE = -1


def run_code_take(*, campaign_id: int, user_id: str, member: str) -> TakeCode:
    """Take one use of a codes campaign's shared code for the use `member` (code_take.lua). Raise
    StoreUnavailable (nothing was taken)."""
    keys = campaign_keys(campaign_id)
    try:
        return TakeCode(int(scripts().code_take(keys=_take_keys(keys), args=_take_args(keys, user_id, member))))
    except redis.RedisError as exc:
        raise StoreUnavailable(str(exc)) from exc


def run_code_takes(takes: list[tuple[int, str, str]]) -> list[TakeCode]:
    """run_code_take for each (campaign id, user id, member), in one pipelined round trip a campaign (one hash
    slot: with replica acks its WAIT confirms them all), each take atomic on its own, not the takes together.
    Raise StoreUnavailable (some may have been taken: give them back)."""
    by_campaign: dict[int, list[int]] = {}
    for n, (campaign_id, _, _) in enumerate(takes):
        by_campaign.setdefault(campaign_id, []).append(n)
    answers: list[TakeCode] = [TakeCode.NO_STATE] * len(takes)
    try:
        for campaign_id, indexes in by_campaign.items():
            keys = campaign_keys(campaign_id)
            replies = scripts().code_take.each([(_take_keys(keys), _take_args(keys, *takes[n][1:]))
                                                for n in indexes])
            for n, reply in zip(indexes, replies, strict=True):
                answers[n] = TakeCode(int(reply))
    except redis.RedisError as exc:
        raise StoreUnavailable(str(exc)) from exc
    return answers


def _take_keys(keys: CampaignKeys) -> list[str]:
    """code_take.lua's keys: a campaign of a group counts its group's hash too."""
    return [keys.meta, keys.uses, keys.users, keys.takes, keys.group] if keys.group else [
        keys.meta, keys.uses, keys.users, keys.takes]


def _take_args(keys: CampaignKeys, user_id: str, member: str) -> list[str | int]:
    return [user_id, member, keys.group_limit] if keys.group else [user_id, member]


def code_uses_of(campaign_ids: list[int], user_id: str) -> dict[int, tuple[int | None, int]]:
    """For each codes campaign: (its shared code's uses left, None when Redis holds no state; this shopper's
    uses), read in one pipelined round trip; what code_take.lua would judge, nothing changed. Raise
    StoreUnavailable."""
    if not campaign_ids:
        return {}
    try:
        pipe = redis_client().pipeline(transaction=False)
        for campaign_id in campaign_ids:
            keys = campaign_keys(campaign_id)
            pipe.get(keys.uses)
            pipe.hget(keys.users, user_id)
        return _uses(campaign_ids, pipe.execute())
    except redis.RedisError as exc:
        raise StoreUnavailable(str(exc)) from exc


async def code_uses_of_async(campaign_ids: list[int], user_id: str) -> dict[int, tuple[int | None, int]]:
    """code_uses_of() through the event loop's pipelined client (its reads sent together). Raise
    StoreUnavailable."""
    if not campaign_ids:
        return {}
    client = async_client()
    reads = []
    for campaign_id in campaign_ids:
        keys = campaign_keys(campaign_id)
        reads += [client.execute("GET", keys.uses), client.execute("HGET", keys.users, user_id)]
    replies = await asyncio.gather(*reads, return_exceptions=True)  # every read awaited, whatever failed
    for reply in replies:
        if isinstance(reply, redis.RedisError | OSError):  # OSError: TimeoutError and a refused connect too
            raise StoreUnavailable(str(reply)) from reply
        if isinstance(reply, BaseException):
            raise reply
    return _uses(campaign_ids, replies)


def _uses(campaign_ids: list[int], answers: list[Any]) -> dict[int, tuple[int | None, int]]:
    replies = iter(answers)
    uses: dict[int, tuple[int | None, int]] = {}
    for campaign_id in campaign_ids:
        left, held = next(replies), next(replies)
        uses[campaign_id] = (None if left is None else int(left), int(held or 0))
    return uses


def run_code_give_back(*, campaign_id: int, user_id: str, member: str) -> RestockResult:
    """Give the use `member` back to the shared code, once (code_give_back.lua). Raise StoreUnavailable."""
    keys = campaign_keys(campaign_id)
    try:
        return RestockResult(int(scripts().code_give_back(
            keys=[keys.uses, keys.users, keys.takes, *([keys.group] if keys.group else [])], args=[user_id, member])))
    except redis.RedisError as exc:
        raise StoreUnavailable(str(exc)) from exc


def codes_snapshot(campaign_id: int) -> tuple[int | None, set[str], dict[str, int]]:
    """A consistent cut of a codes campaign in Redis (one MULTI): (uses left or None, takes, per-user uses)."""
    keys = campaign_keys(campaign_id)
    try:
        pipe = redis_client().pipeline(transaction=True)
        pipe.get(keys.uses)
        pipe.smembers(keys.takes)
        pipe.hgetall(keys.users)
        left, takes, users = pipe.execute()
    except redis.RedisError as exc:
        raise StoreUnavailable(str(exc)) from exc

    def text(value: Any) -> str:
        return value.decode() if isinstance(value, bytes) else str(value)

    return (None if left is None else int(left), {text(m) for m in takes} - {""},
            {text(k): int(v) for k, v in users.items() if text(k)})
