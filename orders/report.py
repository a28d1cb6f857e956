"""A campaign's report: what happened to it, day by day in the operator's zone (settings.TIME_ZONE), from the
event log, in two queries (claims by day; coupon events by day and type), never a query per coupon.

Figures: claims (claim rows, by the day Redis accepted them; codes campaigns have none), issued, reserved,
redeemed (redemptions made, a confirmed hold counts once), released (releases and lapsed holds: the coupon usable
again), expired, revoked, and the discount given (the redemptions' discounts less those of redemptions released
afterwards, on the day of the release). Totals add redeemed_net (redemptions not released since: the coupons
redeemed now) and the redemption rate, redeemed_net / issued; a budgeted campaign's report its budget, used (the
discounts of its held and redeemed coupons) and left. The discount by rule: the report's `rule` (the campaign's
discount_type: fixed, percent, tiers, free_shipping, buy_get) and its totals' `discount_by_rule` (the discount
under each rule of the report's scope, one campaign: its one rule); the CSV's `rule` column, after `discount`,
names each row's. They agree with verify_campaign: claims == Balance.claims once the ledger is drained,
issued == Balance.coupons, revoked >= Balance.restocked. Claims by storefront: orders/report_storefronts.py.
"""
from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import date
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import connection

from campaigns.models import Campaign
from coupons.budget import BudgetFigures
from coupons.budget import figures as budget_figures
from coupons.models import CouponEvent

from .report_storefronts import CLAIMS_SQL, StorefrontClaims

COUNTS = ("claims", "issued", "reserved", "redeemed", "released", "expired", "revoked")
COLUMNS = ("day", *COUNTS, "discount")
_TYPES = {"issued": "issued", "reserved": "reserved", "redeemed": "redeemed", "released": "released",
          "hold_lapsed": "released", "expired": "expired", "revoked": "revoked"}


@dataclass
class Day:
    day: date
    claims: int = 0
    issued: int = 0
    reserved: int = 0
    redeemed: int = 0
    released: int = 0
    expired: int = 0
    revoked: int = 0
    discount: Decimal = Decimal("0.00")
    redemptions_released: int = 0


@dataclass
class Report:
    campaign_id: int
    name: str
    currency: str
    time_zone: str
    days: list[Day] = field(default_factory=list)
    storefronts: StorefrontClaims = field(default_factory=StorefrontClaims)  # claims by storefront (and by day)
    budget: BudgetFigures | None = None  # a budgeted campaign's money: budget, used and left (coupons/budget.py)
    rule: str = ""  # the campaign's rule (discount_type), whose discount this is

    def total(self) -> Day:
        whole = Day(day=self.days[0].day if self.days else date.today())
        for day in self.days:
            for name in (*COUNTS, "discount", "redemptions_released"):
                setattr(whole, name, getattr(whole, name) + getattr(day, name))
        return whole

    @property
    def redeemed_net(self) -> int:
        whole = self.total()
        return whole.redeemed - whole.redemptions_released

    @property
    def redemption_rate(self) -> Decimal:
        issued = self.total().issued
        return (Decimal(self.redeemed_net) / issued).quantize(Decimal("0.0001")) if issued else Decimal("0.0000")

    def as_json(self) -> dict:
        total = self.total()
        return {
            "campaign_id": self.campaign_id, "name": self.name, "currency": self.currency,
            "time_zone": self.time_zone,
            "days": [_row(d) for d in self.days],
            "storefronts": self.storefronts.totals(),
            "totals": {**{k: v for k, v in _row(total).items() if k != "day"}, "redeemed_net": self.redeemed_net,
                       "redemption_rate": str(self.redemption_rate),
                       "discount_by_rule": {self.rule: str(total.discount)}},
            **({"budget": self.budget.as_json()} if self.budget is not None else {}),
            "rule": self.rule,
        }


def _row(day: Day) -> dict:
    row = asdict(day)
    row.pop("redemptions_released")
    row["day"] = day.day.isoformat()
    row["discount"] = str(day.discount)
    return row


_EVENTS_SQL = f"""
SELECT day, type, count(*), coalesce(sum(discount), 0), coalesce(sum(released_discount), 0),
       count(released_discount)
FROM (
    SELECT (created_at AT TIME ZONE %(tz)s)::date AS day, type,
           CASE WHEN type = 'redeemed' THEN (data->>'discount')::numeric END AS discount,
           -- a release of a redemption gives its discount back: the redemption is the coupon's event before it
           CASE WHEN type = 'released' AND data->>'was' = 'redeemed'
                THEN coalesce((lag(data->>'discount') OVER coupon)::numeric, 0) END AS released_discount
    FROM {CouponEvent._meta.db_table}
    WHERE campaign_id = %(campaign)s
    WINDOW coupon AS (PARTITION BY coupon_id ORDER BY id)
) AS e
WHERE type = ANY(%(types)s)
GROUP BY day, type
"""


def campaign_report(*, campaign: Campaign) -> Report:
    """Build the campaign's report in two queries."""
    tz = settings.TIME_ZONE
    days: dict[date, Day] = {}
    storefronts = StorefrontClaims()
    params: dict[str, Any] = {"tz": tz, "campaign": campaign.pk, "types": sorted(_TYPES)}
    with connection.cursor() as cursor:
        cursor.execute(CLAIMS_SQL, params)  # by day and storefront
        for day, storefront, storefront_name, n in cursor.fetchall():
            days.setdefault(day, Day(day)).claims += n
            storefronts.add(day, storefront, storefront_name, n)
        cursor.execute(_EVENTS_SQL, params)
        for day, kind, n, discount, released_discount, redemptions_released in cursor.fetchall():
            row = days.setdefault(day, Day(day))
            name = _TYPES[kind]
            setattr(row, name, getattr(row, name) + n)
            row.discount += Decimal(discount) - Decimal(released_discount)
            row.redemptions_released += redemptions_released
    for row in days.values():
        row.discount = row.discount.quantize(Decimal("0.01"))
    return Report(campaign_id=campaign.pk, name=campaign.name, currency=campaign.currency, time_zone=tz,
                  storefronts=storefronts,
                  days=[days[d] for d in sorted(days)], budget=budget_figures(campaign), rule=campaign.discount_type)


TOTAL_ONLY_COLUMNS = ("redeemed_net", "redemption_rate")  # the total row's (JSON: "totals"); empty on a day's
BUDGET_COLUMNS = ("budget", "budget_used", "budget_left")  # a budgeted campaign's total row's (JSON: "budget")
RULE_COLUMN = "rule"  # every row's, after discount: the rule it is under (JSON: "rule", totals' "discount_by_rule")


def report_csv_lines(report: Report) -> Iterator[str]:
    """The report as CSV, one line at a time (for a streaming answer): a header, a row a day, a total row with
    redeemed_net and the redemption rate too; each row's rule after its discount (RULE_COLUMN), then the claims of
    each storefront ("claims: <name>", report_storefronts.py)."""
    out = io.StringIO()
    writer = csv.writer(out)

    def line(values: list) -> str:
        out.seek(0)
        out.truncate()
        writer.writerow(values)
        return out.getvalue()

    money = report.budget.as_json() if report.budget is not None else None
    totals_only = (*TOTAL_ONLY_COLUMNS, *(BUDGET_COLUMNS if money else ()))
    storefronts = report.storefronts.totals()
    by_storefront = report.storefronts.csv_header(storefronts)
    yield line([*COLUMNS, RULE_COLUMN, *by_storefront, *totals_only])
    for day in report.days:
        row = _row(day)
        yield line([*(row[c] for c in COLUMNS), report.rule, *report.storefronts.csv_day(day.day, storefronts),
                    *("" for _ in totals_only)])
    total = _row(report.total())
    yield line(["total", *[total[c] for c in COLUMNS[1:]], report.rule, *(s["claims"] for s in storefronts),
                report.redeemed_net, str(report.redemption_rate),
                *([money["budget"], money["used"], money["left"]] if money else [])])
