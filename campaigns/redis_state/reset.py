"""reset_redis_client: the one place that forgets what the process holds of Redis."""
from __future__ import annotations

from . import buckets, clients, lua, recovery


def reset_redis_client() -> None:
    """Forget the process's clients and everything learnt through them (after a settings change in tests, or a
    fork): the sync client, its scripts and the recovery client; every event loop's client, a running loop's
    included (each thread's last one, _this_thread); the campaigns' bucket counts and empty buckets; Redis's
    clock offset."""
    with clients.client_lock:
        clients.forget_clients()
        lua.forget_scripts()
        buckets.forget_bucket_counts()
        recovery.forget_clock()
