"""A claim whose reply was lost, and Redis's clock.

A lost reply is not a lost claim: every claim stores its answer, and once its deadline (in Redis's clock) has
passed the script can no longer run, so that answer, or its absence, is the outcome (stored_answer_after); when
it cannot be read, the claim is taken back once Redis answers again (ClaimOutcomeUnknown, run_void)."""
from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import redis

from core.errors import StoreUnavailable

from ..redis_async import AsyncRedis, NotAcknowledged
from .clients import pipelined, recovery_client, redis_client
from .keys import ledger_ref
from .lua import scripts, text


class ClaimOutcomeUnknown(StoreUnavailable):
    """The claim's reply was lost and its answer could not be read (Redis still unreachable after the
    deadline). The caller answers 503, so the claim, if it ran, must be taken back: run_void() once Redis
    answers again (orders.claim.ClaimVoider does it in the background)."""

    def __init__(self, message: str, *, campaign_id: int, user_id: str, answer_key: str, token: str,
                 bucket: int = 0) -> None:
        super().__init__(message)
        self.campaign_id, self.user_id, self.answer_key, self.token = campaign_id, user_id, answer_key, token
        self.bucket = bucket  # the shopper's bucket, whose ledger id the answer holds
        self.claim_id: str | None = None  # set once void.lua took the claim back: it is then cancelled
        self.voided = False  # void.lua ran, confirmed (replica acks): what it found holds on the replicas too
        self.unconfirmed_void = ""  # the ledger id a run of void.lua not confirmed took back (run_void's `again`)


UNREADABLE = object()  # the stored answer could not be read (Redis still unreachable)

OWN_ANSWER_KEEP_MS = 30_000  # a second's hash outlives a Redis frozen for up to 30 s: a void still finds the answer
RECOVERY_BUDGET_SECONDS = 0.3
RECOVERY_PAUSE_SECONDS = 0.01


def stored_answer_after(idem_key: str, field: str, deadline_ms: int) -> tuple[int, str] | None | object:
    """After the claim's deadline, read the answer its script stored (under `idem_key`, or in that hash's
    `field`): None if it never ran, UNREADABLE when Redis did not answer within the budget."""
    for pause in _recovery_pauses(deadline_ms):
        if pause:
            time.sleep(pause)
        try:
            stored = recovery_client().hget(idem_key, field) if field else recovery_client().get(idem_key)
        except redis.RedisError:
            continue
        return _parse_stored(stored)
    return UNREADABLE


def _recovery_pauses(deadline_ms: int) -> Iterator[float]:
    """The pauses, in seconds, before each try to read a lost reply's stored answer, the same for a thread and
    an event loop: until the claim's deadline (in Redis's clock) has passed, then RECOVERY_PAUSE_SECONDS between
    tries (a refused connection fails at once: no busy loop) for RECOVERY_BUDGET_SECONDS; then no more."""
    wait_ms = deadline_ms + DEADLINE_MARGIN_MS - int(time.time() * 1000 + _clock["offset_ms"])
    first = min(wait_ms, 1000) / 1000 if wait_ms > 0 else 0.0
    give_up = time.monotonic() + first + RECOVERY_BUDGET_SECONDS  # the shopper's 503 must still come within a second
    yield first
    while time.monotonic() + RECOVERY_PAUSE_SECONDS < give_up:
        yield RECOVERY_PAUSE_SECONDS


async def stored_answer_after_async(idem_key: str, field: str, deadline_ms: int
                                    ) -> tuple[int, str] | None | object:
    """stored_answer_after() for an event loop: a fresh short-timeout connection reads the stored answer."""
    for pause in _recovery_pauses(deadline_ms):
        if pause:
            await asyncio.sleep(pause)
        reader = pipelined(0.1)
        try:
            stored = await (reader.execute("HGET", idem_key, field) if field else reader.execute("GET", idem_key))
        except redis.RedisError:
            continue
        finally:
            reader.close()
        return _parse_stored(stored)
    return UNREADABLE


def _parse_stored(stored: bytes | str | None) -> tuple[int, str] | None:
    """A stored answer "<code>:<ledger id>[:<token>[:<told>]]" (None: absent, or 'void': taken back, never given);
    an own answer in the second's hash has no token (its field names it)."""
    if stored is None:
        return None
    text = stored.decode() if isinstance(stored, bytes) else str(stored)
    if text == "void":
        return None
    code, ledger_id, *_ = [*text.split(":"), ""]
    return int(code), ledger_id


# The claim carries a deadline in Redis's own clock (its TIME), so host clocks may differ: each process learns
# the offset between its clock and Redis's (one TIME round trip a minute) and subtracts a margin for the
# reply's way back. A claim Redis runs later than the deadline changes nothing (claim.lua: -3).
DEADLINE_MARGIN_MS = 50
_OFFSET_REFRESH_SECONDS = 60.0
_clock: dict[str, float] = {"offset_ms": 0.0, "measured": -1e9}


def redis_now_ms() -> int:
    """Return an estimate of Redis's clock now, in milliseconds. Raise StoreUnavailable."""
    now = time.monotonic()
    if now - _clock["measured"] > _OFFSET_REFRESH_SECONDS:
        try:
            before = time.time()
            seconds, micros = redis_client().time()
            after = time.time()
        except redis.RedisError as exc:
            raise StoreUnavailable(str(exc)) from exc
        _learn_offset(before, after, seconds, micros, now)
    return int(time.time() * 1000 + _clock["offset_ms"])


async def redis_now_ms_async(client: AsyncRedis) -> int:
    now = time.monotonic()
    if now - _clock["measured"] > _OFFSET_REFRESH_SECONDS:
        before = time.time()
        seconds, micros = await client.execute("TIME")
        _learn_offset(before, time.time(), int(seconds), int(micros), now)
    return int(time.time() * 1000 + _clock["offset_ms"])


def _learn_offset(before: float, after: float, seconds: int, micros: int, measured: float) -> None:
    """Remember the offset of Redis's clock (TIME: seconds, micros) from ours, read between before and after."""
    _clock["offset_ms"] = seconds * 1000 + micros / 1000 - (before + after) / 2 * 1000
    _clock["measured"] = measured


def forget_clock() -> None:
    """Forget Redis's clock offset (reset_redis_client): the next claim measures it again."""
    _clock["offset_ms"], _clock["measured"] = 0.0, -1e9


class VoidNotConfirmed(StoreUnavailable):
    """void.lua ran on the master but fewer replicas than COUPONS_REDIS_REPLICA_ACKS confirmed it in time: a
    failover may still lose it (the claim's answer would then tell a repeat of its key 'claimed'), so the claim
    is not cancelled yet; run_void again, with the claim it took back (`ledger_id`, if it did): where that void
    holds it is returned again, where a failover lost it the claim is decided anew."""

    def __init__(self, message: str, ledger_id: str | None) -> None:
        super().__init__(message)
        self.ledger_id = ledger_id


def run_void(answer_key: str, token: str, again: str = "", bucket: int = 0) -> str | None:
    """Take back the claim the request `token` made, whose answer is under `answer_key` (void.lua); return its
    ledger_ref (on `bucket`) when it must be cancelled now, None when there is nothing to take back. Raise
    StoreUnavailable (VoidNotConfirmed with replica acks when the replicas did not confirm it: run it again with
    `again`, the ledger id that run took back)."""
    try:
        taken, ledger_id = scripts().void(keys=[answer_key], args=[token, again])
    except NotAcknowledged as exc:
        taken, ledger_id = exc.reply
        raise VoidNotConfirmed(str(exc), text(ledger_id) if int(taken) else None) from exc
    except redis.RedisError as exc:
        raise StoreUnavailable(str(exc)) from exc
    if not int(taken):
        return None
    return ledger_ref(text(ledger_id), bucket)
