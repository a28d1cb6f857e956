"""Shopper identity (docs/api.md, Shoppers): X-User-Id + X-Token "<expires>.<hex HMAC-SHA256(secret, 'user.expires')>".

A storefront may sign the shopper's tags into the token (X-Shopper-Tags: "vip,gold", 1-10 of [a-z0-9_-]{1,32}):
the message is then "<user id>.<expires>.<tags as sent>", so a tags header the token was not signed with fails as
a bad signature does. Checked in memory, no database. Every refusal looks the same to the caller.

Storefront keys: a token "<key id>.<expires>.<sig>" is signed with that storefront key's secret (same message).
core knows no storefront: the storefronts app hands it the lookup of a key id (use_storefront_keys, at ready()),
a dict read in this process's memory that its own thread keeps current (storefronts/keyring.py). The default key
(COUPONS_TOKEN_SECRET, tokens without a key id) can be switched off (COUPONS_TOKEN_DEFAULT_KEY=false).
"""
from __future__ import annotations

import hmac
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from django.conf import settings

from .hot import hmac_states, hot

USER_ID_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")  # an explicit ASCII class: no unicode digits, no trimming
KEY_ID_RE = re.compile(r"[A-Za-z0-9_-]{1,32}")
# "<expires>.<sig>" (the default key) or "<key id>.<expires>.<sig>" (a storefront's key): one dot more.
TOKEN_RE = re.compile(r"(?:([A-Za-z0-9_-]{1,32})\.)?([0-9]{1,12})\.([0-9a-f]{64})")
TAGS_RE = re.compile(r"[a-z0-9_-]{1,32}(?:,[a-z0-9_-]{1,32}){0,9}")  # X-Shopper-Tags as sent
TAG_RE = re.compile(r"[a-z0-9_-]{1,32}")


@dataclass(frozen=True, slots=True)
class SigningKey:
    """A storefront's key as the token check needs it: its HMAC's two keyed hash states (core.hot.hmac_states),
    and whose it is."""

    key_id: str
    storefront_id: int
    channels: frozenset[str]
    inner: Any
    outer: Any

    @classmethod
    def of(cls, *, key_id: str, storefront_id: int, channels: frozenset[str], secret: str) -> SigningKey:
        inner, outer = hmac_states(secret.encode())
        return cls(key_id, storefront_id, channels, inner, outer)


class Identity(NamedTuple):  # made on every claim: a tuple costs a third of a frozen dataclass
    """Who a valid token says the caller is: the shopper, and the storefront whose key signed it (None and no
    channels: the default key)."""

    user_id: str
    key_id: str | None = None
    storefront_id: int | None = None
    channels: frozenset[str] = frozenset()


def _no_storefront_keys(key_id: str) -> SigningKey | None:
    return None


# key id -> its live (not revoked) key, or None. Must answer from memory: it runs on the claim's event loop.
_storefront_key: Callable[[str], SigningKey | None] = _no_storefront_keys


def use_storefront_keys(lookup: Callable[[str], SigningKey | None] | None) -> None:
    """Make `lookup` the source of storefront keys (None: no storefront key is valid)."""
    global _storefront_key
    _storefront_key = lookup or _no_storefront_keys


def tags_of(header: str | None) -> frozenset[str]:
    """The tags of an X-Shopper-Tags header authenticate() accepted (none without the header)."""
    return frozenset(header.split(",")) if header else frozenset()


def _signature(inner: Any, outer: Any, user_id: str, expires: int | str, tags: str | None) -> str:
    inner = inner.copy()  # keyed once: copies of the two states, not hmac.new() each time
    inner.update(f"{user_id}.{expires}".encode() if tags is None else f"{user_id}.{expires}.{tags}".encode())
    outer = outer.copy()
    outer.update(inner.digest())
    return outer.hexdigest()


def token_signature(user_id: str, expires: int | str, tags: str | None = None) -> str:
    """Lowercase hex HMAC-SHA256(COUPONS_TOKEN_SECRET, "<user id>.<expires>"), or with the shopper's tags
    "<user id>.<expires>.<tags>"."""
    settings_now = hot()
    return _signature(settings_now.token_inner, settings_now.token_outer, user_id, expires, tags)


def mint_token(user_id: str, *, ttl: int = 600, now: float | None = None, tags: str | None = None,
               key: SigningKey | None = None) -> str:
    """Return a token for `user_id` valid for `ttl` seconds (at most COUPONS_TOKEN_MAX_TTL), signed with the
    shopper's `tags` ("vip,gold", sent as X-Shopper-Tags) if given, with the storefront `key` if given (else the
    default key)."""
    if not is_user_id(user_id):
        raise ValueError("a user id is 1-64 characters of A-Z a-z 0-9 _ -")
    if tags is not None and TAGS_RE.fullmatch(tags) is None:
        raise ValueError("tags are 1-10 of a-z 0-9 _ - (1-32 characters each), comma-separated, no spaces")
    if not 1 <= ttl <= settings.COUPONS_TOKEN_MAX_TTL:
        raise ValueError(f"ttl must be between 1 and {settings.COUPONS_TOKEN_MAX_TTL} seconds")
    expires = int(now if now is not None else time.time()) + ttl
    if key is not None:
        return f"{key.key_id}.{expires}.{_signature(key.inner, key.outer, user_id, expires, tags)}"
    return f"{expires}.{token_signature(user_id, expires, tags)}"


def is_user_id(value: str | None) -> bool:
    return value is not None and USER_ID_RE.fullmatch(value) is not None


DEFAULT_KEY = "default"  # what _signer() answers for a token of the default key


def authenticate(user_id: str | None, token: str | None, *, tags: str | None = None, now: float | None = None
                 ) -> str | None:
    """Return the shopper's user id when the token is valid for it and for the X-Shopper-Tags header's value
    `tags` (None: no header), else None."""
    return None if _signer(user_id, token, tags, now) is None else user_id


def identify(user_id: str | None, token: str | None, *, tags: str | None = None, now: float | None = None
             ) -> Identity | None:
    """authenticate(), answering who signed the token too (the storefront and its channels), or None."""
    key = _signer(user_id, token, tags, now)
    if key is None:
        return None
    if key is DEFAULT_KEY:
        return Identity(user_id)  # type: ignore[arg-type]
    assert isinstance(key, SigningKey)
    return Identity(user_id, key.key_id, key.storefront_id, key.channels)  # type: ignore[arg-type]


def _signer(user_id: str | None, token: str | None, tags: str | None, now: float | None
            ) -> SigningKey | str | None:
    """The storefront key that signed `token` for `user_id` (and `tags`), DEFAULT_KEY for the default key's, or
    None when it is not valid. Once the token's form and time pass, whichever key it names, one signature is
    compared, in constant time (hmac.compare_digest)."""
    if not is_user_id(user_id) or token is None:
        return None
    if tags is not None and TAGS_RE.fullmatch(tags) is None:
        return None
    match = TOKEN_RE.fullmatch(token)
    if match is None:
        return None
    key_id, expires_text, signature = match.groups()
    settings_now = hot()
    current = time.time() if now is None else now
    expires = int(expires_text)
    if expires < current or expires > current + settings_now.token_max_ttl:
        return None
    if key_id is None:
        if not settings_now.token_default_key:
            hmac.compare_digest(signature, signature)  # a comparison on this path too, as on every other
            return None
        expected = _signature(settings_now.token_inner, settings_now.token_outer, user_id,  # type: ignore[arg-type]
                              expires_text, tags)
        return DEFAULT_KEY if hmac.compare_digest(expected, signature) else None
    key = _storefront_key(key_id)
    if key is None:  # unknown or revoked: checked against the default key's states all the same, then refused
        expected = _signature(settings_now.token_inner, settings_now.token_outer, user_id,  # type: ignore[arg-type]
                              expires_text, tags)
        hmac.compare_digest(expected, signature)
        return None
    expected = _signature(key.inner, key.outer, user_id, expires_text, tags)  # type: ignore[arg-type]
    return key if hmac.compare_digest(expected, signature) else None
