"""The storefront keys' secrets at rest: Fernet (AES-128-CBC + HMAC-SHA256) with COUPONS_STOREFRONT_ENCRYPTION_KEYS
(the first encrypts, every one decrypts), so a database dump alone hands out no secret."""
from __future__ import annotations

from cryptography.fernet import Fernet, MultiFernet
from django.conf import settings

_fernet: tuple[tuple[str, ...], MultiFernet] | None = None


def fernet() -> MultiFernet:
    global _fernet
    keys = tuple(settings.COUPONS_STOREFRONT_ENCRYPTION_KEYS)
    if _fernet is None or _fernet[0] != keys:
        _fernet = keys, MultiFernet([Fernet(key) for key in keys])
    return _fernet[1]


def encrypt(secret: str) -> str:
    return fernet().encrypt(secret.encode()).decode("ascii")


def decrypt(stored: str) -> str:
    """Raise cryptography.fernet.InvalidToken when no configured key opened it."""
    return fernet().decrypt(stored.encode("ascii")).decode()


def reencrypt(stored: str) -> str:
    """`stored` encrypted again with the first key (MultiFernet.rotate)."""
    return fernet().rotate(stored.encode("ascii")).decode("ascii")
