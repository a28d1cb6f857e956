"""The admin's richer rules (issue 38 goal 3): a tiers rule edited as rows (threshold, off, percent?) instead of
JSON, and the preview of a campaign's rule on a sample cart (its lines, or an amount, and its shipping) priced
by campaigns.pricing as POST /carts/validate would, with the tier reached, the free items or the shipping taken
off. Nothing here writes: the rows are checked by Campaign.clean (rich_rules.rule_errors), the preview by pricing.
"""
from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Any

from django import forms
from django.template.loader import render_to_string
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from . import pricing
from .models import SCOPE_NAME_RE, Campaign
from .money import AMOUNT_RE, MINOR_UNITS
from .rich_rules import InvalidRule, tier_progress, tiers_of

EMPTY_ROWS = 3  # blank rows under a rule's tiers, for adding some (up to pricing.MAX_TIERS rows in all)

# The change page's preview starts from this cart (sku,category,quantity,unit_price a line).
SAMPLE_CART = "TEA-1,tea,2,120.00\nCUP-9,kitchen,1,60.00"


class TiersWidget(forms.Widget):
    """Up to pricing.MAX_TIERS rows of threshold, off and "percent?"; its value is the rows typed (text)."""

    template_name = "admin/campaigns/tiers_widget.html"

    def get_context(self, name: str, value: Any, attrs: dict[str, Any] | None) -> dict[str, Any]:
        context = super().get_context(name, value, attrs)
        rows = [[str(item[0]), str(item[1]), bool(item[2])] for item in _rows_of(value)]
        count = min(pricing.MAX_TIERS, max(len(rows) + EMPTY_ROWS, 1))
        rows += [["", "", False]] * (count - len(rows))
        context["widget"]["rows"] = [(index, *row) for index, row in enumerate(rows)]
        return context

    def render(self, name: str, value: Any, attrs: dict[str, Any] | None = None, renderer: Any = None) -> SafeString:
        # the project's templates (the form renderer's engine sees only Django's own widget templates)
        return mark_safe(render_to_string(self.template_name, self.get_context(name, value, attrs)))  # noqa: S308

    def value_from_datadict(self, data: Any, files: Any, name: str) -> list[list[Any]]:
        rows = []
        for index in range(pricing.MAX_TIERS):
            threshold = (data.get(f"{name}_threshold_{index}") or "").strip()
            off = (data.get(f"{name}_off_{index}") or "").strip()
            if threshold or off:
                rows.append([threshold, off, bool(data.get(f"{name}_percent_{index}"))])
        return rows

    def value_omitted_from_data(self, data: Any, files: Any, name: str) -> bool:
        return False  # no row typed is "no tiers", not "not sent"


def _rows_of(value: Any) -> list[Any]:
    """The rows of a value as the form holds it: Campaign.tiers (a list), or rows typed; else none."""
    return [item for item in value if isinstance(item, list | tuple) and len(item) == 3] if isinstance(
        value, list | tuple) else []


class TiersField(forms.Field):
    """Campaign.tiers from rows typed: each threshold and off a plain decimal (the off of a percent row a
    percentage); whether they go up is Campaign.clean's (rich_rules.rule_errors)."""

    widget = TiersWidget

    def to_python(self, value: Any) -> list[list[Any]]:
        tiers = []
        for number, (threshold, off, percent) in enumerate(_rows_of(value), 1):
            if not (AMOUNT_RE.fullmatch(str(threshold)) and AMOUNT_RE.fullmatch(str(off))):
                raise forms.ValidationError(gettext("Tier %(number)s: a threshold and an amount off (or a "
                                                    "percentage), plain decimals such as 200.00.")
                                            % {"number": number})
            tiers.append([str(threshold), str(off), bool(percent)])
        return tiers

    def has_changed(self, initial: Any, data: Any) -> bool:
        try:
            return tiers_of(list(initial or [])) != tiers_of(self.to_python(data))
        except (InvalidRule, forms.ValidationError):
            return True


class CampaignForm(forms.ModelForm):
    """The campaign's admin form: its tiers as rows."""

    tiers = TiersField(required=False, label=_("tiers"),
                       help_text=_("A tiers rule's steps, thresholds going up (the first is the minimum spend): "
                                   "from the threshold of eligible amount, the amount off, or with \"%\" a "
                                   "percentage of it. Leave a row empty to drop it."))

    class Meta:
        model = Campaign
        fields = ["tiers"]  # the admin names the rest (its fieldsets)


class CartPreviewForm(forms.Form):
    """A cart typed by an operator: one line per row, sku,category,quantity,unit_price (category may be empty), or
    an order's amount alone; and its shipping."""

    lines = forms.CharField(
        label=_("Cart"),
        widget=forms.Textarea(attrs={"rows": 6, "cols": 60, "placeholder": "TEA-1,tea,2,120.00\nCUP-9,,1,60.00"}),
        help_text=_("One line per row: sku,category,quantity,unit_price (category may be left empty); at most 100. "
                    "Or an order's amount alone (350.00)."))
    shipping = forms.CharField(label=_("Shipping"), required=False, initial="0",
                               widget=forms.TextInput(attrs={"size": 8}),
                               help_text=_("What the order's shipping costs (0: none)."))

    def __init__(self, *args: Any, currency: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.currency = currency

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        shipping_text = (data.get("shipping") or "0").strip()
        try:
            shipping = Decimal(shipping_text) if AMOUNT_RE.fullmatch(shipping_text) else None
        except InvalidOperation:
            shipping = None
        rows = [row.strip() for row in data.get("lines", "").splitlines() if row.strip()]
        if not 1 <= len(rows) <= 100:
            raise forms.ValidationError(_("Give 1 to 100 lines."))
        if shipping is None:
            raise forms.ValidationError(_("Shipping is a plain decimal such as 12.00 (0: none)."))
        try:
            if len(rows) == 1 and AMOUNT_RE.fullmatch(rows[0]):  # an amount alone
                data["cart"] = pricing.whole_order_cart(Decimal(rows[0]), self.currency, shipping)
                return data
            lines = tuple(self._line(number, row) for number, row in enumerate(rows, 1))
            data["cart"] = pricing.Cart(currency=self.currency, lines=lines, shipping=shipping)
        except (ValueError, InvalidOperation) as exc:
            raise forms.ValidationError(str(exc)) from exc
        return data

    def _line(self, number: int, row: str) -> pricing.CartLine:
        parts = [part.strip() for part in row.split(",")]
        if len(parts) != 4:
            raise forms.ValidationError(_("Line %(number)s: sku,category,quantity,unit_price (4 fields).")
                                        % {"number": number})
        sku, category, quantity, price = parts
        if not SCOPE_NAME_RE.fullmatch(sku) or (category and not SCOPE_NAME_RE.fullmatch(category)):
            raise forms.ValidationError(_("Line %(number)s: a sku or category is 1-64 of A-Z a-z 0-9 _ . : / -")
                                        % {"number": number})
        try:
            line = pricing.CartLine(sku=sku, quantity=int(quantity), unit_price=Decimal(price),
                                    category=category or None)
            pricing.Cart(currency=self.currency, lines=(line,))
        except (ValueError, InvalidOperation) as exc:
            raise forms.ValidationError(_("Line %(number)s: %(error)s") % {"number": number, "error": exc}) from exc
        return line


def preview(campaign: Campaign, cart: pricing.Cart) -> dict[str, Any]:
    """What the campaign's rule alone gives `cart` (pricing.validate_cart, as POST /carts/validate), with what its
    kind shows: the tier the eligible amount reaches and what is left to the next, the free items (buy N get M),
    the shipping taken off."""
    rule = campaign.coupon_rule()
    coupon = pricing.validate_cart(cart, [campaign.candidate("preview")]).coupons[0]
    shares = {share.index: share.discount for share in coupon.lines}
    result: dict[str, Any] = {
        "coupon": coupon, "amount": cart.amount, "shipping": cart.shipping, "total": cart.total,
        "payable": cart.total - coupon.discount,
        "lines": [(line, shares.get(index)) for index, line in enumerate(cart.lines)]}
    if rule.discount_type == pricing.TIERS and campaign.currency in MINOR_UNITS:
        eligible = sum((cart.lines[i].amount for i in pricing.eligible_lines(cart, rule)), Decimal(0))
        reached, left = tier_progress(rule.tiers, eligible)
        following = 0 if reached is None else reached + 1
        result["tiers"] = {"eligible": eligible, "left": left,
                           "rows": [(tier, index == reached, index == following and left is not None)
                                    for index, tier in enumerate(rule.tiers)]}
    return result
