"""How many status requests a claimed shopper sends until the coupon shows: the storefront's old pattern (GET
/claims/{id} every 400 ms) against its long poll (?wait=20), over the real server, with a drain that runs every
second as the worker's trigger and beat would (issue 35, goal 2)."""
from __future__ import annotations

import json
import threading
import time
import urllib.request

import pytest
from django.db import connection

from campaigns.redis_state import run_claim
from orders.drain import drain_campaign
from tests.conftest import shopper_headers

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]
SHOPPERS = 20


def status(base: str, claim_id: str, user_id: str, query: str = "") -> str:
    headers = {"X-User-Id": user_id, "X-Token": shopper_headers(user_id)["HTTP_X_TOKEN"]}
    request = urllib.request.Request(f"{base}/api/v1/claims/{claim_id}{query}", headers=headers)
    with urllib.request.urlopen(request, timeout=30) as response:
        return str(json.loads(response.read())["status"])


def follow(base: str, claim_id: str, user_id: str, long_poll: bool) -> int:
    """The storefront's loop (static/storefront/app.js, before and after): requests until issued."""
    asked = 0
    if not long_poll:
        time.sleep(0.4)
    while True:
        asked += 1
        if status(base, claim_id, user_id, "?wait=20" if long_poll else "") == "issued":
            return asked
        if not long_poll:
            time.sleep(0.4)


def requests_per_shopper(base: str, campaign_id: int, long_poll: bool, tag: str) -> list[int]:
    counts: list[int] = []
    lock = threading.Lock()

    def shopper(n: int) -> None:
        user_id = f"{tag}{n}"
        result = run_claim(campaign_id=campaign_id, user_id=user_id, idempotency_key=None)
        asked = follow(base, f"{campaign_id}-{result.ledger_id}", user_id, long_poll)
        with lock:
            counts.append(asked)

    threads = [threading.Thread(target=shopper, args=(n,)) for n in range(SHOPPERS)]
    for thread in threads:
        thread.start()
        time.sleep(0.05)  # claims spread over a second, as a sale's clicks
    for thread in threads:
        thread.join(60)
    return counts


def test_a_long_polling_shopper_asks_once_where_polling_asked_several(live_campaign, http_server) -> None:
    campaign = live_campaign(total_stock=1000, per_user_limit=1)
    stop = threading.Event()

    def drain_every_second() -> None:
        try:
            while not stop.wait(1.0):
                drain_campaign(campaign_id=campaign.pk)
        finally:
            connection.close()  # this thread's own

    drainer = threading.Thread(target=drain_every_second)
    drainer.start()
    try:
        polled = requests_per_shopper(http_server, campaign.pk, long_poll=False, tag="p")
        long_polled = requests_per_shopper(http_server, campaign.pk, long_poll=True, tag="l")
    finally:
        stop.set()
        drainer.join()
    print(f"requests per shopper until issued: polling every 400 ms mean {sum(polled) / len(polled):.2f} "
          f"(max {max(polled)}), long poll mean {sum(long_polled) / len(long_polled):.2f} (max {max(long_polled)})")
    assert len(polled) == len(long_polled) == SHOPPERS
    assert max(long_polled) == 1
    assert sum(polled) > sum(long_polled)
