"""A group's count checked, repaired and restored (docs/design.md, "Groups"): the group's hash in Redis (user id ->
coupons held of all the group's campaigns) against what its campaigns hold: their per-user counts in Redis, read in
the same cut (one slot), and PostgreSQL's for a campaign Redis no longer holds (ended and expired, or lost). Its
campaigns' own counts are verify_campaign's; this is the sum across them."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from django.db.models import Count

from campaigns import redis_state
from campaigns.models import Campaign
from campaigns.services import keys_expire_at
from coupons.services import held_uses

from .drain import drain_campaign
from .models import Claim, ClaimStatus


@dataclass
class GroupBalance:
    """A group's hash against its campaigns' counts: `lost` when Redis holds no hash for it, `drift` the shoppers
    whose count differs, user -> (in Redis, expected)."""

    group: str
    key: str
    lost: bool = False
    homeless: bool = False  # the campaign's home (its own slot) does not name its group: a process that never met
    # it would claim where its keys are not (-1, a 503) until the home is written again (a preheat, reconcile)
    drift: dict[str, tuple[int, int]] = field(default_factory=dict)
    over_limit: list[str] = field(default_factory=list)

    def problems(self) -> list[str]:
        if self.lost:
            return [f"group {self.group}: Redis holds no group hash (its claims and code uses wait: rebuild)"]
        problems = []
        if self.homeless:
            problems.append(f"group {self.group}: the campaign's home in Redis does not name its group (a process "
                            "that never met it answers 503: reconcile --repair writes it again)")
        if self.drift:
            sample = dict(sorted(self.drift.items())[:10])
            problems.append(f"group {self.group}: {len(self.drift)} shoppers' coupons held of the group differ in "
                            f"Redis (Redis, expected): {sample}")
        if self.over_limit:
            problems.append(f"group {self.group}: shoppers above its limit: {self.over_limit[:10]}")
        return problems


def group_members(campaign: Campaign) -> list[Campaign]:
    """The campaigns of the campaign's group ever loaded into Redis (its own included)."""
    return list(Campaign.objects.filter(group=campaign.group, preheated_at__isnull=False).order_by("pk"))


def group_verify(campaign: Campaign) -> GroupBalance | None:
    """The campaign's group's balance (None without a group). Exact when no claim or code use of the group runs
    between the cut and PostgreSQL's counts of the campaigns Redis no longer holds (those take none)."""
    if not campaign.group:
        return None
    key = redis_state.group_key(campaign.pk, campaign.group, campaign.group_limit or 0)
    members = group_members(campaign)
    for member in members:  # told from PostgreSQL: this process may never have met them
        redis_state.remember_group(member.pk, member.group, member.group_limit or 0)
    held, counts = redis_state.group_snapshot(key, [redis_state.campaign_keys(m.pk).users for m in members])
    balance = GroupBalance(group=campaign.group, key=key)
    if campaign in members and counts[members.index(campaign)] is not None:  # its state is in Redis
        balance.homeless = redis_state.group_home(campaign.pk) != (campaign.group, campaign.group_limit)
    if held is None:
        balance.lost = True
        return balance
    expected: Counter[str] = Counter()
    for member, users in zip(members, counts, strict=True):
        expected.update(users if users is not None else held_in_postgres(member))
    balance.drift = {user: (held.get(user, 0), expected.get(user, 0)) for user in set(held) | set(expected)
                     if held.get(user, 0) != expected.get(user, 0)}
    limit = campaign.group_limit or 0
    balance.over_limit = sorted(user for user, n in expected.items() if n > limit)
    return balance


def held_in_postgres(campaign: Campaign) -> dict[str, int]:
    """What PostgreSQL says each shopper holds of a campaign: its claims not cancelled, or (a codes campaign) its
    uses holding a unit (the counts a rebuild loads)."""
    if campaign.is_codes:
        return dict(Counter(held_uses(campaign).values_list("user_id", flat=True)))
    claims = Claim.objects.filter(campaign=campaign).exclude(status=ClaimStatus.CANCELLED)
    return dict(claims.values_list("user_id").annotate(n=Count("id")).values_list("user_id", "n"))


def group_repair(balance: GroupBalance) -> list[str]:
    """Set each drifting shopper's count to what the group's campaigns hold (compare-and-set: never over a change
    made since the cut). Return the repairs made."""
    fixed = [user for user, (seen, expected) in sorted(balance.drift.items())
             if redis_state.compare_and_set(key=balance.key, field=user, expected=seen if seen else None,
                                            new=expected)
             or (not seen and redis_state.compare_and_set(key=balance.key, field=user, expected=0, new=expected))]
    return [f"group {balance.group}: set the coupons held of {len(fixed)} shoppers: {fixed[:10]}"] if fixed else []


def group_restore_lost(campaign: Campaign) -> bool:
    """Restore the campaign's group hash from PostgreSQL if Redis lost it (the rebuild, before the campaign is
    loaded again): each campaign of the group drained first, so PostgreSQL holds every claim Redis accepted. Return
    whether it was restored. Raise StoreUnavailable."""
    key = redis_state.group_key(campaign.pk, campaign.group, campaign.group_limit or 0)
    if redis_state.group_held(key) is not None:
        return False
    members = group_members(campaign)
    counts: Counter[str] = Counter()
    for member in members:
        if not member.is_codes:
            redis_state.remember_group(member.pk, member.group, member.group_limit or 0)
            drain_campaign(campaign_id=member.pk, max_seconds=600)
        counts.update(held_in_postgres(member))
    expire_at = max(keys_expire_at(m) for m in [campaign, *members])
    return redis_state.group_restore(key, dict(counts), expire_at)
