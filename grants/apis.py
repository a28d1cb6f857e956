"""POST /api/v1/campaigns/{id}/grants: the shop's backend grants a campaign's coupons to listed shoppers.

Authorization: Bearer <api key>: a live storefront key's api_key (storefronts/, docs/api.md, Shoppers), or one of
the operators' interim COUPONS_SERVICE_API_KEYS (still accepted: docs/deployment.md, Storefront keys), each
compared in constant time; a shopper's token never passes."""
from __future__ import annotations

import hmac
import json
from typing import Any

from django.conf import settings
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import exceptions as drf_exceptions
from rest_framework import serializers
from rest_framework.authentication import BaseAuthentication
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api import id_parameter, validated
from core.errors import BadRequest, PayloadTooLarge, Unavailable, UnsupportedMediaType
from core.http import declared_length, parse_id
from storefronts.keyring import KEYRING

from .claims import GrantStopped
from .lines import list_values, read_ids
from .models import BATCH_NAME_PATTERN, GrantSource
from .services import CampaignEnded, CampaignPaused, grant_batch_run, grant_batch_start, grantable_campaign

MAX_USER_IDS = 10_000
# 10,000 ids of 64 characters, quoted, with commas, and the rest of the body: what one call may send.
MAX_BODY_BYTES = 1024 * 1024


class ServiceClient:
    """The shop's backend, authenticated by an API key (request.user)."""

    is_authenticated = True
    is_anonymous = False


def service_key_valid(key: str) -> bool:
    """Whether `key` is a live storefront's api_key or one of COUPONS_SERVICE_API_KEYS (each compared in constant
    time, all of them)."""
    found = KEYRING.api_key_owner(key) is not None
    for known in settings.COUPONS_SERVICE_API_KEYS:
        found |= hmac.compare_digest(key.encode(), known.encode())
    return found


class ServiceKeyAuthentication(BaseAuthentication):
    def authenticate(self, request: Request) -> tuple[ServiceClient, None]:
        scheme, _, key = (request.META.get("HTTP_AUTHORIZATION") or "").partition(" ")
        if scheme.lower() != "bearer" or not key or not service_key_valid(key):
            raise drf_exceptions.AuthenticationFailed("A valid API key is required: Authorization: Bearer <key>.")
        return ServiceClient(), None

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="couponrush"'


class ServiceKeyScheme(OpenApiAuthenticationExtension):
    target_class = "grants.apis.ServiceKeyAuthentication"
    name = "ServiceApiKey"

    def get_security_definition(self, auto_schema: Any) -> dict[str, Any]:
        return {"type": "http", "scheme": "bearer",
                "description": "A storefront's api_key (or an operator's COUPONS_SERVICE_API_KEYS key)"}


class GrantInputSerializer(serializers.Serializer):
    batch = serializers.RegexField(rf"^{BATCH_NAME_PATTERN}\Z")
    # Each element is counted (an id that is not one: invalid), so any JSON value is taken here.
    user_ids = serializers.ListField(child=serializers.JSONField(allow_null=True), max_length=MAX_USER_IDS)


GRANT_COUNTS: dict[str, serializers.Field] = {"batch": serializers.CharField(), "granted": serializers.IntegerField(),
                "limit_reached": serializers.IntegerField(), "sold_out": serializers.IntegerField(),
                "invalid": serializers.IntegerField(), "duplicate": serializers.IntegerField()}


def _json_object(request: Request) -> dict[str, Any]:
    """The body, a JSON object (RFC 8259: no NaN) of at most MAX_BODY_BYTES, read here: Django's request.body
    (DRF's request.data) stops at DATA_UPLOAD_MAX_MEMORY_SIZE, 64 KiB, a sixth of 10,000 ids."""
    length = declared_length(request.META.get("CONTENT_LENGTH") or "0")
    if length is None:
        raise BadRequest("Bad Content-Length.")
    if length > MAX_BODY_BYTES:
        raise PayloadTooLarge()
    if (request.content_type or "").split(";")[0].strip().lower() != "application/json":
        raise UnsupportedMediaType()
    raw = request._request.read(MAX_BODY_BYTES + 1)
    if len(raw) > MAX_BODY_BYTES:
        raise PayloadTooLarge()
    try:
        body = json.loads(raw, parse_constant=_not_json)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise BadRequest("The body is not valid JSON.") from exc
    if not isinstance(body, dict):
        raise BadRequest("The body must be a JSON object.")
    return body


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


class CampaignGrantApi(APIView):
    """POST /api/v1/campaigns/{id}/grants: grant one coupon to each listed shopper."""

    authentication_classes = [ServiceKeyAuthentication]
    permission_classes = [IsAuthenticated]

    @extend_schema(
        operation_id="campaign_grants", tags=["grants"], summary="Grant coupons to listed shoppers",
        description="One coupon of the campaign to each shopper of `user_ids` (at most 10,000 a call) through the "
                    "claim's atomic path (stock, per-user limit). The same `batch` sent again grants nothing twice "
                    "(`granted`: 0). `invalid`: not a user id; `duplicate`: an id repeated in the list. A campaign "
                    "may be granted before its window opens; once it ended: 4 `ended`, while paused: 5 `paused`.",
        parameters=[id_parameter("campaign_id")], request=GrantInputSerializer,
        responses={200: inline_serializer("GrantCounts", {"code": serializers.IntegerField(),
                                                          "status": serializers.CharField(), **GRANT_COUNTS})})
    def post(self, request: Request, campaign_id: str) -> Response:
        data = validated(GrantInputSerializer, _json_object(request))
        campaign = grantable_campaign(parse_id(campaign_id))
        batch = grant_batch_start(campaign=campaign, name=data["batch"], source=GrantSource.API,
                                  read=read_ids(list_values(data["user_ids"])), actor="api")
        try:
            batch = grant_batch_run(batch=batch)
        except GrantStopped as exc:
            refusal = {CampaignPaused.code: CampaignPaused, CampaignEnded.code: CampaignEnded}.get(exc.code)
            raise (refusal(str(exc)) if refusal else Unavailable()) from exc
        return Response({"code": 0, "status": "granted", **batch.counts})
