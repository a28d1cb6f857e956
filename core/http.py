"""HTTP helpers every way in shares: the contract's JSON answers, ids, Idempotency-Key, JSON object bodies,
the client's address and the shopper's token, each checked from a WSGI environ (Django's request.META is one) or,
for a door that reads a request's headers itself (the claim's: orders/door.py), from the headers' values."""
from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.core.signals import setting_changed
from django.http import HttpRequest, HttpResponse
from django.http.request import split_domain_port, validate_host

from .auth import Identity, identify
from .errors import ApplicationError, BadRequest, PayloadTooLarge, Unauthenticated, UnsupportedMediaType

ID_RE = re.compile(r"[1-9][0-9]{0,17}")  # a positive id that fits PostgreSQL's bigint
IDEMPOTENCY_KEY_RE = re.compile(r"[\x20-\x7e]{1,255}")  # 1-255 printable ASCII characters
MAX_BODY_BYTES = 16 * 1024
CONTENT_LENGTH_RE = re.compile(r"[0-9]+")  # ASCII digits only: str.isdigit() admits '²' and '٢'
_LONGEST_LENGTH = 12  # digits: a Content-Length longer is above every body limit (and int() of 5,000 digits raises)


def declared_length(text: str) -> int | None:
    """A Content-Length's value, or None when the text is none (RFC 9110 8.6: 1*DIGIT); beyond 12 digits
    10**12, above every limit (a 413 like any body too large, not a 400)."""
    if CONTENT_LENGTH_RE.fullmatch(text) is None:
        return None
    return int(text) if len(text) <= _LONGEST_LENGTH else 10**_LONGEST_LENGTH


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


def error_body(exc: ApplicationError) -> dict[str, Any]:
    """The contract's JSON of a refusal."""
    return body_of(exc.code, exc.status, exc.message, **exc.extra)


def application_error_response(exc: ApplicationError) -> HttpResponse:
    return json_response(error_body(exc), exc.http_status, exc.headers())


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
    return idempotency_key_in(meta.get("HTTP_IDEMPOTENCY_KEY"), required=required)


def idempotency_key_in(key: str | None, *, required: bool = False) -> str | None:
    """idempotency_key() of the header's value (None: absent)."""
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
    return json_object_in(meta.get("CONTENT_LENGTH"), meta.get("HTTP_TRANSFER_ENCODING"), meta.get("CONTENT_TYPE"),
                          read_body, allow_empty=allow_empty)


def json_object_in(content_length: str | None, transfer_encoding: str | None, content_type: str | None,
                   read_body: Callable[[], bytes], *, allow_empty: bool = True) -> dict[str, Any]:
    """json_object_of() of the headers' values (None: absent)."""
    length = declared_length(content_length or "0")
    if length is None:
        raise BadRequest("Bad Content-Length.")
    if length > MAX_BODY_BYTES:
        raise PayloadTooLarge()
    if length == 0 and "chunked" not in (transfer_encoding or "").lower():
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
    content_type = content_type or ""
    if content_type != "application/json":  # the usual one needs no normalizing
        if content_type.split(";")[0].strip().lower() not in ("application/json", ""):
            raise UnsupportedMediaType()
    if raw == b"{}":
        return {}  # the usual claim body, without the parser
    try:
        document = json.loads(raw, parse_constant=_not_json)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:  # RecursionError: absurdly deep nesting
        raise BadRequest("The body is not valid JSON.") from exc
    if not isinstance(document, dict):
        raise BadRequest("The body must be a JSON object.")
    return document


_FORWARDED = ("HTTP_X_FORWARDED_FOR", "HTTP_X_FORWARDED_PROTO", "HTTP_X_FORWARDED_HOST", "HTTP_X_FORWARDED_PORT",
              "HTTP_FORWARDED")
_proxies: tuple[tuple[str, ...], list[Any]] | None = None


def from_trusted_proxy(meta: Mapping[str, Any]) -> bool:
    """True when the connection comes from a proxy the settings trust (COUPONS_TRUSTED_PROXY_HOPS > 0 and the
    peer in COUPONS_TRUSTED_PROXIES): only then do its forwarded headers say anything."""
    return trusted_proxy(meta.get("REMOTE_ADDR"))


def trusted_proxy(peer_address: str | None) -> bool:
    """from_trusted_proxy() of the peer's address (REMOTE_ADDR)."""
    global _proxies
    if settings.COUPONS_TRUSTED_PROXY_HOPS <= 0:
        return False
    configured = tuple(settings.COUPONS_TRUSTED_PROXIES)
    if _proxies is None or _proxies[0] != configured:
        _proxies = configured, [ipaddress.ip_network(n, strict=False) for n in configured]
    try:
        peer = ipaddress.ip_address(peer_address or "")
    except ValueError:
        return False
    return any(peer in network for network in _proxies[1])


class ForwardedHeadersMiddleware:
    """Drop the forwarded headers of a request that did not come from a trusted proxy, before anything reads
    them (SECURE_PROXY_SSL_HEADER's X-Forwarded-Proto, the per-address limit's X-Forwarded-For)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        meta = request.META
        if not from_trusted_proxy(meta):
            for key in _FORWARDED:
                meta.pop(key, None)
        return self.get_response(request)


_hosts: dict[str, bool] = {}  # a Host value -> whether it is one of ours


def host_allowed(host: str) -> bool:
    """Whether `host` (the Host header's value; without one, the server's name and port) names a host this
    service serves: a host name, of DJANGO_ALLOWED_HOSTS, exactly as Django's request.get_host() decides. The
    one Host check of every door (core.api.HostCheckMiddleware, the event loop's /healthz and claim); the
    decision is remembered per value (a bounded number of them: a client may send any), so the claim's hot
    path pays one dictionary lookup."""
    allowed = _hosts.get(host)
    if allowed is None:
        patterns = settings.ALLOWED_HOSTS
        if settings.DEBUG and not patterns:  # Django's own default in DEBUG
            patterns = [".localhost", "127.0.0.1", "[::1]"]
        domain, _ = split_domain_port(host)
        allowed = bool(domain) and validate_host(domain, patterns)
        if len(_hosts) >= 1024:
            _hosts.clear()
        _hosts[host] = allowed
    return allowed


def _forget_hosts(*, setting: str, **kwargs: Any) -> None:
    if setting in ("ALLOWED_HOSTS", "DEBUG"):
        _hosts.clear()


setting_changed.connect(_forget_hosts, dispatch_uid="couponrush-allowed-hosts")


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON (RFC 8259)")


IPV6_CLIENT_PREFIX = 64  # one IPv6 client: a subscriber gets a /64 (or more) and picks any address in it


def client_ip(meta: Mapping[str, Any]) -> str | None:
    """Return the client, as the per-address limits count it: REMOTE_ADDR, or, on a connection from a trusted
    proxy, the address the COUPONS_TRUSTED_PROXY_HOPS-th proxy saw (X-Forwarded-For). An IPv4 address is itself
    (normalized; an IPv4-mapped IPv6 one too); an IPv6 address is its /64 ("2001:db8:1:2::/64"), since a client
    that could take a fresh address of its /64 for each request would escape every limit. The proxy keys its
    own limits the same way (deploy/nginx/). None when it is not an address."""
    return client_address(meta.get("REMOTE_ADDR"), meta.get("HTTP_X_FORWARDED_FOR"))


def client_address(peer_address: str | None, forwarded_for: str | None) -> str | None:
    """client_ip() of the peer's address (REMOTE_ADDR) and the X-Forwarded-For header's value."""
    hops = settings.COUPONS_TRUSTED_PROXY_HOPS
    candidate = peer_address
    if hops > 0 and trusted_proxy(peer_address):
        forwarded = [part.strip() for part in (forwarded_for or "").split(",") if part.strip()]
        candidate = forwarded[-hops] if len(forwarded) >= hops else None
    try:
        address = ipaddress.ip_address(candidate) if candidate else None
    except ValueError:
        return None
    if not isinstance(address, ipaddress.IPv6Address):
        return None if address is None else str(address)
    if address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(ipaddress.IPv6Network((int(address), IPV6_CLIENT_PREFIX), strict=False))


def authenticated_user(meta: Mapping[str, Any]) -> str:
    """The authenticated shopper's user id of a WSGI environ (Django's request.META is one), or raise
    Unauthenticated (no database involved)."""
    return shopper_identity(meta).user_id


def shopper_identity(meta: Mapping[str, Any]) -> Identity:
    """identity_of() the shopper's headers in a WSGI environ."""
    return identity_of(meta.get("HTTP_X_USER_ID"), meta.get("HTTP_X_TOKEN"), meta.get("HTTP_X_SHOPPER_TAGS"))


def identity_of(user_id_header: str | None, token: str | None, tags_header: str | None = None) -> Identity:
    """Who the X-User-Id, X-Token and X-Shopper-Tags headers' values (None: absent) say the shopper is: the user id
    and the storefront that signed the token with its channels (core.auth.Identity); or raise Unauthenticated."""
    identity = identify(user_id_header, token, tags=tags_header)
    if identity is None:
        raise Unauthenticated()
    return identity


