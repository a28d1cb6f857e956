"""Storefront clients' tests: keys made through the services (or the commands), tokens signed as a storefront's
backend signs them, from the secret it was shown (docs/api.md, Shoppers: Storefront keys)."""
from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Iterator
from typing import Any

import pytest

from storefronts.keyring import KEYRING


@pytest.fixture(autouse=True)
def fresh_keyring() -> Iterator[None]:
    """Each test starts with no keys held and no refresher thread (the next keyed token starts them)."""
    KEYRING.forget()
    yield
    KEYRING.forget()


def signed(secret: str, user_id: str, *, key_id: str | None = None, ttl: int = 300, tags: str | None = None) -> str:
    """An X-Token as a storefront's backend makes it: HMAC-SHA256(secret, "<user>.<expires>[.<tags>]")."""
    expires = int(time.time()) + ttl
    message = f"{user_id}.{expires}" if tags is None else f"{user_id}.{expires}.{tags}"
    signature = hmac.new(secret.encode(), message.encode(), hashlib.sha256).hexdigest()
    return f"{expires}.{signature}" if key_id is None else f"{key_id}.{expires}.{signature}"


def headers(user_id: str, token: str, **extra: Any) -> dict[str, Any]:
    return {"HTTP_X_USER_ID": user_id, "HTTP_X_TOKEN": token, **extra}
