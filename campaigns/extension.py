"""Extend a campaign's end: PostgreSQL, the settings cached in Redis and every key's expiry move together.

Which campaigns can be extended: published ones that have not ended yet (running, paused or not yet
started). An ended campaign is never reopened: its shoppers were told "ended", its ledger may be drained
and its figures closed; a new campaign is the way to sell again.
"""
from __future__ import annotations

import enum
from datetime import UTC, datetime, timedelta

from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext

from core.errors import ApplicationError, Conflict, Unavailable

from . import redis_state
from .models import Campaign, CampaignEvent, CampaignEventType
from .services import keys_expire_at

MAX_EXTENSION = timedelta(days=365)


class InvalidExtension(ApplicationError):
    """An extension an operator asked for is not allowed; nothing was changed."""

    http_status = 400
    code = 400
    status = "invalid_request"


class ExtensionConflict(Conflict):
    """Redis holds another end than PostgreSQL for the campaign; nothing was changed."""


class ExtendCode(enum.IntEnum):
    """Return codes of extend.lua."""

    EXTENDED = 1
    ALREADY = 0
    NO_STATE = -1
    CONFLICT = -2
    NOT_LATER = -3


def operator_time(moment: datetime) -> str:
    """Return `moment` as the operator reads it: their zone, to the second, with the offset."""
    return timezone.localtime(moment).isoformat(sep=" ", timespec="seconds")


def check_new_end(*, campaign: Campaign, new_end: datetime, now: datetime) -> None:
    """Raise InvalidExtension unless `campaign` may end at `new_end` instead of its current end."""
    values = {"id": campaign.pk, "new_end": operator_time(new_end), "end": operator_time(campaign.ends_at)}
    if campaign.published_at is None:
        raise InvalidExtension(gettext("Campaign #%(id)s is a draft: change its end in its form. Only published "
                                       "campaigns are extended.") % values)
    if now >= campaign.ends_at:
        raise InvalidExtension(
            gettext("Campaign #%(id)s ended at %(end)s; an ended campaign can't be extended (create a new campaign "
                    "to sell again).") % values
        )
    if new_end <= campaign.ends_at:
        raise InvalidExtension(
            gettext("The new end (%(new_end)s) must be later than the current end (%(end)s).") % values
        )
    if new_end - campaign.ends_at > MAX_EXTENSION:
        raise InvalidExtension(
            gettext("The new end (%(new_end)s) is more than 365 days after the current end; the latest allowed is "
                    "%(latest)s.") % {**values, "latest": operator_time(campaign.ends_at + MAX_EXTENSION)}
        )
    if new_end <= campaign.starts_at:
        raise InvalidExtension(
            gettext("The new end (%(new_end)s) must be later than the start (%(start)s).")
            % {**values, "start": operator_time(campaign.starts_at)}
        )
    if campaign.valid_until is not None and new_end > campaign.valid_until:
        raise InvalidExtension(
            gettext("Coupons of campaign #%(id)s are valid until %(valid_until)s: the campaign can't sell coupons "
                    "past their validity, so it can't end later than that.")
            % {**values, "valid_until": operator_time(campaign.valid_until)}
        )


def _last_extension(campaign: Campaign) -> CampaignEvent | None:
    return (
        CampaignEvent.objects.filter(campaign=campaign, type=CampaignEventType.END_EXTENDED)
        .order_by("-created_at", "-id")
        .first()
    )


def _move_in_redis(campaign: Campaign, *, old_end: datetime, new_end: datetime) -> ExtendCode:
    """Run extend.lua for a loaded campaign (already at new_end in PostgreSQL). Raise Unavailable/Conflict."""
    try:
        code, ends_ms = redis_state.run_extend(
            campaign_id=campaign.pk, old_ends_at=old_end, new_ends_at=new_end, expire_at=keys_expire_at(campaign),
            codes=campaign.is_codes,
        )
    except redis_state.StoreUnavailable as exc:
        raise Unavailable() from exc
    result = ExtendCode(code)
    if result in (ExtendCode.CONFLICT, ExtendCode.NOT_LATER):
        held = operator_time(datetime.fromtimestamp(ends_ms / 1000, tz=UTC))
        raise ExtensionConflict(
            gettext("Redis holds another end for campaign #%(id)s (%(held)s) than PostgreSQL: one was changed "
                    "without the other. Nothing was changed; reload its settings with `manage.py preheat %(id)s` "
                    "and try again.") % {"id": campaign.pk, "held": held}
        )
    return result


def campaign_extend_end(*, campaign: Campaign, new_end: datetime, actor: str) -> Campaign:
    """Move the campaign's end to `new_end` in PostgreSQL and Redis together, with an END_EXTENDED event.

    Redis (extend.lua: the cached end and the expiry of every state key, new end plus the grace) is
    changed inside the PostgreSQL transaction, last, so a Redis failure rolls the row back (Unavailable).
    A campaign never loaded into Redis, or whose state is gone, changes in PostgreSQL only: a preheat or
    rebuild loads its end from there. Repeating the last extension (same new end) changes nothing but
    applies the keys' expiry again, and writes no second event. Raise InvalidExtension, ExtensionConflict
    or Unavailable; in every case nothing was changed.
    """
    if not isinstance(new_end, datetime) or timezone.is_naive(new_end):
        raise InvalidExtension(gettext("The new end needs a time zone (an aware datetime)."))
    new_end = new_end.astimezone(UTC)
    with transaction.atomic():
        campaign = Campaign.objects.select_for_update().get(pk=campaign.pk)
        last = _last_extension(campaign)
        if last is not None and campaign.ends_at == new_end and datetime.fromisoformat(last.data["to"]) == new_end:
            # A repeat (a redelivered task, a form sent twice): re-apply the keys' expiry. Passing the
            # previous end lets it finish a Redis change that was lost (e.g. a Redis restart).
            if campaign.preheated_at is not None:
                _move_in_redis(campaign, old_end=datetime.fromisoformat(last.data["from"]), new_end=new_end)
            return campaign
        check_new_end(campaign=campaign, new_end=new_end, now=timezone.now())
        old_end = campaign.ends_at
        campaign.ends_at = new_end
        campaign.save(update_fields=["ends_at", "updated_at"])
        redis = "not_loaded"
        if campaign.preheated_at is not None:
            redis = _move_in_redis(campaign, old_end=old_end, new_end=new_end).name.lower()
        CampaignEvent.objects.create(
            campaign=campaign,
            type=CampaignEventType.END_EXTENDED,
            data={"from": old_end.isoformat(), "to": new_end.isoformat(), "redis": redis},
            actor=actor,
        )
    return campaign
