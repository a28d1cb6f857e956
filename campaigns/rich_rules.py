"""A campaign's richer rules (issue 38; docs/api.md, Richer rules): tiers (满减), free shipping and buy N get M,
as Campaign stores them and as campaign_create takes them; campaigns.pricing prices them (kinds.py).

A campaign's `discount_type` names its benefit; these three take the place of its discount (`discount_value` 0).
Tiers are stored in `Campaign.tiers` as JSON, `[[threshold, off, is_percent], ...]` with the amounts as decimal
strings (`[["100.00", "10.00", false], ["200.00", "10", true]]`), thresholds going up; the first threshold is the
campaign's `min_spend`. Buy N get M is `buy_quantity` N and `get_quantity` M. `max_discount` caps any of them.
"""
from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

from django.utils.translation import gettext

from . import pricing
from .money import AMOUNT_RE, MINOR_UNITS

RICH_KINDS = (pricing.TIERS, pricing.FREE_SHIPPING, pricing.BUY_GET)
MAX_ITEMS = 1000  # the most a buy or a get quantity may be
# One tier as typed: THRESHOLD:OFF, OFF an amount or a percentage (200:25, 200:10%).
_TIER_TEXT_RE = re.compile(rf"({AMOUNT_RE.pattern}):({AMOUNT_RE.pattern})(%?)")


class InvalidRule(ValueError):
    """A richer rule that can't be a campaign's; the message (translated) says why."""


def tier_message(problem: str) -> str:
    """pricing.tiers_problem's problem, for operators."""
    return {
        "count": gettext("A tiered rule has 1 to %(max)s tiers.") % {"max": pricing.MAX_TIERS},
        "amount": gettext("A tier's threshold and amount off are more than 0, with at most the currency's decimals."),
        "percent": gettext("A tier's percentage is more than 0 and at most 100, with at most two decimals."),
        "increasing": gettext("Tiers go up: each threshold above the one before, each tier taking off at least what "
                              "the one before would at its threshold."),
    }[problem]


def tiers_of(value: Any) -> tuple[pricing.Tier, ...]:
    """Campaign.tiers (JSON) as pricing's tiers; InvalidRule when it is not of the stored form (amounts as decimal
    strings or whole numbers). Whether the tiers go up is tiers_problem's."""
    form = gettext("Tiers are a list of [threshold, off, is a percentage], amounts as decimal strings.")
    if not isinstance(value, list):
        raise InvalidRule(form)
    tiers = []
    for item in value:
        if not (isinstance(item, list) and len(item) == 3 and isinstance(item[2], bool)):
            raise InvalidRule(form)
        amounts = []
        for amount in item[:2]:
            if isinstance(amount, int) and not isinstance(amount, bool):
                amount = str(amount)
            if not isinstance(amount, str) or AMOUNT_RE.fullmatch(amount) is None:
                raise InvalidRule(form)
            amounts.append(Decimal(amount))
        tiers.append(pricing.Tier(threshold=amounts[0], off=amounts[1], percent=item[2]))
    return tuple(tiers)


def tiers_json(tiers: tuple[pricing.Tier, ...]) -> list[list[Any]]:
    return [[str(tier.threshold), str(tier.off), tier.percent] for tier in tiers]


def parse_tiers(text: str, currency: str) -> list[list[Any]]:
    """--tiers 100:10,200:25,500:80 (THRESHOLD:OFF, OFF an amount or a percentage: 200:10%) as Campaign.tiers;
    InvalidRule when malformed or when the tiers don't go up."""
    tiers = []
    for part in text.split(","):
        match = _TIER_TEXT_RE.fullmatch(part.strip())
        if match is None:
            raise InvalidRule(gettext("--tiers: THRESHOLD:OFF pairs, comma-separated, OFF an amount or a percentage "
                                      "(100:10,200:25,500:10%%), not %(part)s") % {"part": repr(part)})
        tiers.append(pricing.Tier(Decimal(match.group(1)), Decimal(match.group(4)), percent=bool(match.group(7))))
    problem = pricing.tiers_problem(tuple(tiers), currency)
    if problem is not None:
        raise InvalidRule(f"--tiers: {tier_message(problem)}")
    return tiers_json(tuple(tiers))


def rule_errors(campaign: Any) -> dict[str, str]:
    """Campaign.clean's checks of its benefit: a tiers, free shipping or buy N get M rule has no discount of its own
    (discount_value 0), a tiers rule's tiers go up (its min_spend becomes the first threshold),
    buy N get M buys and gets at least 1 item each; no other kind has tiers or quantities."""
    errors: dict[str, str] = {}
    kind = campaign.discount_type
    if campaign.tiers is None:  # a form's empty field: none
        campaign.tiers = []
    for name in ("buy_quantity", "get_quantity"):
        if getattr(campaign, name) is None:
            setattr(campaign, name, 0)
    if kind not in RICH_KINDS:
        if campaign.tiers:
            errors["tiers"] = gettext("Only a tiers rule has tiers.")
        if campaign.buy_quantity or campaign.get_quantity:
            errors["buy_quantity"] = gettext("Only a buy N get M rule has quantities.")
        return errors
    if campaign.discount_value is not None and campaign.discount_value != 0:
        errors["discount_value"] = gettext("Tiers, free shipping and buy N get M take the place of the discount: "
                                           "leave it 0.")
    if kind == pricing.TIERS:
        try:
            tiers = tiers_of(campaign.tiers)
        except InvalidRule as exc:
            return {**errors, "tiers": str(exc)}
        problem = pricing.tiers_problem(tiers, campaign.currency) if campaign.currency in MINOR_UNITS else None
        if problem is not None:
            errors["tiers"] = tier_message(problem)
        elif campaign.currency in MINOR_UNITS:
            campaign.min_spend = tiers[0].threshold  # the first threshold is the minimum spend
    elif campaign.tiers:
        errors["tiers"] = gettext("Only a tiers rule has tiers.")
    if kind == pricing.BUY_GET:
        for name in ("buy_quantity", "get_quantity"):
            value = getattr(campaign, name)
            if not 1 <= value <= MAX_ITEMS:
                errors[name] = gettext("Buy N get M buys and gets 1 to %(max)s items each.") % {"max": MAX_ITEMS}
    elif campaign.buy_quantity or campaign.get_quantity:
        errors["buy_quantity"] = gettext("Only a buy N get M rule has quantities.")
    return errors


def rule_of_options(*, discount: str | None, min_spend: str | None, tiers: str | None, free_shipping: bool,
                    buy: int | None, get: int | None, currency: str) -> dict[str, Any]:
    """campaign_create's benefit options as Campaign fields (discount_type, discount_value, min_spend, tiers,
    buy_quantity, get_quantity); InvalidRule when they don't go together. --tiers takes the place of --discount
    and --min-spend, --free-shipping and --buy/--get that of --discount; without any, --discount (10.00 by
    default). discount and min_spend are returned as typed (the command parses them as amounts)."""
    chosen = [flag for flag, given in (("--tiers", tiers is not None), ("--free-shipping", free_shipping),
                                       ("--buy/--get", buy is not None or get is not None)) if given]
    if len(chosen) > 1:
        raise InvalidRule(gettext("%(a)s and %(b)s: choose one") % {"a": chosen[0], "b": chosen[1]})
    if not chosen:
        text = "10.00" if discount is None else discount
        return {"discount_type": pricing.PERCENT if text.endswith("%") else pricing.FIXED,
                "discount_text": text.rstrip("%"), "min_spend_text": min_spend or "0"}
    flag = chosen[0]
    if discount is not None:
        raise InvalidRule(gettext("%(flag)s takes the place of --discount") % {"flag": flag})
    rule: dict[str, Any] = {"discount_text": "0", "min_spend_text": min_spend or "0"}
    if flag == "--tiers":
        if min_spend is not None:
            raise InvalidRule(gettext("--tiers takes the place of --min-spend (the first threshold is the minimum "
                                      "spend)"))
        rule |= {"discount_type": pricing.TIERS, "tiers": parse_tiers(tiers or "", currency)}
        rule["min_spend_text"] = rule["tiers"][0][0]
    elif flag == "--free-shipping":
        rule["discount_type"] = pricing.FREE_SHIPPING
    else:
        if buy is None or get is None or not (1 <= buy <= MAX_ITEMS and 1 <= get <= MAX_ITEMS):
            raise InvalidRule(gettext("--buy N --get M: both, whole numbers from 1 to %(max)s") % {"max": MAX_ITEMS})
        rule |= {"discount_type": pricing.BUY_GET, "buy_quantity": buy, "get_quantity": get}
    return rule


def tier_progress(tiers: tuple[pricing.Tier, ...], amount: Decimal) -> tuple[int | None, Decimal | None]:
    """Where `amount` (a cart's eligible amount) stands on a tiers rule's ladder, as the admin's preview and the
    storefront show it: the position of the highest tier it reaches (None: below the first) and what is left to
    reach the next tier (None: the last is reached). Tiers go up (pricing.tiers_problem)."""
    reached = None
    for index, tier in enumerate(tiers):
        if amount >= tier.threshold:
            reached = index
    following = 0 if reached is None else reached + 1
    return reached, (tiers[following].threshold - amount if following < len(tiers) else None)
