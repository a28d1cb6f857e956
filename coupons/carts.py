"""POST /carts/validate's read: which of the shopper's coupons and typed codes apply to a cart, and the best set.

Read-only (nothing reserved or settled) and a fixed number of prepared statements whatever the shopper holds: one
for the shopper's usable coupons and the codes given that are the shopper's own; then, once the other codes are
counted by the unknown-code guard (coupons.guard: the live shared codes the process remembers are checked, not
counted), one for each typed shared code the process does not remember (as reserve looks it up), one for the typed
unique codes, and one for the new-shopper audience when a candidate has it; one Redis round trip for the typed
codes' campaigns' uses left and the shopper's uses of them (a code the shopper may no longer use is refused as
reserve would refuse it). Every amount is campaigns.pricing's (validate_cart): nothing here computes a discount.

Written once (`validation`, a generator of what it needs from the stores) and answered by two doors: Django's view
in a thread (cart_validate) and the web server's event loop (cart_validate_async, coupons/doors.py).
"""
from __future__ import annotations

from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any, NamedTuple

from django.utils import timezone

from campaigns import pricing, redis_state
from campaigns.models import Audience, Campaign, CampaignState, shared_code_form
from campaigns.money import money_text
from campaigns.services import live_code_read, remembered_live_campaign
from core.db import Read
from core.errors import Unavailable

from .guard import CodeLookups
from .hot_reads import cart_coupons_read, free_unique_codes_read, has_used_read
from .models import Coupon, CouponStatus
from .outcomes import REFUSALS, UseCode
from .services import typed_code_form
from .services.order import admits_shopper
from .unique_codes import canonical_unique_code

NOT_FOUND = "not_found"  # a typed code that stands for no coupon this shopper could use (as reserve's 404)


@dataclass(frozen=True)
class CartAnswer:
    """validate's answer (`body`) and how many codes given were unknown (`misses`, for the miss guard)."""

    body: dict[str, Any]
    misses: int


def _refusal(code: str, status: str, currency: str) -> dict[str, Any]:
    return {"code": code, "applicable": False, "status": status, "discount": money_text(Decimal(0), currency),
            "lines": []}


def _own_refusal(coupon: Coupon, cart: pricing.Cart, now: datetime) -> str | None:
    """The slug refusing one of the shopper's coupons before its rule is priced, or None (as reserve decides)."""
    if coupon.status == CouponStatus.EXPIRED or coupon.status == CouponStatus.ACTIVE and coupon.is_expired_at(now):
        return REFUSALS[UseCode.EXPIRED][0]
    if coupon.status == CouponStatus.REVOKED:
        return REFUSALS[UseCode.REVOKED][0]
    if coupon.status == CouponStatus.REDEEMED:
        return REFUSALS[UseCode.ALREADY_REDEEMED][0]
    if coupon.status == CouponStatus.HELD:
        return REFUSALS[UseCode.ON_HOLD][0]
    if now < coupon.valid_from:
        return REFUSALS[UseCode.NOT_YET_VALID][0]
    if coupon.campaign.currency != cart.currency:
        return pricing.NOT_APPLICABLE
    return None


def _typed_refusal(campaign: Campaign, used_up: str | None, cart: pricing.Cart) -> str | None:
    """The slug refusing a typed code before its rule is priced: used up (_used_up_codes), or a campaign in
    another currency than the cart's (not_applicable, its zero in the cart's currency, as a coupon of the
    shopper's in another currency answers); None to price it."""
    return used_up or (pricing.NOT_APPLICABLE if campaign.currency != cart.currency else None)


def _used_up_codes(typed: dict[str | None, Campaign], uses: dict[int, tuple[int | None, int]]
                   ) -> dict[str | None, str]:
    """The typed shared and unique codes a reserve would refuse before pricing them, by what code_take.lua
    judges of their campaigns' `uses` (redis_state.code_uses_of): the shopper at the per-user limit
    (limit_reached, judged first, as there), or no use of the campaign's stock left (sold_out)."""
    refusals: dict[str | None, str] = {}
    for code, campaign in typed.items():
        left, held = uses[campaign.pk]
        if held >= campaign.per_user_limit:
            refusals[code] = REFUSALS[UseCode.LIMIT_REACHED][0]
        elif left is not None and left < 1:  # no state: the first reserve loads it (and then judges)
            refusals[code] = REFUSALS[UseCode.SOLD_OUT][0]
    return refusals


class Count(NamedTuple):
    """Validation's ask: count `n` codes given before they are looked up, and check `known` ones (the guard's
    take, coupons.guard.CodeLookups: it may raise TooManyMisses)."""

    n: int
    known: int


class Uses(NamedTuple):
    """Validation's ask: redis_state.code_uses_of(campaign_ids, user_id), in a thread (run) or on the event loop
    (run_async); Redis failing is the 503."""

    campaign_ids: list[int]
    user_id: str

    def run(self) -> dict[int, tuple[int | None, int]]:
        with _redis_unavailable():
            return redis_state.code_uses_of(self.campaign_ids, self.user_id)

    async def run_async(self) -> dict[int, tuple[int | None, int]]:
        with _redis_unavailable():
            return await redis_state.code_uses_of_async(self.campaign_ids, self.user_id)


@contextmanager
def _redis_unavailable() -> Iterator[None]:
    try:
        yield
    except redis_state.StoreUnavailable as exc:
        raise Unavailable() from exc


Ask = Read | Count | Uses
Validation = Generator[Ask, Any, CartAnswer]


def cart_validate(*, user_id: str, cart: pricing.Cart, codes: list[str],
                  before_lookup: Callable[[int, int], None] = lambda n, known: None, tags: frozenset[str] = frozenset(),
                  channels: frozenset[str] = frozenset()) -> CartAnswer:
    """validation()'s answer in this thread: its reads through Django's connection (core.db.Read.run), its Redis
    reads through the thread's client, its count by `before_lookup(n, known)` (the guard's take)."""
    steps = validation(user_id=user_id, cart=cart, codes=codes, tags=tags, channels=channels)
    reply: Any = None
    while True:
        try:
            ask = steps.send(reply)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        if isinstance(ask, Count):
            before_lookup(ask.n, ask.known)
            reply = None
        else:
            reply = ask.run()


async def cart_validate_async(*, user_id: str, cart: pricing.Cart, codes: list[str], lookups: CodeLookups,
                              tags: frozenset[str] = frozenset(), channels: frozenset[str] = frozenset()
                              ) -> CartAnswer:
    """validation()'s answer on the event loop (coupons/doors.py): its reads through the loop's connections
    (core.pg_loop), its Redis reads and the count (`lookups.take_async`) through the loop's client."""
    steps = validation(user_id=user_id, cart=cart, codes=codes, tags=tags, channels=channels)
    reply: Any = None
    while True:
        try:
            ask = steps.send(reply)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        if isinstance(ask, Count):
            await lookups.take_async(ask.n, ask.known)
            reply = None
        else:
            reply = await ask.run_async()


def validation(*, user_id: str, cart: pricing.Cart, codes: list[str], tags: frozenset[str] = frozenset(),
               channels: frozenset[str] = frozenset()) -> Validation:
    """Price, for `cart`, each of the shopper's usable coupons (active, valid now, in the cart's currency) and
    each code given (the shopper's own coupon, a live shared code, a unique code nobody holds yet; else
    not_found), and find the best allowed set. Typed codes answer in the order given, after the shopper's
    coupons (soonest to expire first); a code listed twice answers once. `tags` and `channels`: the shopper's (a
    campaign asking for tags or channels the shopper lacks answers not_eligible). The answer's `misses` are the
    codes given that stood for nothing.

    The use case written once, for a thread (cart_validate) and the event loop (cart_validate_async) alike: a
    generator that yields what it needs from the stores (a Read of PostgreSQL; the Count of the codes given not
    the shopper's own, before any is looked up, and how many of those this process knows stand for something:
    live shared codes it remembers; the Uses of Redis) and is sent each answer."""
    now = timezone.now()
    typed = {text: typed_code_form(text) for text in codes}
    wanted = sorted({code for code in typed.values() if code is not None})
    rows: list[Coupon] = yield cart_coupons_read(user_id=user_id, now=now, currency=cart.currency, codes=wanted)
    own = {coupon.code: coupon for coupon in rows}
    usable = [coupon for coupon in rows if _own_refusal(coupon, cart, now) is None]
    forms = {c: form for c in wanted if c not in own and (form := shared_code_form(c)) is not None}
    shared: dict[str | None, Campaign] = {  # the live shared codes typed: first those remembered (no query)
        c: campaign for c, form in forms.items() if (campaign := remembered_live_campaign(form, at=now)) is not None}
    known = sum(code in shared for code in typed.values())
    yield Count(sum(code not in own for code in typed.values()) - known, known)  # each may be a miss below

    for c, form in forms.items():  # then, counted, the others (as reserve looks them up: remembered a moment)
        if c not in shared and (campaign := (yield live_code_read(form, at=now))) is not None:
            shared[c] = campaign
    unique_wanted = {c: canonical_unique_code(c) or c for c in wanted if c not in own and c not in shared}
    free: dict[str, Campaign] = (yield free_unique_codes_read(sorted(set(unique_wanted.values())))) if (
        unique_wanted) else {}
    unique = {code: campaign for code, campaign in free.items() if campaign.state_at(now) == CampaignState.LIVE}
    typed_campaigns = dict(shared)
    for unique_code, campaign in unique.items():
        typed_campaigns[unique_code] = campaign
    uses = (yield Uses(sorted({campaign.pk for campaign in typed_campaigns.values()}), user_id)) if (
        typed_campaigns) else {}
    used_up = _used_up_codes(typed_campaigns, uses)

    # Each entry: (code, campaign) priced, or (code, slug) refused before its rule is priced.
    entries: list[tuple[str, Campaign | str]] = []
    seen: set[str] = set()

    def add(code: str, found: Campaign | str) -> None:
        if code not in seen:
            seen.add(code)
            entries.append((code, found))

    for coupon in usable:
        add(coupon.code, coupon.campaign)
    misses = 0
    for text, code in typed.items():
        if code is None:
            add(text, NOT_FOUND)
            misses += 1
        elif code in own:
            coupon = own[code]
            add(code, _own_refusal(coupon, cart, now) or coupon.campaign)
        elif code in shared:
            add(code, _typed_refusal(shared[code], used_up.get(code), cart) or shared[code])
        elif unique_wanted.get(code) in unique:
            campaign = unique[unique_wanted[code]]
            add(unique_wanted[code], _typed_refusal(campaign, used_up.get(unique_wanted[code]), cart) or campaign)
        else:
            add(code, NOT_FOUND)
            misses += 1

    if any(isinstance(found, Campaign) and found.audience == Audience.NEW for _, found in entries) and (
            yield has_used_read(user_id)):
        not_eligible = REFUSALS[UseCode.NOT_ELIGIBLE][0]
        entries = [(code, not_eligible if isinstance(found, Campaign) and found.audience == Audience.NEW else found)
                   for code, found in entries]

    if any(isinstance(found, Campaign) and (found.audience_tags or found.channels) for _, found in entries):
        not_eligible = REFUSALS[UseCode.NOT_ELIGIBLE][0]  # the shopper's tags and storefront channels (the token's)
        entries = [(code, not_eligible if isinstance(found, Campaign) and not admits_shopper(found, tags, channels)
                    else found) for code, found in entries]

    candidates = [found.candidate(code) for code, found in entries if isinstance(found, Campaign)]
    validation = pricing.validate_cart(cart, candidates, budget=pricing.VALIDATE_SEARCH_BUDGET)
    priced = iter(validation.coupons)
    answers = [pricing.as_json(next(priced)) if isinstance(found, Campaign) else _refusal(code, found, cart.currency)
               for code, found in entries]
    body = {"code": 0, "status": "ok", "coupons": answers, "best": pricing.as_json(validation.best)}
    return CartAnswer(body=body, misses=misses)
