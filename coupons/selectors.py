"""Reads of coupons."""
from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db.models import Model, Q, QuerySet
from django.utils import timezone

from campaigns.models import Campaign
from core.db import Read

from .models import Coupon, CouponStatus


def coupons_due(*, user_id: str, now: datetime) -> QuerySet[Coupon]:
    """A shopper's coupons whose hold has lapsed or whose validity has ended by `now` (not yet settled), with their
    campaigns (a lapsed hold gives its discount back to a budget: coupons.budget)."""
    return Coupon.objects.filter(user_id=user_id).select_related("campaign").filter(
        Q(status=CouponStatus.HELD, hold_until__lte=now)
        | Q(status=CouponStatus.ACTIVE, expires_at__lte=now - timedelta(seconds=1))
    )


def coupons_of_user(*, user_id: str, status: str | None = None) -> QuerySet[Coupon]:
    """Return a shopper's coupons, newest first, optionally of one status."""
    coupons = Coupon.objects.filter(user_id=user_id).select_related("campaign")
    if status:
        coupons = coupons.filter(status=status)
    return coupons.order_by("-created_at", "-id")


# A page's columns (UserCoupons' rows): the coupon's that GET /me/coupons shows (coupons.mine), then its campaign's.
PAGE_COUPON_COLUMNS = ("code", "campaign_id", "claim_id", "status", "valid_from", "expires_at", "order_id",
                       "hold_until", "discount")
PAGE_CAMPAIGN_COLUMNS = ("discount_type", "discount_value", "max_discount", "min_spend", "currency", "tiers",
                         "buy_quantity", "get_quantity")


def _columns(model: type[Model], alias: str, names: tuple[str, ...]) -> str:
    columns = {field.attname: field.column for field in model._meta.concrete_fields}
    return ", ".join(f"{alias}.{columns[name]}" for name in names)


# coupons_of_user's page, with its count and whether any of the shopper's coupons is due (coupons_due's rule), in
# one prepared statement (core.db): Django's query compiler cost a GET /me/coupons more than PostgreSQL did. Only
# the columns the answer shows: each column read is a value psycopg converts (a time is the costliest).
_PAGE_SQL = f"""
SELECT {_columns(Coupon, "c", PAGE_COUPON_COLUMNS)},
       {_columns(Campaign, "k", PAGE_CAMPAIGN_COLUMNS)},
       count(*) OVER (),
       EXISTS (SELECT 1 FROM {Coupon._meta.db_table} d WHERE d.user_id = %(user)s::varchar
               AND ((d.status = '{CouponStatus.HELD}' AND d.hold_until <= %(now)s::timestamptz)
                    OR (d.status = '{CouponStatus.ACTIVE}'
                        AND d.expires_at <= %(now)s::timestamptz - interval '1 second')))
FROM {Coupon._meta.db_table} c JOIN {Campaign._meta.db_table} k ON k.id = c.campaign_id
WHERE c.user_id = %(user)s::varchar AND (%(status)s::varchar IS NULL OR c.status = %(status)s::varchar)
ORDER BY c.created_at DESC, c.id DESC
LIMIT %(limit)s::bigint OFFSET %(offset)s::bigint
"""


class UserCoupons:
    """A shopper's coupons as a paginator's object list (coupons.mine): a slice is one query, which also tells how
    many there are in all (`total`) and whether any of the shopper's coupons is due to lapse or expire (`due`).
    Its items are rows: PAGE_COUPON_COLUMNS' values then PAGE_CAMPAIGN_COLUMNS', as psycopg reads them (a JSON
    column as its text)."""

    def __init__(self, *, user_id: str, status: str | None) -> None:
        self.user_id, self.status = user_id, status
        self.total: int | None = None
        self.due = False

    def count(self) -> int:
        return self.total if self.total is not None else coupons_of_user(user_id=self.user_id,
                                                                         status=self.status).count()

    def __getitem__(self, window: slice) -> list[tuple[Any, ...]]:
        return self.read(window).run()  # type: ignore[no-any-return]

    def read(self, window: slice) -> Read:
        """The slice as a Read (core.db: in a thread or on the event loop), which notes `total` and `due`."""
        params = {"user": self.user_id, "now": timezone.now(), "status": self.status or None,
                  "limit": window.stop - window.start, "offset": window.start}
        return Read(_PAGE_SQL, params, self._page)

    def _page(self, rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        if rows:
            self.total, self.due = rows[0][-2], rows[0][-1]
        return [row[:-2] for row in rows]


def coupon_for_claim(*, claim_id: str) -> Coupon | None:
    return Coupon.objects.select_related("campaign").filter(claim_id=claim_id).first()
