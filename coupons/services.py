"""Write use cases of coupons: reserve, confirm, redeem, release, revoke, and what time does to them.

Every change of a coupon is a conditional UPDATE (status and version in the WHERE clause) plus one
CouponEvent, in one transaction; a change that loses a race re-reads the coupon and decides again.
"""
from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from campaigns import pricing, redis_state
from campaigns.claim_settled import claims_changed
from campaigns.errors import CampaignStateLost
from campaigns.models import Audience, Campaign, CampaignKind, CampaignState, shared_code_form
from campaigns.services import campaign_preheat, live_campaign_of_code
from core.db import prepared_cursor
from core.errors import ApplicationError, NotFound, Unavailable
from core.locks import AdvisoryLock, lock_call, xact_lock
from core.together import Together
from webhooks.outbox import delivery_trigger

from .codes import new_codes, normalize_code
from .events_out import coupon_event_out, coupon_event_payload, new_coupon_out_ctes
from .hot_reads import coupon_by_id, order_coupons, own_coupon_id, use_family
from .models import Coupon, CouponEvent, CouponEventType, CouponStatus, UniqueCode
from .outcomes import UseCode, UseOutcome, done, jsonable, refused
from .selectors import coupons_due
from .transitions import event_write, transition_write
from .unique_codes import canonical_unique_code, unique_code_lookup

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 5
HOLD_SECONDS_DEFAULT = 900
HOLD_SECONDS_MAX = 86_400


class CurrencyMismatch(ApplicationError):
    http_status = 400
    code = 400
    status = "invalid_request"


class Contention(Unavailable):
    """The coupon changed under us MAX_ATTEMPTS times in a row; nothing was changed by this request."""

    message = "The coupon is changing too fast; retry."


@dataclass(frozen=True)
class Order:
    """The order a coupon is used for: validated by the caller. `lines` None: an order known by its amount alone
    (priced as one line of that amount); else `amount` is their sum."""

    order_id: str
    amount: Decimal
    currency: str
    lines: tuple[pricing.CartLine, ...] | None = None

    def cart(self) -> pricing.Cart:
        if self.lines is None:
            return pricing.whole_order_cart(self.amount, self.currency)
        return pricing.Cart(currency=self.currency, lines=self.lines)

    def fingerprint_payload(self) -> dict[str, Any]:
        """What an Idempotency-Key's fingerprint covers: the order, its lines when it has some."""
        payload: dict[str, Any] = {"order_id": self.order_id, "amount": self.amount, "currency": self.currency}
        if self.lines is not None:
            payload["lines"] = _lines_form(self.lines)
        return payload


def _lines_form(lines: tuple[pricing.CartLine, ...]) -> list[list[Any]]:
    return [[line.sku, line.category, line.quantity, str(line.unit_price)] for line in lines]


def cart_digest(cart: pricing.Cart) -> str:
    """The digest of a cart's currency and lines: an order's coupons are priced on one cart."""
    text = json.dumps([cart.currency, _lines_form(cart.lines)], separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


class OrderCartChanged(ApplicationError):
    """A new coupon for an order whose other coupons were priced on other lines (or another amount)."""

    http_status = 400
    code = 400
    status = "invalid_request"
    message = ("This order's other coupons were priced on other lines or another amount: send the same lines, or "
               "release them first.")


# What may be a typed code (the schema's pattern of {code}): a claimed coupon's code, a unique code, a shared or
# an imported code. Spaces inside a claimed or generated code are forgiven too (not documented).
TYPED_CODE_RE = re.compile(r"[A-Za-z0-9-]{4,40}")


def typed_code_form(text: str) -> str | None:
    """Return the canonical form of a code a shopper typed, or None when it can't be a code: a claimed coupon's
    code or a generated unique code (case, spaces and dashes forgiven), else a shared or imported code as
    typed, upper case."""
    canonical = normalize_code(text) or canonical_unique_code(text)
    if canonical is not None:
        return canonical
    return text.upper() if TYPED_CODE_RE.fullmatch(text) else None


def coupon_owned_by(*, code: str, user_id: str) -> Coupon:
    """Return the shopper's coupon; an unknown code and someone else's code are the same NotFound."""
    canonical = typed_code_form(code)
    coupon = (
        Coupon.objects.select_related("campaign").filter(code=canonical, user_id=user_id).first()
        if canonical
        else None
    )
    if coupon is None:
        raise NotFound("No such coupon.")
    return coupon


def _transition(
    coupon: Coupon, *, to: str, event: str, source: str, data: dict[str, Any], guard: dict[str, Any] | None = None,
    **fields: Any,
) -> bool:
    """Move the coupon to `to` if nobody changed it since it was read; write the event. Call in atomic.

    `guard` adds conditions on fields a change depends on that are not state changes (expires_at).
    """
    if coupon.version == 1:  # its claim's settled record shows it as issued: PostgreSQL answers from this change on
        claims_changed([coupon.claim_id])
    # The UPDATE, its event and its webhook (in this transaction): one prepared statement (coupons.transitions)
    if not transition_write(coupon, to=to, event=event, source=source, data=data, now=timezone.now(),
                            guard=guard or {}, fields=fields):
        return False
    coupon.status = to
    coupon.version += 1
    for name, value in fields.items():
        setattr(coupon, name, value)
    return True


_NO_ORDER = {"order_id": None, "hold_until": None, "discount": None, "order_amount": None, "shares": None}


def coupon_settle(*, coupon: Coupon, now: datetime, source: str = "lazy") -> bool:
    """Apply what time did to the coupon: a hold past hold_until lapses; validity past its end expires.

    Return False when the coupon changed under us (re-read it). Call inside transaction.atomic.
    """
    if coupon.hold_lapsed_at(now):
        lapsed = {"order_id": coupon.order_id, "hold_until": coupon.hold_until}
        if not _transition(coupon, to=CouponStatus.ACTIVE, event=CouponEventType.HOLD_LAPSED, source=source,
                           data=lapsed, **_NO_ORDER):
            return False
    if coupon.status == CouponStatus.ACTIVE and coupon.is_expired_at(now):
        # Guarded by expires_at: a validity extension committed since the read keeps the coupon alive.
        if not _transition(coupon, to=CouponStatus.EXPIRED, event=CouponEventType.EXPIRED, source=source,
                           data={"expires_at": coupon.expires_at}, guard={"expires_at": coupon.expires_at}):
            return False
    return True


def coupons_settle_due(*, user_id: str) -> int:
    """Lapse the shopper's holds and expire their coupons whose time has come; return how many changed."""
    now = timezone.now()
    due = coupons_due(user_id=user_id, now=now)
    changed = 0
    for coupon in due[:500]:
        with transaction.atomic():
            before = coupon.version
            coupon_settle(coupon=coupon, now=now)
            changed += coupon.version != before
    return changed


Decide = Callable[[Coupon, datetime], "UseOutcome | None"]


def _retrying(find: Callable[[], Coupon], decide: Decide) -> UseOutcome:
    """Run `decide(coupon)` on a fresh, settled read of the coupon until it is not beaten by a race."""
    for _ in range(MAX_ATTEMPTS):
        with transaction.atomic():
            coupon = find()
            now = timezone.now()
            if not coupon_settle(coupon=coupon, now=now):
                continue
            outcome = decide(coupon, now)
            if outcome is not None:
                return outcome
    raise Contention()


def _refusal_for_use(coupon: Coupon, order: Order, user_id: str, now: datetime) -> UseOutcome | None:
    """Return why an active coupon can't be used for this order, or None when it can."""
    checked = _use_checked(coupon, order, user_id, now)
    return checked if isinstance(checked, UseOutcome) else None


# campaigns.pricing's refusals as the business codes a use answers with.
_PRICING_REFUSALS = {
    pricing.NOT_COMBINABLE: UseCode.NOT_COMBINABLE, pricing.NOT_APPLICABLE: UseCode.NOT_APPLICABLE,
    pricing.MIN_QUANTITY_NOT_MET: UseCode.MIN_QUANTITY_NOT_MET, pricing.MIN_SPEND_NOT_MET: UseCode.MIN_SPEND_NOT_MET,
}


def _order_lock_key(user_id: str, order_id: str) -> str:
    """The key of an order's lock (AdvisoryLock.ORDER_COUPONS): _lock_order's, and a batch of first uses'."""
    return f"{user_id}\n{order_id}"


def _lock_order(user_id: str, order_id: str) -> None:
    """Serialize the uses of one order's coupons (until the transaction ends)."""
    xact_lock(AdvisoryLock.ORDER_COUPONS, _order_lock_key(user_id, order_id))


def _stored_pricing(coupon: Coupon, cart: pricing.Cart) -> pricing.CouponPricing:
    """Rebuild one of the order's coupons as campaigns.pricing priced it, from its stored line shares, on `cart`
    (the cart it was priced on, else OrderCartChanged). A coupon used before shares were stored was priced on
    the whole order amount."""
    assert coupon.order_amount is not None and coupon.discount is not None
    stored = coupon.shares or {
        "cart": cart_digest(pricing.whole_order_cart(coupon.order_amount, coupon.campaign.currency)),
        "lines": [[0, pricing.WHOLE_ORDER_SKU, str(coupon.discount)]],
    }
    if stored["cart"] != cart_digest(cart):
        raise OrderCartChanged()
    lines = tuple(pricing.LineShare(index=index, sku=sku, discount=Decimal(share))
                  for index, sku, share in stored["lines"])
    return pricing.CouponPricing(candidate=coupon.campaign.candidate(coupon.code), status=pricing.OK,
                                 discount=coupon.discount, lines=lines)


def _price_on_order(coupon: Coupon, order: Order, user_id: str, now: datetime, others: tuple[Coupon, ...] | None
                    ) -> tuple[pricing.CouponPricing, Decimal]:
    """Price the coupon on the order after the coupons the order already holds or used (this shopper's, held
    and not lapsed, or redeemed), under the order's lock: (its pricing, the order's payable after it).
    `others` given: the order's lock is held and these are those coupons (the first use of a shared code)."""
    if others is None:
        _lock_order(user_id, order.order_id)
    cart = order.cart()
    campaign = coupon.campaign
    candidate = campaign.candidate(coupon.code)
    if order.lines is None and campaign.is_scoped:  # a scope is judged on lines: an amount alone has none
        return pricing.CouponPricing(candidate, pricing.NOT_APPLICABLE, Decimal(0)), cart.amount
    if others is None:
        others = tuple(order_coupons(user_id=user_id, order_id=order.order_id, now=now, exclude=coupon.pk))
    before = [_stored_pricing(other, cart) for other in others]
    result = pricing.price_coupon(cart, candidate, before=before)
    return result, cart.amount - sum((b.discount for b in before), Decimal(0)) - result.discount


def shares_of(order: Order, result: pricing.CouponPricing, payable: Decimal) -> dict[str, Any]:
    """What Coupon.shares stores of a use: the cart's digest, each eligible line's [index, sku, share], the
    order's payable after the coupon, whether the order came with lines."""
    cart = order.cart()
    return {"cart": cart_digest(cart), "lines": [[s.index, s.sku, str(s.discount)] for s in result.lines],
            "payable": str(payable), "with_lines": order.lines is not None}


def _use_checked(coupon: Coupon, order: Order, user_id: str, now: datetime, others: tuple[Coupon, ...] | None = None
                 ) -> UseOutcome | tuple[pricing.CouponPricing, Decimal]:
    """Return why an active coupon can't be used for this order, or what it gives the order (pricing, payable);
    `others`: as _price_on_order's."""
    if coupon.status == CouponStatus.EXPIRED:
        return refused(UseCode.EXPIRED)
    if coupon.status == CouponStatus.REVOKED:
        return refused(UseCode.REVOKED)
    if now < coupon.valid_from:
        return refused(UseCode.NOT_YET_VALID)
    campaign = coupon.campaign
    if order.currency != campaign.currency:
        raise CurrencyMismatch(f"This coupon is in {campaign.currency}; the order is in {order.currency}.")
    priced, payable = _price_on_order(coupon, order, user_id, now, others)
    if not priced.applicable:
        return refused(_PRICING_REFUSALS[priced.status])
    if campaign.audience == Audience.NEW:
        # "Never redeemed here" is a fact about all the shopper's coupons: serialize the shopper's uses of
        # new-shopper coupons (until this transaction ends), so two at once can't both count as the first.
        xact_lock(AdvisoryLock.NEW_SHOPPER_USE, user_id)
        if Coupon.objects.filter(user_id=user_id, status__in=[CouponStatus.REDEEMED, CouponStatus.HELD]).exclude(
            pk=coupon.pk
        ).exists():
            return refused(UseCode.NOT_ELIGIBLE)
    return priced, payable


def _same_use(coupon: Coupon, order: Order) -> bool:
    """Whether the coupon's use is this order's at this amount and on these lines (asked again)."""
    if coupon.order_id != order.order_id or coupon.order_amount != order.amount:
        return False
    stored = coupon.shares
    return stored is None and order.lines is None or stored is not None and stored["cart"] == cart_digest(
        order.cart()) and stored.get("with_lines") == (order.lines is not None)


def _use_answer(coupon: Coupon) -> dict[str, Any]:
    """discount, payable (the order's, after this coupon and those before it) and, for an order sent with lines,
    each eligible line's share."""
    assert coupon.discount is not None and coupon.order_amount is not None
    stored = coupon.shares
    if stored is None:
        return {"discount": coupon.discount, "payable": coupon.order_amount - coupon.discount}
    answer: dict[str, Any] = {"discount": coupon.discount, "payable": Decimal(stored["payable"])}
    if stored.get("with_lines"):
        answer["lines"] = [{"sku": sku, "discount": share} for _, sku, share in stored["lines"]]
    return answer


def coupon_redeem(*, user_id: str, code: str, order: Order, source: str = "api") -> UseOutcome:
    """Redeem a coupon for an order in one step (also completes this order's own hold)."""

    def decide(coupon: Coupon, now: datetime) -> UseOutcome | None:
        if coupon.status == CouponStatus.REDEEMED:
            if _same_use(coupon, order):
                return _redeemed(coupon)  # the same redemption asked again
            return refused(UseCode.ALREADY_REDEEMED)  # another order, or this order at another amount
        if coupon.status == CouponStatus.HELD and coupon.order_id != order.order_id:
            return refused(UseCode.ON_HOLD)
        change = redeem_change(coupon, now)
        if isinstance(change, UseOutcome):
            return change
        if not _transition(coupon, source=source, **change.arguments()):
            return None
        return _redeemed(coupon)

    def redeem_change(coupon: Coupon, now: datetime, others: tuple[Coupon, ...] | None = None) -> UseOutcome | Change:
        checked = _use_checked(coupon, order, user_id, now, others)
        if isinstance(checked, UseOutcome):
            return checked
        priced, payable = checked
        shares = shares_of(order, priced, payable)
        data = {"order_id": order.order_id, "order_amount": order.amount, "currency": order.currency,
                "discount": priced.discount, "payable": payable, **_lines_data(order, shares)}
        return Change(to=CouponStatus.REDEEMED, event=CouponEventType.REDEEMED, data=data, fields={
            "order_id": order.order_id, "order_amount": order.amount, "discount": priced.discount, "shares": shares,
            "hold_until": None, "redeemed_at": now})

    return _code_used(code, user_id, order.order_id, decide, new_use=order, first_use=(redeem_change, _redeemed),
                      source=source)


@dataclass(frozen=True)
class Change:
    """What a use does to an active (or held) coupon whose checks passed: _transition's arguments."""

    to: str
    event: str
    data: dict[str, Any]
    fields: dict[str, Any]

    def arguments(self) -> dict[str, Any]:
        return {"to": self.to, "event": self.event, "data": self.data, **self.fields}


# A use's checks and change (redeem_change, reserve_change: `others` as _price_on_order's), and its answer.
Plan = Callable[[Coupon, datetime, "tuple[Coupon, ...] | None"], "UseOutcome | Change"]
FirstUse = tuple[Plan, Callable[[Coupon], UseOutcome]]


def _lines_data(order: Order, shares: dict[str, Any]) -> dict[str, Any]:
    """The line shares an event of a use records, for an order sent with lines."""
    return {"lines": shares["lines"]} if order.lines is not None else {}


def _redeemed(coupon: Coupon) -> UseOutcome:
    return done("redeemed", **_use_answer(coupon))


def coupon_reserve(
    *, user_id: str, code: str, order: Order, hold_seconds: int = HOLD_SECONDS_DEFAULT, source: str = "api"
) -> UseOutcome:
    """Hold a coupon for an order awaiting payment, until now + hold_seconds (confirm or release it)."""
    if not 1 <= hold_seconds <= HOLD_SECONDS_MAX:
        raise ValueError("hold_seconds out of range")

    def decide(coupon: Coupon, now: datetime) -> UseOutcome | None:
        if coupon.status == CouponStatus.HELD:
            if coupon.order_id != order.order_id:
                return refused(UseCode.ON_HOLD)
            if _same_use(coupon, order):
                return _reserved(coupon)  # the same hold asked again
            # This order's amount changed at checkout: hold again at the new price (checks run again).
        if coupon.status == CouponStatus.REDEEMED:
            return refused(UseCode.ALREADY_REDEEMED)
        change = reserve_change(coupon, now)
        if isinstance(change, UseOutcome):
            return change
        if not _transition(coupon, source=source, **change.arguments()):
            return None
        return _reserved(coupon)

    def reserve_change(coupon: Coupon, now: datetime, others: tuple[Coupon, ...] | None = None) -> UseOutcome | Change:
        checked = _use_checked(coupon, order, user_id, now, others)
        if isinstance(checked, UseOutcome):
            return checked
        priced, payable = checked
        shares = shares_of(order, priced, payable)
        hold_until = (now + timedelta(seconds=hold_seconds)).replace(microsecond=0)
        data = {"order_id": order.order_id, "order_amount": order.amount, "currency": order.currency,
                "discount": priced.discount, "hold_until": hold_until, **_lines_data(order, shares)}
        return Change(to=CouponStatus.HELD, event=CouponEventType.RESERVED, data=data, fields={
            "order_id": order.order_id, "order_amount": order.amount, "discount": priced.discount, "shares": shares,
            "hold_until": hold_until})

    return _code_used(code, user_id, order.order_id, decide, new_use=order, first_use=(reserve_change, _reserved),
                      source=source)


def _reserved(coupon: Coupon) -> UseOutcome:
    answer = _use_answer(coupon)
    return done("reserved", discount=answer.pop("discount"), payable=answer.pop("payable"),
                hold_until=coupon.hold_until, **answer)


def coupon_confirm(*, user_id: str, code: str, order_id: str, source: str = "api") -> UseOutcome:
    """The held order was paid: turn its hold into a redemption."""

    def decide(coupon: Coupon, now: datetime) -> UseOutcome | None:
        if coupon.status == CouponStatus.HELD:
            if coupon.order_id != order_id:
                return refused(UseCode.ON_HOLD)
            data = {"order_id": order_id, "order_amount": coupon.order_amount, "discount": coupon.discount,
                    "confirmed": True}
            if not _transition(coupon, to=CouponStatus.REDEEMED, event=CouponEventType.REDEEMED, source=source,
                               data=data, hold_until=None, redeemed_at=now):
                return None
            return _redeemed(coupon)
        if coupon.status == CouponStatus.REDEEMED:
            return _redeemed(coupon) if coupon.order_id == order_id else refused(UseCode.ALREADY_REDEEMED)
        if coupon.status == CouponStatus.REVOKED:
            return refused(UseCode.REVOKED)
        lapsed_for_this_order = CouponEvent.objects.filter(
            coupon=coupon, type=CouponEventType.HOLD_LAPSED, data__order_id=order_id
        ).exists()
        if lapsed_for_this_order:
            return refused(UseCode.HOLD_LAPSED)
        if coupon.status == CouponStatus.EXPIRED:
            return refused(UseCode.EXPIRED)
        return refused(UseCode.NOT_HELD)

    return _code_used(code, user_id, order_id, decide, absent=refused(UseCode.NOT_HELD), source=source)


def coupon_release(*, user_id: str, code: str, order_id: str, source: str = "api") -> UseOutcome:
    """Undo this order's hold or redemption (cancelled or unpaid): usable again if still valid. Idempotent."""

    def decide(coupon: Coupon, now: datetime) -> UseOutcome | None:
        released = False
        if coupon.status in (CouponStatus.HELD, CouponStatus.REDEEMED) and coupon.order_id == order_id:
            data = {"order_id": order_id, "was": coupon.status}
            if not _transition(coupon, to=CouponStatus.ACTIVE, event=CouponEventType.RELEASED, source=source,
                               data=data, redeemed_at=None, **_NO_ORDER):
                return None
            released = True
        if coupon.status == CouponStatus.ACTIVE and (
            (released and is_shared_use(coupon))
            or coupon.claim_id.startswith(_use_prefix(coupon.campaign_id, user_id, order_id))
        ):
            # A shared code's use is over: its coupon is revoked and the use given back to the code, once.
            if not _transition(coupon, to=CouponStatus.REVOKED, event=CouponEventType.REVOKED, source=source,
                               data={"reason": "released", "order_id": order_id}):
                return None
            event_write(coupon, event=CouponEventType.RESTOCKED, source=source, data={"claim_id": coupon.claim_id})
            _give_back(coupon)  # before the commit: Redis down is a 503 and nothing changed
        elif released and not coupon_settle(coupon=coupon, now=now):  # released after its validity: expired
            return None
        return done("released", coupon_status=coupon.status)

    return _code_used(code, user_id, order_id, decide, absent=done("released", coupon_status=CouponStatus.REVOKED),
                      source=source)


# --- codes typed at checkout: which coupon a typed code stands for --------------------------------------

SHARED_USE = "code:"  # the claim id of a shared code's use: code:<campaign>:<digest of shopper and order>:<n>
UNIQUE_USE = "unique:"  # the claim id of a unique code's coupon: unique:<the UniqueCode's id>
USE_ID_RE = re.compile(r"code:[1-9][0-9]{0,18}:[0-9a-f]{24}:[0-9]{1,9}|unique:[1-9][0-9]{0,18}")
_OVER = (CouponStatus.REVOKED, CouponStatus.EXPIRED)  # a shared code's use that is over: the next is a new one


class _Undone(Exception):
    """A new use's coupon was refused after all: its transaction is rolled back (nothing stays)."""

    def __init__(self, outcome: UseOutcome | None) -> None:
        super().__init__()
        self.outcome = outcome


def _code_used(code: str, user_id: str, order_id: str, decide: Decide, *, new_use: Order | None = None,
               first_use: FirstUse | None = None, absent: UseOutcome | None = None, source: str) -> UseOutcome:
    """Decide on the coupon `code` (canonical, typed_code_form) stands for, for this shopper and order:
    (a) the shopper's own coupon with that code (claimed, or a unique code the shopper holds);
    (b) a shared code of a live codes campaign: the shopper's coupon for this order's use of it, created
        (its use taken) by a reserve or redeem (`new_use`); `absent` answers a confirm or release without one;
        a confirm or release also finds the order's use in a campaign paused or ended since (_campaign_of_use);
    (c) a unique code nobody holds yet, of a live codes campaign: bound to this shopper by a reserve or redeem.
    Anything else, another shopper's unique code and a code of a campaign not live, is NotFound.
    A reserve or redeem of a live shared code tries _first_shared_use first (the order's first use of it)."""
    canonical = typed_code_form(code)
    if canonical is None:
        raise NotFound("No such coupon.")
    code = canonical
    shared = shared_code_form(code)
    if shared is not None and new_use is not None and first_use is not None:
        campaign = live_campaign_of_code(shared, at=timezone.now())
        if campaign is not None:
            outcome = _first_shared_use(campaign, code, user_id, new_use, first_use, source=source)
            if outcome is not None:
                return outcome
    own = own_coupon_id(code=code, user_id=user_id)
    if own is not None:
        return _retrying(lambda: coupon_by_id(own), decide)
    now = timezone.now()
    if shared is not None:
        campaign = live_campaign_of_code(shared, at=now)
        if campaign is None and new_use is None:
            campaign = _campaign_of_use(shared, user_id, order_id)
        if campaign is not None:
            return _shared_use(campaign, user_id, order_id, decide, new_use=new_use, absent=absent, source=source)
    unique = unique_code_lookup(code)
    if unique is not None and new_use is not None:
        return _unique_use(unique, user_id, decide, new_use=new_use, source=source)
    raise NotFound("No such coupon.")


def _campaign_of_use(shared: str, user_id: str, order_id: str) -> Campaign | None:
    """The codes campaign, no longer live (paused or ended since), in which this shopper used the shared code
    for this order: a confirm or release still finds that use (a checkout begun is finished; a new use of the
    code is the 404 of a code not live). Of the campaigns that had the code, the newest with such a use."""
    use = (Coupon.objects.select_related("campaign")
           .filter(user_id=user_id, campaign__kind=CampaignKind.CODES, campaign__code=shared,
                   claim_id__startswith=SHARED_USE, claim_id__contains=f":{_use_digest(user_id, order_id)}:")
           .order_by("-campaign_id").first())
    return use.campaign if use is not None else None


# code_is_own's statement: prepared (core.db), as it runs before every use of a code (Django's query compiler
# cost it 3x the round trip). The shopper's coupons only: the index coupon_user_status, then a filter.
_OWN_CODE = f"""SELECT EXISTS (SELECT 1 FROM {Coupon._meta.db_table} c WHERE c.user_id = %s AND (c.code = %s
    OR c.claim_id LIKE %s AND EXISTS (SELECT 1 FROM {Campaign._meta.db_table} k
                                      WHERE k.id = c.campaign_id AND k.kind = %s AND k.code = %s)))"""


def code_is_own(*, code: str, user_id: str, order_id: str) -> bool:
    """Whether `code` (canonical) is the shopper's own for this order, as _code_used finds it without looking
    anyone else's up: the shopper's coupon of that code (path a), or the shopper's use of that shared code for
    this order, in any campaign that had it (path b's, as _campaign_of_use finds it). Such a code is no guess:
    the unknown-code guard leaves it alone (coupons.guard)."""
    use = f"{SHARED_USE}%:{_use_digest(user_id, order_id)}:%"  # code:<campaign>:<digest>:<n>
    with prepared_cursor() as cursor:
        cursor.execute(_OWN_CODE, [user_id, code, use, CampaignKind.CODES.value, shared_code_form(code)])
        return bool(cursor.fetchone()[0])


def _use_digest(user_id: str, order_id: str) -> str:
    return hashlib.sha256(f"{user_id}\n{order_id}".encode()).hexdigest()[:24]


def _use_prefix(campaign_id: int, user_id: str, order_id: str) -> str:
    """The claim ids of one shopper's uses of a campaign's shared code for one order (48 characters at most),
    and the lock of that use (_shared_use)."""
    return f"{SHARED_USE}{campaign_id}:{_use_digest(user_id, order_id)}:"


def _unique_uses_lock(campaign_id: int, user_id: str) -> str:
    """The lock of one shopper's unique codes of a campaign (_unique_use: the per-user limit, the take)."""
    return f"u:{campaign_id}:{user_id}"


def held_uses(campaign: Campaign) -> QuerySet[Coupon]:
    """A codes campaign's uses that hold a unit of its stock (code_take.lua's takes): the coupons of its shared
    code's uses and of its unique codes, not revoked."""
    return (Coupon.objects.filter(campaign=campaign)
            .filter(Q(claim_id__startswith=SHARED_USE) | Q(claim_id__startswith=UNIQUE_USE))
            .exclude(status=CouponStatus.REVOKED))


def is_code_use_id(text: str) -> bool:
    """Whether `text` is of the form of a typed code's use (a shared code's or a unique code's): the claim_id of
    its coupon, which is no claim (GET /claims/{id} of it is the 404 of an unknown claim, not a 400)."""
    return USE_ID_RE.fullmatch(text) is not None


def is_shared_use(coupon: Coupon) -> bool:
    return coupon.claim_id.startswith(SHARED_USE)


def take_member(coupon: Coupon) -> str:
    """The member of the shared code's takes (Redis) that stands for this coupon's use."""
    return f"{coupon.claim_id}/{coupon.user_id}"


def _lock(key: str) -> None:
    xact_lock(AdvisoryLock.CODE_USE, key)


def _shared_use(campaign: Campaign, user_id: str, order_id: str, decide: Decide, *, new_use: Order | None,
                absent: UseOutcome | None, source: str) -> UseOutcome:
    """Decide on this order's use of the campaign's shared code, creating it for a reserve or redeem.

    One request per (shopper, order) at a time (a transaction lock): the use is taken in Redis (code_take.lua:
    stock and per-user limit, atomic however many shoppers type the code at once), then its coupon is written
    with its events; if that write fails, the use is given back. Its claim id ends in n, the number of this
    order's earlier uses of the code that are over (released or expired).
    """
    prefix = _use_prefix(campaign.pk, user_id, order_id)
    for _ in range(MAX_ATTEMPTS):
        taken: Coupon | None = None
        try:
            with transaction.atomic():
                _lock(prefix)
                family = use_family(user_id=user_id, campaign_id=campaign.pk, prefix=prefix)
                now = timezone.now()
                current = next((c for c in family if c.status not in _OVER), None)
                if current is not None:
                    if not coupon_settle(coupon=current, now=now):
                        continue
                    if current.status not in _OVER:
                        outcome = decide(current, now)
                        if outcome is None:
                            continue
                        return outcome
                if new_use is None:  # a confirm or release: decide on the last use, if any
                    if not family:
                        assert absent is not None
                        return absent
                    outcome = decide(family[-1], now)
                    if outcome is None:
                        continue
                    return outcome
                valid_from, expires_at = campaign.coupon_validity(now)
                coupon = Coupon(code=new_codes(1)[0], campaign=campaign, user_id=user_id,
                                claim_id=f"{prefix}{len(family)}", valid_from=valid_from, expires_at=expires_at)
                refusal = _refusal_for_use(coupon, new_use, user_id, now)
                if refusal is not None:
                    return refusal  # checked before the take: a refused use takes nothing
                refusal = _take(campaign, coupon)
                if refusal is not None:
                    return refusal
                taken = coupon
                coupon.save(force_insert=True)
                CouponEvent.objects.create(coupon_id=coupon.pk, campaign_id=campaign.pk, type=CouponEventType.ISSUED,
                                           source=source, data={"code": campaign.code, "order_id": order_id})
                coupon_event_out(coupon, "issued", {"shared_code": campaign.code, "order_id": order_id},
                                 status="active")
                outcome = decide(coupon, now)
                if outcome is None or outcome.code != 0:
                    raise _Undone(outcome)
                return outcome
        except _Undone as undone:
            _give_back_after_failure(taken)
            if undone.outcome is None:
                continue
            return undone.outcome
        except BaseException:
            _give_back_after_failure(taken)
            raise
    raise Contention()


_COUPON, _EVENT = Coupon._meta.db_table, CouponEvent._meta.db_table

# A batch of first uses (_write_first_uses), its three statements. The locks of each use, in _shared_use's order
# (the use's, then the order's), without waiting: a use whose locks another request holds is decided alone.
_FIRST_USES_LOCKS = f"""SELECT i.n FROM jsonb_to_recordset(%s::jsonb) AS i (n int, use text, ord text)
WHERE {lock_call(AdvisoryLock.CODE_USE, "i.use", wait=False)}
  AND {lock_call(AdvisoryLock.ORDER_COUPONS, "i.ord", wait=False)}"""

# Read after the locks (a statement of its own: its snapshot follows them): the uses this path may write, those
# whose shopper owns no coupon of that code (path (a) decides), whose order holds or used no other coupon (its
# coupons then change the pricing) and whose coupon does not exist (the claim id is taken: not a first use).
_FIRST_USES_FREE = f"""SELECT i.n
FROM jsonb_to_recordset(%s::jsonb) AS i (n int, code text, usr text, ord text, claim text)
WHERE NOT EXISTS (SELECT 1 FROM {_COUPON} c WHERE c.code = i.code AND c.user_id = i.usr)
  AND NOT EXISTS (SELECT 1 FROM {_COUPON} o WHERE o.user_id = i.usr AND o.order_id = i.ord
                  AND (o.status = 'redeemed' OR o.status = 'held' AND o.hold_until > %s))
  AND NOT EXISTS (SELECT 1 FROM {_COUPON} c WHERE c.claim_id = i.claim)"""


def _first_uses_sql() -> str:
    """The uses' coupons in their state after the use, their issued events and use events, their webhooks: one
    statement for the batch; a coupon whose code is taken after all is not written (ON CONFLICT)."""
    used = {event: f"(SELECT * FROM w WHERE w.event = '{event}') AS u" for event in ("redeemed", "reserved")}
    return f"""WITH i AS MATERIALIZED (
    SELECT * FROM jsonb_to_recordset(%s::jsonb) AS r (
        code varchar, campaign int, usr varchar, claim varchar, status varchar, valid_from timestamptz,
        expires_at timestamptz, ord varchar, hold_until timestamptz, order_amount numeric, discount numeric,
        shares jsonb, redeemed_at timestamptz, issued_at timestamptz, used_at timestamptz, event varchar,
        source varchar, issued jsonb, used jsonb, issued_out jsonb, used_out jsonb)
), c AS (
    INSERT INTO {_COUPON} (code, campaign_id, user_id, claim_id, status, valid_from, expires_at, order_id,
                           hold_until, order_amount, discount, shares, redeemed_at, version, created_at, updated_at)
    SELECT code, campaign, usr, claim, status, valid_from, expires_at, ord, hold_until, order_amount, discount,
           shares, redeemed_at, 2, issued_at, used_at FROM i
    ON CONFLICT DO NOTHING
    RETURNING id, campaign_id, claim_id
), w AS (
    SELECT c.id, c.campaign_id, i.* FROM c JOIN i ON i.claim = c.claim_id
), events AS (
    INSERT INTO {_EVENT} (coupon_id, campaign_id, type, data, source, created_at)
    SELECT w.id, w.campaign_id, v.type, v.data, w.source, v.at
    FROM w CROSS JOIN LATERAL (VALUES (1, 'issued', w.issued, w.issued_at),
                                      (2, w.event, w.used, w.used_at)) AS v (n, type, data, at)
    ORDER BY w.id, v.n
){new_coupon_out_ctes("issued_out", "issued", source="w", alias="w", data="w.issued_out")}{
        new_coupon_out_ctes("redeemed_out", "redeemed", source=used["redeemed"], alias="u", data="u.used_out")}{
        new_coupon_out_ctes("reserved_out", "reserved", source=used["reserved"], alias="u", data="u.used_out")}
SELECT w.claim, w.id, (SELECT count(*) FROM issued_out) + (SELECT count(*) FROM redeemed_out)
                      + (SELECT count(*) FROM reserved_out) FROM w"""


_FIRST_USES_SQL = _first_uses_sql()


@dataclass
class _FirstUse:
    """One order's first use of a live shared code, checked and priced (on an order with no other coupon):
    what _write_first_uses writes if its locks and the order allow, and its answer."""

    campaign: Campaign
    typed: str  # the code as typed (canonical)
    coupon: Coupon
    change: Change
    now: datetime
    source: str
    answer: Callable[[Coupon], UseOutcome]

    @property
    def lock(self) -> str:  # the use's lock (_use_prefix)
        return self.coupon.claim_id[:-1]

    @property
    def order_lock(self) -> str:
        return _order_lock_key(self.coupon.user_id, self.change.fields["order_id"])

    @property
    def fields(self) -> dict[str, Any]:  # the coupon's fields after the use (those the use leaves unset: None)
        return {"hold_until": None, "redeemed_at": None, **self.change.fields}

    def row(self) -> dict[str, Any]:
        coupon, change, campaign, fields = self.coupon, self.change, self.campaign, self.fields
        return {
            "code": coupon.code, "campaign": campaign.pk, "usr": coupon.user_id, "claim": coupon.claim_id,
            "status": change.to, "valid_from": jsonable(coupon.valid_from), "expires_at": jsonable(coupon.expires_at),
            "ord": fields["order_id"], "hold_until": jsonable(fields["hold_until"]),
            "order_amount": str(fields["order_amount"]), "discount": str(fields["discount"]),
            "shares": fields["shares"], "redeemed_at": jsonable(fields["redeemed_at"]),
            "issued_at": jsonable(self.now), "used_at": jsonable(timezone.now()), "event": change.event,
            "source": self.source, "issued": {"code": campaign.code, "order_id": fields["order_id"]},
            "used": {k: jsonable(v) for k, v in change.data.items()},
            "issued_out": _out_data(coupon, "issued", {"shared_code": campaign.code,
                                                      "order_id": fields["order_id"]}, "active"),
            "used_out": _out_data(coupon, change.event, change.data, change.to),
        }

    def written(self, pk: int) -> UseOutcome:
        coupon = self.coupon
        coupon.pk, coupon.status, coupon.version = pk, self.change.to, 2
        for name, value in self.fields.items():
            setattr(coupon, name, value)
        return self.answer(coupon)


def _first_shared_use(campaign: Campaign, code: str, user_id: str, order: Order, first_use: FirstUse, *,
                      source: str) -> UseOutcome | None:
    """The order's first use of a live shared code, written together with this process's other first uses of
    the moment (_FIRST_USES: one transaction, three statements and one Redis round trip a batch, not a
    transaction and a round trip a use): the same checks as every use (`first_use`'s plan, on an order that
    holds no other coupon). Return None when this is not the order's first use or it would not pass (an own
    coupon of that code, another coupon on the order, a use of the code for it already, a refusal of the
    checks, its locks held by another request, a campaign not live in Redis): _shared_use decides. A caller
    inside a transaction writes its use alone, in it."""
    if campaign.audience == Audience.NEW:
        return None  # its check reads the shopper's other coupons under a lock of its own: _shared_use
    plan, answer = first_use
    now = timezone.now()
    valid_from, expires_at = campaign.coupon_validity(now)
    coupon = Coupon(code=new_codes(1)[0], campaign=campaign, user_id=user_id,
                    claim_id=f"{_use_prefix(campaign.pk, user_id, order.order_id)}0",
                    valid_from=valid_from, expires_at=expires_at)
    try:
        change = plan(coupon, now, ())
    except ApplicationError:
        return None  # e.g. another currency: answered as the general path does
    if isinstance(change, UseOutcome):
        return None
    use = _FirstUse(campaign=campaign, typed=code, coupon=coupon, change=change, now=now, source=source, answer=answer)
    if connection.in_atomic_block:
        return _write_first_uses([use])[0]
    outcome: UseOutcome | None = _FIRST_USES.run(use)
    return outcome


def _write_first_uses(uses: Sequence[_FirstUse]) -> list[UseOutcome | None]:
    """Write a batch of first uses in one transaction: their locks (not waited for), which of them this path
    may write (read after the locks), their takes in Redis (code_take.lua, one pipelined round trip: stock and
    per-user limit), the coupons of those taken with their events and webhooks (one statement), the commit.
    One outcome per use: its answer, its refusal (sold out, limit reached), or None (_shared_use decides). A
    take whose coupon was not written after all is given back."""
    outcomes: list[UseOutcome | None] = [None] * len(uses)
    first: dict[str, int] = {}
    for n, use in enumerate(uses):  # one use an order (the locks are the session's: a second would pass them)
        first.setdefault(use.lock, n)
        first.setdefault(use.order_lock, n)
    alone = [n for n, use in enumerate(uses) if first[use.lock] == n and first[use.order_lock] == n]
    attempted: list[int] = []  # whose takes were sent (given back after a failure: once, so harmless if not taken)
    taken: list[int] = []
    try:
        with transaction.atomic():
            with prepared_cursor() as cursor:
                cursor.execute(_FIRST_USES_LOCKS, [json.dumps([
                    {"n": n, "use": uses[n].lock, "ord": uses[n].order_lock} for n in alone])])
                locked = [row[0] for row in cursor.fetchall()]
                if not locked:
                    return outcomes
                cursor.execute(_FIRST_USES_FREE, [json.dumps([
                    {"n": n, "code": uses[n].typed, "usr": uses[n].coupon.user_id,
                     "ord": uses[n].change.fields["order_id"], "claim": uses[n].coupon.claim_id} for n in locked]),
                    min(uses[n].now for n in locked)])
                free = sorted(row[0] for row in cursor.fetchall())
                if not free:
                    return outcomes
                attempted = free
                takes = _run_takes([uses[n].coupon for n in free])
                for n, take in zip(free, takes, strict=True):
                    if take in (redis_state.TakeCode.TAKEN, redis_state.TakeCode.ALREADY):
                        taken.append(n)
                    elif take == redis_state.TakeCode.LIMIT_REACHED:
                        outcomes[n] = refused(UseCode.LIMIT_REACHED)
                    elif take == redis_state.TakeCode.SOLD_OUT:
                        outcomes[n] = refused(UseCode.SOLD_OUT)
                    # else not live in Redis or no state there: _shared_use's take decides (preheat, 404, 503)
                if not taken:
                    return outcomes
                cursor.execute(_FIRST_USES_SQL, [json.dumps([uses[n].row() for n in taken])])
                rows = cursor.fetchall()
            written = {claim: pk for claim, pk, _ in rows}
            if rows and rows[0][2]:
                transaction.on_commit(delivery_trigger.request)
            for n in taken:
                pk = written.get(uses[n].coupon.claim_id)
                if pk is not None:
                    outcomes[n] = uses[n].written(pk)
        not_written = [n for n in taken if outcomes[n] is None]
    except BaseException:
        for n in attempted:
            _give_back_after_failure(uses[n].coupon)
        raise
    for n in not_written:  # a coupon code taken meanwhile (ON CONFLICT): decided again by _shared_use
        _give_back_after_failure(uses[n].coupon)
    return outcomes


_FIRST_USES: Together[_FirstUse] = Together(_write_first_uses, failed=None)


def _out_data(coupon: Coupon, event: str, data: dict[str, Any], status: str) -> dict[str, Any]:
    payload = coupon_event_payload(coupon, event, data, status=status)
    del payload["coupon_id"]  # set in SQL
    return payload


def _take(campaign: Campaign, coupon: Coupon) -> UseOutcome | None:
    """Take one use of the shared code for the coupon's use: None when taken, else the refusal. Raise NotFound
    (the campaign is not live in Redis either), Unavailable (Redis down, or its state lost: nothing taken)."""
    take = redis_state.TakeCode
    result = _run_take(campaign, coupon)
    if result == take.NO_STATE and campaign.preheated_at is None:
        campaign_preheat(campaign=campaign)  # published while Redis was away: its state is loaded at first use
        result = _run_take(campaign, coupon)
    if result in (take.TAKEN, take.ALREADY):
        return None
    if result == take.LIMIT_REACHED:
        return refused(UseCode.LIMIT_REACHED)
    if result == take.SOLD_OUT:
        return refused(UseCode.SOLD_OUT)
    if result == take.NO_STATE:
        raise CampaignStateLost()
    raise NotFound("No such coupon.")  # not started, ended or paused in Redis: the same 404 as PostgreSQL's


def _run_takes(coupons: list[Coupon]) -> list[redis_state.TakeCode]:
    try:
        return redis_state.run_code_takes([(c.campaign_id, c.user_id, take_member(c)) for c in coupons])
    except redis_state.StoreUnavailable as exc:
        raise Unavailable() from exc


def _run_take(campaign: Campaign, coupon: Coupon) -> redis_state.TakeCode:
    try:
        return redis_state.run_code_take(campaign_id=campaign.pk, user_id=coupon.user_id, member=take_member(coupon))
    except redis_state.StoreUnavailable as exc:
        raise Unavailable() from exc


def _give_back(coupon: Coupon) -> None:
    """Give a shared code's use back (once). Raise Unavailable when Redis is down."""
    try:
        redis_state.run_code_give_back(campaign_id=coupon.campaign_id, user_id=coupon.user_id,
                                       member=take_member(coupon))
    except redis_state.StoreUnavailable as exc:
        raise Unavailable() from exc


def _give_back_after_failure(taken: Coupon | None) -> None:
    """Give back the use taken for a coupon that was not written after all (never raises)."""
    if taken is None:
        return
    try:
        _give_back(taken)
    except Unavailable:
        log.error("could not give back the use %s of campaign %s (Redis unavailable): verify_campaign reports it "
                  "as taken without a coupon", take_member(taken), taken.campaign_id)


def code_uses_give_back_orphans(campaign: Campaign, members: list[str]) -> int:
    """Give back the uses (of a shared code or a unique code) taken in Redis whose coupon PostgreSQL does not
    hold, each checked under its use's lock (so no request of that use is running): requests that died
    between their take and their commit (reconciliation). Return how many were given back. Raise Unavailable."""
    given = 0
    for member in members:
        claim_id, _, user_id = member.rpartition("/")
        if claim_id.startswith(f"{SHARED_USE}{campaign.pk}:"):
            lock = claim_id.rpartition(":")[0] + ":"  # the use's (_shared_use)
        elif claim_id.startswith(UNIQUE_USE):
            lock = _unique_uses_lock(campaign.pk, user_id)
        else:
            continue
        with transaction.atomic():
            _lock(lock)
            if Coupon.objects.filter(claim_id=claim_id).exists():
                continue
            try:
                result = redis_state.run_code_give_back(campaign_id=campaign.pk, user_id=user_id, member=member)
            except redis_state.StoreUnavailable as exc:
                raise Unavailable() from exc
            given += result == redis_state.RestockResult.RESTOCKED
    return given


def _unique_use(code: str, user_id: str, decide: Decide, *, new_use: Order, source: str) -> UseOutcome:
    """Bind a unique code nobody holds yet to this shopper (the first to use it) and decide on its coupon.

    The coupon's code is the unique code (unique in PostgreSQL: of shoppers typing it at once, one insert
    wins, the others wait for it and fail), and the code row is bound by a conditional UPDATE (holder_id IS
    NULL). A shopper's unique codes of a campaign are counted against its per-user limit under a transaction
    lock of (campaign, shopper), and the use is taken from the campaign's stock in Redis (code_take.lua, as a
    shared code's: the stock is the campaign's uses in all), last before the commit; a failed commit gives it
    back."""
    row = UniqueCode.objects.select_related("campaign").filter(code=code).first()
    now = timezone.now()
    if row is None or row.holder_id is not None or row.campaign.state_at(now) != CampaignState.LIVE:
        raise NotFound("No such coupon.")
    campaign = row.campaign
    taken: Coupon | None = None
    try:
        with transaction.atomic():
            _lock(_unique_uses_lock(campaign.pk, user_id))
            if Coupon.objects.filter(campaign=campaign, user_id=user_id).count() >= campaign.per_user_limit:
                return refused(UseCode.LIMIT_REACHED)
            valid_from, expires_at = campaign.coupon_validity(now)
            coupon = Coupon(code=row.code, campaign=campaign, user_id=user_id, claim_id=f"{UNIQUE_USE}{row.pk}",
                            valid_from=valid_from, expires_at=expires_at)
            refusal = _refusal_for_use(coupon, new_use, user_id, now)
            if refusal is not None:
                return refusal
            coupon.save(force_insert=True)
            CouponEvent.objects.create(coupon_id=coupon.pk, campaign_id=campaign.pk, type=CouponEventType.ISSUED,
                                       source=source, data={"unique_code": row.pk, "order_id": new_use.order_id})
            coupon_event_out(coupon, "issued", {"unique_code": row.pk, "order_id": new_use.order_id}, status="active")
            if not UniqueCode.objects.filter(pk=row.pk, holder_id__isnull=True).update(
                    holder_id=user_id, coupon=coupon, held_at=now):
                raise IntegrityError("the unique code was bound meanwhile")
            outcome = decide(coupon, now)
            if outcome is None or outcome.code != 0:
                raise _Undone(outcome)
            refusal = _take(campaign, coupon)  # the campaign's stock: its uses in all, shared code or unique
            if refusal is not None:
                raise _Undone(refusal)
            taken = coupon
            return outcome
    except _Undone as undone:
        if undone.outcome is None:
            raise Contention() from None
        return undone.outcome
    except IntegrityError:
        _give_back_after_failure(taken)
        # another request bound it first: if it was this shopper's, the code is now theirs (path a)
    except BaseException:
        _give_back_after_failure(taken)
        raise
    if Coupon.objects.filter(code=row.code, user_id=user_id).exists():
        return _retrying(lambda: coupon_owned_by(code=row.code, user_id=user_id), decide)
    raise NotFound("No such coupon.")


def coupon_revoke(*, coupon: Coupon, source: str, reason: str, restocked: bool = False) -> UseOutcome:
    """Revoke an unused coupon (claim cancelled, or an operator's decision). Call inside transaction.atomic.

    Refuses a coupon in use (held or redeemed) or expired; a revoked coupon stays revoked (idempotent).
    """
    now = timezone.now()
    for _ in range(MAX_ATTEMPTS):
        if coupon_settle(coupon=coupon, now=now):
            if coupon.status == CouponStatus.REVOKED:
                return done("revoked")
            if coupon.status == CouponStatus.REDEEMED:
                return refused(UseCode.ALREADY_REDEEMED)
            if coupon.status == CouponStatus.HELD:
                return refused(UseCode.ON_HOLD)
            if coupon.status == CouponStatus.EXPIRED:
                return refused(UseCode.EXPIRED)
            if _transition(coupon, to=CouponStatus.REVOKED, event=CouponEventType.REVOKED, source=source,
                           data={"reason": reason}):
                if restocked:
                    CouponEvent.objects.create(coupon_id=coupon.pk, campaign_id=coupon.campaign_id,
                                               type=CouponEventType.RESTOCKED, source=source,
                                               data={"claim_id": coupon.claim_id})
                return done("revoked")
        coupon.refresh_from_db()
    raise Contention()


def coupon_extend_validity(*, coupon: Coupon, days: int, actor: str) -> bool:
    """Extend one still-usable coupon's validity by `days` (an operator's decision), with its event.

    Return False when the coupon is no longer usable (expired, redeemed, revoked) or changed meanwhile.
    Validate `days` with coupons.extension.check_days first.
    """
    with transaction.atomic():
        current = Coupon.objects.select_for_update().get(pk=coupon.pk)
        if current.status not in (CouponStatus.ACTIVE, CouponStatus.HELD) or current.is_expired_at(timezone.now()):
            return False
        new_expiry = current.expires_at + timedelta(days=days)
        claims_changed([current.claim_id])  # its claim's settled record shows the old expiry
        Coupon.objects.filter(pk=current.pk).update(expires_at=new_expiry, updated_at=timezone.now())
        CouponEvent.objects.create(coupon_id=current.pk, campaign_id=current.campaign_id,
                                   type=CouponEventType.EXTENDED, source="admin",
                                   data={"days": days, "from": jsonable(current.expires_at),
                                         "to": jsonable(new_expiry), "actor": actor})
    return True
