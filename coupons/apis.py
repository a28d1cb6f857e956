"""Storefront API of coupons: the shopper's own coupons."""
from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, NamedTuple, cast

from drf_spectacular.extensions import OpenApiSerializerExtension
from drf_spectacular.plumbing import ResolvedComponent
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_field,
    inline_serializer,
)
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from campaigns import pricing
from campaigns.apis import AmountInCurrencyField
from campaigns.money import MINOR_UNITS, InvalidAmount, amount_re, parse_amount
from core.api import Shopper, ShopperApi, idempotency_key_parameter, pattern_schema
from core.http import client_ip, idempotency_key

from .api_fields import (
    MAX_CART_CODES,
    MAX_CART_LINES,
    AmountField,
    ShippingField,
    TextField,
    WholeNumberField,
    cart_lines_field,
    cart_lines_of,
    shipping_of,
    shipping_re,
)
from .carts import cart_validate
from .guard import CodeLookups, guarded, refuse_unknown
from .idempotency import Answer, run_idempotent
from .metrics import USES
from .models import Coupon, CouponStatus
from .outcomes import REFUSALS, UseCode, UseOutcome, refused
from .services import (
    HOLD_SECONDS_DEFAULT,
    HOLD_SECONDS_MAX,
    TYPED_CODE_RE,
    Order,
    code_is_own,
    coupon_confirm,
    coupon_redeem,
    coupon_release,
    coupon_reserve,
    known_shared_code,
    typed_code_form,
)


class CouponOutputSerializer(serializers.ModelSerializer):
    campaign_id = serializers.IntegerField()
    discount_type = serializers.CharField(source="campaign.discount_type")
    discount_value = AmountInCurrencyField(source="campaign.discount_value", campaign="campaign", rule=True,
                                         help_text="An amount off (fixed), or a percentage (percent).")
    max_discount = AmountInCurrencyField(source="campaign.max_discount", campaign="campaign", allow_null=True)
    min_spend = AmountInCurrencyField(source="campaign.min_spend", campaign="campaign")
    discount = AmountInCurrencyField(campaign="campaign", allow_null=True)
    currency = serializers.CharField(source="campaign.currency")

    class Meta:
        model = Coupon
        fields = [
            "code", "campaign_id", "claim_id", "status", "valid_from", "expires_at",
            "discount_type", "discount_value", "max_discount", "min_spend", "currency",
            "order_id", "hold_until", "discount",
        ]


# --- using a coupon: reserve, confirm, redeem, release ------------------------------------------------

ORDER_ID_RE = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
ORDER_ID_MAX = 10**18 - 1  # an order id sent as a number
_ORDER_ID_RULE = "order_id is required: a positive integer or 1-64 characters of A-Z a-z 0-9 _ . : -"


@extend_schema_field(pattern_schema(ORDER_ID_RE, example="A-1001"))
class OrderIdField(serializers.Field):
    """The shop's order id as text: 1-64 of [A-Za-z0-9_.:-], or a positive integer (accepted, not documented: the
    schema shows the text form clients send)."""

    default_error_messages = dict.fromkeys(("required", "null", "invalid"), _ORDER_ID_RULE)

    def to_internal_value(self, data: Any) -> str:
        if isinstance(data, int) and not isinstance(data, bool) and 0 < data <= ORDER_ID_MAX:
            return str(data)
        if isinstance(data, str) and ORDER_ID_RE.fullmatch(data):
            return data
        self.fail("invalid")

    def to_representation(self, value: Any) -> str:
        return str(value)


class OrderIdInputSerializer(serializers.Serializer):
    """The order a confirm or a release is for."""

    order_id = OrderIdField(help_text="The shop's order id: an integer or 1-64 of [A-Za-z0-9_.:-]")


def _currency_field(help_text: str) -> serializers.ChoiceField:
    return serializers.ChoiceField(
        choices=sorted(MINOR_UNITS), help_text=help_text,
        error_messages=dict.fromkeys(("required", "null", "invalid_choice"),
                                     "currency must be a known ISO 4217 code in capitals, e.g. CNY, USD, EUR, JPY."))


class OrderInputSerializer(OrderIdInputSerializer):
    """The order a coupon is used for; its amount has at most its currency's decimals (none in JPY, two in CNY).
    With `lines`, the amount is their sum (order_amount, if given, must equal it). `shipping`: payable beside."""

    order_amount = AmountField(required=False, help_text='Decimal string, e.g. "350.00"; at most the currency\'s '
                                                         'decimals. Required without lines; with lines, their sum')
    currency = _currency_field("ISO 4217, the coupon's currency, e.g. CNY")
    lines = cart_lines_field(required=False)
    shipping = ShippingField(help_text='The order\'s shipping, e.g. "12.00" (default 0): payable beside the lines, '
                                       'taken off by a free-shipping coupon only')

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        currency = attrs["currency"]
        attrs = {**attrs, "shipping": shipping_of(attrs.get("shipping"), currency)}
        amount = None
        if "order_amount" in attrs:
            try:
                amount = parse_amount(attrs["order_amount"], currency)
            except InvalidAmount as exc:
                raise serializers.ValidationError({"order_amount": [str(exc)]}) from exc
        if "lines" not in attrs:
            if amount is None:
                raise serializers.ValidationError(
                    {"order_amount": ['order_amount is required (or lines): a decimal string such as "350.00".']})
            return {**attrs, "order_amount": amount, "lines": None}
        lines = cart_lines_of(attrs["lines"], currency)
        total = pricing.Cart(currency=currency, lines=lines).amount
        if amount is not None and amount != total:
            raise serializers.ValidationError(
                {"order_amount": [f"order_amount must equal the lines' sum of quantity x unit_price ({total})."]})
        return {**attrs, "order_amount": total, "lines": lines}


class OrderInputSchema(OpenApiSerializerExtension):
    """OrderInputSerializer's schema: its fields', and its validate()'s rule that an amount has at most its
    currency's decimals, as one alternative per number of decimals (money.amount_re, MINOR_UNITS)."""

    target_class = OrderInputSerializer
    match_subclasses = True

    def map_serializer(self, auto_schema: Any, direction: Any) -> dict[str, Any]:
        schema: dict[str, Any] = auto_schema._map_serializer(self.target, direction, bypass_extensions=True)
        with_amount = "order_amount" in schema["properties"]
        by_places: dict[int, list[str]] = {}
        for currency, places in MINOR_UNITS.items():
            by_places.setdefault(places, []).append(currency)
        schema["oneOf"] = []
        for places, currencies in sorted(by_places.items()):
            # A named enum of its own (drf-spectacular's enum hook would name an inline one after the field).
            currencies_enum = ResolvedComponent(
                name=f"CurrencyWith{places}DecimalsEnum", type=ResolvedComponent.SCHEMA,
                object=f"currency-with-{places}-decimals", schema={"type": "string", "enum": sorted(currencies)})
            auto_schema.registry.register_on_missing(currencies_enum)
            amount = {"pattern": pattern_schema(amount_re(places))["pattern"]}
            alternative = {"currency": currencies_enum.ref, "lines": {"items": {"properties": {"unit_price": amount}}},
                           "shipping": {"pattern": pattern_schema(shipping_re(places))["pattern"]}}
            if with_amount:
                alternative["order_amount"] = amount
            schema["oneOf"].append({"properties": alternative})
        if with_amount:  # order_amount or lines (order_amount may also come with lines if it is their sum, which
            # a schema can't say: documented in the description, not in the schema)
            schema["anyOf"] = [{"required": ["order_amount"], "not": {"required": ["lines"]}},
                               {"required": ["lines"], "not": {"required": ["order_amount"]}}]
        return schema


def order_of(data: dict[str, Any], shopper: Any) -> Order:
    """The Order of OrderInputSerializer's validated data, for the request's shopper (core.api.Shopper: the audience
    tags and channels a campaign may ask for)."""
    return Order(order_id=data["order_id"], amount=data["order_amount"], currency=data["currency"],
                 lines=data["lines"], shipping=data["shipping"], tags=shopper.tags, channels=shopper.channels)


def coupon_endpoint(code: str, action: str, user_id: str, ip: str | None = None) -> tuple[str, str]:
    """Return (canonical code, idempotency endpoint); a code that can't exist is the same 404 as unknown
    (and counts as one: coupons.guard)."""
    canonical = typed_code_form(code)
    if canonical is None:
        refuse_unknown(user_id, ip)  # raises: TooManyMisses or NotFound
    return canonical, f"POST /api/v1/coupons/{canonical}/{action}"


def answer_response(answer: Answer) -> Response:
    headers = {"Idempotent-Replayed": "true"} if answer.replayed else None
    return Response(answer.body, status=answer.status, headers=headers)


_USE_CODES = "0 done, 10 expired, 11 already_redeemed, 12 min_spend_not_met, 13 not_yet_valid, 14 revoked, " \
    "15 not_eligible, 16 on_hold, 17 hold_lapsed (confirm only), 18 not_held (confirm only), 19 not_combinable, " \
    "20 not_applicable, 21 min_quantity_not_met, 22 budget_exhausted (19-22: reserve and redeem)"
_CODE_PARAMETER = OpenApiParameter(  # coupon_endpoint() reads it
    "code", pattern_schema(TYPED_CODE_RE, example="K7QM-3XRD-9PVA"), OpenApiParameter.PATH,
    description="The shopper's coupon's code, a codes campaign's shared code (e.g. SAVE50) or a unique code. Case "
                "does not count (nor spaces and dashes in a coupon's or unique code); what is not a code is the "
                "same 404 as an unknown code, as are another shopper's unique code and a code of a campaign "
                "paused or ended.",
)
_WITH_KEY = [idempotency_key_parameter(required=True), _CODE_PARAMETER]
_WITH_OPTIONAL_KEY = [idempotency_key_parameter(required=False), _CODE_PARAMETER]
_USE_RESPONSE = inline_serializer("CouponUseResult", {
    "code": serializers.IntegerField(help_text=_USE_CODES),
    "status": serializers.CharField(),
    "discount": serializers.CharField(required=False, help_text="decimal string"),
    "payable": serializers.CharField(required=False, help_text="order amount plus shipping minus discount"),
    "hold_until": serializers.DateTimeField(required=False),
    "lines": serializers.ListField(
        required=False, help_text="With lines sent: each eligible line's share of the discount (they sum to it)",
        child=inline_serializer("LineShare", {"sku": serializers.CharField(),
                                              "discount": serializers.CharField(help_text="decimal string")})),
    "shipping": serializers.CharField(required=False, help_text="A free-shipping coupon's discount, off the shipping"),
    "detail": serializers.CharField(required=False),
})


def _refusal_examples(*codes: UseCode) -> list[OpenApiExample]:
    """Response examples of refusals: the very bodies the API sends (coupons.outcomes)."""
    return [OpenApiExample(REFUSALS[code][0], response_only=True, value=refused(code).body(),
                           description=f"code {int(code)}: {REFUSALS[code][1]}") for code in codes]


_USE_REFUSALS = (UseCode.EXPIRED, UseCode.ALREADY_REDEEMED, UseCode.MIN_SPEND_NOT_MET, UseCode.NOT_YET_VALID,
                 UseCode.REVOKED, UseCode.NOT_ELIGIBLE, UseCode.ON_HOLD, UseCode.NOT_COMBINABLE,
                 UseCode.NOT_APPLICABLE, UseCode.MIN_QUANTITY_NOT_MET, UseCode.BUDGET_EXHAUSTED)
_IDEMPOTENCY_NOTE = (" A repeat with the same Idempotency-Key and the same request within 24 h answers the first "
                     "answer unchanged (header Idempotent-Replayed: true); with a different request 422; while "
                     "the first is still running 409.")
_ERRORS = {409: OpenApiResponse(description="The same Idempotency-Key is still in flight (Retry-After)."),
           422: OpenApiResponse(description="The same Idempotency-Key was used with a different request.")}


class UseCall(NamedTuple):
    """What a use's request asks, once checked: its order, what a repeat of its Idempotency-Key must match, and
    the use case to run on the canonical code (with the shopper's coupon of that code, if the guard read it)."""

    order_id: str
    payload: dict[str, Any]
    run: Callable[[str, Coupon | None], UseOutcome]


class CouponUseApi(ShopperApi):
    """Base of redeem, reserve, confirm and release: every answer, errors included, is counted by outcome. Each
    operation is its input serializer and `call` (what its checked input asks); the rest is use_answer(), which the
    event loop's door (coupons/use_door.py) runs too."""

    operation = ""
    creates_use = False  # reserve and redeem: a shared code's use is written with others' (run_idempotent's apart)
    key_required = False  # reserve and redeem: an Idempotency-Key is required
    InputSerializer: type[serializers.Serializer]

    @staticmethod
    def call(data: dict[str, Any], shopper: Shopper) -> UseCall:
        raise NotImplementedError

    def finalize_response(self, request: Request, response: Any, *args: Any, **kwargs: Any) -> Any:
        response = super().finalize_response(request, response, *args, **kwargs)
        count_use(self.operation, response.status_code, getattr(response, "data", None))
        return response

    def use(self, request: Request, code: str) -> Response:
        """The operation's use of the coupon the shopper typed as `code`: use_answer() of the checked request."""
        key = idempotency_key(request._request, required=self.key_required)
        call = self.call(self.validated(self.InputSerializer), cast(Shopper, request.user))
        return answer_response(use_answer(type(self), code, self.user_id, client_ip(request.META), key, call))


def use_answer(operation: type[CouponUseApi], code: str, user_id: str, ip: str | None, key: str | None,
               call: UseCall) -> Answer:
    """The use `call.run(canonical code, own coupon)` for the order of the coupon the shopper typed as `code`,
    under the request's Idempotency-Key (`call.payload`: what a repeat of the key must match) and, unless the code
    is the shopper's own, the unknown-code guard (coupons.guard). The guard's check of the shopper's own reads the
    shopper's coupon of that code: the use decides on that row (services._retrying), not reading it again."""
    canonical, endpoint = coupon_endpoint(code, operation.operation, user_id, ip)
    own_coupon: list[Coupon | None] = [None]

    def own() -> bool:
        is_own, own_coupon[0] = code_is_own(code=canonical, user_id=user_id, order_id=call.order_id)
        return is_own

    return run_idempotent(
        user_id=user_id, endpoint=endpoint, key=key, payload=call.payload, apart=operation.creates_use,
        execute=guarded(user_id, ip, own=own, known=lambda: known_shared_code(canonical),
                        execute=lambda: Answer(200, call.run(canonical, own_coupon[0]).body())),
    )


def _of_order(use_case: Callable[..., UseOutcome], data: dict[str, Any], shopper: Shopper) -> UseCall:
    """The call of an operation on an order's coupon by the order's id alone (confirm, release)."""
    order_id = data["order_id"]
    return UseCall(order_id, {"order_id": order_id}, lambda canonical, own: use_case(
        user_id=shopper.user_id, code=canonical, order_id=order_id, own=own))


def count_use(operation: str, http_status: int, body: Any) -> None:
    """Count a use's answer by its outcome (the body's status; else the HTTP status): USES."""
    outcome = body.get("status") if isinstance(body, dict) else None
    USES.labels(operation, outcome if isinstance(outcome, str) else str(http_status)).inc()


class CouponRedeemApi(CouponUseApi):
    """POST /api/v1/coupons/{code}/redeem: use the coupon for an order in one step."""

    operation = "redeem"
    creates_use = key_required = True

    class InputSerializer(OrderInputSerializer):
        class Meta:
            ref_name = "RedeemRequest"

    @extend_schema(
        tags=["coupons"], parameters=_WITH_KEY,
        summary="Use a coupon for an order in one step",
        description="Apply the shopper's coupon to an order: the discount is computed from the coupon's rule "
                    "(fixed or percentage with a cap, minimum spend, currency) and the coupon becomes redeemed by "
                    "this order. 200 with code 0 `redeemed`, `discount` and `payable`, or a refusal: " + _USE_CODES
                    + ". The same order redeeming again gets its redemption back." + _IDEMPOTENCY_NOTE,
        request=InputSerializer,
        responses={200: _USE_RESPONSE, **_ERRORS},
        examples=[OpenApiExample("redeemed", response_only=True,
                                 value={"code": 0, "status": "redeemed", "discount": "50.00", "payable": "300.00"}),
                  *_refusal_examples(*_USE_REFUSALS),
                  OpenApiExample("request", request_only=True,
                                 value={"order_id": "A-1001", "order_amount": "350.00", "currency": "CNY"})],
    )
    def post(self, request: Request, code: str) -> Response:
        return self.use(request, code)

    @staticmethod
    def call(data: dict[str, Any], shopper: Shopper) -> UseCall:
        order = order_of(data, shopper)
        return UseCall(order.order_id, order.fingerprint_payload(), lambda canonical, own: coupon_redeem(
            user_id=shopper.user_id, code=canonical, order=order, own=own))


class CouponReserveApi(CouponUseApi):
    """POST /api/v1/coupons/{code}/reserve: hold the coupon for an order awaiting payment."""

    operation = "reserve"
    creates_use = key_required = True

    class InputSerializer(OrderInputSerializer):
        hold_seconds = WholeNumberField(
            required=False, min_value=1, max_value=HOLD_SECONDS_MAX, default=HOLD_SECONDS_DEFAULT,
            error_messages={key: f"hold_seconds is a whole number of seconds from 1 to {HOLD_SECONDS_MAX} (default "
                                 f"{HOLD_SECONDS_DEFAULT})." for key in ("invalid", "null", "min_value", "max_value")})

        class Meta:
            ref_name = "ReserveRequest"

    @extend_schema(
        tags=["coupons"], parameters=_WITH_KEY,
        summary="Hold a coupon for an order awaiting payment",
        description="Reserve the coupon for an order until `hold_until` (now + hold_seconds, default 900, at most "
                    f"{HOLD_SECONDS_MAX}): nobody else can use it meanwhile. Confirm when the order is paid, "
                    "release when it is cancelled; a hold not confirmed in time lapses and the coupon is usable "
                    "again. 200 with code 0 `reserved`, `discount`, `payable` and `hold_until`, or a refusal: "
                    + _USE_CODES + "." + _IDEMPOTENCY_NOTE,
        request=InputSerializer,
        responses={200: _USE_RESPONSE, **_ERRORS},
        examples=[OpenApiExample("reserved", response_only=True, value={
            "code": 0, "status": "reserved", "discount": "50.00", "payable": "300.00",
            "hold_until": "2026-11-30T10:15:00+00:00"}),
                  *_refusal_examples(*_USE_REFUSALS),
                  OpenApiExample("request", request_only=True, value={
                      "order_id": "A-1002", "order_amount": "350.00", "currency": "CNY", "hold_seconds": 900})],
    )
    def post(self, request: Request, code: str) -> Response:
        return self.use(request, code)

    @staticmethod
    def call(data: dict[str, Any], shopper: Shopper) -> UseCall:
        order, hold_seconds = order_of(data, shopper), data["hold_seconds"]
        return UseCall(order.order_id, {**order.fingerprint_payload(), "hold": hold_seconds},
                       lambda canonical, own: coupon_reserve(user_id=shopper.user_id, code=canonical, order=order,
                                                             hold_seconds=hold_seconds, own=own))


class CouponConfirmApi(CouponUseApi):
    """POST /api/v1/coupons/{code}/confirm: the held order was paid; the coupon becomes redeemed."""

    operation = "confirm"

    class InputSerializer(OrderIdInputSerializer):
        class Meta:
            ref_name = "ConfirmRequest"

    @extend_schema(
        tags=["coupons"], parameters=_WITH_OPTIONAL_KEY,
        summary="Confirm a held coupon: the order was paid",
        description="The order that holds the coupon was paid: the coupon becomes redeemed by it. 200 with code 0 "
                    "`redeemed` (again for a repeat), or a refusal: 16 on_hold (held for another order), 11 "
                    "already_redeemed, 14 revoked, 10 expired, 17 hold_lapsed (this order's hold lapsed: reserve "
                    "again), 18 not_held (this order holds no hold on the coupon). Idempotency-Key optional."
                    + _IDEMPOTENCY_NOTE,
        request=InputSerializer,
        responses={200: _USE_RESPONSE, **_ERRORS},
        examples=[OpenApiExample("redeemed", response_only=True,
                                 value={"code": 0, "status": "redeemed", "discount": "50.00", "payable": "300.00"}),
                  *_refusal_examples(UseCode.HOLD_LAPSED, UseCode.NOT_HELD, UseCode.ON_HOLD,
                                     UseCode.ALREADY_REDEEMED, UseCode.REVOKED, UseCode.EXPIRED),
                  OpenApiExample("request", request_only=True, value={"order_id": "A-1002"})],
    )
    def post(self, request: Request, code: str) -> Response:
        return self.use(request, code)

    @staticmethod
    def call(data: dict[str, Any], shopper: Shopper) -> UseCall:
        return _of_order(coupon_confirm, data, shopper)


class CouponReleaseApi(CouponUseApi):
    """POST /api/v1/coupons/{code}/release: the order was cancelled or not paid; undo its hold or use."""

    operation = "release"

    class InputSerializer(OrderIdInputSerializer):
        class Meta:
            ref_name = "ReleaseRequest"

    @extend_schema(
        tags=["coupons"], parameters=_WITH_OPTIONAL_KEY,
        summary="Release a coupon: the order was cancelled or not paid",
        description="Undo this order's hold or redemption: the coupon is usable again if still valid (else "
                    "expired). Always 200 with code 0 `released` and the coupon's `coupon_status`; releasing a "
                    "coupon the order does not hold changes nothing. Idempotency-Key optional." + _IDEMPOTENCY_NOTE,
        request=InputSerializer,
        responses={200: inline_serializer("ReleaseResult", {
            "code": serializers.IntegerField(), "status": serializers.CharField(),
            "coupon_status": serializers.ChoiceField(choices=CouponStatus.choices)}), **_ERRORS},
        examples=[OpenApiExample("released", response_only=True,
                                 value={"code": 0, "status": "released", "coupon_status": "active"}),
                  OpenApiExample("request", request_only=True, value={"order_id": "A-1002"})],
    )
    def post(self, request: Request, code: str) -> Response:
        return self.use(request, code)

    @staticmethod
    def call(data: dict[str, Any], shopper: Shopper) -> UseCall:
        return _of_order(coupon_release, data, shopper)


# --- carts --------------------------------------------------------------------------------------------------


class CartValidateInputSerializer(serializers.Serializer):
    """A cart to price: its currency, its lines, and codes the shopper typed."""

    currency = _currency_field("ISO 4217, e.g. CNY")
    lines = cart_lines_field(required=True)
    codes = serializers.ListField(
        child=TextField(min_length=1, max_length=64, trim_whitespace=False), required=False,
        max_length=MAX_CART_CODES, default=list,
        help_text=f"At most {MAX_CART_CODES} codes typed by the shopper: a coupon's code, a shared code, a unique code",
        error_messages=dict.fromkeys(("null", "not_a_list", "max_length"),
                                     f"codes is a list of at most {MAX_CART_CODES} codes (strings)."))

    class Meta:
        ref_name = "CartValidateRequest"

    shipping = ShippingField(help_text='The order\'s shipping, e.g. "12.00" (default 0)')

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        currency = attrs["currency"]
        lines = cart_lines_of(attrs["lines"], currency)
        shipping = shipping_of(attrs.get("shipping"), currency)
        return {**attrs, "cart": pricing.Cart(currency=currency, lines=lines, shipping=shipping)}


class CartInputSchema(OrderInputSchema):
    """CartValidateInputSerializer's schema: a line's unit price has at most the currency's decimals."""

    target_class = CartValidateInputSerializer  # type: ignore[assignment]


_CART_COUPON = inline_serializer("CartCoupon", {
    "code": serializers.CharField(help_text="the coupon's code, or the code as given (canonical form)"),
    "applicable": serializers.BooleanField(),
    "status": serializers.CharField(help_text="ok, or the slug that would refuse it: not_applicable, "
                                              "min_quantity_not_met, not_combinable, min_spend_not_met, expired, "
                                              "already_redeemed, revoked, on_hold, not_yet_valid, not_eligible, "
                                              "not_found (a code given that stands for no coupon)"),
    "discount": serializers.CharField(help_text="decimal string; 0 unless applicable"),
    "lines": serializers.ListField(child=inline_serializer("CartLineShare", {
        "sku": serializers.CharField(), "discount": serializers.CharField(help_text="decimal string")})),
    "shipping": serializers.CharField(required=False, help_text="A free-shipping coupon's discount, off the shipping"),
})
_CART_EXAMPLE_REQUEST = {"currency": "CNY", "codes": ["SAVE50"], "lines": [
    {"sku": "TEA-1", "category": "tea", "quantity": 2, "unit_price": "120.00"},
    {"sku": "CUP-9", "category": "kitchen", "quantity": 1, "unit_price": "60.00"}]}
_CART_EXAMPLE_ANSWER = {"code": 0, "status": "ok", "coupons": [
    {"code": "K7QM-3XRD-9PVA", "applicable": True, "status": "ok", "discount": "30.00",
     "lines": [{"sku": "TEA-1", "discount": "30.00"}]},
    {"code": "SAVE50", "applicable": True, "status": "ok", "discount": "50.00",
     "lines": [{"sku": "TEA-1", "discount": "40.00"}, {"sku": "CUP-9", "discount": "10.00"}]},
    {"code": "WELCOME", "applicable": False, "status": "not_found", "discount": "0.00", "lines": []}],
    "best": {"codes": ["SAVE50", "K7QM-3XRD-9PVA"], "discount": "80.00", "payable": "220.00"}}


class CartValidateApi(ShopperApi):
    """POST /api/v1/carts/validate: which of the shopper's coupons and typed codes apply to a cart, and the best."""

    @property
    def ip(self) -> str | None:
        return client_ip(self.request.META)

    @extend_schema(
        tags=["carts"],
        summary="Which coupons apply to a cart, and the best combination",
        description="Price a cart with each of the shopper's usable coupons (active, valid now, in the cart's "
                    "currency) and each code given (a coupon's code, a shared code, a unique code), each alone: "
                    "`applicable`, `status` (ok or the slug that would refuse it at reserve; a code that stands for "
                    "no coupon the shopper could use is `not_found` in the list), `discount` and each eligible "
                    "line's share. `best` is the set the stacking rules allow that saves the most, its codes in the "
                    "order to reserve them (that order gives exactly `best.discount`). Read-only: nothing is "
                    "reserved or counted, no Idempotency-Key; the codes given that are not the shopper's own count "
                    "against the shopper's and the address's unknown-code limit before they are looked up (a cart "
                    "whose codes would pass it is a 429), and stay counted if not_found. At most "
                    f"{MAX_CART_LINES} lines and {MAX_CART_CODES} codes.",
        request=CartValidateInputSerializer,
        responses={200: inline_serializer("CartValidation", {
            "code": serializers.IntegerField(), "status": serializers.CharField(),
            "coupons": serializers.ListField(child=_CART_COUPON),
            "best": inline_serializer("BestCombination", {
                "codes": serializers.ListField(child=serializers.CharField()),
                "discount": serializers.CharField(help_text="decimal string"),
                "payable": serializers.CharField(help_text="the cart's amount plus shipping minus discount, >= 0")}),
        })},
        examples=[OpenApiExample("validated", response_only=True, value=_CART_EXAMPLE_ANSWER),
                  OpenApiExample("request", request_only=True, value=_CART_EXAMPLE_REQUEST)],
    )
    def post(self, request: Request) -> Response:
        data = self.validated(CartValidateInputSerializer)
        with CodeLookups(self.user_id, self.ip) as lookups:  # the codes given not the shopper's own count first
            shopper = self.request.user
            answer = cart_validate(user_id=self.user_id, cart=data["cart"], codes=data["codes"],
                                   before_lookup=lookups.take, tags=shopper.tags,  # type: ignore[union-attr]
                                   channels=shopper.channels)  # type: ignore[union-attr]
            lookups.misses = answer.misses
        return Response(answer.body)
