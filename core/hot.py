"""What the claim path reads on every request, kept cheap.

`hot()` holds the settings the claim reads as plain attributes (each `django.conf.settings.X` is a lazy-object
lookup, a dozen per claim), refreshed when a setting changes (override_settings in tests sends
setting_changed). `unique_hex()` makes the request ids and the claims' own answer keys: a random prefix per
process and a counter, 32 hex characters like a uuid4 but without asking the kernel for randomness each time.
"""
from __future__ import annotations

import hashlib
import hmac
import itertools
import os
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.signals import setting_changed


@dataclass(frozen=True, slots=True)
class HotSettings:
    token_inner: Any  # HMAC-SHA256 keyed with COUPONS_TOKEN_SECRET as its two hash states (RFC 2104), to copy()
    token_outer: Any
    token_max_ttl: int
    token_default_key: bool  # COUPONS_TOKEN_DEFAULT_KEY: tokens without a key id, signed with COUPONS_TOKEN_SECRET
    redis_timeout: float
    redis_cluster: bool
    idempotency_ttl_ms: int
    drain_trigger_ttl_ms: int
    shopper_per_second: int
    ip_per_second: int
    replica_acks: int
    replica_ack_timeout_ms: int


_hot: HotSettings | None = None


def hot() -> HotSettings:
    global _hot
    if _hot is None:
        inner, outer = hmac_states(settings.COUPONS_TOKEN_SECRET.encode())
        _hot = HotSettings(
            token_inner=inner,
            token_outer=outer,
            token_max_ttl=settings.COUPONS_TOKEN_MAX_TTL,
            token_default_key=settings.COUPONS_TOKEN_DEFAULT_KEY,
            redis_timeout=settings.COUPONS_REDIS_SOCKET_TIMEOUT,
            redis_cluster=settings.COUPONS_REDIS_CLUSTER,
            idempotency_ttl_ms=settings.COUPONS_IDEMPOTENCY_TTL_SECONDS * 1000,
            drain_trigger_ttl_ms=settings.COUPONS_DRAIN_TRIGGER_TTL_MS,
            shopper_per_second=settings.COUPONS_RATE_LIMIT_SHOPPER_PER_SECOND,
            ip_per_second=settings.COUPONS_RATE_LIMIT_IP_PER_SECOND,
            replica_acks=settings.COUPONS_REDIS_REPLICA_ACKS,
            replica_ack_timeout_ms=settings.COUPONS_REDIS_REPLICA_ACK_TIMEOUT_MS,
        )
    return _hot


def hmac_states(key: bytes) -> tuple[Any, Any]:
    """SHA-256 after the key's inner and outer pads: HMAC(key, m) = outer.copy() + inner.copy() + m, all in C
    (hmac.HMAC.copy() is Python, a third of a sold-out answer's signature check)."""
    block = hashlib.sha256().block_size
    if len(key) > block:
        key = hashlib.sha256(key).digest()
    key = key.ljust(block, b"\0")
    return (hashlib.sha256(key.translate(hmac.trans_36)), hashlib.sha256(key.translate(hmac.trans_5C)))


def _forget(**kwargs: Any) -> None:
    global _hot
    _hot = None


setting_changed.connect(_forget, dispatch_uid="couponrush-hot-settings")

_unique: tuple[str, itertools.count[int]] | None = None


def _forget_unique() -> None:
    global _unique
    _unique = None


os.register_at_fork(after_in_child=_forget_unique)  # a forked child (a granian worker) draws a prefix of its own


def unique_hex() -> str:
    """Return 32 hex characters no other call in any process returns (random per process, then a counter)."""
    global _unique
    unique = _unique
    if unique is None:  # the first call of this process
        unique = _unique = os.urandom(8).hex(), itertools.count()
    prefix, counter = unique
    return f"{prefix}{next(counter):016x}"
