"""Extend the validity of a campaign's issued, still-usable coupons by N days, one 'extended' event each.

An extension has an id: the pk of the VALIDITY_EXTENDED CampaignEvent written when it begins. It applies
to the coupons issued up to that moment (ids up to the last coupon id then: no clock is compared) that
are active or held, and not yet past their validity, when their batch runs. A coupon already extended
by that id is skipped, so running an extension twice, or twice at once (a redelivered task, two
workers), extends every coupon once. Claims still waiting in the ledger are not coupons yet: extend
after the drain caught up (it runs every few seconds).

The extension is not a state change: the coupon's status and version stay (the event fold ignores
'extended'), only expires_at moves, by whole days of 86,400 seconds on the UTC instant.
"""
from __future__ import annotations

from typing import Any

from django.db import connection, transaction
from django.db.models import Max
from django.utils.translation import gettext

from campaigns.claim_settled import claims_changed
from campaigns.models import Campaign, CampaignEvent, CampaignEventType
from core.errors import ApplicationError
from core.locks import AdvisoryLock, xact_lock

from .models import Coupon, CouponEvent, CouponEventType, CouponStatus

MAX_DAYS = 365
# Measured (local PostgreSQL 15, the 2,500-coupon test in tests/coupons/test_validity_extension.py): a batch
# of 1,000 coupons takes 30-36 ms (the one UPDATE ... RETURNING + INSERT statement), about 30,000 coupons/s;
# its row locks are held that long, so a redemption racing the extension waits at most that.
BATCH_SIZE = 1000


class InvalidValidityExtension(ApplicationError):
    """A validity extension an operator asked for is not allowed; nothing was changed."""

    http_status = 400
    code = 400
    status = "invalid_request"


def check_days(days: object) -> int:
    """Return `days` if it is a whole number of days from 1 to 365; else raise with a hint at the mistake."""
    if not isinstance(days, int) or isinstance(days, bool):
        raise InvalidValidityExtension(gettext("Give the extension as a whole number of days, got %(days)s.")
                                       % {"days": repr(days)})
    if days == 0:
        raise InvalidValidityExtension(gettext("Give at least 1 day: an extension by 0 days would change nothing."))
    if days < 0:
        raise InvalidValidityExtension(
            gettext("Validity can only be extended: give a positive number of days (got %(days)s).") % {"days": days}
        )
    if days > MAX_DAYS:
        if days % 86_400_000 == 0:
            raise InvalidValidityExtension(
                gettext("%(days)s looks like milliseconds (%(meant)s days): give days, e.g. %(meant)s.")
                % {"days": days, "meant": days // 86_400_000}
            )
        if days % 3600 == 0:
            raise InvalidValidityExtension(
                gettext("%(days)s days is more than %(max)s; did you mean seconds (%(meant)s days)? Give days.")
                % {"days": days, "max": MAX_DAYS, "meant": f"{days / 86400:g}"}
            )
        raise InvalidValidityExtension(gettext("A validity extension is at most %(max)s days (got %(days)s).")
                                       % {"max": MAX_DAYS, "days": days})
    return days


def validity_extension_begin(*, campaign: Campaign, days: int, actor: str, key: str | None = None) -> CampaignEvent:
    """Record a new validity extension (its VALIDITY_EXTENDED event) and return it; nothing is extended yet.

    With a `key` (e.g. the admin form's token) a second begin with the same key returns the first
    extension instead of a new one, so a form sent twice extends once; the same key with other days is
    refused.
    """
    days = check_days(days)
    with transaction.atomic():
        # The campaign's row lock makes "find the key, else create" one step for concurrent callers.
        campaign = Campaign.objects.select_for_update().get(pk=campaign.pk)
        if key is not None:
            earlier = CampaignEvent.objects.filter(
                campaign=campaign, type=CampaignEventType.VALIDITY_EXTENDED, data__key=key
            ).first()
            if earlier is not None:
                if earlier.data.get("days") != days:
                    raise InvalidValidityExtension(
                        gettext("This request (%(key)s) already extended the coupons by %(days)s days.")
                        % {"key": key, "days": earlier.data.get("days")}
                    )
                return earlier
        # The highest coupon id of all (one step back along the primary key), not the campaign's (a scan).
        last_coupon = Coupon.objects.aggregate(last=Max("pk"))["last"] or 0
        return CampaignEvent.objects.create(
            campaign=campaign,
            type=CampaignEventType.VALIDITY_EXTENDED,
            data={"days": days, "last_coupon": last_coupon, "key": key},
            actor=actor,
        )


# One statement per batch: pick the next coupons (keyset by id) that this extension has not extended,
# move their expiry and write one 'extended' event each. Conditions on the coupon row itself are repeated
# in the UPDATE, where PostgreSQL re-checks them against a row another transaction changed meanwhile
# (a redemption committed after this statement began). The NOT EXISTS is sound only because the batch
# runs after the extension's advisory lock was taken: under READ COMMITTED the statement's snapshot then
# sees every event an earlier batch of the same extension committed (a subquery is not re-checked).
_BATCH_SQL = f"""
WITH batch AS (
    SELECT c.id FROM {Coupon._meta.db_table} c
    WHERE c.campaign_id = %(campaign)s AND c.id > %(after)s
      AND c.status IN (%(active)s, %(held)s)
      AND c.expires_at > now() - interval '1 second'
      AND c.id <= %(last_coupon)s
      AND NOT EXISTS (
          SELECT 1 FROM {CouponEvent._meta.db_table} e
          WHERE e.coupon_id = c.id AND e.type = %(extended)s AND e.data @> %(mark)s::jsonb
      )
    ORDER BY c.id
    LIMIT %(limit)s
), moved AS (
    UPDATE {Coupon._meta.db_table} c
    SET expires_at = c.expires_at + make_interval(secs => %(seconds)s), updated_at = now()
    FROM batch
    WHERE c.id = batch.id
      AND c.status IN (%(active)s, %(held)s)
      AND c.expires_at > now() - interval '1 second'
    RETURNING c.id, c.expires_at, c.claim_id
), logged AS (
    INSERT INTO {CouponEvent._meta.db_table} (coupon_id, campaign_id, type, data, source, created_at)
    SELECT id, %(campaign)s, %(extended)s,
           jsonb_build_object('extension', %(extension)s::bigint, 'days', %(days)s::int,
                              'from', expires_at - make_interval(secs => %(seconds)s), 'to', expires_at),
           'extension', now()
    FROM moved
    RETURNING 1
)
SELECT (SELECT max(id) FROM batch), (SELECT count(*) FROM logged), (SELECT array_agg(claim_id) FROM moved)
"""


def validity_extension_apply(*, extension: CampaignEvent, batch_size: int = BATCH_SIZE) -> int:
    """Extend every coupon the extension applies to and has not extended yet; return how many it extended.

    Keyset batches by id, each one statement in its own transaction (constant memory, short row locks).
    Safe to run twice, or twice at once: the batches of one extension take turns on an advisory lock.
    """
    if extension.type != CampaignEventType.VALIDITY_EXTENDED:
        raise InvalidValidityExtension(gettext("Event #%(id)s is not a validity extension.") % {"id": extension.pk})
    days = check_days(extension.data.get("days"))
    params: dict[str, Any] = {
        "campaign": extension.campaign_id,
        "active": CouponStatus.ACTIVE.value,
        "held": CouponStatus.HELD.value,
        "last_coupon": int(extension.data["last_coupon"]),
        "extended": CouponEventType.EXTENDED.value,
        "mark": f'{{"extension": {int(extension.pk)}}}',
        "extension": extension.pk,
        "days": days,
        "seconds": days * 86_400,
        "limit": batch_size,
    }
    extended = 0
    after = 0
    while True:
        with transaction.atomic(), connection.cursor() as cursor:
            # Serializes the batches of one extension (see _BATCH_SQL).
            xact_lock(AdvisoryLock.VALIDITY_EXTENSION, extension.pk & 0x7FFFFFFF)
            cursor.execute(_BATCH_SQL, {**params, "after": after})
            last_id, count, claim_ids = cursor.fetchone()  # type: ignore[misc]
            claims_changed(claim_ids or [])  # their claims' settled records showed the old expiry: before the commit
        if last_id is None:
            return extended
        extended += count
        after = last_id


def coupons_extend_validity(
    *, campaign: Campaign, days: int, actor: str, batch_size: int = BATCH_SIZE, key: str | None = None
) -> int:
    """Extend the validity of the campaign's issued, still-usable coupons by `days`; return how many.

    Begins an extension (or, with a known `key`, continues that one) and applies it. Raise
    InvalidValidityExtension for days outside 1..365, changing nothing.
    """
    extension = validity_extension_begin(campaign=campaign, days=days, actor=actor, key=key)
    return validity_extension_apply(extension=extension, batch_size=batch_size)
