"""Where a webhook may go (SSRF): http(s) URLs whose host resolves only to public addresses.

Loopback, link-local (169.254.169.254, the cloud metadata service), private, shared, multicast, reserved and
unspecified ranges are refused, for IPv4 and IPv6 alike, IPv4 addresses inside IPv6 (::ffff:127.0.0.1,
64:ff9b::/96, 6to4, Teredo) judged as the IPv4 address they carry. Checked when an endpoint is registered and
again at every delivery, against what the name resolves to then; the delivery connects to an address it
checked (no second lookup between the check and the connection: no DNS rebinding). A lookup is waited for at
most a given time (resolve()): the system resolver has no timeout of its own that a caller can set. settings
COUPONS_WEBHOOK_ALLOW_PRIVATE (development and tests; production refuses it) lets loopback and private addresses
through, nothing else.
"""
from __future__ import annotations

import ipaddress
import socket
import threading
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.utils.translation import gettext

from core.errors import BadRequest

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
RESOLVE_TIMEOUT = 5.0  # seconds a name may take to resolve at registration (a delivery: what its deadline has left)
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


class Refused(BadRequest):
    """A webhook URL or the address its name resolves to is not allowed."""


class Unresolvable(Refused):
    """The URL's host name does not resolve (now)."""


@dataclass(frozen=True)
class Target:
    scheme: str
    host: str  # the name (or the literal address) of the URL: the Host header and TLS's server name
    port: int
    path: str  # path and query


def parse_url(url: str) -> Target:
    """Return the URL's parts; raise Refused for anything but a plain http(s) URL with a host."""
    if len(url) > 500 or any(ch.isspace() or ord(ch) < 32 for ch in url):
        raise Refused(gettext("The URL is too long or holds spaces or control characters."))
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise Refused(gettext("Not a URL.")) from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise Refused(gettext("Only http:// and https:// URLs with a host."))
    if parts.username is not None or parts.password is not None:
        raise Refused(gettext("No user name or password in the URL (the signature authenticates the sender)."))
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return Target(parts.scheme, parts.hostname, port or (443 if parts.scheme == "https" else 80), path)


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]
    return None


def address_refusal(ip: IPAddress) -> str | None:
    """Return why a webhook may not go to this address, or None when it is a public unicast address."""
    if isinstance(ip, ipaddress.IPv6Address):
        inner = _embedded_ipv4(ip)
        if inner is not None:
            return address_refusal(inner)
    for flag, why in (("is_loopback", "loopback"), ("is_link_local", "link-local"), ("is_multicast", "multicast"),
                      ("is_unspecified", "unspecified"), ("is_reserved", "reserved"), ("is_private", "private")):
        if getattr(ip, flag):
            return why
    if not ip.is_global:
        return "not a public address"
    return None


# What COUPONS_WEBHOOK_ALLOW_PRIVATE lets through: loopback and private addresses, never link-local (the cloud
# metadata service), multicast, unspecified (0.0.0.0 reaches this machine) or reserved ones.
_PRIVATE = ("loopback", "private")


def _allow_private() -> bool:
    return bool(getattr(settings, "COUPONS_WEBHOOK_ALLOW_PRIVATE", False))


def resolve(host: str, port: int, timeout: float) -> list[IPAddress]:
    """The addresses `host` resolves to, in the resolver's order, without repeats; raise Unresolvable when it
    does not resolve or takes more than `timeout` seconds. getaddrinfo blocks for as long as resolv.conf lets it
    (its timeout x attempts x name servers: 30 s and more) and cannot be interrupted, so it runs in a daemon
    thread of its own and is waited for at most `timeout`: a lookup that outlives its wait finishes alone,
    unread, when the system resolver gives up."""
    done = threading.Event()
    outcome: list[Any] = []

    def lookup() -> None:
        try:
            outcome.append(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))
        except (OSError, UnicodeError) as exc:
            outcome.append(exc)
        finally:
            done.set()

    threading.Thread(target=lookup, name="webhook-resolve", daemon=True).start()
    if not done.wait(max(timeout, 0.0)):
        raise Unresolvable(gettext("The host %(host)s did not resolve within %(seconds)s s.")
                           % {"host": host, "seconds": f"{timeout:.3g}"})
    if isinstance(outcome[0], BaseException):
        raise Unresolvable(gettext("The host %(host)s does not resolve (%(error)s).")
                           % {"host": host, "error": outcome[0].__class__.__name__})
    found: list[IPAddress] = []
    for info in outcome[0]:
        ip = ipaddress.ip_address(str(info[4][0]).partition("%")[0])
        if ip not in found:
            found.append(ip)
    return found


def checked_addresses(target: Target, *, timeout: float = RESOLVE_TIMEOUT) -> list[IPAddress]:
    """Resolve the target's host once (within `timeout` seconds) and return its addresses, every one of them
    checked; raise Refused when any is refused (a name with one private address among public ones is refused
    whole), or Unresolvable when it does not resolve in time."""
    try:
        literal: IPAddress | None = ipaddress.ip_address(target.host)
    except ValueError:
        literal = None
    found = [literal] if literal is not None else resolve(target.host, target.port, timeout)
    for ip in found:
        why = address_refusal(ip)
        if why is not None and not (why in _PRIVATE and _allow_private()):
            raise Refused(gettext("The host %(host)s resolves to %(ip)s, a %(why)s address.")
                              % {"host": target.host, "ip": ip, "why": why})
    return found


def check_url(url: str) -> Target:
    """Check a URL at registration: its form, and every address its host resolves to now. A name that does
    not resolve from here is accepted (it is checked again at each delivery); a name of this machine
    ('localhost') and a literal address are judged now."""
    target = parse_url(url)
    host = target.host.lower().rstrip(".")
    if not _allow_private() and (host == "localhost" or host.endswith(".localhost")):
        raise Refused(gettext("The host %(host)s is this machine.") % {"host": target.host})
    try:
        checked_addresses(target)
    except Unresolvable:
        pass
    return target
