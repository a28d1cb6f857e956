"""A claim storm through the real HTTP server: exact totals afterwards, never an oversell."""
from __future__ import annotations

import http.client
import json
import random
import threading
import urllib.parse
from collections import Counter

import pytest

from campaigns.redis_state import campaign_keys, redis_client
from core.auth import mint_token
from coupons.models import Coupon
from orders.drain import drain_campaign
from orders.models import Claim
from orders.verify import campaign_verify

STOCK, LIMIT, SHOPPERS, THREADS, CLAIMS_PER_THREAD = 200, 2, 1000, 16, 200


@pytest.mark.slow
def test_storm_of_3200_claims_by_1000_shoppers_sells_exactly_the_stock(http_server, live_campaign) -> None:
    # Given a live campaign of 200 coupons, 2 per shopper, and 1,000 shoppers with valid tokens
    campaign = live_campaign(total_stock=STOCK, per_user_limit=LIMIT)
    tokens = {f"s{i:04d}": mint_token(f"s{i:04d}", ttl=900) for i in range(SHOPPERS)}
    url = urllib.parse.urlsplit(http_server)
    answers: list[tuple[str, int, dict]] = []
    lock = threading.Lock()

    def storm(seed: int) -> None:
        rng = random.Random(seed)
        conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
        mine = []
        for _ in range(CLAIMS_PER_THREAD):
            user = rng.choice(list(tokens))
            conn.request("POST", f"/api/v1/campaigns/{campaign.pk}/claim", body="{}", headers={
                "X-User-Id": user, "X-Token": tokens[user], "Content-Type": "application/json"})
            response = conn.getresponse()
            mine.append((user, response.status, json.loads(response.read())))
        conn.close()
        with lock:
            answers.extend(mine)

    # When 16 threads send 3,200 claims at once
    threads = [threading.Thread(target=storm, args=(i,)) for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    # Then exactly 200 were claimed, nobody above 2, every other answer a clean refusal
    assert len(answers) == THREADS * CLAIMS_PER_THREAD
    assert {status for _, status, _ in answers} == {200}
    outcomes = Counter(body["status"] for _, _, body in answers)
    assert outcomes["claimed"] == STOCK
    assert set(outcomes) <= {"claimed", "sold_out", "limit_reached"}
    wins = Counter(user for user, _, body in answers if body["status"] == "claimed")
    assert max(wins.values()) <= LIMIT
    claim_ids = {body["claim_id"] for _, _, body in answers if body["status"] == "claimed"}
    assert len(claim_ids) == STOCK
    assert int(redis_client().get(campaign_keys(campaign.pk).stock)) == 0

    # And after the drain exactly 200 coupons, one per claim, to the shoppers who were told they won
    drain_campaign(campaign_id=campaign.pk)
    assert set(Claim.objects.filter(campaign=campaign).values_list("claim_id", flat=True)) == claim_ids
    coupons = Counter(Coupon.objects.filter(campaign=campaign).values_list("user_id", flat=True))
    assert coupons == wins
    assert sum(coupons.values()) == STOCK
    assert campaign_verify(campaign=campaign).balanced
