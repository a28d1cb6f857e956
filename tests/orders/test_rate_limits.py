"""Rate limits of the claim: counted in the claim script (no extra round trip), 429 with Retry-After,
never stored under an Idempotency-Key; and unknown coupon codes are limited per shopper."""
from __future__ import annotations

import pytest
from django.test import override_settings

from campaigns.redis_state import campaign_keys, redis_client
from orders.models import Claim

from ..conftest import in_one_second, shopper_headers

pytestmark = pytest.mark.django_db


def claim(client, campaign, user: str, **headers: str):
    return client.post(f"/api/v1/campaigns/{campaign.pk}/claim", "{}", "application/json",
                       **shopper_headers(user, **headers))


def stock(campaign) -> int:
    return int(redis_client().get(campaign_keys(campaign.pk).stock))


@override_settings(COUPONS_RATE_LIMIT_SHOPPER_PER_SECOND=3)
def test_a_shopper_above_their_rate_is_answered_429_and_nothing_changes(client, live_campaign) -> None:
    campaign = live_campaign(total_stock=50, per_user_limit=50)

    before, answers = in_one_second(lambda _: (stock(campaign), [claim(client, campaign, "ann") for _ in range(5)]))

    assert [a.status_code for a in answers] == [200, 200, 200, 429, 429]
    assert answers[3].json()["status"] == "rate_limited" and answers[3]["Retry-After"] == "1"
    assert stock(campaign) == before - 3


@override_settings(COUPONS_RATE_LIMIT_SHOPPER_PER_SECOND=1)
def test_a_429_is_not_stored_under_the_idempotency_key(client, live_campaign) -> None:
    campaign = live_campaign(total_stock=5, per_user_limit=5)
    claim(client, campaign, "ann", HTTP_IDEMPOTENCY_KEY="first")

    limited = claim(client, campaign, "ann", HTTP_IDEMPOTENCY_KEY="second")

    assert limited.status_code in (429, 200)
    if limited.status_code == 429:
        assert not redis_client().exists(campaign_keys(campaign.pk).idempotency("ann", "second"))


def test_a_campaign_admits_its_rate_per_second_and_no_more(client, live_campaign) -> None:
    campaign = live_campaign(total_stock=100, per_user_limit=1, rate_limit=4)

    statuses = in_one_second(lambda run: [claim(client, campaign, f"s{run}-{i}").status_code for i in range(8)])

    assert statuses == [200] * 4 + [429] * 4


@override_settings(COUPONS_RATE_LIMIT_IP_PER_SECOND=2)
def test_one_address_above_its_rate_is_limited_and_another_is_not(client, live_campaign) -> None:
    campaign = live_campaign(total_stock=100, per_user_limit=1)

    same, other = in_one_second(lambda run: (
        [claim(client, campaign, f"a{run}-{i}", REMOTE_ADDR="10.0.0.7").status_code for i in range(5)],
        claim(client, campaign, f"b{run}", REMOTE_ADDR="10.0.0.8").status_code))

    assert same == [200, 200, 429, 429, 429] and other == 200


@override_settings(COUPONS_RATE_LIMIT_IP_PER_SECOND=2, COUPONS_TRUSTED_PROXY_HOPS=1,
                   COUPONS_TRUSTED_PROXIES=["10.0.0.1/32"])
def test_behind_a_trusted_proxy_the_forwarded_address_is_the_one_limited(client, live_campaign) -> None:
    campaign = live_campaign(total_stock=100, per_user_limit=1)

    via_proxy = [claim(client, campaign, f"p{i}", REMOTE_ADDR="10.0.0.1",
                       HTTP_X_FORWARDED_FOR=f"198.51.100.{i}").status_code for i in range(5)]

    assert via_proxy == [200] * 5  # five shoppers behind one proxy, five addresses


@override_settings(COUPONS_RATE_LIMIT_IP_PER_SECOND=2, COUPONS_TRUSTED_PROXY_HOPS=1,
                   COUPONS_TRUSTED_PROXIES=["10.0.0.1/32"])
def test_a_forwarded_address_from_a_peer_that_is_not_a_trusted_proxy_is_ignored(client, live_campaign) -> None:
    campaign = live_campaign(total_stock=100, per_user_limit=1)

    forged = in_one_second(lambda run: [claim(client, campaign, f"f{run}-{i}", REMOTE_ADDR="10.0.0.9",
                                              HTTP_X_FORWARDED_FOR=f"198.51.100.{i}").status_code
                                        for i in range(5)])

    assert forged == [200, 200, 429, 429, 429]  # one address: the peer's


@override_settings(COUPONS_CODE_MISSES_PER_MINUTE=3)
def test_repeated_unknown_codes_by_one_shopper_are_rate_limited(client) -> None:
    body = '{"order_id": "A1", "order_amount": "350.00", "currency": "CNY"}'

    answers = [client.post(f"/api/v1/coupons/AAAA-BBBB-CC{i:02d}/redeem".replace("0", "2"), body,
                           "application/json", **shopper_headers("guesser", HTTP_IDEMPOTENCY_KEY=f"k{i}"))
               for i in range(5)]
    other = client.post("/api/v1/coupons/AAAA-BBBB-CCCC/redeem", body, "application/json",
                        **shopper_headers("honest", HTTP_IDEMPOTENCY_KEY="k"))

    assert [a.status_code for a in answers] == [404, 404, 404, 429, 429]
    assert answers[3].json()["status"] == "rate_limited" and other.status_code == 404
    assert Claim.objects.count() == 0
