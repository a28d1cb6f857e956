"""The order a use is for, and what campaigns.pricing makes of a coupon on it (the pricing adapter): the cart
and its digest, the checks a use passes (validity, currency, the order's lock and its other coupons, the stacking
and scope rules, new shoppers), the line shares a use stores and the answer it gives."""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from campaigns import pricing
from campaigns.models import Audience, Campaign
from core.errors import BUSINESS_CODES, ApplicationError
from core.locks import AdvisoryLock, xact_lock

from ..hot_reads import order_coupons
from ..models import Coupon, CouponStatus
from ..outcomes import UseCode, UseOutcome, refused


class CurrencyMismatch(ApplicationError):
    http_status = 400
    code = 400
    status = "invalid_request"


@dataclass(frozen=True)
class Order:
    """The order a coupon is used for: validated by the caller. `lines` None: an order known by its amount alone
    (priced as one line of that amount); else `amount` is their sum. `shipping`: payable beside them (0: none)."""

    order_id: str
    amount: Decimal
    currency: str
    lines: tuple[pricing.CartLine, ...] | None = None
    shipping: Decimal = Decimal(0)
    # The shopper's audience tags (signed into the token) and storefront channels: whom a campaign with audience
    # tags or channels admits (admits_shopper). Not the order's: never in its fingerprint.
    tags: frozenset[str] = frozenset()
    channels: frozenset[str] = frozenset()

    def cart(self) -> pricing.Cart:
        if self.lines is None:
            return pricing.whole_order_cart(self.amount, self.currency, self.shipping)
        return pricing.Cart(currency=self.currency, lines=self.lines, shipping=self.shipping)

    def fingerprint_payload(self) -> dict[str, Any]:
        """What an Idempotency-Key's fingerprint covers: the order, its lines and its shipping when it has some."""
        payload: dict[str, Any] = {"order_id": self.order_id, "amount": self.amount, "currency": self.currency}
        if self.lines is not None:
            payload["lines"] = _lines_form(self.lines)
        if self.shipping:
            payload["shipping"] = self.shipping
        return payload


def _lines_form(lines: tuple[pricing.CartLine, ...]) -> list[list[Any]]:
    return [[line.sku, line.category, line.quantity, str(line.unit_price)] for line in lines]


def cart_digest(cart: pricing.Cart) -> str:
    """The digest of a cart's currency, lines and shipping (when it has some): an order's coupons are priced on one
    cart."""
    form: list[Any] = [cart.currency, _lines_form(cart.lines)]
    if cart.shipping:
        form.append(str(cart.shipping))
    text = json.dumps(form, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


class OrderCartChanged(ApplicationError):
    """A new coupon for an order whose other coupons were priced on other lines (or another amount)."""

    http_status = 400
    code = 400
    status = "invalid_request"
    message = ("This order's other coupons were priced on other lines or another amount: send the same lines, or "
               "release them first.")


def _refusal_for_use(coupon: Coupon, order: Order, user_id: str, now: datetime) -> UseOutcome | None:
    """Return why an active coupon can't be used for this order, or None when it can."""
    checked = _use_checked(coupon, order, user_id, now)
    return checked if isinstance(checked, UseOutcome) else None


# campaigns.pricing's refusals (slugs) as the business codes a use answers with: the registry's (core.errors).
_PRICING_REFUSALS = {slug: UseCode(BUSINESS_CODES[slug]) for slug in (
    pricing.NOT_COMBINABLE, pricing.NOT_APPLICABLE, pricing.MIN_QUANTITY_NOT_MET, pricing.MIN_SPEND_NOT_MET)}


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
                                 discount=coupon.discount, lines=lines, shipping=Decimal(stored.get("shipping", 0)))


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
        return pricing.CouponPricing(candidate, pricing.NOT_APPLICABLE, Decimal(0)), cart.total
    if others is None:
        others = tuple(order_coupons(user_id=user_id, order_id=order.order_id, now=now, exclude=coupon.pk))
    before = [_stored_pricing(other, cart) for other in others]
    result = pricing.price_coupon(cart, candidate, before=before)
    return result, cart.total - sum((b.discount for b in before), Decimal(0)) - result.discount


def shares_of(order: Order, result: pricing.CouponPricing, payable: Decimal) -> dict[str, Any]:
    """What Coupon.shares stores of a use: the cart's digest, each eligible line's [index, sku, share], the
    order's payable after the coupon, whether the order came with lines; a free-shipping coupon's share of the
    shipping."""
    cart = order.cart()
    shares = {"cart": cart_digest(cart), "lines": [[s.index, s.sku, str(s.discount)] for s in result.lines],
              "payable": str(payable), "with_lines": order.lines is not None}
    if result.candidate.rule.discount_type == pricing.FREE_SHIPPING:
        shares["shipping"] = str(result.shipping)
    return shares


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
    if not admits_shopper(campaign, order.tags, order.channels):
        return refused(UseCode.NOT_ELIGIBLE)
    if campaign.audience == Audience.NEW:
        # "Never redeemed here" is a fact about all the shopper's coupons: serialize the shopper's uses of
        # new-shopper coupons (until this transaction ends), so two at once can't both count as the first.
        xact_lock(AdvisoryLock.NEW_SHOPPER_USE, user_id)
        if Coupon.objects.filter(user_id=user_id, status__in=[CouponStatus.REDEEMED, CouponStatus.HELD]).exclude(
            pk=coupon.pk
        ).exists():
            return refused(UseCode.NOT_ELIGIBLE)
    return priced, payable


def admits_shopper(campaign: Campaign, tags: frozenset[str], channels: frozenset[str]) -> bool:
    """Whether a shopper of these tags and storefront channels may use the campaign's coupons: one of each list the
    campaign has (claim.lua checks the same at the claim)."""
    return ((not campaign.audience_tags or not tags.isdisjoint(campaign.audience_tags))
            and (not campaign.channels or not channels.isdisjoint(campaign.channels)))


def _same_use(coupon: Coupon, order: Order) -> bool:
    """Whether the coupon's use is this order's at this amount and on these lines (asked again)."""
    if coupon.order_id != order.order_id or coupon.order_amount != order.amount:
        return False
    stored = coupon.shares
    return stored is None and order.lines is None or stored is not None and stored["cart"] == cart_digest(
        order.cart()) and stored.get("with_lines") == (order.lines is not None)


def _use_answer(coupon: Coupon) -> dict[str, Any]:
    """discount, payable (the order's, after this coupon and those before it) and, for an order sent with lines,
    each eligible line's share; a free-shipping coupon's share of the shipping (`shipping`, its whole discount)."""
    assert coupon.discount is not None and coupon.order_amount is not None
    stored = coupon.shares
    if stored is None:
        return {"discount": coupon.discount, "payable": coupon.order_amount - coupon.discount}
    answer: dict[str, Any] = {"discount": coupon.discount, "payable": Decimal(stored["payable"])}
    if stored.get("with_lines"):
        answer["lines"] = [{"sku": sku, "discount": share} for _, sku, share in stored["lines"]]
    if "shipping" in stored:
        answer["shipping"] = Decimal(stored["shipping"])
    return answer


def _lines_data(order: Order, shares: dict[str, Any]) -> dict[str, Any]:
    """The line shares an event of a use records, for an order sent with lines, and a shipping share."""
    data = {"lines": shares["lines"]} if order.lines is not None else {}
    if "shipping" in shares:
        data["shipping"] = shares["shipping"]
    return data

