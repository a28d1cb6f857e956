"""The unknown-code guard on a Redis Cluster: the shopper's counter and the address's sit on different masters,
each counted by its own atomic take (coupons/guard.py), and the limit still holds exactly."""
from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from django.test import override_settings
from redis.cluster import key_slot

from campaigns.models import Campaign
from campaigns.redis_state import redis_client
from coupons.guard import CodeLookups, TooManyMisses, miss_counters
from tests.conftest import shopper_headers
from tests.coupons.helpers import issued_coupon

from .conftest import SLOT_RANGES, Cluster

ORDER = {"order_id": "A-1", "order_amount": "350.00", "currency": "CNY"}


def master_of(key: str) -> int:
    slot = key_slot(key.encode())
    return next(i for i, (low, high) in enumerate(SLOT_RANGES) if low <= slot <= high)


@pytest.mark.django_db
@override_settings(COUPONS_CODE_MISSES_PER_MINUTE=5, COUPONS_CODE_MISSES_PER_IP_PER_MINUTE=1000)
def test_the_guard_counts_exactly_the_limit_with_its_counters_on_two_masters(
        on_cluster: Cluster, client, live_campaign: Callable[..., Campaign]) -> None:
    # given: a shopper whose counter and address's counter are on two masters, and her own coupon
    user = next(f"shopper-{i}" for i in range(100)
                if len({master_of(key) for key, _ in miss_counters(f"shopper-{i}", "127.0.0.1")}) == 2)
    coupon = issued_coupon(live_campaign, user)
    results: list[bool] = []

    def take() -> None:
        try:
            CodeLookups(user, "127.0.0.1").take(1)
            results.append(True)
        except TooManyMisses:
            results.append(False)

    # when: 3 takes at once, then guesses and her own coupon through the API
    threads = [threading.Thread(target=take) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    guesses = [client.post(f"/api/v1/coupons/GUESS{i}/redeem", ORDER, content_type="application/json",
                           **shopper_headers(user, HTTP_IDEMPOTENCY_KEY=f"g{i}")).status_code for i in range(3)]
    own = client.post(f"/api/v1/coupons/{coupon.code}/redeem", ORDER, content_type="application/json",
                      **shopper_headers(user, HTTP_IDEMPOTENCY_KEY="own"))

    # then: 3 + 2 looked up, the third guess refused; her own coupon redeemed; both counters at the limit
    assert results == [True] * 3 and guesses == [404, 404, 429]
    assert own.status_code == 200 and own.json()["status"] == "redeemed"
    assert [int(redis_client().get(key)) for key, _ in miss_counters(user, "127.0.0.1")] == [5, 5]


@pytest.mark.django_db
def test_a_master_that_lost_the_guards_script_never_makes_the_other_count_twice(on_cluster: Cluster) -> None:
    # given: a shopper whose counter and address's counter are on two masters, one take counted on both
    user = next(f"shopper-{i}" for i in range(100)
                if len({master_of(key) for key, _ in miss_counters(f"shopper-{i}", "127.0.0.1")}) == 2)
    CodeLookups(user, "127.0.0.1").take(1)
    counters = [key for key, _ in miss_counters(user, "127.0.0.1")]
    # when: one of the two masters loses its scripts (SCRIPT FLUSH, a restart), and the shopper takes again
    flushed = on_cluster.node(on_cluster.ports[master_of(counters[0])])
    flushed.script_flush()
    CodeLookups(user, "127.0.0.1").take(1)
    # then: the script was sent whole to that master only; each counter counted the take once
    assert [int(redis_client().get(key)) for key in counters] == [2, 2]
    flushed.close()
