"""python manage.py campaign_create --name NAME --stock N [...] [--kind codes [--code SAVE50]]: create a campaign;
print one JSON line."""
from __future__ import annotations

import json
import re
from datetime import datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.utils import timezone
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from campaigns.models import SCOPE_LISTS, Audience, CampaignKind
from campaigns.money import AMOUNT_PLACES, AMOUNT_RE, MINOR_UNITS
from campaigns.rich_rules import InvalidRule, rule_of_options
from campaigns.services import campaign_create
from core.commands import OperatorCommand
from core.errors import ApplicationError

RELATIVE_RE = re.compile(r"\+([0-9]{1,6})([smhd])")
UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_moment(text: str, *, relative_to: datetime, flag: str) -> datetime:
    """Parse 'now', '+30m' / '+2h' / '+7d' (after `relative_to`) or ISO 8601 (naive = operator's zone)."""
    if text == "now":
        return timezone.now()
    match = RELATIVE_RE.fullmatch(text)
    if match:
        return relative_to + timedelta(seconds=int(match.group(1)) * UNIT_SECONDS[match.group(2)])
    try:
        moment = datetime.fromisoformat(text)
    except ValueError as exc:
        raise CommandError(gettext("%(flag)s: expected ISO 8601, 'now' or +N[smhd], got %(text)s")
                           % {"flag": flag, "text": repr(text)}) from exc
    if timezone.is_naive(moment):
        moment = timezone.make_aware(moment, timezone.get_default_timezone())
    return moment


def parse_money(text: str | None, *, flag: str) -> Decimal | None:
    if text is None:
        return None
    try:
        value = Decimal(text)
    except InvalidOperation as exc:
        raise CommandError(gettext("%(flag)s: not an amount: %(text)s") % {"flag": flag, "text": repr(text)}) from exc
    if not value.is_finite() or value < 0 or value.as_tuple().exponent < -2:  # type: ignore[operator]
        raise CommandError(gettext("%(flag)s: an amount is >= 0 with at most 2 decimals, got %(text)s")
                           % {"flag": flag, "text": repr(text)})
    return value


def parse_budget(text: str | None, currency: str) -> Decimal | None:
    """--budget: an amount > 0 in the campaign's currency, as plain decimal text (no sign, no exponent; at most its
    decimals, 12 digits before the point)."""
    if text is None:
        return None
    budget = parse_money(text, flag="--budget")
    assert budget is not None
    places = MINOR_UNITS.get(currency, AMOUNT_PLACES)
    if (AMOUNT_RE.fullmatch(text) is None or budget <= 0 or budget >= BUDGET_BOUND
            or budget.as_tuple().exponent < -places):  # type: ignore[operator]
        raise CommandError(gettext("%(flag)s: an amount > 0 in %(currency)s, with at most %(places)s decimals and "
                                   "12 digits before the point, got %(text)s")
                           % {"flag": "--budget", "currency": currency, "places": places, "text": repr(text)})
    return budget


BUDGET_BOUND = Decimal(10) ** 12


def names(text: str | None) -> list[str]:
    """The names of a comma-separated flag ("a, b" -> ["a", "b"]); Campaign.clean checks each one."""
    return [name.strip() for name in (text or "").split(",") if name.strip()]


def campaign_summary(campaign: Any) -> dict[str, Any]:
    return {
        "id": campaign.pk,
        "name": campaign.name,
        "state": campaign.state,
        "starts_at": campaign.starts_at.isoformat(),
        "ends_at": campaign.ends_at.isoformat(),
        "total_stock": campaign.total_stock,
        "per_user_limit": campaign.per_user_limit,
        "published": campaign.published_at is not None,
        "kind": campaign.kind,
        "code": campaign.code,
        "scope": {name: getattr(campaign, name) for name in SCOPE_LISTS if getattr(campaign, name)},
        "min_quantity": campaign.min_quantity,
        "exclusive": campaign.exclusive,
        "combinable_with": campaign.combinable_with,
        "order_cap": None if campaign.order_cap is None else str(campaign.order_cap),
        "buckets": campaign.buckets,
        "budget": None if campaign.budget is None else str(campaign.budget),
        "discount_type": campaign.discount_type,
        **({"tiers": campaign.tiers} if campaign.tiers else {}),
        **({"buy": campaign.buy_quantity, "get": campaign.get_quantity} if campaign.buy_quantity else {}),
        "audience_tags": campaign.audience_tags,
        "channels": campaign.channels,
        "group": campaign.group or None,
        "group_limit": campaign.group_limit,
    }


class Command(OperatorCommand):
    help = _("Create a campaign (with --publish, also publish and preheat it). Prints one JSON line.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--name", required=True, help=gettext("the campaign's name, shown to shoppers"))
        parser.add_argument("--stock", required=True, type=int, help=gettext("total stock: the coupons to give out"))
        parser.add_argument("--per-user-limit", type=int, default=1, help=gettext("coupons one shopper may claim"))
        parser.add_argument("--starts", default="now", help=gettext("ISO 8601 (naive = operator's zone) or 'now'"))
        parser.add_argument("--ends", default="+2h", help=gettext("ISO 8601 or +N[smhd] after the start"))
        parser.add_argument("--discount", help=gettext("an amount (50.00) or a percentage (15%%); default 10.00"))
        parser.add_argument("--max-discount", help=gettext("cap of a percentage, tiers, free shipping, buy N get M"))
        parser.add_argument("--min-spend", help=gettext("minimum spend of an order to use the coupon (default 0)"))
        parser.add_argument("--tiers", help=gettext("tiers instead of --discount and --min-spend: THRESHOLD:OFF, "
                                                    "comma-separated, OFF an amount or a percentage "
                                                    "(100:10,200:25,500:10%%)"))
        parser.add_argument("--free-shipping", action="store_true",
                            help=gettext("instead of --discount: the order's shipping off (capped by --max-discount)"))
        parser.add_argument("--buy", type=int, help=gettext("buy N get M instead of --discount: N (with --get)"))
        parser.add_argument("--get", type=int, help=gettext("buy N get M: the M cheapest items free"))
        parser.add_argument("--currency", default="CNY", help=gettext("ISO 4217 currency of the amounts"))
        validity = parser.add_mutually_exclusive_group()
        validity.add_argument("--valid-until", help=gettext("ISO 8601: coupons valid until then (inclusive)"))
        validity.add_argument("--valid-days", type=int, help=gettext("coupons valid N days after the claim"))
        parser.add_argument("--audience", choices=[a.value for a in Audience], default=Audience.ALL,
                            help=gettext("who may claim"))
        parser.add_argument("--kind", choices=[k.value for k in CampaignKind], default=CampaignKind.GRAB,
                            help=gettext("grab (shoppers claim coupons) or codes (codes typed at checkout)"))
        parser.add_argument("--code",
                            help=gettext("a codes campaign's shared code, e.g. SAVE50 (4-32 of A-Z 0-9 -, any "
                                             "case): --stock is then its total uses, --per-user-limit the uses "
                                             "per shopper; without it, unique codes (codes_generate)"))
        parser.add_argument("--categories", help=gettext("scope: the categories covered, comma-separated (a,b)"))
        parser.add_argument("--skus",
                            help=gettext("scope: the SKUs covered, comma-separated (with --categories: either)"))
        parser.add_argument("--exclude-categories", help=gettext("categories never covered, comma-separated"))
        parser.add_argument("--exclude-skus", help=gettext("SKUs never covered, comma-separated"))
        parser.add_argument("--min-quantity", type=int, default=0,
                            help=gettext("items of covered lines an order needs"))
        parser.add_argument("--exclusive", action="store_true",
                            help=gettext("combines with no other coupon on an order"))
        parser.add_argument("--combinable-with",
                            help=gettext("ids of the only campaigns it may share an order with (1,2)"))
        parser.add_argument("--order-cap",
                            help=gettext("the most an order holding it may take off with all its coupons"))
        parser.add_argument("--buckets", type=int, default=1,
                            help=gettext("split a grab campaign's stock over N Redis hash slots (1-64), so one hot "
                                         "campaign spreads over N masters of a Redis Cluster"))
        parser.add_argument("--budget", help=gettext("the most all its coupons or codes may take off together, in its "
                                                     "currency (an amount > 0; refused beyond: 22 budget_exhausted)"))
        parser.add_argument("--group", default="", help=gettext("a group of campaigns sharing a per-shopper limit "
                                                               "(1-64 of A-Z a-z 0-9 _ . : / -); with --group-limit"))
        parser.add_argument("--group-limit", type=int, help=gettext("coupons one shopper may hold of all the group's "
                                                                    "campaigns together (refused beyond: 23 "
                                                                    "group_limit_reached)"))
        parser.add_argument("--audience-tags", help=gettext("only shoppers whose token carries one of these tags "
                                                           "(vip,gold) may claim or use it"))
        parser.add_argument("--channels", help=gettext("only shoppers of storefronts of these channels (web,app) may "
                                                      "claim or use it"))
        parser.add_argument("--publish", action="store_true", help=gettext("publish and load into Redis now"))

    def handle(self, *args: Any, **opts: Any) -> None:
        starts_at = parse_moment(opts["starts"], relative_to=timezone.now(), flag="--starts")
        ends_at = parse_moment(opts["ends"], relative_to=starts_at, flag="--ends")
        try:
            rule = rule_of_options(discount=opts["discount"], min_spend=opts["min_spend"], tiers=opts["tiers"],
                                   free_shipping=opts["free_shipping"], buy=opts["buy"], get=opts["get"],
                                   currency=opts["currency"].upper())
        except InvalidRule as exc:
            raise CommandError(str(exc)) from exc
        discount = parse_money(rule.pop("discount_text"), flag="--discount")
        min_spend = parse_money(rule.pop("min_spend_text"), flag="--min-spend")
        valid_until = (
            parse_moment(opts["valid_until"], relative_to=ends_at, flag="--valid-until")
            if opts["valid_until"] else None
        )
        if opts["stock"] < 0:
            raise CommandError(gettext("%(flag)s: must be 0 or more") % {"flag": "--stock"})
        if opts["per_user_limit"] < 1:
            raise CommandError(gettext("%(flag)s: must be 1 or more") % {"flag": "--per-user-limit"})
        if opts["valid_days"] is not None and opts["valid_days"] < 1:
            raise CommandError(gettext("%(flag)s: must be 1 or more") % {"flag": "--valid-days"})
        if opts["code"] is not None and opts["kind"] != CampaignKind.CODES:
            raise CommandError(gettext("--code: only with --kind codes"))
        if opts["min_quantity"] < 0:
            raise CommandError(gettext("%(flag)s: must be 0 or more") % {"flag": "--min-quantity"})
        budget = parse_budget(opts["budget"], opts["currency"].upper())
        try:
            combinable_with = [int(i) for i in names(opts["combinable_with"])]
        except ValueError as exc:
            raise CommandError(gettext("--combinable-with: campaign ids, comma-separated (1,2)")) from exc
        try:
            campaign = campaign_create(
                name=opts["name"],
                total_stock=opts["stock"],
                per_user_limit=opts["per_user_limit"],
                starts_at=starts_at,
                ends_at=ends_at,
                discount_value=discount or Decimal("0"),
                max_discount=parse_money(opts["max_discount"], flag="--max-discount"),
                min_spend=min_spend or Decimal("0"),
                **rule,
                currency=opts["currency"].upper(),
                valid_until=valid_until,
                valid_days=opts["valid_days"],
                audience=opts["audience"],
                kind=opts["kind"],
                code=opts["code"],
                include_categories=names(opts["categories"]),
                exclude_categories=names(opts["exclude_categories"]),
                include_skus=names(opts["skus"]),
                exclude_skus=names(opts["exclude_skus"]),
                min_quantity=opts["min_quantity"],
                exclusive=opts["exclusive"],
                combinable_with=combinable_with,
                order_cap=parse_money(opts["order_cap"], flag="--order-cap"),
                buckets=opts["buckets"],
                budget=budget,
                group=opts["group"],
                group_limit=opts["group_limit"],
                audience_tags=names(opts["audience_tags"]),
                channels=names(opts["channels"]),
                publish=opts["publish"],
            )
        except ApplicationError as exc:
            raise CommandError(exc.message) from exc
        self.stdout.write(json.dumps(campaign_summary(campaign)))
