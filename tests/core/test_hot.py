"""core/hot.py: the claim path's cached settings follow every change, and its ids never repeat."""
from __future__ import annotations

import os

from django.test import override_settings

from core.auth import authenticate, mint_token
from core.hot import hot, unique_hex


def test_the_cached_settings_follow_a_changed_setting() -> None:
    token = mint_token("ann", ttl=600)
    with override_settings(COUPONS_TOKEN_SECRET="another-secret-for-this-test", COUPONS_RATE_LIMIT_IP_PER_SECOND=7):
        assert hot().ip_per_second == 7
        assert authenticate("ann", token) is None  # signed with the other secret
        assert authenticate("ann", mint_token("ann", ttl=600)) == "ann"
    assert authenticate("ann", token) == "ann" and hot().ip_per_second != 7


def test_unique_ids_never_repeat_in_a_process_nor_in_a_forked_child() -> None:
    ids = {unique_hex() for _ in range(10_000)}
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # the child reports its ids and leaves at once
        os.write(write, "\n".join(unique_hex() for _ in range(100)).encode())
        os._exit(0)
    os.close(write)
    os.waitpid(child, 0)
    with os.fdopen(read) as pipe:
        child_ids = set(pipe.read().split("\n"))
    assert len(ids) == 10_000 and len(child_ids) == 100 and not ids & child_ids
    assert all(len(i) == 32 and int(i, 16) >= 0 for i in ids | child_ids)
