"""Storefront clients' use cases (admin and commands): add one with its first key, rotate (a new key beside the
others), revoke a key, re-encrypt the secrets with the newest encryption key. Every change tells the workers after
its commit (keyring.announce_change): a revoked key is refused everywhere within 2 s."""
from __future__ import annotations

import hashlib
import logging
import re
import secrets
from collections.abc import Iterable
from dataclasses import asdict, dataclass

from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext

from .crypto import encrypt, reencrypt
from .keyring import announce_change
from .models import CHANNEL_PATTERN, Storefront, StorefrontKey

log = logging.getLogger(__name__)

CHANNEL_RE = re.compile(CHANNEL_PATTERN)
MAX_CHANNELS = 10


class StorefrontRefused(ValueError):
    """What an operator asked for can't be done (the message says why)."""


@dataclass(frozen=True)
class IssuedKey:
    """A new key as its storefront receives it, once: nothing but the key id can be read back."""

    key_id: str
    secret: str
    api_key: str

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


def channels_of(value: str | Iterable[str] | None) -> list[str]:
    """Channels as "web,app" or a list: each 1-32 of a-z 0-9 _ -, at most 10, in order, no repeats."""
    names = value.split(",") if isinstance(value, str) else list(value or ())
    names = [name.strip() for name in names if name.strip()]
    wrong = [name for name in names if CHANNEL_RE.fullmatch(name) is None]
    if wrong:
        raise StorefrontRefused(gettext("A channel is 1-32 of a-z 0-9 _ -: %(wrong)s") % {"wrong": ", ".join(wrong)})
    unique = list(dict.fromkeys(names))
    if len(unique) > MAX_CHANNELS:
        raise StorefrontRefused(gettext("At most %(n)d channels.") % {"n": MAX_CHANNELS})
    return unique


def _announce_after_commit() -> None:
    transaction.on_commit(_announce, robust=True)


def _announce() -> None:
    try:
        announce_change()
    except Exception:
        log.error("the storefront keys changed but Redis could not be told: every worker reads the keys again "
                  "within a minute", exc_info=True)


def storefront_key_issue(*, storefront: Storefront) -> IssuedKey:
    """Give `storefront` a new key (its secret and api_key returned once). Call inside transaction.atomic."""
    issued = IssuedKey(key_id=f"sf_{secrets.token_hex(8)}", secret=secrets.token_urlsafe(32),
                       api_key=f"cr_{secrets.token_urlsafe(32)}")
    StorefrontKey.objects.create(key_id=issued.key_id, storefront=storefront, secret_encrypted=encrypt(issued.secret),
                                 api_key_sha256=hashlib.sha256(issued.api_key.encode()).hexdigest())
    _announce_after_commit()
    return issued


@transaction.atomic
def storefront_add(*, name: str, channels: str | Iterable[str] | None = None) -> tuple[Storefront, IssuedKey]:
    """Register a storefront client with its first key."""
    name = name.strip()
    if not name or len(name) > 100:
        raise StorefrontRefused(gettext("A storefront's name is 1-100 characters."))
    if Storefront.objects.filter(name=name).exists():
        raise StorefrontRefused(gettext("A storefront named %(name)s exists already.") % {"name": name})
    storefront = Storefront.objects.create(name=name, channels=channels_of(channels))
    return storefront, storefront_key_issue(storefront=storefront)


def storefront_change(*, storefront: Storefront, name: str, channels: str | Iterable[str] | None) -> Storefront:
    """Rename a storefront or change its channels (its shoppers' identity carries them: every worker is told)."""
    with transaction.atomic():
        storefront.name = name.strip()
        storefront.channels = channels_of(channels)
        storefront.save(update_fields=["name", "channels"])
        _announce_after_commit()
    return storefront


def _key(key_id: str) -> StorefrontKey:
    key = StorefrontKey.objects.select_for_update().filter(key_id=key_id).first()
    if key is None:
        raise StorefrontRefused(gettext("No storefront key %(key_id)s.") % {"key_id": key_id})
    return key


@transaction.atomic
def storefront_key_rotate(*, key_id: str) -> IssuedKey:
    """A new key for the storefront of `key_id`; both stay valid until the old one is revoked."""
    return storefront_key_issue(storefront=_key(key_id).storefront)


@transaction.atomic
def storefront_key_revoke(*, key_id: str) -> StorefrontKey:
    """Revoke `key_id`: its tokens and api_key are refused on every worker within 2 s (again: nothing changes)."""
    key = _key(key_id)
    if key.revoked_at is None:
        key.revoked_at = timezone.now()
        key.save(update_fields=["revoked_at"])
        _announce_after_commit()
    return key


def storefront_secrets_reencrypt() -> int:
    """Encrypt every key's secret again with the first of COUPONS_STOREFRONT_ENCRYPTION_KEYS (after a new one was
    put first); return how many. The older encryption keys may then be dropped."""
    count = 0
    with transaction.atomic():
        for key in StorefrontKey.objects.select_for_update().order_by("pk"):
            key.secret_encrypted = reencrypt(key.secret_encrypted)
            key.save(update_fields=["secret_encrypted"])
            count += 1
    return count
