"""The claim: the script's call (ClaimCall, claim_call) and reply, its steps (ClaimFlow: the checked claim and its
call), the same for a thread (run_flow) and an event loop (run_flow_async), and its one outcome (ClaimOutcome); a
lost reply is read back (recovery.py)."""
from __future__ import annotations

import asyncio
import enum
import random
import time
from typing import Any, NamedTuple

import redis

from core.errors import SLUGS, Code, StoreUnavailable
from core.hot import hot, unique_hex

from ..redis_async import AsyncRedis, NotAcknowledged, NotSent
from .buckets import EMPTY_FOR_SECONDS, empty_until, known_buckets, move_counts_of, move_stock, remember_buckets
from .clients import async_client
from .keys import bucket_of, campaign_keys, claim_id_of, key_digest, ledger_ref, remember_group
from .lua import scripts, text
from .recovery import (
    DEADLINE_MARGIN_MS,
    OWN_ANSWER_KEEP_MS,
    UNREADABLE,
    ClaimOutcomeUnknown,
    redis_now_ms,
    redis_now_ms_async,
    stored_answer_after,
    stored_answer_after_async,
)


class ClaimCode(enum.IntEnum):
    """claim.lua's answers: the registry's business codes (core.errors, the script's numbers checked against it by
    tests/core/test_errors.py) and the script's own, negative, never answered as they are."""

    CLAIMED = int(Code.DONE)
    LIMIT_REACHED = int(Code.LIMIT_REACHED)
    SOLD_OUT = int(Code.SOLD_OUT)
    NOT_STARTED = int(Code.NOT_STARTED)
    ENDED = int(Code.ENDED)
    PAUSED = int(Code.PAUSED)
    GROUP_LIMIT_REACHED = int(Code.GROUP_LIMIT_REACHED)
    NOT_ELIGIBLE = int(Code.NOT_ELIGIBLE)  # the campaign's audience tags or channels: not the shopper's
    NO_STATE = -1
    RATE_LIMITED = -2
    TOO_LATE = -3
    OTHER_BUCKETS = -4  # claim.lua: the campaign has another bucket count than the caller assumed (never answered)
    DRY = -5  # claim.lua: this bucket's stock ran out; stock is moved here from another bucket (never answered)
    GROUPED = -6  # claim.lua: the campaign is of a group, its keys are the group's (never answered)


# The slug of each answer of the claim script: the registry's (core.codes) for the answered codes, looked up once
# here, not a claim; the script's own (negative) codes are never answered, their names stand in.
CLAIM_STATUSES = {code: SLUGS[code] if code else "claimed" for code in ClaimCode if code >= 0}
_STATUSES = {**{code: code.name.lower() for code in ClaimCode}, **CLAIM_STATUSES}


class ClaimOutcome(NamedTuple):  # a tuple: built on every claim, 4x cheaper than a frozen dataclass
    """A claim's outcome: what the script's reply means (claim_result), what the use case decides
    (orders.claim) and what both doors answer as it is ({code, status, claim_id, campaign_id}, docs/api.md)."""

    code: ClaimCode
    status: str
    campaign_id: int
    claim_id: str | None  # "<campaign id>-<ledger ref>" of a claimed (or replayed claimed) answer, else None
    replayed: bool = False
    trigger_drain: bool = False  # the script asks for a drain trigger (never answered)

    @property
    def ledger_id(self) -> str:
        """The claim's ledger ref (keys.ledger_ref): its claim id past the campaign's; "" without one."""
        return self.claim_id.partition("-")[2] if self.claim_id else ""


class ClaimCall:
    """One claim script call (claim_call): its keys and arguments, where it leaves its answer, and its deadline,
    for a shopper (campaign, user, Idempotency-Key, client address) on a bucket. A claim's flow (ClaimFlow) is its
    call, prepared again for each run of the script."""

    __slots__ = ("campaign_id", "user_id", "idempotency_key", "client_ip", "bucket", "keys", "args", "idem_key",
                 "answer_field", "deadline_ms", "token", "audience", "storefront")
    keys: list[str]
    args: list[str | int]
    idem_key: str  # where the answer is left: the Idempotency-Key's string, or the second's hash (own answers)
    answer_field: str  # the answer's field in the second's hash ("" when it is the Idempotency-Key's own string)
    deadline_ms: int
    token: str  # this request's, stored with its answer (only this request may void its claim)
    audience: str  # the shopper's tags and storefront channels as claim.lua reads them (claim_audience), or ""
    storefront: str  # the id of the storefront whose key signed the shopper's token, "" for the default key's

    def __init__(self, campaign_id: int, user_id: str, idempotency_key: str | None, client_ip: str | None,
                 bucket: int = 0, audience: str = "", storefront: str = "") -> None:
        self.campaign_id, self.user_id = campaign_id, user_id
        self.idempotency_key, self.client_ip = idempotency_key, client_ip
        self.bucket, self.audience, self.storefront = bucket, audience, storefront

    learn = True  # what keys.campaign_keys does for a campaign whose group this process does not know

    def prepare(self, now_ms: int, buckets: int = 1, dry: bool = False, grant: bool = False) -> ClaimCall:
        """Build the script's keys and arguments (claim.lua documents them) on self.bucket; `now_ms` is Redis's
        clock. Of a campaign split into `buckets`; `dry`: answer -5 rather than sold_out; `grant`: an operator's.
        Return self."""
        keys = campaign_keys(self.campaign_id, self.bucket, learn=self.learn)
        # Every claim stores its answer: under the shopper's Idempotency-Key (kept 24 h), or in its second's hash
        # (kept seconds), so that when the reply is lost the outcome can still be read (see run_claim).
        conf = hot()
        user_id, idempotency_key, client_ip = self.user_id, self.idempotency_key, self.client_ip
        self.token = token = unique_hex()
        second = keys.second(int(time.time()))
        self.deadline_ms = deadline_ms = now_ms + int(conf.redis_timeout * 1000) - DEADLINE_MARGIN_MS
        call_keys = [keys.meta, keys.stock, keys.users, keys.ledger, second]
        if idempotency_key is None:
            self.idem_key, answer = second, own_answer_field(token)
            self.answer_field = answer
        else:
            digest = key_digest(idempotency_key)
            self.idem_key = idem_key = keys.idempotency_of_digest(user_id, digest)
            answer = token
            self.answer_field = ""
            call_keys.append(idem_key)
        args: list[str | int] = [user_id, deadline_ms, answer, conf.shopper_per_second, f"u:{user_id}",
                                 conf.ip_per_second if client_ip else 0, f"i:{client_ip}", OWN_ANSWER_KEEP_MS,
                                 conf.drain_trigger_ttl_ms]
        if idempotency_key is not None:  # with replica acks a repeat is told only once confirmed (claim.lua, void.lua)
            args += [digest, conf.idempotency_ttl_ms, 1 if conf.replica_acks else 0]
        audience, storefront = self.audience, self.storefront
        if buckets > 1 or grant or keys.group or audience or storefront:
            if idempotency_key is None:
                args += ["", 0, 0]
            args += [buckets, "1" if dry else "0"]
            if grant or keys.group or audience or storefront:
                args.append("1" if grant else "0")
            if keys.group:  # only a campaign of a group pays for its count (claim.lua's last key, ARGV[16])
                call_keys.append(keys.group)
                args.append(keys.group_limit)
            elif audience or storefront:
                args.append("")
            if audience or storefront:  # a shopper with tags or a storefront's channels (claim.lua's ARGV[17])
                args.append(audience or "|")
            if storefront:  # only a storefront's shopper: its id into the ledger entry (claim.lua's ARGV[18])
                args.append(storefront)
        self.keys, self.args = call_keys, args
        return self

    def unknown(self, exc: Exception) -> ClaimOutcomeUnknown:
        """The error of this claim's outcome unknown (chained to `exc`)."""
        unknown = ClaimOutcomeUnknown(str(exc), campaign_id=self.campaign_id, user_id=self.user_id,
                                      answer_key=self.idem_key, token=self.token, bucket=self.bucket)
        unknown.__cause__ = exc
        return unknown


def claim_audience(tags: str | None, channels: frozenset[str]) -> str:
    """The shopper's audience as claim.lua's ARGV[17] reads it: ",<tags as sent>,|,<channels>," ("" for none: a
    shopper without tags of the default key, whom only a campaign asking nothing admits)."""
    if not tags and not channels:
        return ""
    return f",{tags or ''},|,{','.join(sorted(channels))},"


def own_answer_field(token: str) -> str:
    """The field of a claim made without an Idempotency-Key in its second's hash (CampaignKeys.second)."""
    return f"a:{token}"


def claim_call(
    *, campaign_id: int, user_id: str, idempotency_key: str | None, client_ip: str | None, now_ms: int,
    bucket: int = 0, buckets: int = 1, dry: bool = False, grant: bool = False, audience: str = "",
) -> ClaimCall:
    """The claim script's call for one shopper (campaign, user, Idempotency-Key, client address), for a caller that
    runs the script itself (a pipeline of many shoppers' claims): its .keys and .args (claim.lua documents them);
    `now_ms` is Redis's clock. Of a campaign split into `buckets`, on the shopper's `bucket`; `dry`: answer -5
    rather than sold_out; `grant`: an operator's grant (claim.lua's ARGV[15]). Its reply is read by claim_result()."""
    return ClaimCall(campaign_id, user_id, idempotency_key, client_ip, bucket, audience).prepare(
        now_ms, buckets, dry, grant)


class ClaimFlow(ClaimCall):
    """The steps of one claim, the same for the thread (run_claim) and the event loop (run_claim_async): the
    claim script on the shopper's bucket; of a campaign split into buckets, when that bucket is dry, stock moved
    to it from another bucket (move_stock) and the script again, until it answers, or until every other bucket
    gave nothing, and no stock moved into any of them since (their move counters, read once more: else those are
    asked again): then the script once more without "dry", which answers sold_out (stored, so a repeat of its
    Idempotency-Key replays it) unless stock came meanwhile. Each round moves at least one unit out of the other
    buckets or drops an empty one, so it ends; past the claim's time budget it is a 503 (StoreUnavailable).

    The flow is the checked claim itself (who claims, on which campaign, with which key, from where: the doors'
    checks build it, orders.apis) and its script call (ClaimCall, prepared again for each run: call()). A step is
    None (run the script: call()), a donor bucket (move stock from it: moved()), a list of the empty donors (read
    their move counters: quiet()) or the ClaimOutcome."""

    __slots__ = ("buckets", "donors", "final", "give_up", "recounted", "empty")
    learn = False  # never waits for a lookup (on an event loop too): claim.lua's -6 tells a grouped campaign

    def __init__(self, campaign_id: int, user_id: str, idempotency_key: str | None, client_ip: str | None,
                 audience: str = "", storefront: str = "") -> None:
        self.campaign_id, self.user_id = campaign_id, user_id
        self.idempotency_key, self.client_ip, self.audience = idempotency_key, client_ip, audience
        self.storefront = storefront
        self.buckets = buckets = known_buckets.get(campaign_id, 1)
        self.bucket = bucket_of(user_id, buckets)  # the shopper's own
        self.donors: list[int] | None = None
        self.final = False
        self.give_up = 0.0
        self.recounted = False
        self.empty: dict[int, int] = {}  # donor -> its move counter when found empty

    def again(self) -> ClaimFlow:
        """A new flow of the same claim (the script again after its campaign was loaded into Redis)."""
        return ClaimFlow(self.campaign_id, self.user_id, self.idempotency_key, self.client_ip, self.audience,
                         self.storefront)

    def call(self, now_ms: int) -> ClaimFlow:
        self.prepare(now_ms, self.buckets, self.buckets > 1 and not self.final)
        return self

    def answer(self, raw: Any) -> ClaimOutcome | int | list[int] | None:
        """The next step after the script's reply."""
        code, counted, _ = claim_reply(raw)
        if code == ClaimCode.OTHER_BUCKETS and not self.recounted:
            self.recounted = True  # learnt from Redis: at most once per claim
            self.buckets = int(counted)
            remember_buckets(self.campaign_id, self.buckets)
            self.bucket = bucket_of(self.user_id, self.buckets)
            return None
        if code == ClaimCode.OTHER_BUCKETS:
            raise StoreUnavailable(f"campaign {self.campaign_id}: its buckets disagree on their count")
        if code == ClaimCode.GROUPED:  # learnt from its home, once: a campaign's group never changes in Redis
            remember_group(self.campaign_id, bytes.fromhex(counted).decode(), _)
            remember_buckets(self.campaign_id, 1)
            self.buckets, self.bucket = 1, 0
            return None
        if code != ClaimCode.DRY:
            return claim_result(raw, self.campaign_id, self.bucket)
        if self.donors is None:
            start = random.randrange(self.buckets)  # shoppers of one dry bucket spread over the donors
            now = time.monotonic()
            self.donors = []
            for b in (*range(start, self.buckets), *range(start)):
                until, moved = empty_until.get((self.campaign_id, b), (0.0, 0))
                if b == self.bucket:
                    continue
                if until > now:  # found empty a moment ago: only its counter is read again (quiet())
                    self.empty[b] = moved
                else:
                    self.donors.append(b)
            self.give_up = now + hot().redis_timeout * 2
        return self._next_donor()

    def moved(self, donor: int, result: tuple[int, int]) -> int | list[int] | None:
        """The next step after move_stock() from `donor` gave (units, its move counter); units 0 or less: it had
        none."""
        units, moved = result
        if units > 0:
            return None
        assert self.donors is not None
        self.donors.remove(donor)
        self.empty[donor] = moved
        if len(empty_until) > 10_000:
            empty_until.clear()
        empty_until[(self.campaign_id, donor)] = (time.monotonic() + EMPTY_FOR_SECONDS, moved)
        return self._next_donor()

    def quiet(self, counters: list[int]) -> int | list[int] | None:
        """The next step after the empty donors' move counters were read again (in the order quiet_check())."""
        assert self.donors is not None
        for donor, moved in zip(sorted(self.empty), counters, strict=True):
            if moved != self.empty[donor]:  # stock moved into it since it was found empty: ask it again
                del self.empty[donor]
                empty_until.pop((self.campaign_id, donor), None)
                self.donors.append(donor)
        if self.donors:
            return self._next_donor()
        self.final = True
        return None

    def _next_donor(self) -> int | list[int] | None:
        if time.monotonic() > self.give_up:
            raise StoreUnavailable(f"campaign {self.campaign_id}: no stock moved within the claim's time")
        if self.donors:
            return self.donors[0]
        return sorted(self.empty)  # read their counters: quiet()


def run_claim(
    *, campaign_id: int, user_id: str, idempotency_key: str | None, client_ip: str | None = None
) -> ClaimOutcome:
    """Run the claim (ClaimFlow) for a validated campaign id, user id and (normalized) client IP.

    Raise StoreUnavailable.
    """
    return run_flow(ClaimFlow(campaign_id, user_id, idempotency_key, client_ip))


def run_flow(flow: ClaimFlow) -> ClaimOutcome:
    """Run a claim's flow on this thread: its outcome, whatever it is (NO_STATE, RATE_LIMITED, ... included).

    Raise StoreUnavailable.
    """
    step: ClaimOutcome | int | list[int] | None = None
    while True:
        if step is None:
            step = flow.answer(_claim_once(flow.call(redis_now_ms())))
        elif isinstance(step, ClaimOutcome):
            return step
        elif isinstance(step, list):
            step = flow.quiet(move_counts_of(flow.campaign_id, step))
        else:
            step = flow.moved(step, move_stock(flow.campaign_id, step, flow.bucket))


def _claim_once(call: ClaimCall) -> Any:
    """Run the claim script once; its reply, or the one read back when the reply was lost."""
    try:
        return scripts().claim(keys=call.keys, args=call.args)
    except NotAcknowledged as exc:
        return _unless_claimed(exc, call)
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        # The reply is lost, not necessarily the claim: once the deadline has passed the script can no longer
        # run, so its stored answer (or its absence) is the outcome. Never answer 503 for a claim that happened.
        return _found_or_unavailable(stored_answer_after(call.idem_key, call.answer_field, call.deadline_ms), exc,
                                    call)
    except redis.RedisError as exc:
        raise StoreUnavailable(str(exc)) from exc


def _found_or_unavailable(stored: tuple[int, str] | None | object, exc: Exception, call: ClaimCall) -> str:
    """The script's reply rebuilt from its stored answer (the drain flag set: a trigger costs nothing);
    StoreUnavailable when it never ran, ClaimOutcomeUnknown when the answer could not be read."""
    if stored is UNREADABLE:
        raise call.unknown(exc)
    if stored is None:
        raise StoreUnavailable(str(exc)) from exc
    assert isinstance(stored, tuple)
    if stored[0] == ClaimCode.CLAIMED and hot().replica_acks:
        # Read back from the master, but no replica confirmed it to this request: never answered claimed.
        raise call.unknown(exc)
    return f"{stored[0]}:{stored[1]}:2"


def _unless_claimed(exc: NotAcknowledged, call: ClaimCall) -> Any:
    """The reply of a claim the replicas did not confirm in time: a claim (or the replay of one) may be lost
    by a failover, so it is answered 503 and taken back (ClaimOutcomeUnknown, as a lost reply); any other
    answer promised nothing and stands."""
    if claim_reply(exc.reply)[0] != ClaimCode.CLAIMED:
        return exc.reply
    raise call.unknown(exc)


_CODES = {code.value: code for code in ClaimCode}


def claim_reply(raw: bytes | str) -> tuple[int, str, int]:
    """The claim script's reply "<code>:<ledger id>:<flags>" (claim.lua) as (code, ledger id, flags)."""
    code, ledger_id, flags = text(raw).split(":")
    return int(code), ledger_id, int(flags)


def claim_result(raw: bytes | str, campaign_id: int, bucket: int = 0) -> ClaimOutcome:
    """The outcome of the claim script's reply (claim_reply) on `bucket` of `campaign_id`: a claimed answer's claim
    id is "<campaign id>-<ledger ref>" (keys.ledger_ref)."""
    code, ledger_id, flags = claim_reply(raw)
    claim_code = _CODES[code]
    claimed = code == ClaimCode.CLAIMED
    return ClaimOutcome(
        claim_code, _STATUSES[claim_code], campaign_id,
        claim_id_of(campaign_id, ledger_ref(ledger_id, bucket) if bucket else ledger_id) if claimed else None,
        bool(flags & 1), bool(flags & 2),
    )


async def run_claim_async(
    *, campaign_id: int, user_id: str, idempotency_key: str | None, client_ip: str | None = None
) -> ClaimOutcome:
    """run_claim() for an event loop (run_flow_async)."""
    return await run_flow_async(ClaimFlow(campaign_id, user_id, idempotency_key, client_ip))


async def run_flow_async(flow: ClaimFlow) -> ClaimOutcome:
    """run_flow() for an event loop: the script through the loop's auto-pipelined connection
    (campaigns/redis_async.py; on a cluster, its connection to the master of the slot of the call's first key,
    the shopper's bucket's); the rare moves of stock between buckets in a thread.

    Raise StoreUnavailable.
    """
    client = async_client()
    step: ClaimOutcome | int | list[int] | None = None
    while True:
        if step is None:
            try:
                now_ms = await redis_now_ms_async(client)
            except redis.RedisError as exc:
                raise StoreUnavailable(str(exc)) from exc
            step = flow.answer(await _claim_once_async(client, flow.call(now_ms)))
        elif isinstance(step, ClaimOutcome):
            return step
        elif isinstance(step, list):
            step = flow.quiet(await asyncio.to_thread(move_counts_of, flow.campaign_id, step))
        else:
            step = flow.moved(step, await asyncio.to_thread(move_stock, flow.campaign_id, step, flow.bucket))


async def _claim_once_async(client: AsyncRedis, call: ClaimCall) -> Any:
    script = scripts().claim
    try:
        return await client.evalsha(script.sha, script.script, call.keys, call.args)
    except NotAcknowledged as exc:
        return _unless_claimed(exc, call)
    except NotSent as exc:  # never reached Redis: nothing to read back, nothing to take back
        raise StoreUnavailable(str(exc)) from exc
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        return _found_or_unavailable(await stored_answer_after_async(call.idem_key, call.answer_field,
                                                                     call.deadline_ms), exc, call)
    except redis.RedisError as exc:
        raise StoreUnavailable(str(exc)) from exc
