"""A chunk of grants: one claim script call a shopper (campaigns.redis_state.claim_call, with claim.lua's grant
argument), sent in one pipelined round trip. The script decides each as a claim (stock, per-user limit, ledger
entry, drain trigger); the Idempotency-Key of a grant is built from its batch, so a batch run again replays."""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import redis
from django.conf import settings

from campaigns.redis_state import (
    ClaimCode,
    StoreUnavailable,
    bucket_of,
    claim_call,
    claim_reply,
    redis_client,
    scripts,
)
from campaigns.redis_state.recovery import redis_now_ms
from core.codes import BUSINESS_CODES, Code
from core.hot import hot

try:
    from hiredis import pack_command
except ImportError:  # redis-py packs them (scripts().claim.each)
    pack_command = None  # type: ignore[assignment]

# Not printable: no shopper's Idempotency-Key (printable ASCII, docs/api.md) can be a grant's.
GRANT_KEY_PREFIX = "grant\x1f"
# The shopper holds the campaign's per-user limit, or their group's (docs/api.md: both counted limit_reached).
LIMITS = (int(ClaimCode.LIMIT_REACHED), BUSINESS_CODES["group_limit_reached"])
PART = 250  # calls written at once: the next part is packed while Redis runs this one
ROUNDS = 5  # a chunk's calls answered "too late" (Redis stalled past their deadline) are sent again, this often


def grant_key(batch: str) -> str:
    """The Idempotency-Key of a batch's grants (one a shopper: the claim's keys are the shopper's own)."""
    return GRANT_KEY_PREFIX + batch


class GrantStopped(Exception):
    """The campaign refused the chunk as a whole (ended, paused, its state gone from Redis): nothing of what the
    script answered is counted; the batch stops and is resumed once the campaign is granted again."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class ChunkCounts:
    granted: int = 0
    limit_reached: int = 0
    sold_out: int = 0
    already_granted: int = 0
    trigger_drain: bool = False


def _ledger_ms(ledger_id: str) -> int:
    return int(ledger_id.partition("-")[0])


def grant_chunk(*, campaign_id: int, user_ids: list[str], batch: str, started_ms: int, buckets: int = 1
                ) -> ChunkCounts:
    """Grant one coupon of the campaign to each of `user_ids` (valid, distinct), in one pipeline. A grant the
    script replays as claimed counts granted when its ledger entry is from this run (>= `started_ms`, Redis's
    clock: a chunk run again after a crash), already_granted when an earlier run made it.

    Of a campaign split into buckets each shopper is granted on their own bucket (sold_out when it is empty).
    Raise GrantStopped, StoreUnavailable (nothing is known of the chunk: run it again; it replays).
    """
    counts = ChunkCounts()
    key = grant_key(batch)
    pending = user_ids
    for _ in range(ROUNDS):
        if not pending:
            return counts
        try:
            now_ms = redis_now_ms()
            parts = ([_grant_call(campaign_id, user_id, key, now_ms, buckets) for user_id in pending[i:i + PART]]
                     for i in range(0, len(pending), PART))
            replies = _run_claims(parts)
        except redis.RedisError as exc:  # NotAcknowledged too: a grant replicas did not confirm is not counted
            raise StoreUnavailable(f"grants of campaign {campaign_id}: {exc}") from exc
        again = []
        for user_id, raw in zip(pending, replies, strict=True):
            code, ledger_id, flags = claim_reply(raw)
            if code == ClaimCode.CLAIMED:
                if flags & 1 and _ledger_ms(ledger_id) < started_ms:
                    counts.already_granted += 1
                else:
                    counts.granted += 1
                counts.trigger_drain = counts.trigger_drain or bool(flags & 2)
            elif code in LIMITS:
                counts.limit_reached += 1
            elif code == ClaimCode.SOLD_OUT:
                counts.sold_out += 1
            elif code == ClaimCode.OTHER_BUCKETS:
                buckets = int(ledger_id)
                again.append(user_id)
            elif code in (ClaimCode.TOO_LATE, ClaimCode.RATE_LIMITED):
                again.append(user_id)
            elif code == ClaimCode.NO_STATE:
                raise GrantStopped(code, f"campaign {campaign_id} has no state in Redis (rebuild it)")
            else:
                why = {int(Code.ENDED): "has ended", int(Code.PAUSED): "is paused"}.get(code, f"answered {code}")
                raise GrantStopped(code, f"campaign {campaign_id} {why}")
        pending = again
    raise StoreUnavailable(f"grants of campaign {campaign_id}: Redis answered too late {ROUNDS} times")


def _run_claims(parts: Iterator[list[tuple[list[str], list]]]) -> list[Any]:
    """Run the claim script once for each call of `parts`, in order: scripts().claim.each, but on one Redis (no
    replica acks, not a cluster) packed by hiredis and written on one connection, a part while Redis runs the one
    before (its replies read after): redis-py's pipeline packed each call's 21 arguments in Python, then waited for
    all (100 -> 30 us a grant in this process, bench/grants_bench.py)."""
    client = redis_client()
    script = scripts().claim
    if hot().replica_acks or settings.COUPONS_REDIS_CLUSTER or pack_command is None:
        return script.each([call for part in parts for call in part])  # with its WAIT, or a cluster's routing
    pool = client.connection_pool
    connection = pool.get_connection()
    replies: list[Any] = []
    sent: list[list[tuple[list[str], list]]] = []
    try:
        for part in parts:
            connection.send_packed_command(
                [b"".join(pack_command(("EVALSHA", script.sha, len(keys), *keys, *args)) for keys, args in part)])
            sent.append(part)
            if len(sent) > 1:
                _read_replies(connection, sent[-2], replies)
        if sent:
            _read_replies(connection, sent[-1], replies)
    except BaseException:
        connection.disconnect()  # replies unread: never hand this connection on
        raise
    finally:
        pool.release(connection)
    if any(isinstance(reply, redis.exceptions.NoScriptError) for reply in replies):
        return script.each([call for part in sent for call in part])  # those that ran replay (their key)
    return replies


def _read_replies(connection: Any, part: list[Any], replies: list[Any]) -> None:
    for _ in part:
        try:
            replies.append(connection.read_response())
        except redis.exceptions.NoScriptError as exc:  # Redis lost its scripts: each() sends them whole
            replies.append(exc)


def _grant_call(campaign_id: int, user_id: str, key: str, now_ms: int, buckets: int) -> tuple[list[str], list]:
    call = claim_call(campaign_id=campaign_id, user_id=user_id, idempotency_key=key, client_ip=None, now_ms=now_ms,
                      bucket=bucket_of(user_id, buckets), buckets=buckets, grant=True)
    return call.keys, call.args
