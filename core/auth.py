"""Shopper identity (docs/api.md, Shoppers): X-User-Id + X-Token "<expires>.<hex HMAC-SHA256(secret, 'user.expires')>".

Checked in memory, no database. Every refusal looks the same to the caller.
"""
from __future__ import annotations

import hmac
import re
import time

from django.conf import settings

from .hot import hot

USER_ID_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")  # an explicit ASCII class: no unicode digits, no trimming
TOKEN_RE = re.compile(r"([0-9]{1,12})\.([0-9a-f]{64})")


def token_signature(user_id: str, expires: int | str) -> str:
    """Lowercase hex HMAC-SHA256(COUPONS_TOKEN_SECRET, "<user id>.<expires>")."""
    settings_now = hot()
    inner = settings_now.token_inner.copy()  # keyed once: copies of the two states, not hmac.new() each time
    inner.update(f"{user_id}.{expires}".encode())
    outer = settings_now.token_outer.copy()
    outer.update(inner.digest())
    return outer.hexdigest()


def mint_token(user_id: str, *, ttl: int = 600, now: float | None = None) -> str:
    """Return a token for `user_id` valid for `ttl` seconds (at most COUPONS_TOKEN_MAX_TTL)."""
    if not is_user_id(user_id):
        raise ValueError("a user id is 1-64 characters of A-Z a-z 0-9 _ -")
    if not 1 <= ttl <= settings.COUPONS_TOKEN_MAX_TTL:
        raise ValueError(f"ttl must be between 1 and {settings.COUPONS_TOKEN_MAX_TTL} seconds")
    expires = int(now if now is not None else time.time()) + ttl
    return f"{expires}.{token_signature(user_id, expires)}"


def is_user_id(value: str | None) -> bool:
    return value is not None and USER_ID_RE.fullmatch(value) is not None


def authenticate(user_id: str | None, token: str | None, *, now: float | None = None) -> str | None:
    """Return the shopper's user id when the token is valid for it, else None."""
    if not is_user_id(user_id) or token is None:
        return None
    match = TOKEN_RE.fullmatch(token)
    if match is None:
        return None
    expires_text, signature = match.groups()
    expires = int(expires_text)
    current = time.time() if now is None else now
    if expires < current or expires > current + hot().token_max_ttl:
        return None
    if not hmac.compare_digest(token_signature(user_id, expires_text), signature):  # type: ignore[arg-type]
        return None
    return user_id
