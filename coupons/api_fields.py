"""The request fields of the uses and of carts/validate (coupons.apis): an amount, a cart's lines, the shipping."""
from __future__ import annotations

import re
from decimal import Decimal
from functools import cache
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from campaigns import pricing
from campaigns.models import SCOPE_NAME_RE
from campaigns.money import AMOUNT_PLACES, MINOR_UNITS, InvalidAmount, amount_re, minor_unit, parse_amount
from core.api import pattern_schema


@extend_schema_field(pattern_schema(amount_re(AMOUNT_PLACES), example="350.00"))
class AmountField(serializers.Field):
    """An amount's decimal text ("350.00"); the serializer checks it in its currency (campaigns.money)."""

    default_error_messages = dict.fromkeys(("required", "null", "invalid"),
                                           'order_amount is required: a decimal string such as "350.00".')

    def __init__(self, *args: Any, name: str = "order_amount", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if name != "order_amount":
            self.error_messages = dict.fromkeys(
                ("required", "null", "invalid"), f'{name} is required: a decimal string such as "35.00".')

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return data

    def to_representation(self, value: Any) -> str:
        return str(value)


class WholeNumberField(serializers.IntegerField):
    """A JSON integer and nothing else (DRF's IntegerField also takes "900" and 900.0)."""

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return data


@extend_schema_field(pattern_schema(SCOPE_NAME_RE, example="TEA-1"))
class ScopeNameField(serializers.Field):
    """A SKU or a category: 1-64 of [A-Za-z0-9_.:/-], as a campaign's scope names them (campaigns.models)."""

    default_error_messages = dict.fromkeys(("required", "null", "invalid"),
                                           "sku and category are 1-64 of A-Z a-z 0-9 _ . : / -")

    def to_internal_value(self, data: Any) -> str:
        if isinstance(data, str) and SCOPE_NAME_RE.fullmatch(data):
            return data
        self.fail("invalid")

    def to_representation(self, value: Any) -> str:
        return str(value)


class TextField(serializers.CharField):
    """A JSON string and nothing else (DRF's CharField also takes 7 and true)."""

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


MAX_CART_LINES = 100
MAX_CART_CODES = 20


class CartLineInputSerializer(serializers.Serializer):
    """One line of a cart: quantity items of sku (in category, if the shop has one) at unit_price each."""

    sku = ScopeNameField(help_text="1-64 of [A-Za-z0-9_.:/-]")
    category = ScopeNameField(required=False, help_text="1-64 of [A-Za-z0-9_.:/-]; leave out when none")
    quantity = WholeNumberField(
        min_value=1, max_value=pricing.MAX_LINE_QUANTITY,
        error_messages=dict.fromkeys(("required", "null", "invalid", "min_value", "max_value"),
                                     f"quantity is a whole number from 1 to {pricing.MAX_LINE_QUANTITY}."))
    unit_price = AmountField(name="unit_price", help_text='Decimal string, e.g. "35.00"; at most the currency\'s '
                                                         'decimals')

    class Meta:
        ref_name = "CartLine"


def cart_lines_field(required: bool) -> serializers.ListField:
    return serializers.ListField(
        child=CartLineInputSerializer(), required=required, min_length=1, max_length=MAX_CART_LINES,
        help_text=f"1 to {MAX_CART_LINES} lines",
        error_messages=dict.fromkeys(("required", "null", "not_a_list", "empty", "min_length", "max_length"),
                                     f"lines is a list of 1 to {MAX_CART_LINES} lines."))


def cart_lines_of(lines: list[dict[str, Any]], currency: str) -> tuple[pricing.CartLine, ...]:
    """The cart lines of validated line data in `currency` (each unit price at most its decimals); raise
    ValidationError naming the line. Any sum they make fits Coupon.order_amount (24 digits)."""
    parsed = []
    for position, line in enumerate(lines):
        try:
            price = parse_amount(line["unit_price"], currency)
        except InvalidAmount as exc:
            message = str(exc).replace("order_amount", "unit_price")
            raise serializers.ValidationError({"lines": [f"line {position + 1}: {message}"]}) from exc
        parsed.append(pricing.CartLine(sku=line["sku"], quantity=line["quantity"], unit_price=price,
                                       category=line.get("category")))
    return tuple(parsed)


@cache
def shipping_re(places: int) -> re.Pattern[str]:
    """The text of a shipping amount in a currency of `places` decimals: as an amount's (money.amount_re), 0 too."""
    fraction = rf"(\.[0-9]{{1,{min(places, AMOUNT_PLACES)}}})?" if places else ""
    return re.compile(rf"(0|[1-9][0-9]{{0,11}}){fraction}")


@extend_schema_field(pattern_schema(shipping_re(AMOUNT_PLACES), example="12.00"))
class ShippingField(AmountField):
    """The order's shipping, payable beside its lines (docs/api.md, Richer rules): decimal text, 0 or more."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(name="shipping", required=False, **kwargs)


def shipping_of(value: str | None, currency: str) -> Decimal:
    """The order's shipping in `currency` (0 when not sent); ValidationError when not an amount >= 0 in its
    decimals (no sign, no exponent)."""
    if value is None:
        return Decimal(0).quantize(minor_unit(currency))
    if shipping_re(MINOR_UNITS[currency]).fullmatch(value) is None:
        raise serializers.ValidationError({"shipping": [
            f'shipping is an amount of 0 or more such as "12.00" (no sign, no exponent), with at most the '
            f"{currency} decimals ({MINOR_UNITS[currency]})."]})
    return Decimal(value).quantize(minor_unit(currency))
