"""Verify a campaign's accounting (docs/design.md, The accounting identity): total stock == Redis remaining
+ claims - restocked, computed from one consistent cut of Redis, then PostgreSQL; reconciliation repairs from
what it finds. A campaign split into buckets balances per bucket (its share == its remaining + its claims - its
restocked), and the shares plus the stock in transit between buckets add up to the total (docs/design.md,
"Buckets")."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from django.db import connection
from django.utils import timezone

from campaigns import redis_state
from campaigns.models import Campaign
from campaigns.money import from_minor, to_minor
from campaigns.redis_state.budget import budget_left_many
from coupons import budget
from coupons.models import Coupon, CouponEvent
from coupons.services import held_uses

from . import ledger
from .groups import GroupBalance, group_verify
from .models import Claim, ClaimStatus, ParkedLedgerEntry, ParkedState


@dataclass
class Balance:
    """docs/design.md's accounting identity: total == remaining + claims (persisted and in the ledger) - restocked.

    `restocked` counts the claims Redis gave back (cancel.lua's set), read in the same cut as the stock.
    Per-user counts in Redis are checked against the claims too (claims given back excluded).
    """

    campaign_id: int
    total_stock: int
    remaining: int | None
    persisted_claims: int
    ledger_only_claims: int
    restocked: int
    coupons: int
    issued_claims: int
    parked: int = 0  # ledger entries the drain could never persist (orders/parking.py): no claims, not counted
    in_transit: int = 0  # stock moved between buckets, out and not in as the buckets' cuts saw it (ledger.py)
    # Of a campaign split into buckets: each bucket's remaining stock, and its drift (share - its right side)
    bucket_remaining: dict[int, int | None] = field(default_factory=dict)
    bucket_drifts: dict[int, int] = field(default_factory=dict)
    users_over_limit: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    # What reconciliation may repair: ledger entries PostgreSQL lacks, per-user counts Redis has wrong.
    missing_entries: list[ledger.LedgerEntry] = field(default_factory=list, repr=False)
    users_drift: dict[str, tuple[int, int]] = field(default_factory=dict)  # user -> (in Redis, expected)
    given_back: set[str] = field(default_factory=set, repr=False)  # claim ids Redis restocked
    # A codes campaign's uses taken in Redis whose coupon PostgreSQL does not hold (in flight, or a request
    # that died between the take and its coupon): what reconciliation gives back.
    orphan_takes: list[str] = field(default_factory=list, repr=False)
    # A budgeted campaign's money (coupons/budget.py), in its currency: "budget", "used" (the discounts of its held
    # and redeemed coupons), "left" (Redis's; None: not loaded, the next use loads it); money_drift, in minor
    # units: budget - left - used (> 0 taken in Redis without a coupon holding it, < 0 Redis could overspend).
    money: dict[str, str | None] | None = None
    money_drift: int = 0
    group: GroupBalance | None = None  # a grouped campaign's group hash against its campaigns' counts (groups.py)

    @property
    def claims(self) -> int:
        return self.persisted_claims + self.ledger_only_claims

    @property
    def right_side(self) -> int | None:
        if self.remaining is None:
            return None
        return self.remaining + self.in_transit + self.claims - self.restocked

    @property
    def drift(self) -> int | None:
        return None if self.right_side is None else self.total_stock - self.right_side

    @property
    def balanced(self) -> bool:
        return (self.right_side == self.total_stock and not self.users_over_limit and not self.users_drift
                and not self.problems and not any(self.bucket_drifts.values()))


@dataclass(frozen=True, slots=True)
class _PersistedSide:
    per_user: dict[str, int]  # claims up to the cut, by shopper
    persisted: int  # claims up to the cut
    persisted_ledger_ids: set[str]  # which of the cut's ledger entries PostgreSQL holds
    cancelled: list[str]  # claims up to the cut that are cancelled
    given_back_owners: dict[str, str]  # claim id -> shopper, for the claims Redis gave back
    coupons: int
    issued: int  # claims no longer pending
    orphans: int  # issued claims without a coupon
    misfiled_events: int  # events of the campaign's coupons filed under another campaign, or the reverse
    parked_ledger_ids: set[str]  # which of the cut's ledger entries are parked or discarded (no claims)


# The bucket of a claim id (redis_state.ledger_ref): its fourth part, none for bucket 0.
BUCKET_SQL = "coalesce(nullif(split_part({0}, '-', 4), ''), '0')::int"


def _persisted_side(campaign: Campaign, snap: ledger.LedgerSnapshot) -> _PersistedSide:
    """PostgreSQL's side of the balance in one statement, so one snapshot: a drain committing meanwhile is
    seen by all of it or by none (separate queries counted such an entry twice, as persisted and as missing).
    Of a campaign split into buckets, the side of the snapshot's bucket (the misfiled events on bucket 0's)."""
    ms, seq = (int(part) for part in snap.last_id.split("-"))
    claims, coupons, events = Claim._meta.db_table, Coupon._meta.db_table, CouponEvent._meta.db_table
    parked = ParkedLedgerEntry._meta.db_table
    split = campaign.buckets > 1
    of_bucket = f"AND {BUCKET_SQL.format('claim_id')} = %(bucket)s" if split else ""
    coupon_of_bucket = f"AND {BUCKET_SQL.format('claim_id')} = %(bucket)s" if split else ""
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            WITH c AS (SELECT claim_id, user_id, status FROM {claims} WHERE campaign_id = %(campaign)s {of_bucket}),
                 upto AS (SELECT * FROM c WHERE (split_part(claim_id, '-', 2)::bigint,
                                                 split_part(claim_id, '-', 3)::bigint) <= (%(ms)s, %(seq)s))
            SELECT
              (SELECT coalesce(json_object_agg(user_id, n), '{{}}')
                 FROM (SELECT user_id, count(*) AS n FROM upto GROUP BY user_id) AS per_user),
              (SELECT count(*) FROM upto),
              (SELECT coalesce(array_agg(claim_id), '{{}}') FROM c WHERE claim_id = ANY(%(ledger)s)),
              (SELECT coalesce(array_agg(claim_id), '{{}}') FROM upto WHERE status = %(cancelled)s),
              (SELECT coalesce(json_object_agg(claim_id, user_id), '{{}}') FROM c WHERE claim_id = ANY(%(given)s)),
              (SELECT count(*) FROM {coupons} WHERE campaign_id = %(campaign)s {coupon_of_bucket}),
              (SELECT count(*) FROM c WHERE status <> %(pending)s),
              (SELECT count(*) FROM c WHERE status = %(issued)s AND NOT EXISTS (
                 SELECT 1 FROM {coupons} AS k WHERE k.campaign_id = %(campaign)s AND k.claim_id = c.claim_id)),
              CASE WHEN %(bucket)s = 0 THEN
              (SELECT count(*) FROM {events} AS e JOIN {coupons} AS k ON k.id = e.coupon_id
                 WHERE e.campaign_id = %(campaign)s AND k.campaign_id <> %(campaign)s)
              + (SELECT count(*) FROM {coupons} AS k JOIN {events} AS e ON e.coupon_id = k.id
                 WHERE k.campaign_id = %(campaign)s AND e.campaign_id <> %(campaign)s) ELSE 0 END,
              (SELECT coalesce(array_agg(%(campaign)s || '-' || entry_id), '{{}}') FROM {parked}
                 WHERE campaign_id = %(campaign)s AND state <> %(retried)s
                   AND %(campaign)s || '-' || entry_id = ANY(%(ledger)s))
            """,
            {"campaign": campaign.pk, "bucket": snap.bucket, "ms": ms, "seq": seq,
             "ledger": [e.claim_id for e in snap.entries],
             "given": sorted(snap.cancelled), "cancelled": ClaimStatus.CANCELLED, "pending": ClaimStatus.PENDING,
             "issued": ClaimStatus.ISSUED, "retried": ParkedState.RETRIED},
        )
        (per_user, persisted, in_ledger, cancelled, owners, coupon_count, issued, orphans, misfiled,
         parked_ids) = cursor.fetchone()
    return _PersistedSide(per_user=per_user, persisted=persisted, persisted_ledger_ids=set(in_ledger),
                          cancelled=list(cancelled), given_back_owners=owners, coupons=coupon_count, issued=issued,
                          orphans=orphans, misfiled_events=misfiled, parked_ledger_ids=set(parked_ids))


def campaign_verify(*, campaign: Campaign) -> Balance:
    """Compute both sides of the campaign's balance from one consistent cut of Redis, then PostgreSQL; of a
    budgeted campaign, its money too (budget == left in Redis + the discounts its coupons hold).

    Exact under load: only claims Redis had issued at the moment of the cut are counted from PostgreSQL. The money
    is exact when no use is running (a use takes in Redis before its commit).
    """
    redis_state.remember_group(campaign.pk, campaign.group or None, campaign.group_limit or 0)  # its keys' names
    if campaign.is_codes:
        balance = codes_verify(campaign=campaign)
    else:
        cut = ledger.campaign_snapshot(campaign.pk, campaign.buckets)
        balance = _bucket_verify(campaign, cut.buckets[0]) if campaign.buckets == 1 else _sum_of_buckets(campaign, cut)
    if campaign.budget is not None:
        _money_verify(campaign, balance)
    if campaign.group:
        balance.group = group_verify(campaign)
        assert balance.group is not None
        balance.problems += balance.group.problems()
    return balance


def _money_verify(campaign: Campaign, balance: Balance) -> None:
    """The campaign's money: its budget == what Redis has left + the discounts of its held and redeemed coupons."""
    assert campaign.budget is not None
    currency = campaign.currency
    units = budget_left_many([campaign.pk])[campaign.pk]  # Redis first: a take precedes its coupon's commit
    used = budget.used(campaign)
    balance.money = {"budget": str(campaign.budget), "used": str(used),
                     "left": None if units is None else str(from_minor(units, currency))}
    if used > campaign.budget:
        balance.problems.append(f"the discounts of held and redeemed coupons ({used}) exceed the budget "
                                f"({campaign.budget})")
    if units is None:
        return  # not in Redis: the next use loads it from PostgreSQL
    balance.money_drift = to_minor(campaign.budget, currency) - units - to_minor(used, currency)
    drift = from_minor(abs(balance.money_drift), currency)
    if balance.money_drift > 0:
        balance.problems.append(f"budget: {drift} taken in Redis that no held or redeemed coupon holds (a use "
                                "running, or a give-back that failed): left unspent")
    elif balance.money_drift < 0:
        balance.problems.append(f"budget: Redis has {drift} more left than the budget less the discounts used: it "
                                "could pay beyond the budget (reconcile --repair lowers it)")


def _sum_of_buckets(campaign: Campaign, cut: ledger.CampaignSnapshot) -> Balance:
    """A campaign split into buckets: each bucket's balance, and their sum with the stock in transit."""
    parts = [_bucket_verify(campaign, snap) for snap in cut.buckets]
    remaining = [p.remaining for p in parts]
    balance = Balance(
        campaign_id=campaign.pk, total_stock=campaign.total_stock,
        remaining=None if None in remaining else sum(r or 0 for r in remaining),
        persisted_claims=sum(p.persisted_claims for p in parts), ledger_only_claims=sum(p.ledger_only_claims
                                                                                        for p in parts),
        restocked=sum(p.restocked for p in parts), coupons=sum(p.coupons for p in parts),
        issued_claims=sum(p.issued_claims for p in parts), parked=sum(p.parked for p in parts),
        in_transit=cut.in_transit,
        users_over_limit=sorted(u for p in parts for u in p.users_over_limit),
        missing_entries=[e for p in parts for e in p.missing_entries],
        users_drift={u: d for p in parts for u, d in p.users_drift.items()},
        given_back={c for p in parts for c in p.given_back},
        bucket_remaining=dict(enumerate(remaining)),
    )
    for bucket, (part, snap) in enumerate(zip(parts, cut.buckets, strict=True)):
        balance.problems += [f"bucket {bucket}: {problem}" for problem in part.problems]
        if part.right_side is not None and snap.share is not None and snap.share != part.right_side:
            balance.bucket_drifts[bucket] = snap.share - part.right_side
    if balance.bucket_drifts:
        balance.problems.append("buckets whose share is not their remaining + claims - restocked (bucket: "
                                f"share - that): {balance.bucket_drifts}")
    return balance


def _bucket_verify(campaign: Campaign, snap: ledger.LedgerSnapshot) -> Balance:
    """One bucket's balance (a campaign not split: the campaign's)."""
    side = _persisted_side(campaign, snap)
    # A parked entry (one the drain could never persist, acknowledged) is no claim: neither persisted nor missing.
    missing = [e for e in snap.entries
               if e.claim_id not in side.persisted_ledger_ids and e.claim_id not in side.parked_ledger_ids]
    # Per user: every claim up to the cut (PostgreSQL, plus the ledger's own), less those given back.
    expected: dict[str, int] = dict(side.per_user)
    for entry in missing:
        expected[entry.user_id] = expected.get(entry.user_id, 0) + 1
    owners = dict(side.given_back_owners)
    owners.update({e.claim_id: e.user_id for e in missing if e.claim_id in snap.cancelled})
    for claim_id in snap.cancelled:
        if claim_id in owners:
            expected[owners[claim_id]] -= 1
    balance = Balance(
        campaign_id=campaign.pk,
        total_stock=campaign.total_stock,
        remaining=snap.remaining,
        persisted_claims=side.persisted,
        ledger_only_claims=len(missing),
        restocked=len(snap.cancelled),
        parked=len(side.parked_ledger_ids),
        coupons=side.coupons,
        issued_claims=side.issued,
        users_over_limit=sorted(u for u, n in expected.items() if n > campaign.per_user_limit),
        missing_entries=missing,
        given_back=snap.cancelled,
    )
    if snap.remaining is None:
        balance.problems.append("Redis holds no stock for this campaign (never loaded, expired or lost)")
        return balance
    if snap.remaining < 0:
        balance.problems.append(f"Redis stock is negative ({snap.remaining})")
    redis_users = {u: n for u, n in snap.users.items() if u}
    balance.users_drift = {
        u: (redis_users.get(u, 0), expected.get(u, 0))
        for u in set(redis_users) | set(expected)
        if redis_users.get(u, 0) != expected.get(u, 0)
    }
    if side.orphans:
        balance.problems.append(f"{side.orphans} issued claims have no coupon")
    if side.misfiled_events:
        balance.problems.append(f"{side.misfiled_events} coupon events name another campaign than their coupon's")
    cancelled_in_db = set(side.cancelled)
    if cancelled_in_db != snap.cancelled:
        balance.problems.append(
            f"claims given back in Redis but not cancelled in PostgreSQL: {sorted(snap.cancelled - cancelled_in_db)}; "
            f"cancelled in PostgreSQL without their stock back: {sorted(cancelled_in_db - snap.cancelled)}"
        )
    return balance


def codes_verify(*, campaign: Campaign) -> Balance:
    """A codes campaign's balance: total == uses left + uses taken (Redis, one cut), and the uses taken are
    the coupons of its uses, of its shared code or its unique codes, that are not revoked (PostgreSQL).

    In the Balance's terms: persisted_claims are the uses PostgreSQL holds a coupon for, ledger_only_claims the
    uses taken in Redis without a coupon yet (in flight, or a request that died between the two: reconciliation
    gives those back), restocked the coupons whose use Redis no longer holds (a problem: a release whose commit
    failed after its give-back). Coupons written after the cut are left out (a use writes its coupon after its
    take), so the figures are exact under load.
    """
    cut = timezone.now()
    left, takes, users = redis_state.codes_snapshot(campaign.pk)
    coupons = Coupon.objects.filter(campaign=campaign)
    live = held_uses(campaign).filter(created_at__lte=cut).values_list("claim_id", "user_id")
    in_postgres = {f"{claim_id}/{user_id}" for claim_id, user_id in live}
    only_redis, given_back = takes - in_postgres, in_postgres - takes
    expected = Counter(member.rpartition("/")[2] for member in takes)
    count = coupons.count()
    balance = Balance(
        campaign_id=campaign.pk, total_stock=campaign.total_stock, remaining=left,
        persisted_claims=len(in_postgres), ledger_only_claims=len(only_redis), restocked=len(given_back),
        coupons=count, issued_claims=count,
        users_over_limit=sorted(u for u, n in expected.items() if n > campaign.per_user_limit),
        orphan_takes=sorted(only_redis),
    )
    if left is None:
        balance.problems.append("Redis holds no uses for this codes campaign (never loaded, expired or lost)")
        return balance
    if left < 0:
        balance.problems.append(f"Redis uses left are negative ({left})")
    balance.users_drift = {u: (users.get(u, 0), expected.get(u, 0)) for u in set(users) | set(expected)
                           if users.get(u, 0) != expected.get(u, 0)}
    if given_back:
        balance.problems.append(
            f"coupons of uses Redis gave back but PostgreSQL did not revoke: {sorted(given_back)[:10]}")
    return balance
