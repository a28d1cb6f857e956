"""This worker's storefront keys, in memory: the claim checks a keyed token with a dict lookup, never a database or
Redis round trip (docs/design.md, Storefronts as clients).

A thread of the process keeps the keys current: once a second it reads a version in Redis (one GET) and, when it
changed, reads the live keys from PostgreSQL and swaps the whole ring at once; every RELOAD_SECONDS it reads them
anyway (a change whose version was lost with Redis). Every change (storefronts/services.py) writes a new version
after its commit, so a revoked key is refused by every worker within POLL_SECONDS plus one read of the keys.

Each web worker starts the thread as it makes its application (config/asgi.py), so its first read is done before
the first keyed token comes, which otherwise waits for it (at most FIRST_LOAD_WAIT, once a process); tokens of the
default key never touch the ring."""
from __future__ import annotations

import hashlib
import hmac
import itertools
import logging
import os
import threading
import time
from dataclasses import dataclass, field

from django.db import connection

from core.auth import SigningKey
from core.hot import unique_hex

log = logging.getLogger(__name__)

VERSION_KEY = "couponrush:storefront-keys:version"
POLL_SECONDS = 1.0  # the version in Redis is read at most once a second
RELOAD_SECONDS = 60.0
FIRST_LOAD_WAIT = 3.0


@dataclass(frozen=True)
class Ring:
    keys: dict[str, SigningKey]
    api_keys: tuple[tuple[bytes, SigningKey], ...]  # (SHA-256 of the api_key, its key)
    version: bytes | None
    ticket: int = 0  # which read this is: a read begun earlier never replaces one begun later
    loaded_at: float = field(default_factory=time.monotonic)


def api_key_digest(api_key: str) -> bytes:
    return hashlib.sha256(api_key.encode()).digest()


def read_ring(version: bytes | None, ticket: int = 0) -> Ring:
    """The live keys as PostgreSQL holds them now, their secrets decrypted (a key no configured encryption key
    opens is left out, and logged: its tokens are refused)."""
    from .crypto import decrypt
    from .models import StorefrontKey

    keys: dict[str, SigningKey] = {}
    api_keys: list[tuple[bytes, SigningKey]] = []
    for row in StorefrontKey.objects.live().select_related("storefront"):
        try:
            secret = decrypt(row.secret_encrypted)
        except Exception:
            log.error("storefront key %s: its secret does not decrypt with COUPONS_STOREFRONT_ENCRYPTION_KEYS",
                      row.key_id)
            continue
        key = SigningKey.of(key_id=row.key_id, storefront_id=row.storefront_id,
                            channels=frozenset(row.storefront.channels), secret=secret)
        keys[row.key_id] = key
        api_keys.append((bytes.fromhex(row.api_key_sha256), key))
    return Ring(keys, tuple(api_keys), version, ticket)


def read_version() -> bytes | None:
    from campaigns.redis_state import redis_client

    value = redis_client().get(VERSION_KEY)
    return value if isinstance(value, bytes) or value is None else str(value).encode()


def announce_change() -> None:
    """Tell every worker the keys changed (a new version in Redis). Call after the change's commit."""
    from campaigns.redis_state import redis_client

    redis_client().set(VERSION_KEY, unique_hex())


class Keyring:
    def __init__(self) -> None:
        self._forked()
        os.register_at_fork(after_in_child=self._forked)  # a forked worker reads its own, with its own thread

    def forget(self) -> None:
        """Hold no keys and stop the thread (tests: the next keyed token starts over)."""
        with self._lock:
            self._forked()

    def _forked(self) -> None:
        self._generation = getattr(self, "_generation", 0) + 1
        self._ring: Ring | None = None
        self._lock = threading.Lock()
        self._first = threading.Event()
        self._running = False
        self._deadline = 0.0
        self._warned_at = -RELOAD_SECONDS
        self._tickets = itertools.count(1)

    def key(self, key_id: str) -> SigningKey | None:
        """The live key `key_id`, from memory (core.auth's lookup)."""
        ring = self._ring
        if ring is None:
            ring = self._first_ring()
            if ring is None:
                return None
        return ring.keys.get(key_id)

    def api_key_owner(self, api_key: str) -> SigningKey | None:
        """The live key whose api_key this is, compared in constant time with every live one (hmac.compare_digest),
        or None."""
        ring = self._ring or self._first_ring()
        if ring is None:
            return None
        digest = api_key_digest(api_key)
        found = None
        for known, key in ring.api_keys:
            if hmac.compare_digest(digest, known):
                found = key
        return found

    def refresh(self) -> Ring:
        """Read the keys now, in this thread (tests; the refresher's own reads)."""
        ticket = next(self._tickets)
        try:
            version = read_version()
        except Exception:
            version = None
        ring = read_ring(version, ticket)
        self._hold(ring, self._generation)
        return ring

    def _hold(self, ring: Ring, generation: int) -> None:
        """Hold `ring` unless forgotten meanwhile or a read begun later is held already."""
        with self._lock:
            current = self._ring
            if generation == self._generation and (current is None or current.ticket < ring.ticket):
                self._ring = ring
                self._first.set()

    def _first_ring(self) -> Ring | None:
        """Start the thread; wait for its first read, but only within FIRST_LOAD_WAIT of its start (a database
        away then: keyed tokens are refused at once until it answers)."""
        self.start()
        self._first.wait(max(0.0, self._deadline - time.monotonic()))
        return self._ring

    def start(self) -> None:
        """Start this process's refresher thread (once): its first read then comes before the first keyed token."""
        with self._lock:
            if self._running:
                return
            self._running = True
            self._deadline = time.monotonic() + FIRST_LOAD_WAIT
        threading.Thread(target=self._refresh_forever, args=(self._generation,), name="storefront-keys",
                         daemon=True).start()

    def _refresh_forever(self, generation: int) -> None:
        while generation == self._generation:
            try:
                self._refresh_if_changed(generation)
            except Exception:  # PostgreSQL or Redis away: keep the keys held, try again next time
                if generation != self._generation:  # forgotten meanwhile (a test's end): nothing to warn of
                    break
                if time.monotonic() - self._warned_at >= RELOAD_SECONDS:  # a line a minute, not a second
                    self._warned_at = time.monotonic()
                    log.warning("could not refresh the storefront keys", exc_info=True)
            finally:
                connection.close()  # this thread's connection: none held between reads
            time.sleep(POLL_SECONDS)

    def _refresh_if_changed(self, generation: int) -> None:
        ring = self._ring
        stale = ring is None or time.monotonic() - ring.loaded_at >= RELOAD_SECONDS
        ticket = next(self._tickets)
        try:
            version = read_version()
        except Exception:  # Redis away: the keys are still read from PostgreSQL every RELOAD_SECONDS
            version = ring.version if ring is not None else None
        if stale or ring is None or version != ring.version:
            self._hold(read_ring(version, ticket), generation)


KEYRING = Keyring()
