"""The reads of a checkout's routes as prepared statements (core.db): a coupon and its campaign by the shopper's
code, the coupons of a shared code's use or of an order and a cart's candidates.

Each ran on every reserve, confirm, redeem, release or cart through Django's ORM, whose query compiler cost more
than PostgreSQL did (bench/api_routes.py, docs/benchmarks.md). The statements are the ORM's, written out: the same
rows in the same order, built into the same model objects (core.db.ModelRows).
"""
from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from campaigns.models import Campaign
from core.db import ModelRows, Read, prepared_cursor

from .models import Coupon, CouponStatus, UniqueCode

_COUPON, _CAMPAIGN = Coupon._meta.db_table, Campaign._meta.db_table
_COUPON_ROWS, _CAMPAIGN_ROWS = ModelRows(Coupon), ModelRows(Campaign)


def campaign_of_row(values: Sequence[Any]) -> Campaign:
    campaign: Campaign = _CAMPAIGN_ROWS.build(values)
    return campaign


def _coupons(sql: str, params: dict[str, Any]) -> list[Coupon]:
    """The coupons of a statement selecting the coupon's columns then its campaign's, each with its campaign (as
    select_related("campaign") has it)."""
    with prepared_cursor() as cursor:
        cursor.execute(sql, params)
        return _built(cursor.fetchall())


def _built(rows: Sequence[Sequence[Any]]) -> list[Coupon]:
    coupons = []
    for row in rows:
        coupon: Coupon = _COUPON_ROWS.build(row[:_COUPON_ROWS.width])
        coupon.campaign = campaign_of_row(row[_COUPON_ROWS.width:])
        coupons.append(coupon)
    return coupons


_WITH_CAMPAIGN = (f"SELECT {_COUPON_ROWS.columns('c')}, {_CAMPAIGN_ROWS.columns('k')} "
                  f"FROM {_COUPON} c JOIN {_CAMPAIGN} k ON k.id = c.campaign_id")

_FREE_UNIQUE = f"""SELECT u.code, {_CAMPAIGN_ROWS.columns('k')} FROM {UniqueCode._meta.db_table} u
    JOIN {_CAMPAIGN} k ON k.id = u.campaign_id WHERE u.code = ANY(%(codes)s::varchar[]) AND u.holder_id IS NULL"""
_HAS_USED = f"""SELECT 1 FROM {_COUPON} c WHERE c.user_id = %(user)s::varchar
    AND c.status IN ('{CouponStatus.REDEEMED.value}', '{CouponStatus.HELD.value}') LIMIT 1"""
_OWN = f"{_WITH_CAMPAIGN} WHERE c.code = %(code)s::varchar AND c.user_id = %(user)s::varchar"
# The shopper's coupon of a code (its row, as _OWN's), else whether the shopper used that shared code for an order
# (a coupon of theirs whose claim id matches `use`, in a codes campaign of that code): services.code_is_own's.
_OWN_OR_USE = f"""SELECT {_COUPON_ROWS.columns('c')}, {_CAMPAIGN_ROWS.columns('k')},
    CASE WHEN c.id IS NOT NULL THEN true ELSE EXISTS (
        SELECT 1 FROM {_COUPON} u WHERE u.user_id = %(user)s::varchar AND u.claim_id LIKE %(use)s::varchar
        AND EXISTS (SELECT 1 FROM {_CAMPAIGN} s WHERE s.id = u.campaign_id AND s.kind = %(kind)s::varchar
                    AND s.code = %(shared)s::varchar)) END
FROM (SELECT 1) AS one LEFT JOIN ({_COUPON} c JOIN {_CAMPAIGN} k ON k.id = c.campaign_id)
    ON c.code = %(code)s::varchar AND c.user_id = %(user)s::varchar"""
_BY_ID = f"{_WITH_CAMPAIGN} WHERE c.id = %(id)s::bigint"
_FAMILY = f"""{_WITH_CAMPAIGN} WHERE c.user_id = %(user)s::varchar AND c.campaign_id = %(campaign)s::bigint
    AND c.claim_id LIKE %(prefix)s::varchar ORDER BY c.id"""
_ORDER_OTHERS = f"""{_WITH_CAMPAIGN} WHERE c.user_id = %(user)s::varchar AND c.order_id = %(order)s::varchar
    AND (c.status = '{CouponStatus.REDEEMED.value}'
         OR (c.status = '{CouponStatus.HELD.value}' AND c.hold_until > %(now)s::timestamptz))
    AND c.id <> %(id)s::bigint ORDER BY c.id"""
_CART = f"""{_WITH_CAMPAIGN} WHERE c.user_id = %(user)s::varchar
    AND ((c.status = '{CouponStatus.ACTIVE.value}' AND c.valid_from <= %(now)s::timestamptz
          AND c.expires_at >= %(second)s::timestamptz AND k.currency = %(currency)s::varchar)
         OR c.code = ANY(%(codes)s::varchar[]))
    ORDER BY c.expires_at, c.id"""
def own_coupon(*, code: str, user_id: str) -> Coupon | None:
    """The shopper's coupon of this code (canonical), with its campaign, or None."""
    found = _coupons(_OWN, {"code": code, "user": user_id})
    return found[0] if found else None


def own_coupon_or_use(*, code: str, user_id: str, use: str, kind: str, shared: str | None
                      ) -> tuple[bool, Coupon | None]:
    """(whether the code is the shopper's own, the shopper's coupon of that code): the coupon (with its campaign)
    if the shopper has one of that code, else whether a coupon of theirs has a claim id LIKE `use` in a campaign of
    `kind` whose code is `shared` (a use of that shared code). One statement."""
    with prepared_cursor() as cursor:
        cursor.execute(_OWN_OR_USE, {"code": code, "user": user_id, "use": use, "kind": kind, "shared": shared})
        row = cursor.fetchone()
    if row[0] is None:
        return bool(row[-1]), None
    return True, _built([row[:-1]])[0]


def coupon_by_id(pk: int) -> Coupon:
    """The coupon with its campaign (Coupon.DoesNotExist: none)."""
    found = _coupons(_BY_ID, {"id": pk})
    if not found:
        raise Coupon.DoesNotExist(f"no coupon {pk}")
    return found[0]


def use_family(*, user_id: str, campaign_id: int, prefix: str) -> list[Coupon]:
    """The shopper's coupons of one order's uses of a campaign's shared code (claim ids starting with `prefix`,
    which has no LIKE wildcard: services._use_prefix), oldest first."""
    return _coupons(_FAMILY, {"user": user_id, "campaign": campaign_id, "prefix": f"{prefix}%"})


def order_coupons(*, user_id: str, order_id: str, now: datetime, exclude: int | None) -> list[Coupon]:
    """The shopper's other coupons of an order that bear on its pricing: redeemed, or held and not lapsed by
    `now`; oldest first."""
    return _coupons(_ORDER_OTHERS, {"user": user_id, "order": order_id, "now": now,
                                    "id": exclude if exclude is not None else 0})


def cart_coupons(*, user_id: str, now: datetime, currency: str, codes: list[str]) -> list[Coupon]:
    """A cart's candidates among the shopper's coupons: those active, valid at `now` and in its currency, and
    those whose code is given; soonest to expire first."""
    return cart_coupons_read(user_id=user_id, now=now, currency=currency, codes=codes).run()


def cart_coupons_read(*, user_id: str, now: datetime, currency: str, codes: list[str]) -> Read:
    """cart_coupons() as a Read (core.db): for a thread or the event loop."""
    return Read(_CART, {"user": user_id, "now": now, "second": now.replace(microsecond=0), "currency": currency,
                        "codes": codes}, _built)


def free_unique_codes_read(codes: list[str]) -> Read:
    """The unique codes among `codes` nobody holds yet, as a Read of {code: its campaign}: the rows of
    UniqueCode.objects.select_related("campaign").filter(code__in=codes, holder_id__isnull=True)."""
    return Read(_FREE_UNIQUE, {"codes": codes}, _codes_campaigns)


def _codes_campaigns(rows: list[Sequence[Any]]) -> dict[str, Campaign]:
    return {row[0]: campaign_of_row(row[1:]) for row in rows}


def has_used_read(user_id: str) -> Read:
    """Whether the shopper redeemed or holds a coupon (a new-shopper campaign's test), as a Read of a bool: the
    answer of Coupon.objects.filter(user_id=user_id, status__in=[REDEEMED, HELD]).exists()."""
    return Read(_HAS_USED, {"user": user_id}, _exists)


def _exists(rows: list[Sequence[Any]]) -> bool:
    return bool(rows)
