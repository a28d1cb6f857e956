"""storefront_revoke reaches every worker of a running server within 2 seconds, without a restart (docs/api.md,
Shoppers: Storefront keys): the server is another process (the run command's, its workers each holding the keys),
the keys' version lives in the real Redis, and both doors are asked: the claim's on the event loop, and Django's."""
from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from devstack import resolve, web_command
from storefronts.services import storefront_add, storefront_key_revoke, storefront_key_rotate

from ..conftest import free_port, serving
from .conftest import signed

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def two_workers(transactional_db: Any) -> Iterator[str]:
    """The run command's server with two worker processes, against the test database and Redis."""
    port = free_port()
    with serving([*resolve(web_command(port)), "--workers", "2"], port) as url:
        yield url


def answer(url: str, user_id: str, token: str, *, claim: bool) -> int:
    request = urllib.request.Request(url, method="POST" if claim else "GET", data=b"{}" if claim else None,
                                     headers={"X-User-Id": user_id, "X-Token": token,
                                              "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=5) as reply:
            return reply.status
    except urllib.error.HTTPError as error:
        return error.code


def test_a_revoked_key_is_refused_by_every_worker_within_two_seconds(two_workers: str, live_campaign: Any) -> None:
    campaign = live_campaign(total_stock=10_000, per_user_limit=10_000)
    claim_url, coupons_url = f"{two_workers}/api/v1/campaigns/{campaign.pk}/claim", f"{two_workers}/api/v1/me/coupons"
    _, old = storefront_add(name="Web shop")
    new = storefront_key_rotate(key_id=old.key_id)
    old_token, new_token = signed(old.secret, "ann", key_id=old.key_id), signed(new.secret, "ann", key_id=new.key_id)

    def refused() -> bool:
        return answer(claim_url, "ann", old_token, claim=True) == 401 and \
            answer(coupons_url, "ann", old_token, claim=False) == 401

    time.sleep(2.0)  # a new key reaches every worker within 2 s too (each read its keys as it started)
    for _ in range(20):  # each new connection lands on either worker: both hold the keys
        assert answer(claim_url, "ann", old_token, claim=True) == 200
        assert answer(coupons_url, "ann", old_token, claim=False) == 200

    storefront_key_revoke(key_id=old.key_id)
    revoked_at = time.monotonic()
    while not refused():
        assert time.monotonic() - revoked_at < 2.0, "the revoked key was still accepted after 2 s"
        time.sleep(0.02)
    first_refusal = time.monotonic() - revoked_at
    time.sleep(max(0.0, revoked_at + 2.0 - time.monotonic()))
    answers = [(answer(claim_url, "ann", old_token, claim=True), answer(coupons_url, "ann", old_token, claim=False))
               for _ in range(30)]
    assert set(answers) == {(401, 401)}, f"first refusal after {first_refusal:.2f} s, then {answers}"
    assert answer(claim_url, "ann", new_token, claim=True) == 200  # the rotated key goes on
    assert answer(coupons_url, "ann", new_token, claim=False) == 200
