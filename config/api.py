"""HTTP plumbing shared by every API module: JSON answers in the contract's form, shopper auth for DRF,
id and Idempotency-Key parsing, the one exception handler, and OpenAPI post-processing."""
from __future__ import annotations

import ipaddress
import json
import logging
import re
from collections.abc import Callable, Mapping
from typing import Any

from django import db
from django.conf import settings
from django.core.exceptions import PermissionDenied, RequestDataTooBig
from django.http import Http404, HttpRequest, HttpResponse
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import exceptions as drf_exceptions
from rest_framework.authentication import BaseAuthentication
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from campaigns.errors import ApplicationError, Unavailable

from .auth import authenticate
from .logs import add_log_fields

log = logging.getLogger(__name__)

ID_RE = re.compile(r"[1-9][0-9]{0,17}")  # a positive id that fits PostgreSQL's bigint
IDEMPOTENCY_KEY_RE = re.compile(r"[\x20-\x7e]{1,255}")  # 1-255 printable ASCII characters
RETRY_AFTER_SECONDS = "1"
MAX_BODY_BYTES = 16 * 1024
CONTENT_LENGTH_RE = re.compile(r"[0-9]{1,12}")  # ASCII digits only: str.isdigit() admits '²' and '٢'


class BadRequest(ApplicationError):
    http_status = 400
    code = 400
    status = "invalid_request"
    message = "The request is malformed."


class Unauthenticated(ApplicationError):
    http_status = 401
    code = 401
    status = "unauthenticated"
    message = "Missing, invalid or expired token."


class PayloadTooLarge(ApplicationError):
    http_status = 413
    code = 413
    status = "payload_too_large"
    message = f"The request body is larger than {MAX_BODY_BYTES} bytes."


class UnsupportedMediaType(ApplicationError):
    http_status = 415
    code = 415
    status = "unsupported_media_type"
    message = "Send the body as application/json."


def body_of(code: int, status: str, detail: str = "", **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"code": code, "status": status}
    if detail:
        body["detail"] = detail
    body.update(extra)
    return body


def json_response(body: dict[str, Any], status: int = 200, headers: dict[str, str] | None = None) -> HttpResponse:
    response = HttpResponse(
        json.dumps(body, separators=(",", ":"), ensure_ascii=False), content_type="application/json", status=status
    )
    for name, value in (headers or {}).items():
        response[name] = value
    return response


def error_headers(http_status: int) -> dict[str, str]:
    return {"Retry-After": RETRY_AFTER_SECONDS} if http_status in (409, 429, 503) else {}


def application_error_response(exc: ApplicationError) -> HttpResponse:
    return json_response(
        body_of(exc.code, exc.status, exc.message, **exc.extra), exc.http_status, error_headers(exc.http_status)
    )


def parse_id(text: str) -> int:
    """Return the integer id in `text`, or raise BadRequest for anything that is not an id."""
    if ID_RE.fullmatch(text) is None:
        raise BadRequest("Not an id: ids are positive integers.")
    return int(text)


def idempotency_key(request: HttpRequest, *, required: bool = False) -> str | None:
    """Return the request's Idempotency-Key, None when absent (and allowed); raise BadRequest when bad."""
    return idempotency_key_of(request.META, required=required)


def idempotency_key_of(meta: Mapping[str, Any], *, required: bool = False) -> str | None:
    """idempotency_key() on a WSGI environ."""
    key = meta.get("HTTP_IDEMPOTENCY_KEY")
    if key is None:
        if required:
            raise BadRequest("An Idempotency-Key header is required.")
        return None
    if IDEMPOTENCY_KEY_RE.fullmatch(key) is None:
        raise BadRequest("An Idempotency-Key is 1-255 printable ASCII characters.")
    return key


def json_object_body(request: HttpRequest, *, allow_empty: bool = True) -> dict[str, Any]:
    """Return the JSON object in the request body, checking size and media type first."""
    return json_object_of(request.META, lambda: request.body, allow_empty=allow_empty)


def json_object_of(meta: Mapping[str, Any], read_body: Callable[[], bytes], *, allow_empty: bool = True
                   ) -> dict[str, Any]:
    """json_object_body() on a WSGI environ and a function that reads the body (called once, if at all)."""
    length_text = meta.get("CONTENT_LENGTH") or "0"
    if CONTENT_LENGTH_RE.fullmatch(length_text) is None:
        raise BadRequest("Bad Content-Length.")
    length = int(length_text)
    if length > MAX_BODY_BYTES:
        raise PayloadTooLarge()
    if length == 0 and "chunked" not in (meta.get("HTTP_TRANSFER_ENCODING") or "").lower():
        return {}  # nothing to read (the common claim: no body at all)
    try:
        raw = read_body()
    except RequestDataTooBig as exc:
        raise PayloadTooLarge() from exc
    if len(raw) > MAX_BODY_BYTES:
        raise PayloadTooLarge()
    if not raw.strip():
        if allow_empty:
            return {}
        raise BadRequest("A JSON object body is required.")
    content_type = meta.get("CONTENT_TYPE") or ""
    if content_type != "application/json":  # the usual one needs no normalizing
        if content_type.split(";")[0].strip().lower() not in ("application/json", ""):
            raise UnsupportedMediaType()
    if raw == b"{}":
        return {}  # the usual claim body, without the parser
    try:
        document = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:  # RecursionError: absurdly deep nesting
        raise BadRequest("The body is not valid JSON.") from exc
    if not isinstance(document, dict):
        raise BadRequest("The body must be a JSON object.")
    return document


def client_ip(meta: Mapping[str, Any]) -> str | None:
    """Return the client's address, normalized, for the per-IP limit: REMOTE_ADDR, or the address the
    COUPONS_TRUSTED_PROXY_HOPS-th trusted proxy saw (X-Forwarded-For). None when it is not an address."""
    hops = settings.COUPONS_TRUSTED_PROXY_HOPS
    candidate = meta.get("REMOTE_ADDR")
    if hops > 0:
        forwarded = [part.strip() for part in (meta.get("HTTP_X_FORWARDED_FOR") or "").split(",") if part.strip()]
        candidate = forwarded[-hops] if len(forwarded) >= hops else None
    try:
        return str(ipaddress.ip_address(candidate)) if candidate else None
    except ValueError:
        return None


def shopper_id(request: HttpRequest) -> str:
    """Return the authenticated shopper's user id, or raise Unauthenticated (no database involved)."""
    return authenticated_user(request.META)


def authenticated_user(meta: Mapping[str, Any]) -> str:
    """shopper_id() on a WSGI environ."""
    user_id = authenticate(meta.get("HTTP_X_USER_ID"), meta.get("HTTP_X_TOKEN"))
    if user_id is None:
        raise Unauthenticated()
    return user_id


class Shopper:
    """The authenticated storefront shopper of a DRF request (request.user)."""

    is_authenticated = True
    is_anonymous = False

    def __init__(self, user_id: str) -> None:
        self.user_id = user_id

    def __str__(self) -> str:
        return self.user_id


class ShopperTokenAuthentication(BaseAuthentication):
    def authenticate(self, request: Request) -> tuple[Shopper, None]:
        try:
            return Shopper(shopper_id(request._request)), None
        except Unauthenticated as exc:
            raise drf_exceptions.AuthenticationFailed(exc.message) from exc

    def authenticate_header(self, request: Request) -> str:
        return 'X-Token realm="couponrush"'


class ShopperApi(APIView):
    """Base of the storefront's authenticated DRF views: shopper token, body size limit, JSON objects."""

    authentication_classes = [ShopperTokenAuthentication]
    permission_classes = [IsAuthenticated]

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        add_log_fields(shopper=self.user_id)
        length = request.META.get("CONTENT_LENGTH") or "0"
        if CONTENT_LENGTH_RE.fullmatch(length) is None:
            raise BadRequest("Bad Content-Length.")
        if int(length) > MAX_BODY_BYTES:
            raise PayloadTooLarge()

    @property
    def user_id(self) -> str:
        return self.request.user.user_id  # type: ignore[union-attr]

    def body(self) -> dict[str, Any]:
        data = self.request.data
        if not isinstance(data, dict):
            raise BadRequest("The body must be a JSON object.")
        return data


_DRF_STATUS_SLUGS = {
    400: "invalid_request",
    401: "unauthenticated",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    413: "payload_too_large",
    415: "unsupported_media_type",
    429: "rate_limited",
}


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """Render every error of a DRF view in the contract's form: {code, status, detail}."""
    if isinstance(exc, ApplicationError):
        body = body_of(exc.code, exc.status, exc.message, **exc.extra)
        return Response(body, exc.http_status, headers=error_headers(exc.http_status))
    if isinstance(exc, Http404):
        exc = drf_exceptions.NotFound()
    elif isinstance(exc, PermissionDenied):
        exc = drf_exceptions.PermissionDenied()
    elif isinstance(exc, RequestDataTooBig):
        return Response(body_of(413, "payload_too_large", PayloadTooLarge.message), 413)
    if isinstance(exc, drf_exceptions.NotAuthenticated | drf_exceptions.AuthenticationFailed):
        return Response(body_of(401, "unauthenticated", Unauthenticated.message), 401)
    if isinstance(exc, drf_exceptions.APIException):
        status_code = exc.status_code
        detail: Any = exc.detail
        extra: dict[str, Any] = {}
        if isinstance(detail, dict | list):
            extra["errors"] = detail
            detail = "The request is invalid."
        headers = error_headers(status_code)
        return Response(body_of(status_code, _DRF_STATUS_SLUGS.get(status_code, "error"), str(detail), **extra),
                        status_code, headers=headers)
    return None


class DatabaseUnavailableMiddleware:
    """A view that could not reach PostgreSQL (down, restarting, a connection cut) answers the contract's 503
    with Retry-After, not a 500: the client may retry, and nothing was changed (its transaction rolled back)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if isinstance(exception, db.OperationalError | db.InterfaceError):
            log.warning("PostgreSQL unavailable for %s %s: %s", request.method, request.path, exception)
            return application_error_response(Unavailable())
        return None


def not_found_view(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    return json_response(body_of(404, "not_found", "Not found."), 404)


def server_error_view(request: HttpRequest) -> HttpResponse:
    return json_response(body_of(500, "server_error", "Internal error."), 500)


ERROR_SCHEMA = {
    "type": "object",
    "required": ["code", "status"],
    "properties": {
        "code": {"type": "integer", "description": "The HTTP status for protocol errors."},
        "status": {"type": "string", "description": "A stable slug (CONTRACT.md)."},
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


# What the API accepts, said exactly in the schema (clients and fuzzers can rely on it): the patterns are the
# validators' own regular expressions, anchored.
_POSITIVE = "(?!0+(\\.0+)?$)"  # an amount is never zero


def _parameter_schemas() -> dict[tuple[str, str], dict[str, Any]]:
    from coupons.codes import CODE_RE
    from orders.ledger import CLAIM_ID_RE

    return {
        ("header", "Idempotency-Key"): {"type": "string", "minLength": 1, "maxLength": 255,
                                        "pattern": f"^{IDEMPOTENCY_KEY_RE.pattern}$"},
        ("path", "campaign_id"): {"type": "integer", "minimum": 1, "maximum": 999_999_999_999_999_999},
        ("path", "claim_id"): {"type": "string", "pattern": f"^{CLAIM_ID_RE.pattern}$",
                               "example": "42-1764470000000-0"},
        ("path", "code"): {"type": "string", "pattern": f"^{CODE_RE.pattern}$", "example": "K7QM-3XRD-9PVA"},
        ("query", "page_size"): {"type": "integer", "minimum": 1, "maximum": 100},
        ("query", "page"): {"type": "integer", "minimum": 1},
    }


def _amount_patterns() -> dict[int, str]:
    """Amount patterns by the currency's decimals: the parser's own for two, whole units for none."""
    from campaigns.money import AMOUNT_RE

    return {0: "^[1-9][0-9]{0,11}$", 2: f"^{_POSITIVE}{AMOUNT_RE.pattern}$"}


def _body_properties() -> dict[str, dict[str, Any]]:
    from coupons.apis import ORDER_ID_RE

    return {
        "order_id": {"type": "string", "pattern": f"^{ORDER_ID_RE.pattern}$", "example": "A-1001"},
        "order_amount": {"type": "string", "pattern": _amount_patterns()[2], "example": "350.00"},
    }


def _tighten(operation: dict[str, Any], components: dict[str, Any]) -> None:
    from campaigns.money import MINOR_UNITS

    for parameter in operation.get("parameters", []):
        exact = _parameter_schemas().get((parameter.get("in"), parameter.get("name")))
        if exact is not None:
            parameter["schema"] = dict(exact)
    body = operation.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema", {})
    ref = body.get("$ref", "")
    target = components.get(ref.rsplit("/", 1)[-1], body) if ref else body
    body_properties = _body_properties()
    for name, prop in target.get("properties", {}).items():
        if name in body_properties:
            prop.update(body_properties[name])
        elif name == "currency":
            prop.update({"type": "string", "enum": sorted(MINOR_UNITS)})
    if target.get("properties") and "order_id" in target["properties"]:
        target["required"] = sorted(set(target.get("required", [])) | {"order_id"})
    if {"currency", "order_amount"} <= set(target.get("properties", {})):
        # How many decimals an amount may have depends on its currency (JPY none, CNY two).
        by_places: dict[int, list[str]] = {}
        for currency, places in MINOR_UNITS.items():
            by_places.setdefault(places, []).append(currency)
        target["oneOf"] = [
            {"properties": {"currency": {"enum": sorted(currencies)},
                            "order_amount": {"pattern": _amount_patterns()[places]}}}
            for places, currencies in sorted(by_places.items())
        ]


def schema_postprocess(result: dict[str, Any], generator: Any, request: Any, public: bool) -> dict[str, Any]:
    """Document the contract's error answers on every operation, and the claim (a plain Django view)."""
    components = result.setdefault("components", {}).setdefault("schemas", {})
    components["Error"] = ERROR_SCHEMA
    from orders.apis import CLAIM_OPERATION  # the claim view is not a DRF view: document it here

    result.setdefault("paths", {})["/api/v1/campaigns/{campaign_id}/claim"] = {"post": CLAIM_OPERATION}
    for path_item in result["paths"].values():
        for operation in path_item.values():
            if not isinstance(operation, dict) or "responses" not in operation:
                continue
            _tighten(operation, components)
            for status_code, (description, slug) in _ERROR_RESPONSES.items():
                operation["responses"].setdefault(status_code, {
                    "description": description,
                    "content": {"application/json": {
                        "schema": {"$ref": "#/components/schemas/Error"},
                        "example": {"code": int(status_code), "status": slug},
                    }},
                })
            for status_code, slug in _DOCUMENTED_ELSEWHERE.items():  # the body of the answers views document
                documented = operation["responses"].get(status_code)
                if documented is not None and "content" not in documented:
                    documented["content"] = {"application/json": {
                        "schema": {"$ref": "#/components/schemas/Error"},
                        "example": {"code": int(status_code), "status": slug},
                    }}
    return result


class ShopperTokenScheme(OpenApiAuthenticationExtension):
    """Document the shopper headers (X-User-Id + X-Token) as two API keys required together."""

    target_class = "config.api.ShopperTokenAuthentication"
    name = ["ShopperUserId", "ShopperToken"]

    def get_security_definition(self, auto_schema: Any) -> list[dict[str, Any]]:
        return [
            {"type": "apiKey", "in": "header", "name": "X-User-Id",
             "description": "The shopper's id: 1-64 characters of A-Z a-z 0-9 _ -"},
            {"type": "apiKey", "in": "header", "name": "X-Token",
             "description": "<expires>.<lowercase hex HMAC-SHA256(COUPONS_TOKEN_SECRET, '<user id>.<expires>')>"},
        ]

    def get_security_requirement(self, auto_schema: Any) -> dict[str, list[str]]:
        return {"ShopperUserId": [], "ShopperToken": []}
