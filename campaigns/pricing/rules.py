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
DISCOUNT_TYPES = ("fixed", "percent")


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
    """A cart in one currency. Lines are identified by their position (two lines may share a SKU)."""

    currency: str
    lines: tuple[CartLine, ...]
    units: tuple[int, ...] = field(init=False, repr=False, compare=False)  # each line's amount in minor units

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
        object.__setattr__(self, "units", tuple(_to_units(line.amount, self.currency) for line in self.lines))

    @property
    def amount(self) -> Decimal:
        return _money(sum(self.units), self.currency)


@dataclass(frozen=True)
class CouponRule:
    """A campaign's coupon rule, as pricing needs it (the Campaign fields of the same names).

    discount_type 'fixed' (discount_value off) or 'percent' (discount_value % off, at most 100, capped by
    max_discount); min_spend judged on the eligible lines (0: none); include_* / exclude_* the scope (empty
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

    def __post_init__(self) -> None:
        if self.currency not in MINOR_UNITS:
            raise InvalidCart(f"Unknown currency {self.currency!r}.")
        if self.discount_type not in DISCOUNT_TYPES:
            raise InvalidCart("discount_type is 'fixed' or 'percent'.")
        if not self.discount_value > 0 or (self.discount_type == "percent" and self.discount_value > 100):
            raise InvalidCart("discount_value is positive (a percentage at most 100).")
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


def whole_order_cart(amount: Decimal, currency: str) -> Cart:
    """Return the cart of an order sent without lines: one line of its whole amount (no category). A rule
    with a scope or a minimum quantity can't be judged on it (callers refuse such a rule as not applicable)."""
    return Cart(currency=currency, lines=(CartLine(sku=WHOLE_ORDER_SKU, quantity=1, unit_price=amount),))


def eligible_lines(cart: Cart, rule: CouponRule) -> tuple[int, ...]:
    """Return the positions of the cart's lines in the rule's scope (none when the currencies differ)."""
    if rule.currency != cart.currency:
        return ()
    return tuple(index for index, line in enumerate(cart.lines) if rule.covers(line))

