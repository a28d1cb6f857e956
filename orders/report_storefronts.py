"""A campaign report's claims by storefront (orders/report.py): whose key signed the shopper's token
(Claim.storefront, from the ledger entry's field s, claim.lua), "default key" for the default key's claims and
for grants. Read in the report's claims query (CLAIMS_SQL: by day and storefront, with the storefront's name),
so the report stays two queries: in total (JSON "storefronts", by name, the default key's last) and by day (the
CSV's columns "claims: <name>", after the rule)."""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date
from typing import Any

from storefronts.models import Storefront

from .models import Claim

DEFAULT_KEY = "default key"  # the name of the claims no storefront's key signed

# A campaign's claims by day in the operator's zone and storefront (None: the default key), with its name.
CLAIMS_SQL = f"""
SELECT (c.claimed_at AT TIME ZONE %(tz)s)::date, c.storefront_id, s.name, count(*) FROM {Claim._meta.db_table} c
LEFT JOIN {Storefront._meta.db_table} s ON s.id = c.storefront_id
WHERE c.campaign_id = %(campaign)s GROUP BY 1, 2, 3
"""


@dataclass
class StorefrontClaims:
    """Claims by day and storefront (None: the default key), and the storefronts' names."""

    days: dict[date, dict[int | None, int]] = field(default_factory=dict)
    names: dict[int | None, str] = field(default_factory=dict)

    def add(self, day: date, storefront: int | None, name: str | None, claims: int) -> None:
        """One row of CLAIMS_SQL."""
        self.days.setdefault(day, {})[storefront] = claims
        self.names[storefront] = DEFAULT_KEY if storefront is None else str(name)

    def totals(self) -> list[dict[str, Any]]:
        """[{storefront_id, name, claims}] in total: by name, the default key's last."""
        claims: dict[int | None, int] = {}
        for counts in self.days.values():
            for storefront, n in counts.items():
                claims[storefront] = claims.get(storefront, 0) + n
        order = sorted(claims, key=lambda s: (s is None, self.names[s]))
        return [{"storefront_id": s, "name": self.names[s], "claims": claims[s]} for s in order]

    def csv_header(self, totals: list[dict[str, Any]]) -> list[str]:
        return [f"claims: {s['name']}" for s in totals]

    def csv_day(self, day: date, totals: list[dict[str, Any]]) -> list[int]:
        counts = self.days.get(day, {})
        return [counts.get(s["storefront_id"], 0) for s in totals]
