"""The DRF layer every API module builds on: shopper auth, the base view, the one exception handler, the
database-down and Host-check middlewares, the JSON error views (and the service endpoints' 405), the schema of
the shared parameters and the schema's error answers."""
from __future__ import annotations

import functools
import logging
import re
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied, RequestDataTooBig
from django.http import Http404, HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.utils import OpenApiParameter
from rest_framework import exceptions as drf_exceptions
from rest_framework import serializers
from rest_framework.authentication import BaseAuthentication
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from .auth import TAGS_RE, TOKEN_RE, USER_ID_RE, tags_of
from .errors import (
    PROTOCOL_SLUGS,
    ApplicationError,
    BadHost,
    BadRequest,
    NotFound,
    PayloadTooLarge,
    RateLimited,
    Unauthenticated,
    unavailable_of,
)
from .http import (
    ID_RE,
    IDEMPOTENCY_KEY_RE,
    application_error_response,
    body_of,
    declared_length,
    error_body,
    host_allowed,
    json_response,
    shopper_identity,
)
from .logs import add_log_fields

log = logging.getLogger(__name__)

class Shopper:
    """The authenticated storefront shopper of a DRF request (request.user): the user id, the audience tags the
    token was signed with (X-Shopper-Tags) and the channels of the storefront whose key signed it."""

    is_authenticated = True
    is_anonymous = False

    def __init__(self, user_id: str, tags: frozenset[str] = frozenset(), channels: frozenset[str] = frozenset()
                 ) -> None:
        self.user_id, self.tags, self.channels = user_id, tags, channels

    def __str__(self) -> str:
        return self.user_id


class ShopperTokenAuthentication(BaseAuthentication):
    def authenticate(self, request: Request) -> tuple[Shopper, None]:
        try:
            meta = request._request.META
            identity = shopper_identity(meta)
            return Shopper(identity.user_id, tags_of(meta.get("HTTP_X_SHOPPER_TAGS")), identity.channels), None
        except Unauthenticated as exc:
            raise drf_exceptions.AuthenticationFailed(exc.message) from exc

    def authenticate_header(self, request: Request) -> str:
        return 'X-Token realm="couponrush"'


class ShopperApi(APIView):
    """Base of the storefront's authenticated DRF views: shopper token, body size limit, JSON objects (every DRF
    view's content negotiation is core.negotiation's: REST_FRAMEWORK's default)."""

    authentication_classes = [ShopperTokenAuthentication]
    permission_classes = [IsAuthenticated]

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        add_log_fields(shopper=self.user_id)
        length = declared_length(request.META.get("CONTENT_LENGTH") or "0")
        if length is None:
            raise BadRequest("Bad Content-Length.")
        if length > settings.DATA_UPLOAD_MAX_MEMORY_SIZE:  # 64 KiB: the largest cart the API takes fits
            raise PayloadTooLarge()

    @property
    def user_id(self) -> str:
        return self.request.user.user_id  # type: ignore[union-attr]

    def body(self) -> dict[str, Any]:
        data = self.request.data
        if not isinstance(data, dict):
            raise BadRequest("The body must be a JSON object.")
        return data

    def validated(self, input_serializer: type[serializers.Serializer]) -> dict[str, Any]:
        """Return the body checked by the operation's input serializer (the one its schema documents); what it
        refuses is a 400 with the serializer's `errors`."""
        return validated(input_serializer, self.body())


def validated(input_serializer: type[serializers.Serializer], data: Any) -> dict[str, Any]:
    """`data` checked by `input_serializer` as serializer.is_valid(raise_exception=True) checks it (the same
    ValidationError, so the same 400), on one instance of it a process: DRF deep-copies every declared field into
    each new serializer, which cost a use more than its checks. A serializer validating keeps nothing of the data
    on its fields (run_validation only returns or raises), so threads share the instance."""
    serializer = _INPUTS.get(input_serializer)
    if serializer is None:
        serializer = _INPUTS.setdefault(input_serializer, input_serializer())
    try:
        return serializer.run_validation(data)  # type: ignore[no-any-return]
    except serializers.ValidationError as exc:
        raise serializers.ValidationError(exc.detail) from None


_INPUTS: dict[type[serializers.Serializer], serializers.Serializer] = {}


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """Render every error of a DRF view in the contract's form: {code, status, detail}."""
    if isinstance(exc, PermissionDenied):
        exc = drf_exceptions.PermissionDenied()
    error = application_error_of(exc)
    if error is not None:
        return Response(error_body(error), error.http_status, headers=error.headers())
    if isinstance(exc, drf_exceptions.APIException):  # another of DRF's (405, 406 ...): its own status
        status_code = exc.status_code
        detail: Any = exc.detail
        extra: dict[str, Any] = {}
        if isinstance(detail, dict | list):
            extra["errors"] = detail
            detail = "The request is invalid."
        return Response(body_of(status_code, PROTOCOL_SLUGS.get(status_code, "error"), str(detail), **extra),
                        status_code)
    return None


def application_error_of(exc: Exception) -> ApplicationError | None:
    """The project's error for what Django or DRF raised (None: not one the contract names)."""
    if isinstance(exc, ApplicationError):
        return exc
    if isinstance(exc, Http404 | drf_exceptions.NotFound):
        return NotFound()
    if isinstance(exc, RequestDataTooBig):
        return PayloadTooLarge()
    if isinstance(exc, drf_exceptions.NotAuthenticated | drf_exceptions.AuthenticationFailed):
        return Unauthenticated()
    if isinstance(exc, drf_exceptions.Throttled):
        return RateLimited()
    if isinstance(exc, drf_exceptions.ValidationError | drf_exceptions.ParseError):
        detail = exc.detail
        if isinstance(detail, dict | list):
            return BadRequest(first_message(detail) or "The request is invalid.", errors=detail)
        return BadRequest(str(detail))
    return None


def first_message(errors: Any) -> str | None:
    """The first message of a serializer's errors: the answer's detail says what was wrong, as the hand
    parsers' did ({"order_amount": ["..."]} -> "...")."""
    if isinstance(errors, dict):
        errors = list(errors.values())
    for item in errors if isinstance(errors, list) else [errors]:
        found = first_message(item) if isinstance(item, dict | list) else str(item)
        if found:
            return found
    return None


class DatabaseUnavailableMiddleware:
    """A view that could not reach a store (PostgreSQL down, restarting, a connection cut; Redis unreachable)
    answers the contract's 503 with Retry-After, not a 500: the client may retry, and nothing was changed (its
    transaction rolled back). The mapping is core.errors.unavailable_of, the event loop's claim door's too."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        error = unavailable_of(exception)
        if error is None:
            return None
        log.warning("a store is unavailable for %s %s: %s", request.method, request.path, exception)
        return application_error_response(error)


class HostCheckMiddleware:
    """A Host that is not a host name, or not one of DJANGO_ALLOWED_HOSTS, is the contract's JSON 400 on every
    path (Django answers DisallowedHost with its HTML page, in DEBUG its debug page): checked before any other
    middleware asks for the host. The check is core.http.host_allowed, the event loop's doors' too."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        # The host get_host() checks (X-Forwarded-Host with USE_X_FORWARDED_HOST), checked as it checks it
        if not host_allowed(request._get_raw_host()):  # type: ignore[attr-defined]
            return application_error_response(BadHost())
        return self.get_response(request)


def bad_request_view(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    return application_error_response(BadRequest("Bad request."))


def safe_methods_only(view: Callable[[HttpRequest], HttpResponse]) -> Callable[[HttpRequest], HttpResponse]:
    """A service endpoint's view: GET and HEAD; any other method is the contract's JSON 405 (Django answered
    them with its HTML CSRF page, and TRACE as GET)."""

    @functools.wraps(view)
    def safe_only(request: HttpRequest) -> HttpResponse:
        if request.method not in ("GET", "HEAD"):
            return json_response(body_of(405, PROTOCOL_SLUGS[405], f'Method "{request.method}" not allowed.'), 405,
                                 {"Allow": "GET, HEAD"})
        return view(request)

    return csrf_exempt(safe_only)


def not_found_view(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    return application_error_response(NotFound())


def server_error_view(request: HttpRequest) -> HttpResponse:
    return json_response(body_of(500, "server_error", "Internal error."), 500)


# --- the schema ------------------------------------------------------------------------------------------------


def pattern_schema(regex: re.Pattern[str], **extra: Any) -> dict[str, Any]:
    """The JSON Schema of the text a validator takes when `regex.fullmatch(text)`: its own expression, anchored."""
    return {"type": "string", "pattern": f"^{regex.pattern}$", **extra}


def id_parameter(name: str, description: str = "") -> OpenApiParameter:
    """The path parameter of an id that core.http.parse_id() reads."""
    return OpenApiParameter(name, pattern_schema(ID_RE, example="42"), OpenApiParameter.PATH,
                            description=description or "A positive integer of at most 18 digits.")


def idempotency_key_parameter(*, required: bool) -> OpenApiParameter:
    """The Idempotency-Key header that core.http.idempotency_key() reads."""
    return OpenApiParameter(
        "Idempotency-Key", pattern_schema(IDEMPOTENCY_KEY_RE), OpenApiParameter.HEADER, required=required,
        description="1-255 printable ASCII characters; a repeat replays the first answer (Idempotent-Replayed: "
                    "true)",
    )


def shopper_header_parameters() -> list[OpenApiParameter]:
    """The shopper's headers as core.auth.authenticate() reads them, for a view that documents them as parameters
    (the claim; DRF views have them as ShopperTokenScheme's security scheme)."""
    return [
        OpenApiParameter("X-User-Id", pattern_schema(USER_ID_RE), OpenApiParameter.HEADER, required=True,
                         description="The shopper's id: 1-64 characters of A-Z a-z 0-9 _ -"),
        OpenApiParameter("X-Token", pattern_schema(TOKEN_RE), OpenApiParameter.HEADER, required=True,
                         description="[<key id>.]<expires>.<hex HMAC-SHA256(secret, '<user id>.<expires>')>: the "
                                     "default key's secret, or with a key id that storefront key's"),
        OpenApiParameter("X-Shopper-Tags", pattern_schema(TAGS_RE), OpenApiParameter.HEADER, required=False,
                         description="The shopper's audience tags (1-10 of a-z 0-9 _ -, comma-separated), signed into "
                                     "the token: its message is then '<user id>.<expires>.<tags as sent>'"),
    ]


ERROR_SCHEMA = {
    "type": "object",
    "required": ["code", "status"],
    "properties": {
        "code": {"type": "integer", "description": "The HTTP status for protocol errors."},
        "status": {"type": "string", "description": "A stable slug (docs/api.md, Answers)."},
        "detail": {"type": "string"},
    },
}
_ERROR_RESPONSES = {
    "400": ("Malformed request: bad JSON, wrong types, bad Idempotency-Key, ids that are not ids.", "invalid_request"),
    "401": ("Missing, bad or expired token (always the same body).", "unauthenticated"),
    "404": ("Unknown, or someone else's.", "not_found"),
    "429": ("Rate limited (Retry-After); nothing was changed or stored.", "rate_limited"),
    "503": ("A required store is down; nothing was changed (Retry-After).", "unavailable"),
}


_DOCUMENTED_ELSEWHERE = {"409": "idempotency_in_flight", "413": "payload_too_large", "415": "unsupported_media_type",
                         "422": "idempotency_mismatch"}


def schema_postprocess(result: dict[str, Any], generator: Any, request: Any, public: bool) -> dict[str, Any]:
    """Document the contract's error answers (the exception handler's) on every operation: their body, and the
    answers every view may give. Inputs are the views' own (their serializers and parameters): not touched."""
    components = result.setdefault("components", {}).setdefault("schemas", {})
    components["Error"] = ERROR_SCHEMA
    slugs = {**{status_code: slug for status_code, (_, slug) in _ERROR_RESPONSES.items()}, **_DOCUMENTED_ELSEWHERE}
    for path_item in result.setdefault("paths", {}).values():
        for operation in path_item.values():
            if not isinstance(operation, dict) or "responses" not in operation:
                continue
            for status_code, (description, _) in _ERROR_RESPONSES.items():
                operation["responses"].setdefault(status_code, {"description": description})
            for status_code, slug in slugs.items():  # the body of the error answers, views' own included
                documented = operation["responses"].get(status_code)
                if documented is not None and "content" not in documented:
                    documented["content"] = {"application/json": {
                        "schema": {"$ref": "#/components/schemas/Error"},
                        "example": {"code": int(status_code), "status": slug},
                    }}
    return result


class ShopperTokenScheme(OpenApiAuthenticationExtension):
    """Document the shopper headers (X-User-Id + X-Token) as two API keys required together."""

    target_class = "core.api.ShopperTokenAuthentication"
    name = ["ShopperUserId", "ShopperToken"]

    def get_security_definition(self, auto_schema: Any) -> list[dict[str, Any]]:
        return [
            {"type": "apiKey", "in": "header", "name": "X-User-Id",
             "description": "The shopper's id: 1-64 characters of A-Z a-z 0-9 _ -"},
            {"type": "apiKey", "in": "header", "name": "X-Token",
             "description": "<expires>.<lowercase hex HMAC-SHA256(COUPONS_TOKEN_SECRET, '<user id>.<expires>')>, "
                            "or <key id>.<expires>.<the same with that storefront key's secret>"},
        ]

    def get_security_requirement(self, auto_schema: Any) -> dict[str, list[str]]:
        return {"ShopperUserId": [], "ShopperToken": []}
