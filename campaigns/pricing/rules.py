"""A cart and a coupon's rule, pricing's inputs: frozen dataclasses that check their preconditions on creation
(InvalidCart says which broke), a rule's scope (`CouponRule.covers`, `eligible_lines`: rule 1 of the package's
docstring) and the cart of an order known by its amount alone."""
from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal

from ..money import MINOR_UNITS, minor_unit
from .units import _money, _to_units

# A line's quantity, at most: keeps every amount far inside Decimal's 28 digits.
MAX_LINE_QUANTITY = 1_000_000
# A rule's benefit: an amount or a percentage off (discount_value), tiers (满减), free shipping, buy N get M.
FIXED, PERCENT, TIERS, FREE_SHIPPING, BUY_GET = "fixed", "percent", "tiers", "free_shipping", "buy_get"
DISCOUNT_TYPES = (FIXED, PERCENT, TIERS, FREE_SHIPPING, BUY_GET)
MAX_TIERS = 10


class InvalidCart(ValueError):
    """A cart or a rule that breaks the preconditions below; the message says which."""


@dataclass(frozen=True)
class CartLine:
    """One line of a cart: `quantity` (1..MAX_LINE_QUANTITY) items of `sku` at `unit_price` (> 0, at most the
    currency's decimals) each; `category` None when the storefront sends none."""

    sku: str
    quantity: int
    unit_price: Decimal
    category: str | None = None

    @property
    def amount(self) -> Decimal:
        return self.quantity * self.unit_price


@dataclass(frozen=True)
class Cart:
    """A cart in one currency. Lines are identified by their position (two lines may share a SKU). `shipping`:
    what the order's shipping costs (0: none), payable beside the lines; only a free-shipping rule takes it off."""

    currency: str
    lines: tuple[CartLine, ...]
    shipping: Decimal = Decimal(0)
    units: tuple[int, ...] = field(init=False, repr=False, compare=False)  # each line's amount in minor units
    # The amounts the coupons take from: the lines' units, then the shipping's at position len(lines) (SHIPPING).
    priced: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.currency not in MINOR_UNITS:
            raise InvalidCart(f"Unknown currency {self.currency!r}.")
        unit = minor_unit(self.currency)
        for line in self.lines:
            if type(line.quantity) is not int or not 1 <= line.quantity <= MAX_LINE_QUANTITY:
                raise InvalidCart(f"A line's quantity is a whole number from 1 to {MAX_LINE_QUANTITY}.")
            price = line.unit_price
            if not isinstance(price, Decimal) or not price.is_finite() or price <= 0 or price != price.quantize(unit):
                raise InvalidCart(f"A line's unit price is a positive Decimal of at most the {self.currency} decimals.")
        shipping = self.shipping
        if (not isinstance(shipping, Decimal) or not shipping.is_finite() or shipping < 0
                or shipping != shipping.quantize(unit)):
            raise InvalidCart(f"Shipping is a Decimal >= 0 of at most the {self.currency} decimals.")
        units = tuple(_to_units(line.amount, self.currency) for line in self.lines)
        object.__setattr__(self, "units", units)
        object.__setattr__(self, "priced", (*units, _to_units(shipping, self.currency)))

    @property
    def amount(self) -> Decimal:
        """The lines' amount (shipping apart)."""
        return _money(sum(self.units), self.currency)

    @property
    def total(self) -> Decimal:
        """What the order costs before any coupon: its lines and its shipping."""
        return _money(sum(self.priced), self.currency)

    @property
    def shipping_index(self) -> int:
        """The shipping's position in `priced`."""
        return len(self.lines)


@dataclass(frozen=True)
class Tier:
    """One step of a tiered rule (满减): from `threshold` (> 0) of eligible amount, `off` off: an amount (at most
    the currency's decimals), or with `percent` a percentage (at most 100, two decimals) of the eligible amount."""

    threshold: Decimal
    off: Decimal
    percent: bool = False

    def value(self, amount: Decimal) -> Decimal:
        """What this tier takes off `amount`, exactly (before rounding and caps)."""
        return amount * self.off / 100 if self.percent else self.off


def tiers_problem(tiers: tuple[Tier, ...], currency: str) -> str | None:
    """Why `tiers` can't be a rule's ('count', 'amount', 'percent', 'increasing'), or None. Tiers go up: each
    threshold above the one before, and each tier takes off at its threshold at least what the tier before it
    would take there, so the discount never falls as the eligible amount grows (the best-set search needs it)."""
    if not 1 <= len(tiers) <= MAX_TIERS:
        return "count"
    unit = minor_unit(currency)
    for tier in tiers:
        for amount in (tier.threshold, *(() if tier.percent else (tier.off,))):
            if not isinstance(amount, Decimal) or not amount.is_finite() or amount <= 0 or amount != amount.quantize(
                    unit):
                return "amount"
        if tier.percent and not (0 < tier.off <= 100 and tier.off == tier.off.quantize(Decimal("0.01"))):
            return "percent"
    for before, tier in zip(tiers, tiers[1:], strict=False):
        if tier.threshold <= before.threshold or tier.value(tier.threshold) < before.value(tier.threshold):
            return "increasing"
    return None


_TIER_PROBLEMS = {
    "count": f"A tiered rule has 1 to {MAX_TIERS} tiers.",
    "amount": "A tier's threshold and amount off are positive, in the currency's decimals.",
    "percent": "A tier's percentage is more than 0 and at most 100, with at most two decimals.",
    "increasing": "Tiers go up: each threshold above the one before, each taking off at least as much there.",
}


@dataclass(frozen=True)
class CouponRule:
    """A campaign's coupon rule, as pricing needs it (the Campaign fields of the same names).

    discount_type 'fixed' (discount_value off) or 'percent' (discount_value % off, at most 100, capped by
    max_discount); or, with discount_value 0 and capped by max_discount if given: 'tiers' (the highest of
    `tiers` the eligible amount reaches; the first threshold is a minimum spend), 'free_shipping' (the cart's
    shipping off) or 'buy_get' (of the eligible items, for every buy + get the get cheapest free); min_spend
    judged on the eligible lines (0: none); include_* / exclude_* the scope (empty
    include lists: every line; an exclude wins); min_quantity eligible items (0: none); exclusive: combines with
    nothing; combinable_with: the campaign ids this one may share an order with (empty: any non-exclusive
    coupon); order_cap: the most all the order's coupons together may take off (None: no cap).
    """

    discount_type: str
    discount_value: Decimal
    currency: str
    max_discount: Decimal | None = None
    min_spend: Decimal = Decimal(0)
    include_categories: frozenset[str] = frozenset()
    exclude_categories: frozenset[str] = frozenset()
    include_skus: frozenset[str] = frozenset()
    exclude_skus: frozenset[str] = frozenset()
    min_quantity: int = 0
    exclusive: bool = False
    combinable_with: frozenset[int] = frozenset()
    order_cap: Decimal | None = None
    tiers: tuple[Tier, ...] = ()
    buy: int = 0
    get: int = 0

    def __post_init__(self) -> None:
        if self.currency not in MINOR_UNITS:
            raise InvalidCart(f"Unknown currency {self.currency!r}.")
        kind = self.discount_type
        if kind not in DISCOUNT_TYPES:
            raise InvalidCart(f"discount_type is one of {', '.join(DISCOUNT_TYPES)}.")
        if kind in (FIXED, PERCENT):
            if not self.discount_value > 0 or (kind == PERCENT and self.discount_value > 100):
                raise InvalidCart("discount_value is positive (a percentage at most 100).")
        elif self.discount_value != 0:
            raise InvalidCart(f"A {kind} rule's discount_value is 0 (its benefit says what it takes off).")
        if (kind == TIERS) != bool(self.tiers):
            raise InvalidCart("A tiers rule has tiers, and only it.")
        if self.tiers and (problem := tiers_problem(self.tiers, self.currency)):
            raise InvalidCart(_TIER_PROBLEMS[problem])
        if kind == BUY_GET and not (type(self.buy) is int and type(self.get) is int and self.buy >= 1
                                    and self.get >= 1):
            raise InvalidCart("A buy_get rule buys and gets at least 1 item each.")
        if kind != BUY_GET and (self.buy or self.get):
            raise InvalidCart("Only a buy_get rule has buy and get.")
        for name in ("max_discount", "order_cap"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise InvalidCart(f"{name} is positive or None.")
        if self.min_spend < 0 or self.min_quantity < 0:
            raise InvalidCart("min_spend and min_quantity are not negative.")

    def covers(self, line: CartLine) -> bool:
        """Return whether `line` is in this rule's scope (eligible)."""
        if line.sku in self.exclude_skus or (line.category is not None and line.category in self.exclude_categories):
            return False
        if not self.include_skus and not self.include_categories:
            return True
        return line.sku in self.include_skus or (line.category is not None and line.category in self.include_categories)


@dataclass(frozen=True)
class Candidate:
    """A coupon the shopper could use: its code (a held coupon's or a typed one), its campaign and rule."""

    code: str
    campaign_id: int
    rule: CouponRule


# The SKU of the one line of an order known by its amount alone (whole_order_cart): no scope lists it.
WHOLE_ORDER_SKU = ""


def whole_order_cart(amount: Decimal, currency: str, shipping: Decimal = Decimal(0)) -> Cart:
    """Return the cart of an order sent without lines: one line of its whole amount (no category), and its
    shipping. A rule with a scope, a minimum quantity or items to give (buy N get M) can't be judged on it
    (callers refuse such a rule as not applicable)."""
    return Cart(currency=currency, lines=(CartLine(sku=WHOLE_ORDER_SKU, quantity=1, unit_price=amount),),
                shipping=shipping)


def eligible_lines(cart: Cart, rule: CouponRule) -> tuple[int, ...]:
    """Return the positions of the cart's lines in the rule's scope (none when the currencies differ)."""
    if rule.currency != cart.currency:
        return ()
    return tuple(index for index, line in enumerate(cart.lines) if rule.covers(line))

