"""Shopper identity (docs/api.md, Shoppers): X-User-Id + X-Token "<expires>.<hex HMAC-SHA256(secret, 'user.expires')>".

A storefront may sign the shopper's tags into the token (X-Shopper-Tags: "vip,gold", 1-10 of [a-z0-9_-]{1,32}):
the message is then "<user id>.<expires>.<tags as sent>", so a tags header the token was not signed with fails as
a bad signature does. Checked in memory, no database. Every refusal looks the same to the caller.
"""
from __future__ import annotations

import hmac
import re
import time

from django.conf import settings

from .hot import hot

USER_ID_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")  # an explicit ASCII class: no unicode digits, no trimming
TOKEN_RE = re.compile(r"([0-9]{1,12})\.([0-9a-f]{64})")
TAGS_RE = re.compile(r"[a-z0-9_-]{1,32}(?:,[a-z0-9_-]{1,32}){0,9}")  # X-Shopper-Tags as sent
TAG_RE = re.compile(r"[a-z0-9_-]{1,32}")


def tags_of(header: str | None) -> frozenset[str]:
    """The tags of an X-Shopper-Tags header authenticate() accepted (none without the header)."""
    return frozenset(header.split(",")) if header else frozenset()


def token_signature(user_id: str, expires: int | str, tags: str | None = None) -> str:
    """Lowercase hex HMAC-SHA256(COUPONS_TOKEN_SECRET, "<user id>.<expires>"), or with the shopper's tags
    "<user id>.<expires>.<tags>"."""
    settings_now = hot()
    inner = settings_now.token_inner.copy()  # keyed once: copies of the two states, not hmac.new() each time
    inner.update(f"{user_id}.{expires}".encode() if tags is None else f"{user_id}.{expires}.{tags}".encode())
    outer = settings_now.token_outer.copy()
    outer.update(inner.digest())
    return outer.hexdigest()


def mint_token(user_id: str, *, ttl: int = 600, now: float | None = None, tags: str | None = None) -> str:
    """Return a token for `user_id` valid for `ttl` seconds (at most COUPONS_TOKEN_MAX_TTL), signed with the
    shopper's `tags` ("vip,gold", sent as X-Shopper-Tags) if given."""
    if not is_user_id(user_id):
        raise ValueError("a user id is 1-64 characters of A-Z a-z 0-9 _ -")
    if tags is not None and TAGS_RE.fullmatch(tags) is None:
        raise ValueError("tags are 1-10 of a-z 0-9 _ - (1-32 characters each), comma-separated, no spaces")
    if not 1 <= ttl <= settings.COUPONS_TOKEN_MAX_TTL:
        raise ValueError(f"ttl must be between 1 and {settings.COUPONS_TOKEN_MAX_TTL} seconds")
    expires = int(now if now is not None else time.time()) + ttl
    return f"{expires}.{token_signature(user_id, expires, tags)}"


def is_user_id(value: str | None) -> bool:
    return value is not None and USER_ID_RE.fullmatch(value) is not None


def authenticate(user_id: str | None, token: str | None, *, tags: str | None = None, now: float | None = None
                 ) -> str | None:
    """Return the shopper's user id when the token is valid for it and for the X-Shopper-Tags header's value
    `tags` (None: no header), else None."""
    if not is_user_id(user_id) or token is None:
        return None
    if tags is not None and TAGS_RE.fullmatch(tags) is None:
        return None
    match = TOKEN_RE.fullmatch(token)
    if match is None:
        return None
    expires_text, signature = match.groups()
    expires = int(expires_text)
    current = time.time() if now is None else now
    if expires < current or expires > current + hot().token_max_ttl:
        return None
    if not hmac.compare_digest(token_signature(user_id, expires_text, tags), signature):  # type: ignore[arg-type]
        return None
    return user_id
