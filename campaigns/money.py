"""Money: Decimal amounts in a currency's minor unit, and the discount a coupon rule gives an order."""
from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import ROUND_DOWN, ROUND_HALF_UP, Decimal
from functools import cache

# ISO 4217 codes this service accepts, with the number of decimals of their minor unit.
MINOR_UNITS: dict[str, int] = {
    "CNY": 2, "USD": 2, "EUR": 2, "GBP": 2, "HKD": 2, "TWD": 2, "SGD": 2, "AUD": 2, "CAD": 2, "CHF": 2,
    "SEK": 2, "NOK": 2, "DKK": 2, "PLN": 2, "CZK": 2, "NZD": 2, "MYR": 2, "THB": 2, "INR": 2, "BRL": 2,
    "MXN": 2, "ZAR": 2, "AED": 2, "SAR": 2, "RUB": 2, "TRY": 2, "PHP": 2, "IDR": 2,
    "JPY": 0, "KRW": 0, "VND": 0, "CLP": 0, "ISK": 0, "HUF": 2,
}
_WHOLE = r"(0|[1-9][0-9]{0,11})"  # at most 12 digits, no leading zero
AMOUNT_PLACES = 2  # the most decimals of any amount (the amount columns' decimal_places)
AMOUNT_RE = re.compile(rf"{_WHOLE}(\.[0-9]{{1,{AMOUNT_PLACES}}})?")  # plain decimal text: no sign, no exponent
HUNDRED = Decimal(100)


class InvalidAmount(ValueError):
    """An amount or currency a client sent is not acceptable; the message says why."""


def minor_unit(currency: str) -> Decimal:
    return Decimal(1).scaleb(-MINOR_UNITS[currency])


def parse_currency(value: object) -> str:
    if not isinstance(value, str) or value not in MINOR_UNITS:
        raise InvalidAmount("currency must be a known ISO 4217 code in capitals, e.g. CNY, USD, EUR, JPY.")
    return value


@cache
def amount_re(places: int) -> re.Pattern[str]:
    """Return the text of the amounts parse_amount() accepts in a currency of `places` decimals: AMOUNT_RE's
    (its whole part, at most `places` of its decimals), never zero. The OpenAPI schema's amount patterns are
    these (coupons.apis.OrderInputSerializer)."""
    fraction = rf"(\.[0-9]{{1,{min(places, AMOUNT_PLACES)}}})?" if places else ""
    return re.compile(rf"(?!0+(\.0+)?$){_WHOLE}{fraction}")


def parse_amount(value: object, currency: str) -> Decimal:
    """Return a positive amount from its decimal text ("350.00"), at most the currency's decimals."""
    places = MINOR_UNITS[currency]
    if isinstance(value, str) and amount_re(places).fullmatch(value) is not None:
        return Decimal(value).quantize(minor_unit(currency))
    # Refused: say why.
    if isinstance(value, str) and re.fullmatch(r"[1-9][0-9]{12,}(\.[0-9]+)?", value):
        raise InvalidAmount("order_amount has at most 12 digits before the decimal point.")
    if not isinstance(value, str) or AMOUNT_RE.fullmatch(value) is None:
        raise InvalidAmount('order_amount must be a decimal string such as "350.00" (no sign, no exponent).')
    if Decimal(value) <= 0:
        raise InvalidAmount("order_amount must be positive.")
    raise InvalidAmount(f"{currency} amounts have at most {places} decimals.")


def to_minor(amount: Decimal, currency: str) -> int:
    """An amount as a whole number of the currency's minor units (350.00 CNY -> 35000): a budget in Redis. An
    amount finer than the minor unit is rounded down."""
    return int(amount.scaleb(MINOR_UNITS[currency]).to_integral_value(rounding=ROUND_DOWN))


def from_minor(units: int, currency: str) -> Decimal:
    """A whole number of minor units as the amount (35000 CNY -> 350.00)."""
    return Decimal(units).scaleb(-MINOR_UNITS[currency]).quantize(minor_unit(currency))


def money_text(amount: Decimal, currency: str) -> str:
    return str(amount.quantize(minor_unit(currency), rounding=ROUND_HALF_UP))


@dataclass(frozen=True)
class Discount:
    amount: Decimal
    payable: Decimal


def compute_discount(
    *, discount_type: str, value: Decimal, cap: Decimal | None, order_amount: Decimal, currency: str
) -> Discount:
    """Return the discount of a rule on an order: half-up to the minor unit, capped, never above the order."""
    unit = minor_unit(currency)
    if discount_type == "percent":
        discount = (order_amount * value / HUNDRED).quantize(unit, rounding=ROUND_HALF_UP)
        if cap is not None:
            discount = min(discount, cap.quantize(unit, rounding=ROUND_HALF_UP))
    else:
        discount = value.quantize(unit, rounding=ROUND_HALF_UP)
    discount = max(min(discount, order_amount), Decimal(0).quantize(unit))
    return Discount(amount=discount, payable=(order_amount - discount).quantize(unit))
