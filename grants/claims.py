"""A chunk of grants: one claim script call a shopper (campaigns.redis_state.claim_call, with claim.lua's grant
argument), sent in one pipelined round trip. The script decides each as a claim (stock, per-user limit, ledger
entry, drain trigger); the Idempotency-Key of a grant is built from its batch, so a batch run again replays."""
from __future__ import annotations

from dataclasses import dataclass

import redis

from campaigns.redis_state import ClaimCode, StoreUnavailable, bucket_of, claim_call, claim_reply, scripts
from campaigns.redis_state.recovery import redis_now_ms
from core.codes import Code

# Not printable: no shopper's Idempotency-Key (printable ASCII, docs/api.md) can be a grant's.
GRANT_KEY_PREFIX = "grant\x1f"
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
            calls = [_grant_call(campaign_id, user_id, key, now_ms, buckets) for user_id in pending]
            replies = scripts().claim.each(calls)
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
            elif code == ClaimCode.LIMIT_REACHED:
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


def _grant_call(campaign_id: int, user_id: str, key: str, now_ms: int, buckets: int) -> tuple[list[str], list]:
    call = claim_call(campaign_id=campaign_id, user_id=user_id, idempotency_key=key, client_ip=None, now_ms=now_ms,
                      bucket=bucket_of(user_id, buckets), buckets=buckets)
    args = list(call.args)
    if buckets == 1:  # ARGV[13] and ARGV[14] before claim.lua's grant argument (ARGV[15])
        args += [1, "0"]
    args.append("1")
    return call.keys, args
