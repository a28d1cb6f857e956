"""Write use cases of campaigns: create, publish (preheat), pause and resume."""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import F
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver
from django.utils import timezone
from django.utils.translation import gettext

from core.db import ModelRows, Read
from core.errors import Unavailable
from core.locks import AdvisoryLock, xact_lock

from . import redis_state
from .errors import CampaignDraft, CampaignOver, CampaignStateLost, InvalidCampaign
from .models import Audience, Campaign, CampaignEvent, CampaignEventType, CampaignKind, CampaignState, DiscountType
from .money import to_minor
from .redis_state.budget import budget_load


def keys_expire_at(campaign: Campaign) -> datetime:
    """Return when the campaign's Redis keys expire: its end plus the grace period to drain the ledger."""
    return campaign.ends_at + timedelta(seconds=settings.COUPONS_KEY_GRACE_SECONDS)


def campaign_create(
    *,
    name: str,
    total_stock: int,
    starts_at: datetime,
    ends_at: datetime,
    discount_value: Decimal,
    discount_type: str = DiscountType.FIXED,
    per_user_limit: int = 1,
    max_discount: Decimal | None = None,
    min_spend: Decimal = Decimal("0"),
    currency: str = "CNY",
    valid_until: datetime | None = None,
    valid_days: int | None = None,
    audience: str = Audience.ALL,
    kind: str = CampaignKind.GRAB,
    code: str | None = None,
    include_categories: list[str] | None = None,
    exclude_categories: list[str] | None = None,
    include_skus: list[str] | None = None,
    exclude_skus: list[str] | None = None,
    min_quantity: int = 0,
    exclusive: bool = False,
    combinable_with: list[int] | None = None,
    order_cap: Decimal | None = None,
    tiers: list[list[Any]] | None = None,
    buy_quantity: int = 0,
    get_quantity: int = 0,
    buckets: int = 1,
    budget: Decimal | None = None,
    group: str = "",
    group_limit: int | None = None,
    audience_tags: list[str] | None = None,
    channels: list[str] | None = None,
    publish: bool = False,
) -> Campaign:
    """Create a campaign (validated like the admin form); with publish=True also publish and preheat it.

    A codes campaign (kind "codes") may have a shared code: stock is then its total uses, per_user_limit the
    uses per shopper; without one its codes are unique codes (generated or imported)."""
    if valid_until is None and valid_days is None:
        valid_days = 30
    campaign = Campaign(
        name=name,
        total_stock=total_stock,
        per_user_limit=per_user_limit,
        starts_at=starts_at,
        ends_at=ends_at,
        discount_type=discount_type,
        discount_value=discount_value,
        max_discount=max_discount,
        min_spend=min_spend,
        currency=currency,
        valid_until=valid_until,
        valid_days=valid_days,
        audience=audience,
        kind=kind,
        code=code or None,
        include_categories=include_categories or [],
        exclude_categories=exclude_categories or [],
        include_skus=include_skus or [],
        exclude_skus=exclude_skus or [],
        min_quantity=min_quantity,
        exclusive=exclusive,
        combinable_with=combinable_with or [],
        order_cap=order_cap,
        tiers=tiers or [],
        buy_quantity=buy_quantity,
        get_quantity=get_quantity,
        buckets=buckets,
        budget=budget,
        group=group,
        group_limit=group_limit,
        audience_tags=audience_tags or [],
        channels=channels or [],
    )
    try:
        campaign.full_clean()
    except ValidationError as exc:
        raise InvalidCampaign(exc.message_dict) from exc
    with transaction.atomic():
        campaign_save(campaign)
        if publish:
            campaign = campaign_publish(campaign=campaign)
    return campaign


def _check_shared_code(campaign: Campaign) -> None:
    """Check, race-free, that the campaign's shared code is free among campaigns not ended: under the code's
    transaction lock, held until the caller's transaction ends (call inside transaction.atomic)."""
    if not campaign.code:
        return
    campaign.code = campaign.code.upper()
    xact_lock(AdvisoryLock.SHARED_CODE, campaign.code)
    conflict = campaign.shared_code_conflict()
    if conflict:
        raise InvalidCampaign({"code": [conflict]})


# The live campaign of a shared code, per process, for LIVE_CODE_SECONDS: a code typed at checkout costs no
# query for it. Staleness can't oversell or let a paused or ended code through: the use's Redis take
# (code_take.lua) checks the window, the pause and the stock atomically; a save in this process clears it.
LIVE_CODE_SECONDS = 1.0
LIVE_CODE_ENTRIES = 1000
_live_codes: dict[str, tuple[float, Campaign]] = {}
_live_codes_lock = threading.Lock()
# A code not remembered (none live has it: every claimed coupon's code typed at a reserve or redeem asks) is one
# prepared statement (core.db), not a query Django's ORM compiles each time; the same row as
# Campaign.objects.published().with_shared_code(code, at=at).first() (its ordering: -starts_at, -id).
_CAMPAIGN_ROWS = ModelRows(Campaign)
_LIVE_CODE_SQL = f"""SELECT {_CAMPAIGN_ROWS.columns("k")} FROM {Campaign._meta.db_table} k
WHERE k.published_at IS NOT NULL AND k.kind = '{CampaignKind.CODES.value}' AND k.code = %(code)s::varchar
  AND k.ends_at > %(at)s::timestamptz
ORDER BY k.starts_at DESC, k.id DESC LIMIT 1"""


def _remembered(code: str) -> Campaign | None:
    """The campaign this process remembers for the shared code, if its memory is still fresh."""
    hit = _live_codes.get(code)
    return hit[1] if hit is not None and hit[0] > time.monotonic() else None


def _live_at(campaign: Campaign | None, at: datetime) -> Campaign | None:
    return campaign if campaign is not None and campaign.state_at(at) == CampaignState.LIVE else None


def live_campaign_of_code(code: str, *, at: datetime) -> Campaign | None:
    """Return the published, live codes campaign whose shared code is `code` (shared_code_form), or None.
    Its rules may be up to LIVE_CODE_SECONDS old (a save in another process); read it, never change it."""
    campaign = _remembered(code)
    if campaign is None:
        with _live_codes_lock:  # one read when it expires, not one per thread typing the code meanwhile
            campaign = _remembered(code)
            if campaign is None:
                return live_code_read(code, at=at).run()  # type: ignore[no-any-return]
    return _live_at(campaign, at)


def live_code_read(code: str, *, at: datetime) -> Read:
    """The read of live_campaign_of_code() when this process does not remember the code, as a Read (core.db: for
    a thread or the event loop) of the live campaign or None; the campaign it finds is remembered."""
    return Read(_LIVE_CODE_SQL, {"code": code, "at": at}, lambda rows: _found(code, rows, at))


def _found(code: str, rows: list[Any], at: datetime) -> Campaign | None:
    """Campaign.objects.published().with_shared_code(code).first()'s campaign of the rows, remembered."""
    campaign: Campaign | None = _CAMPAIGN_ROWS.build(rows[0]) if rows else None
    if campaign is not None:
        if len(_live_codes) >= LIVE_CODE_ENTRIES:
            _live_codes.clear()
        _live_codes[code] = (time.monotonic() + LIVE_CODE_SECONDS, campaign)
    return _live_at(campaign, at)


def remembered_live_campaign(code: str, *, at: datetime) -> Campaign | None:
    """live_campaign_of_code's answer if this process remembers it (no query: None when it does not), for what
    must not look a code up before counting it (coupons.guard)."""
    return _live_at(_remembered(code), at)


def forget_live_codes() -> None:
    """Forget the live campaigns of shared codes this process remembers (tests: a rolled-back database)."""
    _live_codes.clear()


@receiver(post_save, sender=Campaign)
@receiver(post_delete, sender=Campaign)
def _campaign_saved(**kwargs: object) -> None:
    forget_live_codes()


def campaign_save(campaign: Campaign) -> Campaign:
    """Save a campaign (created or edited), its shared code checked unique race-free. Raise InvalidCampaign."""
    with transaction.atomic():
        _check_shared_code(campaign)
        campaign.save()
    return campaign


def campaign_publish(*, campaign: Campaign, actor: str = "system") -> Campaign:
    """Publish a draft campaign and load it into Redis. Raise Unavailable when Redis is down, InvalidCampaign
    when its shared code was taken meanwhile by another campaign not ended."""
    with transaction.atomic():
        campaign = Campaign.objects.select_for_update().get(pk=campaign.pk)
        if campaign.published_at is None:
            _check_shared_code(campaign)
            campaign.published_at = timezone.now()
            campaign.save(update_fields=["published_at", "updated_at"])
            CampaignEvent.objects.create(campaign=campaign, type=CampaignEventType.PUBLISHED, actor=actor)
        campaign_preheat(campaign=campaign)
    return campaign


@dataclass(frozen=True)
class PreheatResult:
    campaign_id: int
    stock_created: bool
    remaining: int


def campaign_preheat(*, campaign: Campaign) -> PreheatResult:
    """Load the campaign's settings into Redis (first time: its whole stock) and set the keys' expiry.

    A campaign that was loaded before and whose stock is gone from Redis is never given its stock again
    here: that raises CampaignStateLost and needs the rebuild from PostgreSQL (orders.rebuild).
    """
    with transaction.atomic():
        # Read under the row's lock: a preheat never writes back an end an extension just moved.
        campaign = Campaign.objects.select_for_update().get(pk=campaign.pk)
        return _preheat(campaign)


def campaign_state_load(campaign: Campaign, *, initial_stock: int | None, last_ledger_id: str = "0-0",
                        bucket: int = 0, share: int | None = None) -> tuple[bool, int | None]:
    """Write the campaign's settings into Redis (load.lua), and its stock when `initial_stock` is given:
    (whether the stock was created, the stock Redis holds). Of a campaign split into buckets, one bucket's (its
    part of the stock and of the rate limit; `share` its share when not `initial_stock`). Raise StoreUnavailable."""
    return redis_state.load_state(
        campaign_id=campaign.pk,
        codes=campaign.is_codes,
        starts_at=campaign.starts_at,
        ends_at=campaign.ends_at,
        paused=campaign.paused,
        per_user_limit=campaign.per_user_limit,
        total_stock=campaign.total_stock,
        expire_at=keys_expire_at(campaign),
        initial_stock=initial_stock,
        last_ledger_id=last_ledger_id,
        rate_limit=-(-campaign.admits_per_second // campaign.buckets),
        bucket=bucket,
        buckets=campaign.buckets,
        share=share,
        grant_only=campaign.kind == CampaignKind.GRANT,
        group=campaign.group,
        group_limit=campaign.group_limit or 0,
        audience_tags=campaign.audience_tags,
        channels=campaign.channels,
    )


def _preheat(campaign: Campaign) -> PreheatResult:
    first_load = campaign.preheated_at is None
    if campaign.published_at is None:
        raise CampaignDraft()
    if keys_expire_at(campaign) <= timezone.now():
        raise CampaignOver()
    parts = redis_state.split_stock(campaign.total_stock, campaign.buckets)
    created, remaining = False, 0
    try:
        for bucket, part in enumerate(parts):  # a bucket loaded before keeps its stock (a retried first load)
            made, left = campaign_state_load(campaign, initial_stock=part if first_load else None, bucket=bucket)
            if left is None:
                raise CampaignStateLost()
            created, remaining = created or made, remaining + left
        if first_load and campaign.budget is not None:  # no coupon used it yet; later loads: coupons/budget.py
            budget_load(campaign.pk, to_minor(campaign.budget, campaign.currency), keys_expire_at(campaign))
    except redis_state.StoreUnavailable as exc:
        raise Unavailable() from exc
    if first_load:
        now = timezone.now()
        Campaign.objects.filter(pk=campaign.pk, preheated_at__isnull=True).update(preheated_at=now)
        campaign.preheated_at = now
    return PreheatResult(campaign_id=campaign.pk, stock_created=created, remaining=remaining)


def campaign_set_paused(*, campaign: Campaign, paused: bool, actor: str = "system") -> Campaign:
    """Pause or resume a campaign, in PostgreSQL and (if loaded) in Redis, together."""
    with transaction.atomic():
        campaign = Campaign.objects.select_for_update().get(pk=campaign.pk)
        if campaign.paused != paused:
            CampaignEvent.objects.create(
                campaign=campaign, type=CampaignEventType.PAUSED if paused else CampaignEventType.RESUMED, actor=actor
            )
        campaign.paused = paused
        campaign.save(update_fields=["paused", "updated_at"])
        try:
            redis_state.set_paused(campaign_id=campaign.pk, paused=paused)
        except redis_state.StoreUnavailable as exc:
            raise Unavailable() from exc
    return campaign


def campaign_pause(*, campaign: Campaign, actor: str = "system") -> Campaign:
    return campaign_set_paused(campaign=campaign, paused=True, actor=actor)


def campaign_resume(*, campaign: Campaign, actor: str = "system") -> Campaign:
    return campaign_set_paused(campaign=campaign, paused=False, actor=actor)


MAX_STOCK_ADDED = 1_000_000


def campaign_add_stock(*, campaign: Campaign, quantity: int, actor: str) -> Campaign:
    """Add `quantity` coupons to a campaign: total in PostgreSQL, stock and total in Redis, with an event.

    The balance holds: total and remaining grow by the same amount. A campaign Redis lost must be rebuilt
    first (the stock is never guessed). Raise InvalidCampaign, CampaignStateLost or Unavailable.
    """
    if isinstance(quantity, bool) or not isinstance(quantity, int) or not 1 <= quantity <= MAX_STOCK_ADDED:
        added = gettext("Add between 1 and %(max)s coupons.") % {"max": f"{MAX_STOCK_ADDED:,}"}
        raise InvalidCampaign({"quantity": [added]})
    with transaction.atomic():
        campaign = Campaign.objects.select_for_update().get(pk=campaign.pk)
        if campaign.state_at(timezone.now()) == CampaignState.ENDED:
            raise InvalidCampaign({"quantity": [gettext("The campaign has ended: stock can't be added any more.")]})
        Campaign.objects.filter(pk=campaign.pk).update(total_stock=F("total_stock") + quantity,
                                                       updated_at=timezone.now())
        stock = None
        if campaign.preheated_at is not None:
            try:
                stock = redis_state.run_add_stock(campaign_id=campaign.pk, quantity=quantity,  # bucket 0's
                                                   codes=campaign.is_codes)
            except redis_state.StoreUnavailable as exc:
                raise Unavailable() from exc
            if stock is None:
                raise CampaignStateLost()
            if campaign.buckets > 1:  # added to bucket 0; the others draw from it (redis_state.move_stock)
                stock = redis_state.remaining_many([campaign.pk]).get(campaign.pk)
        CampaignEvent.objects.create(campaign=campaign, type=CampaignEventType.STOCK_ADDED, actor=actor,
                                     data={"added": quantity, "total": campaign.total_stock + quantity,
                                           "remaining": stock})
        campaign.refresh_from_db()
    return campaign
