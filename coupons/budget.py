"""A campaign's budget (docs/api.md, "Grants, budgets, groups"): the most its coupons' uses take off in all, in
its currency, kept in Redis beside its stock in minor units (campaigns.redis_state.budget).

What a coupon holds of the budget is its discount while it is held or redeemed (holds). A reserve or redeem takes
what its new discount adds to that (take: atomic in Redis, before its change is written; whole or not at all: 22
budget_exhausted, nothing changed); a change that lowers it (a release, a lapsed hold, a hold again at a lower
price) gives the difference back once its transaction has committed (given_back; the expiry sweep's lapsed holds:
give_back_after_commit). So Redis never holds less taken than PostgreSQL's committed coupons hold: a take whose
write fails is given back (kept, around the use's transaction), a give-back whose Redis call fails leaves money
unspent (verify_campaign names it), never spent twice; money left above the budget less what is used is what
reconcile --repair lowers.

A campaign without a budget costs nothing here: no Redis call, no query (its row is read with the coupon).
Where Redis holds no budget (never preheated with one, expired, lost), the first take loads what is left from
PostgreSQL: the budget less the discounts of its held and redeemed coupons (load).

campaign.budget_exhausted goes out once a campaign: the first time a take does not fit, or a take leaves 0.
"""
from __future__ import annotations

import functools
import logging
from contextvars import ContextVar, Token
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from campaigns.events_out import campaign_event_out
from campaigns.models import Campaign
from campaigns.money import from_minor, to_minor
from campaigns.redis_state import StoreUnavailable
from campaigns.redis_state.budget import (
    BudgetTake,
    budget_left_many,
    budget_load,
    run_budget_give_back,
    run_budget_take,
)
from campaigns.services import keys_expire_at
from core.errors import Unavailable
from webhooks.models import EventType

from .models import Coupon, CouponStatus
from .outcomes import UseCode, UseOutcome, refused

log = logging.getLogger(__name__)

USING = (CouponStatus.HELD, CouponStatus.REDEEMED)  # the states whose discount the budget pays


def holds(status: str, discount: Decimal | None) -> Decimal:
    """What a coupon in `status` with `discount` holds of its campaign's budget."""
    return discount if status in USING and discount is not None else Decimal(0)


@dataclass
class _Taken:
    """The takes of a use's transaction (kept), given back if it does not commit; the campaigns whose budget it
    found exhausted, announced once it ended."""

    takes: list[tuple[int, int]] = field(default_factory=list)  # (campaign id, minor units)
    exhausted: dict[int, Campaign] = field(default_factory=dict)


_kept: ContextVar[_Taken | None] = ContextVar("budget_kept", default=None)


class kept:  # noqa: N801 - used as a function: `with budget.kept(), transaction.atomic():`
    """Wrap a use's outermost transaction.atomic(): what take() took in it is given back if it raises (rolled
    back or its commit failed: none of its changes stay). Nested: the outermost one gives back. A class, not a
    generator: it runs around every use of every campaign (~0.5 us)."""

    __slots__ = ("taken", "token")

    def __enter__(self) -> None:
        if _kept.get() is not None:
            self.token: Token[_Taken | None] | None = None
            return
        self.taken = _Taken()
        self.token = _kept.set(self.taken)

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: Any) -> None:
        if self.token is None:
            return
        _kept.reset(self.token)
        if kind is not None:
            for campaign_id, amount in self.taken.takes:
                _give_back_now(campaign_id, amount)
        for campaign in self.taken.exhausted.values():
            _announce(campaign)


def take(coupon: Coupon, discount: Decimal) -> UseOutcome | None:
    """Take from the coupon's campaign's budget what a use at `discount` adds to what the coupon holds already:
    None when taken (or nothing to take), else the refusal (22: nothing taken). Call inside kept(), before the
    coupon's change is written; untake() when the change is not written after all. Raise Unavailable."""
    campaign = coupon.campaign
    if campaign.budget is None:
        return None
    amount = to_minor(discount, campaign.currency) - to_minor(holds(coupon.status, coupon.discount),
                                                            campaign.currency)
    if amount <= 0:
        return None
    try:
        answer, left = run_budget_take(campaign.pk, amount)
        if answer == BudgetTake.NO_STATE:
            load(campaign)
            answer, left = run_budget_take(campaign.pk, amount)
    except StoreUnavailable as exc:  # taken or not (a lost reply): never given back, so never spent twice
        raise Unavailable() from exc
    if answer == BudgetTake.NO_STATE:
        raise Unavailable()
    if answer == BudgetTake.SHORT:
        _exhausted(campaign)
        return refused(UseCode.BUDGET_EXHAUSTED)
    taken = _kept.get()
    if taken is not None:
        taken.takes.append((campaign.pk, amount))
    if left == 0:
        _exhausted(campaign)
    return None


def untake(coupon: Coupon, discount: Decimal) -> None:
    """Give back now what take() took for a use whose change was not written (it lost a race: nothing changed).
    Call only after take() answered None for this coupon, unchanged since, and this discount."""
    campaign = coupon.campaign
    if campaign.budget is None:
        return
    amount = to_minor(discount, campaign.currency) - to_minor(holds(coupon.status, coupon.discount),
                                                            campaign.currency)
    if amount <= 0:
        return
    taken = _kept.get()
    if taken is not None and (campaign.pk, amount) in taken.takes:
        taken.takes.remove((campaign.pk, amount))
    _give_back_now(campaign.pk, amount)


def given_back(coupon: Coupon, was: Decimal, now: Decimal) -> None:
    """A change of the coupon from holding `was` to holding `now` is written (in this transaction): what it holds
    less goes back to the budget once the transaction commits."""
    if was <= now:
        return
    campaign = coupon.campaign
    if campaign.budget is None:
        return
    amount = to_minor(was, campaign.currency) - to_minor(now, campaign.currency)
    if amount > 0:
        transaction.on_commit(lambda: _give_back_now(campaign.pk, amount))


def give_back_after_commit(amounts: dict[int, int]) -> None:
    """Give back, once this transaction commits, minor units to each campaign's budget (campaign id -> units)."""
    for campaign_id, amount in amounts.items():
        if amount > 0:
            transaction.on_commit(functools.partial(_give_back_now, campaign_id, amount))


def _give_back_now(campaign_id: int, amount: int) -> None:
    """Give money back to a campaign's budget (never raises: Redis down leaves it unspent, verify names it)."""
    try:
        run_budget_give_back(campaign_id, amount)
    except StoreUnavailable:
        log.error("could not give %s minor units back to campaign %s's budget (Redis unavailable): left unspent, "
                  "verify_campaign reports it", amount, campaign_id)


# -- what is used and left -----------------------------------------------------------------------------------------

_USED_SQL = (f"SELECT coalesce(sum(discount), 0) FROM {Coupon._meta.db_table} "
             "WHERE campaign_id = %s AND status IN ('held', 'redeemed')")


def used(campaign: Campaign) -> Decimal:
    """What the campaign's coupons hold of its budget in PostgreSQL: the discounts of its held and redeemed ones."""
    with connection.cursor() as cursor:
        cursor.execute(_USED_SQL, [campaign.pk])
        return Decimal(cursor.fetchone()[0])


def load(campaign: Campaign) -> int:
    """Load what is left of the campaign's budget into Redis where it holds none (from PostgreSQL: the budget less
    what its coupons hold); return what Redis holds (minor units). Raise StoreUnavailable."""
    assert campaign.budget is not None
    left = to_minor(campaign.budget, campaign.currency) - to_minor(used(campaign), campaign.currency)
    return budget_load(campaign.pk, left, keys_expire_at(campaign))


@dataclass(frozen=True)
class BudgetFigures:
    """A budgeted campaign's money, in its currency: its budget, what its coupons use (the discounts of the held
    and redeemed ones, PostgreSQL) and what is left (Redis's; the budget less what is used when Redis holds none
    or does not answer)."""

    budget: Decimal
    used: Decimal
    left: Decimal

    def as_json(self) -> dict[str, Any]:
        return {"budget": str(self.budget), "used": str(self.used), "left": str(self.left)}


def figures(campaign: Campaign) -> BudgetFigures | None:
    """The campaign's budget figures (None: no budget)."""
    if campaign.budget is None:
        return None
    try:
        units = budget_left_many([campaign.pk]).get(campaign.pk)
    except StoreUnavailable:
        units = None
    spent = used(campaign)
    left = campaign.budget - spent if units is None else from_minor(units, campaign.currency)
    return BudgetFigures(budget=campaign.budget, used=spent, left=left)


# -- campaign.budget_exhausted ---------------------------------------------------------------------------------------

_announced: set[int] = set()  # campaigns whose event this process wrote (the outbox's `once` keeps it one in all)


def _exhausted(campaign: Campaign) -> None:
    if campaign.pk in _announced:
        return
    taken = _kept.get()
    if taken is not None:
        taken.exhausted[campaign.pk] = campaign  # written once the use's transaction ended, committed or not
    else:
        _announce(campaign)


def _announce(campaign: Campaign) -> None:
    """Write campaign.budget_exhausted to the outbox once (never raises: the next refusal tries again)."""
    if campaign.pk in _announced:
        return
    try:
        with transaction.atomic():
            campaign_event_out(campaign, EventType.CAMPAIGN_BUDGET_EXHAUSTED,
                               {"budget": str(campaign.budget), "exhausted_at": timezone.now().isoformat()},
                               once=f"campaign.budget_exhausted:{campaign.pk}")
    except Exception:
        log.exception("could not write campaign.budget_exhausted of campaign %s", campaign.pk)
        return
    _announced.add(campaign.pk)
