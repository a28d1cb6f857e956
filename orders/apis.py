"""Storefront API of claims: the claim itself (the hot path) and reading a claim back."""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from django.http import HttpRequest, HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, OpenApiResponse, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from campaigns.redis_state import CLAIM_STATUSES, ClaimCode, ClaimFlow, ClaimOutcome, claim_audience
from core.api import (
    ShopperApi,
    ShopperTokenAuthentication,
    id_parameter,
    idempotency_key_parameter,
    pattern_schema,
    shopper_header_parameters,
)
from core.errors import ApplicationError, BadRequest, NotFound, unavailable_of
from core.hot import hot
from core.http import (
    application_error_response,
    body_of,
    client_address,
    idempotency_key,
    idempotency_key_in,
    identity_of,
    json_object_in,
    json_response,
    parse_id,
)
from core.logs import log_fields
from core.tracing import span
from coupons.apis import CouponOutputSerializer, answer_response
from coupons.idempotency import Answer, run_idempotent
from coupons.services import is_code_use_id

from . import ledger
from .cancel import claim_cancel
from .claim import claim_in_redis, claim_in_redis_async, known_sold_out
from .claim_status import WAIT_MAX_SECONDS, claim_status, status_request_of
from .metrics import CLAIM_TALLY, DEFAULT_STOREFRONT, UNKNOWN_STOREFRONT
from .models import ClaimStatus

log = logging.getLogger(__name__)
REPLAYED = {"Idempotent-Replayed": "true"}


def claim_answer(meta: Mapping[str, Any], campaign_id_text: str, read_body: Callable[[], bytes]
                 ) -> ClaimOutcome | ApplicationError:
    """Answer a claim request on this thread (Django's view): its outcome, or the refusal to answer (counted,
    traced, logged). `meta` is the WSGI environ (Django's request.META): the headers the door reads
    (orders.door.CLAIM_HEADER_NAMES), by their environ keys."""
    started = time.perf_counter()
    flow = claim_decided_or_flow(
        campaign_id_text, meta.get("HTTP_X_USER_ID"), meta.get("HTTP_X_TOKEN"), meta.get("HTTP_X_SHOPPER_TAGS"),
        meta.get("HTTP_IDEMPOTENCY_KEY"),
        meta.get("CONTENT_LENGTH"), meta.get("HTTP_TRANSFER_ENCODING"), meta.get("CONTENT_TYPE"),
        meta.get("REMOTE_ADDR"), meta.get("HTTP_X_FORWARDED_FOR"), read_body, started)
    if type(flow) is not ClaimFlow:
        return flow  # type: ignore[return-value]
    with _Claiming(flow, started) as claiming:
        try:
            return claiming.answered(claim_in_redis(flow))
        except ApplicationError as exc:
            return claiming.refused(exc)
        except Exception as exc:
            return claiming.refused(claiming.store_failure(exc))


async def claim_on_loop(flow: ClaimFlow, started: float) -> ClaimOutcome | ApplicationError:
    """claim_answer() past its checks on an event loop (the door): the script through the loop's pipelined client
    (claim_in_redis_async)."""
    with _Claiming(flow, started) as claiming:
        try:
            return claiming.answered(await claim_in_redis_async(flow))
        except ApplicationError as exc:
            return claiming.refused(exc)
        except Exception as exc:
            return claiming.refused(claiming.store_failure(exc))


def claim_decided_or_flow(campaign_id_text: str, user_id: str | None, token: str | None, tags: str | None,
                          key: str | None, content_length: str | None, transfer_encoding: str | None,
                          content_type: str | None, peer_address: str | None, forwarded_for: str | None,
                          read_body: Callable[[], bytes], started: float
                          ) -> ClaimOutcome | ApplicationError | ClaimFlow:
    """The first half of every claim, whichever door (each passes the values of the headers it read: absent,
    None): the checked claim, its flow, or the answer when it is decided already (a refusal, or this process's
    sold-out flag: nothing to trace, nothing logs). The one place a claim asks known_sold_out(): the second half
    (claim_in_redis, its async twin) goes to Redis. CampaignClaimApi documents what it reads."""
    label = UNKNOWN_STOREFRONT  # refused before its token was found valid: signed by no storefront known
    try:
        shopper = identity_of(user_id, token, tags)
        storefront = "" if shopper.storefront_id is None else str(shopper.storefront_id)
        label = storefront or DEFAULT_STOREFRONT
        campaign = parse_id(campaign_id_text)
        idempotency_key = idempotency_key_in(key)
        json_object_in(content_length, transfer_encoding, content_type, read_body)
    except ApplicationError as exc:
        return _refused(exc, None, started, label)
    known = known_sold_out(campaign, idempotency_key)
    if known is not None:
        return claim_answered(known, started, label)
    ip = client_address(peer_address, forwarded_for) if hot().ip_per_second else None  # only when it is limited
    return ClaimFlow(campaign, shopper.user_id, idempotency_key, ip, claim_audience(tags, shopper.channels),
                     storefront)


class _Claiming:
    """The decided part of a claim's answer, the same for both doors: counted, traced, logged. A context
    manager: every log line inside carries the claim's campaign and shopper; a span covers it when tracing
    is on."""

    __slots__ = ("flow", "started", "traced", "span", "fields")

    def __init__(self, flow: ClaimFlow, started: float) -> None:
        self.flow, self.started = flow, started
        self.fields = log_fields(campaign=flow.campaign_id, shopper=flow.user_id)
        self.span = span("couponrush.claim", campaign_id=flow.campaign_id)

    def __enter__(self) -> _Claiming:
        self.fields.__enter__()
        self.traced = self.span.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            self.span.__exit__(*exc)
        finally:
            self.fields.__exit__(*exc)

    def answered(self, outcome: ClaimOutcome) -> ClaimOutcome:
        self.traced.set(outcome=outcome.status, claim_id=outcome.claim_id)
        return claim_answered(outcome, self.started, self.flow.storefront or DEFAULT_STOREFRONT)

    def refused(self, exc: ApplicationError) -> ApplicationError:
        self.traced.set(outcome=exc.status)
        return _refused(exc, self.flow.campaign_id, self.started, self.flow.storefront or DEFAULT_STOREFRONT)

    def store_failure(self, exc: Exception) -> ApplicationError:
        """A store's failure (PostgreSQL down or hung past the claim's bound, Redis down) as the contract's 503,
        by core.errors.unavailable_of, the mapping Django's routes answer with; anything else is raised again
        (the door's JSON 500, its traceback logged)."""
        error = unavailable_of(exc)
        if error is None:
            raise exc
        log.warning("claim on campaign %s: a store is unavailable: %r", self.flow.campaign_id, exc)
        return error


def _count(campaign: str, outcome: str, started: float, storefront: str) -> None:
    CLAIM_TALLY.add(campaign, outcome, time.perf_counter() - started, storefront)


def _refused(exc: ApplicationError, campaign: int | None, started: float, storefront: str) -> ApplicationError:
    # Label only campaigns that exist (an unknown id is "-"), so a storm of junk ids adds no series.
    known = campaign if campaign is not None and exc.http_status != 404 else "-"
    _count(str(known), exc.status, started, storefront)
    return exc


def claim_answered(outcome: ClaimOutcome, started: float, storefront: str) -> ClaimOutcome:
    """A decided claim's outcome, counted (its status, its time since `started`, the storefront's label)."""
    _count(str(outcome.campaign_id), outcome.status, started, storefront)
    return outcome


def claim_body(outcome: ClaimOutcome) -> dict[str, Any]:
    """The answer's JSON of a decided claim (docs/api.md), the same at both doors; with `Idempotent-Replayed:
    true` when outcome.replayed."""
    return {"code": outcome.code, "status": outcome.status, "claim_id": outcome.claim_id,
            "campaign_id": outcome.campaign_id}


# The schema's answers are the outcomes' (claim_body of each code the script answers, CLAIM_STATUSES).
_CLAIM_EXAMPLES: dict[str, dict[str, Any]] = {
    status: claim_body(ClaimOutcome(code, status, 42, "42-1764470000000-0" if code == ClaimCode.CLAIMED else None))
    for code, status in CLAIM_STATUSES.items()
}
_REFUSED = {name: body for name, body in _CLAIM_EXAMPLES.items() if body["claim_id"] is None}


def _claim_result(codes: list[int], statuses: list[str], claim_id: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["code", "status", "claim_id", "campaign_id"],
        "properties": {
            "code": {"type": "integer", "enum": codes},
            "status": {"type": "string", "enum": statuses},
            "claim_id": claim_id,
            "campaign_id": {"type": "integer"},
        },
    }


# A claim id exactly when the claim was claimed (a tool that follows claim_id to GET /claims/{claim_id} never
# gets a null from a refusal: the schema says which answers carry one).
_CLAIM_RESULT = {"oneOf": [
    _claim_result([0], ["claimed"], pattern_schema(ledger.CLAIM_ID_RE)),
    _claim_result([body["code"] for body in _REFUSED.values()], list(_REFUSED),
                  {"type": "string", "nullable": True, "enum": [None]}),
]}


class CampaignClaimApi(APIView):
    """POST /api/v1/campaigns/{id}/claim through Django, for a WSGI server (the web server and the ASGI application
    answer it on their event loop: orders/door.py), through the claim's one implementation (claim_answer), as the
    door does. Its post() is both the code that answers and the OpenAPI operation; dispatch() hands it Django's
    request without DRF's request cycle (content negotiation, authentication, throttles: the claim checks its own,
    claim_decided_or_flow(), on the hot path). The parameters are the ones it reads, built from the expressions it
    checks them with (core.http's ID_RE and IDEMPOTENCY_KEY_RE, core.auth's USER_ID_RE and TOKEN_RE)."""

    # the schema's security scheme: claim_decided_or_flow checks it
    authentication_classes = [ShopperTokenAuthentication]
    permission_classes = [IsAuthenticated]

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:  # type: ignore[override]
        if request.method != "POST":
            return json_response(body_of(405, "method_not_allowed", "Use POST."), 405, {"Allow": "POST"})
        return self.post(request, kwargs["campaign_id"])  # type: ignore[arg-type]

    @extend_schema(
        operation_id="campaign_claim",
        tags=["claims"],
        summary="Grab a coupon of a campaign",
        description=(
            "One atomic step in Redis: idempotency lookup, window and pause check, per-user limit, stock, "
            "decrement, and the claim appended to the campaign's ledger. The coupon is issued asynchronously: "
            "poll GET /api/v1/claims/{claim_id}. Business outcomes are HTTP 200 with `code` and `status`. "
            "With an Idempotency-Key, a repeat returns the first answer unchanged with header "
            "`Idempotent-Replayed: true`."
        ),
        parameters=[
            id_parameter("campaign_id"),
            *shopper_header_parameters(),
            idempotency_key_parameter(required=False),
            OpenApiParameter("Idempotent-Replayed", {"type": "string", "enum": ["true"]}, OpenApiParameter.HEADER,
                             response=[200], description="The answer is the first one of this Idempotency-Key."),
        ],
        request={"application/json": OpenApiTypes.OBJECT},  # no field is read: any JSON object, or no body
        responses={
            200: OpenApiResponse(_CLAIM_RESULT, description="Decided: " + ", ".join(
                f"{code} {status}" for code, status in CLAIM_STATUSES.items()) + "."),
            429: OpenApiResponse(description="Rate limited: the campaign, the shopper or the address sent too many "
                                             "claims this second (Retry-After). Not stored under the "
                                             "Idempotency-Key."),
            413: OpenApiResponse(description="Body too large."),
            415: OpenApiResponse(description="Body is not JSON."),
        },
        examples=[
            OpenApiExample("empty", value={}, request_only=True),
            *[OpenApiExample(name, value=value, response_only=True, status_codes=[200])
              for name, value in _CLAIM_EXAMPLES.items()],
        ],
    )
    def post(self, request: HttpRequest, campaign_id: str) -> HttpResponse:  # type: ignore[override]
        answer = claim_answer(request.META, campaign_id, lambda: request.body)
        if type(answer) is ClaimOutcome:
            return json_response(claim_body(answer), 200, REPLAYED if answer.replayed else None)
        return application_error_response(answer)  # type: ignore[arg-type]


def claim_id_of(text: str) -> tuple[int, str]:
    """Return (campaign id, ledger entry id) of the claim id in a path; raise BadRequest if it is not one."""
    parsed = ledger.parse_claim_id(text)
    if parsed is None:
        if is_code_use_id(text):  # a typed code's use (its coupon's claim_id in /me/coupons): no claim
            raise NotFound()
        raise BadRequest("Not a claim id.")
    return parsed


_CLAIM_ID_PARAMETER = OpenApiParameter(  # claim_id_of() reads it
    "claim_id", pattern_schema(ledger.CLAIM_ID_RE, example="42-1764470000000-0"), OpenApiParameter.PATH,
    description="The claim's id, as the claim answered it.")


_WAIT_PARAMETER = OpenApiParameter(  # claim_status.wait_of() reads it
    "wait", {"type": "number", "minimum": 0, "maximum": WAIT_MAX_SECONDS, "default": 0}, OpenApiParameter.QUERY,
    description="Seconds to wait while the claim is pending (a long poll).")


class ClaimOutputSerializer(serializers.Serializer):
    code = serializers.IntegerField(default=0)
    status = serializers.ChoiceField(choices=ClaimStatus.choices)
    claim_id = serializers.CharField()
    campaign_id = serializers.IntegerField()
    claimed_at = serializers.DateTimeField()
    coupon = CouponOutputSerializer(allow_null=True)


class ClaimDetailApi(APIView):
    """GET /api/v1/claims/{claim_id}: the async order of a claim, with its coupon once issued. The web server's
    door answers what Redis knows on the event loop (orders/status_door.py) and hands the rest here; this view
    runs the same decisions (orders/claim_status.py) for a WSGI server and for what it is handed."""

    authentication_classes = [ShopperTokenAuthentication]
    permission_classes = [IsAuthenticated]

    @extend_schema(
        tags=["claims"],
        summary="A claim and its coupon",
        description="The async order behind a claim: `pending` while it waits in the campaign's ledger in Redis, "
                    "`issued` with its coupon once the drain wrote it to PostgreSQL (usually within a second), "
                    "`cancelled` after a cancel, `failed` if it could not be issued. Only the shopper who claimed "
                    "it sees it: anyone else gets the same 404 as for an unknown claim. With `wait`, a long poll: "
                    "the answer comes as soon as the claim is no longer pending, or after that many seconds with "
                    "`pending`. `Cache-Control: private, no-store`.",
        parameters=[_CLAIM_ID_PARAMETER, _WAIT_PARAMETER],
        responses={200: ClaimOutputSerializer},
        examples=[OpenApiExample("pending", value={
            "code": 0, "status": "pending", "claim_id": "42-1764470000000-0", "campaign_id": 42,
            "claimed_at": "2026-11-30T10:13:20+08:00", "coupon": None}, response_only=True)],
    )
    def get(self, request: Request, claim_id: str) -> HttpResponse:
        checked = status_request_of(request.META, claim_id, request.GET.getlist("wait"))
        return HttpResponse(claim_status(checked), content_type="application/json")


class ClaimCancelApi(ShopperApi):
    """POST /api/v1/claims/{claim_id}/cancel: give an unused coupon back; the stock returns to the sale."""

    @extend_schema(
        tags=["claims"],
        summary="Give a claimed coupon back",
        description="Cancel the claim: its coupon is revoked and the stock and the shopper's per-user count return "
                    "to the sale through the same atomic path as the claim. A claim still pending is recorded as "
                    "cancelled at once. 200 with code 0 `cancelled`, or a refusal: 4 ended (after the campaign's "
                    "end nothing is given back), 10 expired, 11 already_redeemed, 14 revoked, 16 on_hold. "
                    "Idempotency-Key optional.",
        parameters=[idempotency_key_parameter(required=False), _CLAIM_ID_PARAMETER],
        request=None,
        responses={200: inline_serializer("CancelResult", {
            "code": serializers.IntegerField(help_text="0 cancelled, 4 ended, 11 already_redeemed, 14 revoked, "
                                                       "16 on_hold, 10 expired"),
            "status": serializers.CharField(), "claim_id": serializers.CharField(required=False)}),
            409: OpenApiResponse(description="Idempotency-Key in flight"),
            422: OpenApiResponse(description="Idempotency-Key used with a different request")},
        examples=[OpenApiExample("cancelled", response_only=True,
                                 value={"code": 0, "status": "cancelled", "claim_id": "42-1764470000000-0"})],
    )
    def post(self, request: Request, claim_id: str) -> Response:
        key = idempotency_key(request._request)
        self.body()
        claim_id_of(claim_id)
        answer = run_idempotent(
            user_id=self.user_id, endpoint=f"POST /api/v1/claims/{claim_id}/cancel", key=key, payload={},
            execute=lambda: Answer(200, claim_cancel(user_id=self.user_id, claim_id=claim_id).body()),
        )
        return answer_response(answer)
