"""A campaign's key names in Redis.

Every key of one campaign carries the hash tag {c<id>}, so each script touches one slot and the design
runs unchanged on Redis Cluster. A hot campaign may be split into buckets (Campaign.buckets): bucket b >= 1 has
the tag {c<id>.<b>}, its own slot, its share of the stock, its shoppers' counts, ledger and answers; a shopper
belongs to bucket bucket_of(user id, buckets) (docs/design.md, "Buckets"). A campaign of a group (Campaign.group)
has its group's tag instead, {g<group>} ("cpn:{g<group>}:c<id>:..."), so that its claims count the group's hash
(CampaignKeys.group: user id -> coupons held of all the group's campaigns) in the same atomic step; the campaign's
own tag then holds only its home, a hash naming the group and its limit (docs/design.md, "Groups").
Keys are built only from validated integers and user ids; an
Idempotency-Key (free text) enters a key name only as its SHA-256.
"""
from __future__ import annotations

import hashlib
import zlib
from dataclasses import dataclass

import redis

from core.errors import StoreUnavailable

from .clients import redis_client

DRAIN_GROUP = "drain"


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
    group: str = ""  # a grouped campaign's group hash "cpn:{g<group>}:held" (user id -> coupons held), "" without
    group_limit: int = 0  # the most coupons of the group one shopper holds (the campaign's Campaign.group_limit)
    home: str = ""  # "cpn:{c<id>}:meta": the meta of an ungrouped campaign, a grouped one's home (its group, limit)

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

    @property
    def budget(self) -> str:
        """The campaign's budget: the money left, in minor units (redis_state/budget.py; bucket 0's tag)."""
        return f"{self.tag}budget"

    def left(self, *, codes: bool) -> str:
        """The key of what is left: a grab campaign's stock, a codes campaign's uses."""
        return self.uses if codes else self.stock


def key_digest(idempotency_key: str) -> str:
    """What stands for a shopper's Idempotency-Key in key names, the ledger and PostgreSQL (never the key)."""
    return hashlib.sha256(idempotency_key.encode()).hexdigest()[:32]


def campaign_keys(campaign_id: int, bucket: int = 0, *, learn: bool = True) -> CampaignKeys:
    """The keys of a campaign's bucket (bucket 0: the whole campaign when it is not split). A campaign this process
    does not know yet is looked up in Redis once (its home: learn_group), unless `learn` is False (the claim, on an
    event loop too: it never waits for a lookup, and claim.lua's -6 corrects it): then an ungrouped campaign is
    assumed. Raise StoreUnavailable (the lookup)."""
    keys = _keys.get((campaign_id, bucket))
    if keys is None:
        if type(campaign_id) is not int or campaign_id < 1:
            raise ValueError(f"not a campaign id: {campaign_id!r}")
        if type(bucket) is not int or not 0 <= bucket < MAX_BUCKETS:
            raise ValueError(f"not a bucket: {bucket!r}")
        if campaign_id not in known_groups:
            if not learn:
                return _assumed.get((campaign_id, bucket)) or _assume(campaign_id, bucket)
            learn_group(campaign_id)
            if campaign_id not in known_groups:  # not in Redis: nothing to learn, nothing kept
                return _build(campaign_id, bucket, None)
        if len(_keys) > 10_000:
            _keys.clear()
        keys = _keys[(campaign_id, bucket)] = _build(campaign_id, bucket, known_groups[campaign_id])
    return keys


def _build(campaign_id: int, bucket: int, group: tuple[str, int] | None) -> CampaignKeys:
    home = f"cpn:{{c{campaign_id}}}:"
    if group is not None:
        tag = f"cpn:{{g{group[0]}}}:c{campaign_id}:"
    else:
        tag = home if bucket == 0 else f"cpn:{{c{campaign_id}.{bucket}}}:"
    return CampaignKeys(
        campaign_id, tag + "meta", tag + "stock", tag + "users", tag + "ledger", tag + "cancelled",
        tag + "uses", tag + "takes", bucket, tag, tag + "moves", tag + "received", tag + "sent",
        f"cpn:{{g{group[0]}}}:held" if group else "", group[1] if group else 0, home + "meta",
    )


def _assume(campaign_id: int, bucket: int) -> CampaignKeys:
    if len(_assumed) > 10_000:
        _assumed.clear()
    keys = _assumed[(campaign_id, bucket)] = _build(campaign_id, bucket, None)
    return keys


def home_of(campaign_id: int) -> str:
    """The hash in the campaign's own slot ({c<id>}) that says where its keys are: its meta when it has no group,
    else its home: {"group": <group>, "group_limit": <limit>} (load_state writes it)."""
    return f"cpn:{{c{campaign_id}}}:meta"


def learn_group(campaign_id: int) -> None:
    """Learn from the campaign's home (home_of) whether it is grouped, once: a campaign's group never changes once
    it is in Redis (Campaign.clean), so what a process learnt never goes stale. A campaign Redis holds nothing of
    is not learnt (asked again next time). Raise StoreUnavailable."""
    try:
        group, limit, starts = redis_client().hmget(home_of(campaign_id), "group", "group_limit", "starts_ms")
    except redis.RedisError as exc:
        raise StoreUnavailable(str(exc)) from exc
    if group is not None:
        remember_group(campaign_id, group.decode() if isinstance(group, bytes) else group, int(limit or 0))
    elif starts is not None:
        remember_group(campaign_id, None)


def remember_group(campaign_id: int, group: str | None, limit: int = 0) -> None:
    """Keep what the campaign's keys are: of its group `group` with its `limit`, or of none (None); from PostgreSQL
    (load_state, the rebuild), its home in Redis (learn_group) or the claim script's -6."""
    value = (group, limit) if group else None
    if known_groups.get(campaign_id, False) == value:
        return
    if len(known_groups) > 10_000:
        forget_groups()
    known_groups[campaign_id] = value
    for bucket_keys in (_keys, _assumed):
        for key in [key for key in bucket_keys if key[0] == campaign_id]:
            bucket_keys.pop(key, None)


def forget_groups() -> None:
    """Forget the campaigns' groups this process learnt, and the key names built from them."""
    known_groups.clear()
    _keys.clear()
    _assumed.clear()


_keys: dict[tuple[int, int], CampaignKeys] = {}  # of the campaigns whose group (or none) this process knows
_assumed: dict[tuple[int, int], CampaignKeys] = {}  # the claim's assumption (ungrouped) for the others
# campaign id -> (group, its limit), None for a campaign of no group: learnt once (learn_group, remember_group)
known_groups: dict[int, tuple[str, int] | None] = {}
MAX_BUCKETS = 64  # campaigns.models.MAX_BUCKETS


def bucket_of(user_id: str, buckets: int) -> int:
    """The bucket a shopper belongs to: a stable hash of the user id (CRC-32, the same in every process and
    release; never Python's hash(), which is salted per process)."""
    return 0 if buckets == 1 else zlib.crc32(user_id.encode()) % buckets


def ledger_ref(ledger_id: str, bucket: int) -> str:
    """A claim's ledger entry across the campaign's buckets: the stream id, "-<bucket>" after it beyond bucket 0
    (two buckets' streams may issue the same id). A claim id is "<campaign id>-<ref>"."""
    return ledger_id if bucket == 0 or not ledger_id else f"{ledger_id}-{bucket}"


def claim_id_of(campaign_id: int, ref: str) -> str:
    """A claim's id: "<campaign id>-<ledger ref>" (ledger_ref)."""
    return f"{campaign_id}-{ref}"


def split_ref(ref: str) -> tuple[str, int]:
    """(stream id, bucket) of a ledger_ref()."""
    ms, _, rest = ref.partition("-")
    seq, _, bucket = rest.partition("-")
    return f"{ms}-{seq}", int(bucket) if bucket else 0
