"""A campaign's state in Redis: key names, the Lua scripts and their Python wrappers.

Every key of one campaign carries the hash tag {c<id>}, so each script touches one slot and the design
runs unchanged on Redis Cluster. A hot campaign may be split into buckets (Campaign.buckets): bucket b >= 1 has
the tag {c<id>.<b>}, its own slot, its share of the stock, its shoppers' counts, ledger and answers; a shopper
belongs to bucket bucket_of(user id, buckets), and a bucket that runs dry takes stock from the others
(move_stock: two scripts, one per slot, never a cross-slot one). docs/design.md, "Buckets".
Keys are built only from validated integers and user ids; an
Idempotency-Key (free text) enters a key name only as its SHA-256.
"""
from __future__ import annotations

import asyncio
import enum
import hashlib
import logging
import random
import threading
import time
import weakref
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, NamedTuple, cast

import redis
from django.conf import settings
from redis.backoff import NoBackoff
from redis.retry import Retry

from core.errors import StoreUnavailable
from core.hot import hot, unique_hex

from .redis_async import AsyncRedis, ClusterPipelinedRedis, NotAcknowledged, NotSent, PipelinedRedis

log = logging.getLogger(__name__)
LUA_DIR = Path(__file__).resolve().parent / "lua"
DRAIN_GROUP = "drain"


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


class ClaimCode(enum.IntEnum):
    CLAIMED = 0
    LIMIT_REACHED = 1
    SOLD_OUT = 2
    NOT_STARTED = 3
    ENDED = 4
    PAUSED = 5
    NO_STATE = -1
    RATE_LIMITED = -2
    TOO_LATE = -3
    OTHER_BUCKETS = -4  # claim.lua: the campaign has another bucket count than the caller assumed (never answered)
    DRY = -5  # claim.lua: this bucket's stock ran out; stock is moved here from another bucket (never answered)


@dataclass(frozen=True, slots=True)
class CampaignKeys:
    campaign_id: int
    meta: str
    stock: str
    users: str
    ledger: str
    cancelled: str
    # A codes campaign's shared code (code_take.lua): uses left, and the uses taken (one member each). Not the
    # grab's stock key, so the claim script finds no stock for a codes campaign and never sells from it.
    uses: str = ""
    takes: str = ""
    bucket: int = 0
    tag: str = ""  # "cpn:{c<id>}:" (bucket 0), "cpn:{c<id>.<b>}:" (bucket b)
    # A bucket's moves of stock (move_out.lua, move_in.lua): pending moves out, every move out, every move in.
    moves: str = ""
    received: str = ""
    sent: str = ""

    @property
    def move_keys(self) -> list[str]:
        return [self.moves, self.sent, self.received]

    def second(self, window: int) -> str:
        """The hash of one second (`window`, unix seconds) of claims: its rate counters (field "c" the campaign's,
        "u:<user id>" a shopper's, "i:<ip>" an address's) and the answers of its claims made without an
        Idempotency-Key ("a:<request token>"); it expires OWN_ANSWER_KEEP_MS after its first claim."""
        return f"{self.tag}s:{window}"

    def idempotency(self, user_id: str, key: str) -> str:
        return self.idempotency_of_digest(user_id, key_digest(key))

    def idempotency_of_digest(self, user_id: str, digest: str) -> str:
        return f"{self.tag}idem:{user_id}:{digest}"

    @property
    def state(self) -> list[str]:
        """The keys that hold the campaign's own state (they expire at its end plus the grace)."""
        return [self.meta, self.stock, self.users, self.ledger, self.cancelled]

    def state_of(self, *, codes: bool) -> list[str]:
        """The state keys of a grab campaign, or of a codes campaign: the same layout (load_state.lua,
        extend.lua), its uses in place of the stock and its takes in place of the given-back claims."""
        return [self.meta, self.uses, self.users, self.ledger, self.takes] if codes else self.state

    def left(self, *, codes: bool) -> str:
        """The key of what is left: a grab campaign's stock, a codes campaign's uses."""
        return self.uses if codes else self.stock


def key_digest(idempotency_key: str) -> str:
    """What stands for a shopper's Idempotency-Key in key names, the ledger and PostgreSQL (never the key)."""
    return hashlib.sha256(idempotency_key.encode()).hexdigest()[:32]


def campaign_keys(campaign_id: int, bucket: int = 0) -> CampaignKeys:
    """The keys of a campaign's bucket (bucket 0: the whole campaign when it is not split)."""
    keys = _keys.get((campaign_id, bucket))
    if keys is None:
        if type(campaign_id) is not int or campaign_id < 1:
            raise ValueError(f"not a campaign id: {campaign_id!r}")
        if type(bucket) is not int or not 0 <= bucket < MAX_BUCKETS:
            raise ValueError(f"not a bucket: {bucket!r}")
        if len(_keys) > 10_000:
            _keys.clear()
        tag = f"cpn:{{c{campaign_id}}}:" if bucket == 0 else f"cpn:{{c{campaign_id}.{bucket}}}:"
        keys = _keys[(campaign_id, bucket)] = CampaignKeys(
            campaign_id, tag + "meta", tag + "stock", tag + "users", tag + "ledger", tag + "cancelled",
            tag + "uses", tag + "takes", bucket, tag, tag + "moves", tag + "received", tag + "sent",
        )
    return keys


_keys: dict[tuple[int, int], CampaignKeys] = {}
MAX_BUCKETS = 64  # campaigns.models.MAX_BUCKETS


def bucket_of(user_id: str, buckets: int) -> int:
    """The bucket a shopper belongs to: a stable hash of the user id (CRC-32, the same in every process and
    release; never Python's hash(), which is salted per process)."""
    return 0 if buckets == 1 else zlib.crc32(user_id.encode()) % buckets


def ledger_ref(ledger_id: str, bucket: int) -> str:
    """A claim's ledger entry across the campaign's buckets: the stream id, "-<bucket>" after it beyond bucket 0
    (two buckets' streams may issue the same id). A claim id is "<campaign id>-<ref>"."""
    return ledger_id if bucket == 0 or not ledger_id else f"{ledger_id}-{bucket}"


def split_ref(ref: str) -> tuple[str, int]:
    """(stream id, bucket) of a ledger_ref()."""
    ms, _, rest = ref.partition("-")
    seq, _, bucket = rest.partition("-")
    return f"{ms}-{seq}", int(bucket) if bucket else 0


# The bucket count of each campaign this process met (it never changes once a campaign is in Redis): the claim
# assumes 1 for a campaign it does not know, and claim.lua corrects it (-4) once.
_buckets: dict[int, int] = {}


def buckets_of(campaign_id: int) -> int:
    """A loaded campaign's bucket count, as its bucket 0 says (1 when Redis holds none). Raise StoreUnavailable."""
    known = _buckets.get(campaign_id)
    if known is not None:
        return known
    return bucket_counts([campaign_id])[campaign_id]


def bucket_counts(campaign_ids: list[int]) -> dict[int, int]:
    """buckets_of() of several campaigns, those not known yet read in one pipelined round trip."""
    unknown = [cid for cid in campaign_ids if cid not in _buckets]
    if unknown:
        try:
            pipe = redis_client().pipeline(transaction=False)
            for campaign_id in unknown:
                pipe.hget(campaign_keys(campaign_id).meta, "buckets")
            for campaign_id, count in zip(unknown, pipe.execute(), strict=True):
                if count is not None:
                    remember_buckets(campaign_id, int(count))
        except redis.RedisError as exc:
            raise StoreUnavailable(str(exc)) from exc
    return {cid: _buckets.get(cid, 1) for cid in campaign_ids}


def forget_empty_buckets(campaign_id: int) -> None:
    """Forget which buckets of the campaign this process found empty (stock came back: drawn on at once)."""
    for key in [key for key in _empty_until if key[0] == campaign_id]:
        _empty_until.pop(key, None)


def forget_bucket_counts() -> None:
    """Forget the bucket counts this process met, and which buckets it found empty."""
    _buckets.clear()
    _empty_until.clear()


def remember_buckets(campaign_id: int, buckets: int) -> None:
    if len(_buckets) > 10_000:
        _buckets.clear()
    _buckets[campaign_id] = buckets


def split_stock(stock: int, buckets: int) -> list[int]:
    """Each bucket's share of `stock`: equal, the first ones one more."""
    return [stock // buckets + (1 if b < stock % buckets else 0) for b in range(buckets)]


# One client per process. No retries: a claim script must never run twice because a reply was slow,
# and a dead Redis must be a fast 503 (timeouts well under a second).
_client: redis.Redis | None = None
_client_lock = threading.Lock()


def redis_client() -> redis.Redis:
    global _client
    if _client is None:
        with _client_lock:
            if _client is None and settings.COUPONS_REDIS_CLUSTER:
                from .redis_cluster import cluster_client  # REDIS_URL is a seed node of a Redis Cluster

                _client = cluster_client(settings.REDIS_URL, timeout=settings.COUPONS_REDIS_SOCKET_TIMEOUT,
                                         max_connections=settings.COUPONS_REDIS_MAX_CONNECTIONS)
            elif _client is None and settings.REDIS_SENTINELS:
                _client = _sentinel_client(settings.COUPONS_REDIS_SOCKET_TIMEOUT,
                                           max_connections=settings.COUPONS_REDIS_MAX_CONNECTIONS)
            elif _client is None:
                timeout = settings.COUPONS_REDIS_SOCKET_TIMEOUT
                pool = redis.BlockingConnectionPool.from_url(
                    settings.REDIS_URL,
                    max_connections=settings.COUPONS_REDIS_MAX_CONNECTIONS,
                    timeout=timeout,
                    socket_timeout=timeout,
                    socket_connect_timeout=timeout,
                    health_check_interval=30,
                    retry=Retry(NoBackoff(), 0),
                )
                _client = redis.Redis(connection_pool=pool)
    return _client


def _sentinel_client(timeout: float, *, max_connections: int | None = None) -> redis.Redis:
    """A client of the master the sentinels (REDIS_SENTINELS) name REDIS_SENTINEL_MASTER: each new connection
    asks them where it is, and a connection to a demoted master (READONLY) is dropped, so the client follows a
    failover. REDIS_URL gives the password and the database only. No retries, like every client here."""
    from redis.sentinel import Sentinel

    options = redis.connection.parse_url(settings.REDIS_URL) if settings.REDIS_URL else {}
    options = {k: v for k, v in options.items() if k in ("username", "password", "db")}
    sentinel = Sentinel(settings.REDIS_SENTINELS, socket_timeout=timeout, socket_connect_timeout=timeout)
    extra = {"max_connections": max_connections} if max_connections else {}
    return sentinel.master_for(settings.REDIS_SENTINEL_MASTER, socket_timeout=timeout,
                               socket_connect_timeout=timeout, retry=Retry(NoBackoff(), 0), **options, **extra)


def reset_redis_client() -> None:
    """Forget the process's clients and everything learnt through them (after a settings change in tests, or a
    fork): the sync client, its scripts and the recovery client; every event loop's client, a running loop's
    included (each thread's last one, _this_thread); the campaigns' bucket counts and empty buckets; Redis's
    clock offset."""
    global _client, _scripts, _recovery, _this_thread
    from .redis_cluster import close

    with _client_lock:
        for sync_client in (_client, _recovery):
            if sync_client is not None:
                close(sync_client)
        _client = None
        _scripts = None
        _recovery = None
        forget_bucket_counts()
        _clock["offset_ms"], _clock["measured"] = 0.0, -1e9
        for client in list(_async_clients.values()):
            client.close()
        _async_clients.clear()
        _this_thread = threading.local()  # every thread's remembered (loop, client) gone at once


class _Script:
    """One of the Lua scripts, every one of which changes the campaign's state. With replica acks
    (COUPONS_REDIS_REPLICA_ACKS), it runs with a WAIT after it on the same connection (one round trip) and
    answers only once that many replicas hold its change: NotAcknowledged (with the script's reply) otherwise.

    A script that gives back (`gives_back`: cancel, a shared code's give-back, add_stock) answers its reply
    even then: it holds on the master, and a failover that lost it would only leave stock unsold (verify_campaign
    names it, reconcile returns it), never promise a coupon twice; raising would undo the PostgreSQL side of a
    change Redis already made."""

    def __init__(self, client: redis.Redis, name: str, *, gives_back: bool = False) -> None:
        self.client = client
        self.name, self.gives_back = name, gives_back
        self.registered = client.register_script((LUA_DIR / f"{name}.lua").read_text())
        self.sha, self.script = self.registered.sha, self.registered.script

    def __call__(self, *, keys: list[str], args: list[Any]) -> Any:
        if not hot().replica_acks:
            return self.registered(keys=keys, args=args)
        try:
            return self.each([(keys, args)])[0]  # the script and WAIT on one connection
        except NotAcknowledged as exc:
            if not self.gives_back:
                raise
            log.warning("%s: %s; it holds on the master", self.name, exc)
            return exc.reply

    def each(self, calls: list[tuple[list[str], list[Any]]]) -> list[Any]:
        """Run the script once for each (keys, args), in one pipelined round trip (each run atomic on its own,
        not the runs together), with replica acks as one call's; NotAcknowledged's reply is all the replies."""
        def send(command: str, body: str) -> list[Any]:
            pipe = self.client.pipeline(transaction=False)
            for keys, args in calls:  # pipe.evalsha: not on a cluster
                pipe.execute_command(command, body, len(keys), *keys, *args)
            return replicated(pipe)
        try:
            return send("EVALSHA", self.sha)
        except redis.exceptions.NoScriptError:  # Redis lost its scripts (SCRIPT FLUSH, a restart): send them whole
            return send("EVAL", cast(str, self.script))


def replicated(pipe: Any) -> list[Any]:
    """Execute a pipeline (not a MULTI); with replica acks, WAIT after its commands on the same connection and
    return the replies only once that many replicas hold what this connection wrote (and so everything the
    master held before it): raise NotAcknowledged, whose `reply` is the replies, when fewer confirmed it in time.
    The drain reads the ledger through it (orders/ledger.py): it never persists a claim a failover may lose.
    On a cluster the commands (of one slot) and the WAIT go on one connection of the slot's master
    (redis_cluster._ClusterPipeline.execute_then_wait: the cluster pipeline would send the WAIT elsewhere)."""
    conf = hot()
    if not conf.replica_acks:
        return list(pipe.execute())
    on_one_connection = getattr(pipe, "execute_then_wait", None)
    if on_one_connection is not None:
        *replies, replicas = on_one_connection(conf.replica_acks, conf.replica_ack_timeout_ms)
    else:
        pipe.execute_command("WAIT", conf.replica_acks, conf.replica_ack_timeout_ms)
        *replies, replicas = pipe.execute()
    if int(replicas) < conf.replica_acks:
        raise NotAcknowledged(replies[0] if len(replies) == 1 else replies, int(replicas))
    return replies


class _Scripts:
    def __init__(self, client: redis.Redis) -> None:
        self.claim = _Script(client, "claim")
        self.load_state = _Script(client, "load_state")
        self.cancel = _Script(client, "cancel", gives_back=True)
        self.compare_and_set = _Script(client, "compare_and_set")
        self.add_stock = _Script(client, "add_stock", gives_back=True)
        self.extend = _Script(client, "extend")
        self.void = _Script(client, "void")  # its change must be confirmed before the claim is cancelled (run_void)
        self.code_take = _Script(client, "code_take")
        self.code_give_back = _Script(client, "code_give_back", gives_back=True)
        self.move_out = _Script(client, "move_out")
        self.move_in = _Script(client, "move_in", gives_back=True)  # its donor gave already: never undone


_scripts: _Scripts | None = None


def scripts() -> _Scripts:
    global _scripts
    if _scripts is None:
        _scripts = _Scripts(redis_client())
    return _scripts


class ClaimResult(NamedTuple):  # a tuple: built on every claim, 4x cheaper than a frozen dataclass
    code: ClaimCode
    ledger_id: str
    replayed: bool
    trigger_drain: bool


class ClaimFlow:
    """The steps of one claim, the same for the thread (run_claim) and the event loop (run_claim_async): the
    claim script on the shopper's bucket; of a campaign split into buckets, when that bucket is dry, stock moved
    to it from another bucket (move_stock) and the script again, until it answers, or until every other bucket
    gave nothing, and no stock moved into any of them since (their move counters, read once more: else those are
    asked again): then the script once more without "dry", which answers sold_out (stored, so a repeat of its
    Idempotency-Key replays it) unless stock came meanwhile. Each round moves at least one unit out of the other
    buckets or drops an empty one, so it ends; past the claim's time budget it is a 503 (StoreUnavailable).

    A step is None (run the script: call()), a donor bucket (move stock from it: moved()), a list of the empty
    donors (read their move counters: quiet()) or the ClaimResult."""

    __slots__ = ("campaign_id", "user_id", "idempotency_key", "client_ip", "buckets", "home", "donors", "final",
                 "give_up", "recounted", "empty")

    def __init__(self, campaign_id: int, user_id: str, idempotency_key: str | None, client_ip: str | None) -> None:
        self.campaign_id, self.user_id = campaign_id, user_id
        self.idempotency_key, self.client_ip = idempotency_key, client_ip
        self.buckets = _buckets.get(campaign_id, 1)
        self.home = bucket_of(user_id, self.buckets)
        self.donors: list[int] | None = None
        self.final = False
        self.give_up = 0.0
        self.recounted = False
        self.empty: dict[int, int] = {}  # donor -> its move counter when found empty

    def call(self, now_ms: int) -> ClaimCall:
        return claim_call(campaign_id=self.campaign_id, user_id=self.user_id, idempotency_key=self.idempotency_key,
                          client_ip=self.client_ip, now_ms=now_ms, bucket=self.home, buckets=self.buckets,
                          dry=self.buckets > 1 and not self.final)

    def answer(self, raw: Any) -> ClaimResult | int | list[int] | None:
        """The next step after the script's reply."""
        code, counted, _ = claim_reply(raw)
        if code == ClaimCode.OTHER_BUCKETS and not self.recounted:
            self.recounted = True  # learnt from Redis: at most once per claim
            self.buckets = int(counted)
            remember_buckets(self.campaign_id, self.buckets)
            self.home = bucket_of(self.user_id, self.buckets)
            return None
        if code == ClaimCode.OTHER_BUCKETS:
            raise StoreUnavailable(f"campaign {self.campaign_id}: its buckets disagree on their count")
        if code != ClaimCode.DRY:
            return claim_result(raw, self.home)
        if self.donors is None:
            start = random.randrange(self.buckets)  # shoppers of one dry bucket spread over the donors
            now = time.monotonic()
            self.donors = []
            for b in (*range(start, self.buckets), *range(start)):
                until, moved = _empty_until.get((self.campaign_id, b), (0.0, 0))
                if b == self.home:
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
        if len(_empty_until) > 10_000:
            _empty_until.clear()
        _empty_until[(self.campaign_id, donor)] = (time.monotonic() + EMPTY_FOR_SECONDS, moved)
        return self._next_donor()

    def quiet(self, counters: list[int]) -> int | list[int] | None:
        """The next step after the empty donors' move counters were read again (in the order quiet_check())."""
        assert self.donors is not None
        for donor, moved in zip(sorted(self.empty), counters, strict=True):
            if moved != self.empty[donor]:  # stock moved into it since it was found empty: ask it again
                del self.empty[donor]
                _empty_until.pop((self.campaign_id, donor), None)
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


# The donors this process found empty, not asked again for a moment (only their move counters are read again,
# ClaimFlow.quiet: stock moved into one since is asked for): after a sell-out, a claim on an empty bucket (one with
# an Idempotency-Key, which the sold-out flag never answers) costs two scripts and one read, not a script per
# bucket. As short as the sold-out flag (orders/sold_out.py): stock given back to a bucket is drawn on within the
# second.
EMPTY_FOR_SECONDS = 0.5
_empty_until: dict[tuple[int, int], tuple[float, int]] = {}  # (campaign, bucket) -> (until, its move counter)


def run_claim(
    *, campaign_id: int, user_id: str, idempotency_key: str | None, client_ip: str | None = None
) -> ClaimResult:
    """Run the claim (ClaimFlow) for a validated campaign id, user id and (normalized) client IP.

    Raise StoreUnavailable.
    """
    flow = ClaimFlow(campaign_id, user_id, idempotency_key, client_ip)
    step: ClaimResult | int | list[int] | None = None
    while True:
        if step is None:
            step = flow.answer(_claim_once(flow.call(redis_now_ms())))
        elif isinstance(step, ClaimResult):
            return step
        elif isinstance(step, list):
            step = flow.quiet(move_counts_of(campaign_id, step))
        else:
            step = flow.moved(step, move_stock(campaign_id, step, flow.home))


def _claim_once(call: ClaimCall) -> Any:
    """Run the claim script once; its reply, or the one read back when the reply was lost."""
    try:
        return scripts().claim(keys=call.keys, args=call.args)
    except NotAcknowledged as exc:
        return _unless_claimed(exc, call)
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        # The reply is lost, not necessarily the claim: once the deadline has passed the script can no longer
        # run, so its stored answer (or its absence) is the outcome. Never answer 503 for a claim that happened.
        return _found_or_unavailable(_stored_answer_after(call.idem_key, call.answer_field, call.deadline_ms), exc,
                                     call)
    except redis.RedisError as exc:
        raise StoreUnavailable(str(exc)) from exc


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
    return {bucket: {_str(move_id): _move(value) for move_id, value in reply.items()}
            for bucket, reply in enumerate(replies)}


def _str(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _move(value: Any) -> tuple[int, int, int]:
    to, units, ms = _str(value).split(":")
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


UNREADABLE = object()  # the stored answer could not be read (Redis still unreachable)


class ClaimCall(NamedTuple):
    """One claim script call: its keys and arguments, where it leaves its answer, and its deadline."""

    keys: list[str]
    args: list[str | int]
    idem_key: str  # where the answer is left: the Idempotency-Key's string, or the second's hash (own answers)
    deadline_ms: int
    token: str  # this request's, stored with its answer (only this request may void its claim)
    campaign_id: int
    user_id: str
    bucket: int

    def unknown(self, exc: Exception) -> ClaimOutcomeUnknown:
        """The error of this claim's outcome unknown (chained to `exc`)."""
        unknown = ClaimOutcomeUnknown(str(exc), campaign_id=self.campaign_id, user_id=self.user_id,
                                      answer_key=self.idem_key, token=self.token, bucket=self.bucket)
        unknown.__cause__ = exc
        return unknown

    @property
    def answer_field(self) -> str:
        """The answer's field in the second's hash ("" when it is the Idempotency-Key's own string)."""
        return "" if len(self.keys) > 5 else own_answer_field(self.token)


def own_answer_field(token: str) -> str:
    """The field of a claim made without an Idempotency-Key in its second's hash (CampaignKeys.second)."""
    return f"a:{token}"


def claim_call(
    *, campaign_id: int, user_id: str, idempotency_key: str | None, client_ip: str | None, now_ms: int,
    bucket: int = 0, buckets: int = 1, dry: bool = False,
) -> ClaimCall:
    """Build the claim script's call (claim.lua documents the keys and arguments); `now_ms` is Redis's clock.
    Of a campaign split into `buckets`, on the shopper's `bucket`; `dry`: answer -5 rather than sold_out."""
    keys = campaign_keys(campaign_id, bucket)
    # Every claim stores its answer: under the shopper's Idempotency-Key (kept 24 h), or in its second's hash
    # (kept seconds), so that when the reply is lost the outcome can still be read (see run_claim).
    conf = hot()
    token = unique_hex()
    second = keys.second(int(time.time()))
    deadline_ms = now_ms + int(conf.redis_timeout * 1000) - DEADLINE_MARGIN_MS
    call_keys = [keys.meta, keys.stock, keys.users, keys.ledger, second]
    if idempotency_key is None:
        idem_key, answer = second, own_answer_field(token)
    else:
        digest = key_digest(idempotency_key)
        idem_key, answer = keys.idempotency_of_digest(user_id, digest), token
        call_keys.append(idem_key)
    args: list[str | int] = [user_id, deadline_ms, answer, conf.shopper_per_second, f"u:{user_id}",
                             conf.ip_per_second if client_ip else 0, f"i:{client_ip}", OWN_ANSWER_KEEP_MS,
                             conf.drain_trigger_ttl_ms]
    if idempotency_key is not None:  # with replica acks a repeat is told only once confirmed (claim.lua, void.lua)
        args += [digest, conf.idempotency_ttl_ms, 1 if conf.replica_acks else 0]
    if buckets > 1:
        if idempotency_key is None:
            args += ["", 0, 0]
        args += [buckets, "1" if dry else "0"]
    return ClaimCall(keys=call_keys, args=args, idem_key=idem_key, deadline_ms=deadline_ms, token=token,
                     campaign_id=campaign_id, user_id=user_id, bucket=bucket)


_CODES = {code.value: code for code in ClaimCode}


def claim_reply(raw: bytes | str) -> tuple[int, str, int]:
    """The claim script's reply "<code>:<ledger id>:<flags>" (claim.lua) as (code, ledger id, flags)."""
    code, ledger_id, flags = _str(raw).split(":")
    return int(code), ledger_id, int(flags)


def claim_result(raw: bytes | str, bucket: int = 0) -> ClaimResult:
    """Read the claim script's reply on `bucket` (claim_reply): the result's ledger_id is a ledger_ref."""
    code, ledger_id, flags = claim_reply(raw)
    return ClaimResult(
        code=_CODES[code],
        ledger_id=ledger_ref(ledger_id, bucket) if bucket else ledger_id,
        replayed=bool(flags & 1),
        trigger_drain=bool(flags & 2),
    )


async def run_claim_async(
    *, campaign_id: int, user_id: str, idempotency_key: str | None, client_ip: str | None = None
) -> ClaimResult:
    """run_claim() for an event loop: the script through the loop's auto-pipelined connection
    (campaigns/redis_async.py; on a cluster, its connection to the master of the slot of the call's first key,
    the shopper's bucket's); the rare moves of stock between buckets in a thread.

    Raise StoreUnavailable.
    """
    client = async_client()
    flow = ClaimFlow(campaign_id, user_id, idempotency_key, client_ip)
    step: ClaimResult | int | list[int] | None = None
    while True:
        if step is None:
            try:
                now_ms = await _redis_now_ms_async(client)
            except redis.RedisError as exc:
                raise StoreUnavailable(str(exc)) from exc
            step = flow.answer(await _claim_once_async(client, flow.call(now_ms)))
        elif isinstance(step, ClaimResult):
            return step
        elif isinstance(step, list):
            step = flow.quiet(await asyncio.to_thread(move_counts_of, campaign_id, step))
        else:
            step = flow.moved(step, await asyncio.to_thread(move_stock, campaign_id, step, flow.home))


async def _claim_once_async(client: AsyncRedis, call: ClaimCall) -> Any:
    script = scripts().claim
    try:
        return await client.evalsha(script.sha, script.script, call.keys, call.args)
    except NotAcknowledged as exc:
        return _unless_claimed(exc, call)
    except NotSent as exc:  # never reached Redis: nothing to read back, nothing to take back
        raise StoreUnavailable(str(exc)) from exc
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        return _found_or_unavailable(await _stored_answer_after_async(call.idem_key, call.answer_field,
                                                                      call.deadline_ms), exc, call)
    except redis.RedisError as exc:
        raise StoreUnavailable(str(exc)) from exc


# One auto-pipelined connection per event loop (a granian ASGI worker runs one).
_async_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AsyncRedis] = weakref.WeakKeyDictionary()


# This thread's last (loop, client): while that loop runs, it is this thread's running loop (a thread runs one
# loop at a time), so the claim needs no asyncio.get_running_loop(), which makes a getpid() system call on every
# call in CPython 3.11 (one per claim; docs/benchmarks.md, "system calls per claim"). reset_redis_client()
# replaces it, so that no thread keeps a client that was closed.
_this_thread = threading.local()


def async_client() -> AsyncRedis:
    last = getattr(_this_thread, "last", None)
    if last is not None and last[0].is_running():
        return last[1]
    loop = asyncio.get_running_loop()
    client = _async_clients.get(loop)
    if client is None:
        client = _async_clients[loop] = _pipelined(settings.COUPONS_REDIS_SOCKET_TIMEOUT,
                                                   acks=settings.COUPONS_REDIS_REPLICA_ACKS)
    _this_thread.last = (loop, client)
    return client


def _pipelined(timeout: float, *, acks: int = 0) -> AsyncRedis:
    """A pipelined client of REDIS_URL, of the master the sentinels name (REDIS_SENTINELS), or of the masters of
    the cluster REDIS_URL is a node of (COUPONS_REDIS_CLUSTER: each call goes to its first key's master)."""
    if settings.COUPONS_REDIS_CLUSTER:
        return ClusterPipelinedRedis(settings.REDIS_URL, timeout=timeout, acks=acks,
                                     ack_timeout_ms=settings.COUPONS_REDIS_REPLICA_ACK_TIMEOUT_MS)
    return PipelinedRedis(settings.REDIS_URL or "redis://", timeout=timeout, acks=acks,
                          ack_timeout_ms=settings.COUPONS_REDIS_REPLICA_ACK_TIMEOUT_MS,
                          sentinels=settings.REDIS_SENTINELS, sentinel_master=settings.REDIS_SENTINEL_MASTER)


async def _redis_now_ms_async(client: AsyncRedis) -> int:
    now = time.monotonic()
    if now - _clock["measured"] > _OFFSET_REFRESH_SECONDS:
        before = time.time()
        seconds, micros = await client.execute("TIME")
        _learn_offset(before, time.time(), int(seconds), int(micros), now)
    return int(time.time() * 1000 + _clock["offset_ms"])


async def _stored_answer_after_async(idem_key: str, field: str, deadline_ms: int
                                     ) -> tuple[int, str] | None | object:
    """_stored_answer_after() for an event loop: a fresh short-timeout connection reads the stored answer."""
    for pause in _recovery_pauses(deadline_ms):
        if pause:
            await asyncio.sleep(pause)
        reader = _pipelined(0.1)
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


OWN_ANSWER_KEEP_MS = 30_000  # a second's hash outlives a Redis frozen for up to 30 s: a void still finds the answer
RECOVERY_BUDGET_SECONDS = 0.3
RECOVERY_PAUSE_SECONDS = 0.01
_recovery: redis.Redis | None = None


def _recovery_client() -> redis.Redis:
    """A client with short timeouts, only for reading a lost reply's outcome (a stalled Redis fails fast)."""
    global _recovery
    if _recovery is None and settings.COUPONS_REDIS_CLUSTER:
        from .redis_cluster import cluster_client

        _recovery = cluster_client(settings.REDIS_URL, timeout=0.1)
    elif _recovery is None and settings.REDIS_SENTINELS:
        _recovery = _sentinel_client(0.1)
    elif _recovery is None:
        _recovery = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=0.1, socket_connect_timeout=0.1,
                                         retry=Retry(NoBackoff(), 0))
    return _recovery


def _stored_answer_after(idem_key: str, field: str, deadline_ms: int) -> tuple[int, str] | None | object:
    """After the claim's deadline, read the answer its script stored (under `idem_key`, or in that hash's
    `field`): None if it never ran, UNREADABLE when Redis did not answer within the budget."""
    for pause in _recovery_pauses(deadline_ms):
        if pause:
            time.sleep(pause)
        try:
            stored = _recovery_client().hget(idem_key, field) if field else _recovery_client().get(idem_key)
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


def _learn_offset(before: float, after: float, seconds: int, micros: int, measured: float) -> None:
    """Remember the offset of Redis's clock (TIME: seconds, micros) from ours, read between before and after."""
    _clock["offset_ms"] = seconds * 1000 + micros / 1000 - (before + after) / 2 * 1000
    _clock["measured"] = measured


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
        raise VoidNotConfirmed(str(exc), _text(ledger_id) if int(taken) else None) from exc
    except redis.RedisError as exc:
        raise StoreUnavailable(str(exc)) from exc
    if not int(taken):
        return None
    return ledger_ref(_text(ledger_id), bucket)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def to_ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


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
) -> tuple[bool, int | None]:
    """Write a campaign's settings (and its stock, if missing and given) and move every key's expiry. A codes
    campaign's (codes=True) stock is its shared code's uses. Of a campaign split into `buckets`, one `bucket`'s:
    `initial_stock` is its part, `share` its share when not that part (a rebuild), `rate_limit` its part.

    Return (stock_created, stock) where stock is None when Redis holds none. Raise StoreUnavailable.
    """
    keys = campaign_keys(campaign_id, bucket)
    try:
        created, stock = scripts().load_state(
            keys=keys.state_of(codes=codes) + ([] if codes else keys.move_keys),
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
        result = scripts().cancel(keys=[keys.stock, keys.users, keys.cancelled], args=[claim_id, user_id])
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
    return int(code), int(ends_ms)


class TakeCode(enum.IntEnum):
    """code_take.lua's answers."""

    TAKEN = 0
    LIMIT_REACHED = 1
    SOLD_OUT = 2
    NOT_STARTED = 3
    ENDED = 4
    PAUSED = 5
    ALREADY = 6  # this use held its unit already (a request that died before its coupon was written)
    NO_STATE = -1


def run_code_take(*, campaign_id: int, user_id: str, member: str) -> TakeCode:
    """Take one use of a codes campaign's shared code for the use `member` (code_take.lua). Raise
    StoreUnavailable (nothing was taken)."""
    keys = campaign_keys(campaign_id)
    try:
        return TakeCode(int(scripts().code_take(keys=[keys.meta, keys.uses, keys.users, keys.takes],
                                                args=[user_id, member])))
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
            replies = scripts().code_take.each([([keys.meta, keys.uses, keys.users, keys.takes], list(takes[n][1:]))
                                                for n in indexes])
            for n, reply in zip(indexes, replies, strict=True):
                answers[n] = TakeCode(int(reply))
    except redis.RedisError as exc:
        raise StoreUnavailable(str(exc)) from exc
    return answers


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
        replies = iter(pipe.execute())
    except redis.RedisError as exc:
        raise StoreUnavailable(str(exc)) from exc
    uses: dict[int, tuple[int | None, int]] = {}
    for campaign_id in campaign_ids:
        left, held = next(replies), next(replies)
        uses[campaign_id] = (None if left is None else int(left), int(held or 0))
    return uses


def run_code_give_back(*, campaign_id: int, user_id: str, member: str) -> RestockResult:
    """Give the use `member` back to the shared code, once (code_give_back.lua). Raise StoreUnavailable."""
    keys = campaign_keys(campaign_id)
    try:
        return RestockResult(int(scripts().code_give_back(keys=[keys.uses, keys.users, keys.takes],
                                                          args=[user_id, member])))
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
