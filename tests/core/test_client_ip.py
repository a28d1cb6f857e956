"""The client the per-address limits count (core.http.client_ip): an IPv4 address, or an IPv6 address's /64,
whether the address is the peer's or a trusted proxy's X-Forwarded-For; and a claim's per-address limit
counted that way."""
from __future__ import annotations

import pytest
from django.test import override_settings

from core.http import client_ip

from ..conftest import in_one_second, shopper_headers


@pytest.mark.parametrize(("remote", "counted"), [
    ("203.0.113.7", "203.0.113.7"),
    ("2001:db8:1:2::1", "2001:db8:1:2::/64"),
    ("2001:0DB8:0001:0002:ffff:ffff:ffff:ffff", "2001:db8:1:2::/64"),  # the other end of the same /64
    ("2001:db8:1:3::1", "2001:db8:1:3::/64"),
    ("::ffff:203.0.113.7", "203.0.113.7"),  # IPv4 over an IPv6 socket: the IPv4 client
    ("fe80::1%eth0", "fe80::/64"),
    ("::1", "::/64"),
    ("not an address", None),
    ("", None),
])
def test_an_ipv6_client_is_its_64(remote, counted) -> None:
    assert client_ip({"REMOTE_ADDR": remote}) == counted


@override_settings(COUPONS_TRUSTED_PROXY_HOPS=1, COUPONS_TRUSTED_PROXIES=["10.0.0.1/32", "fd00::1/128"])
def test_a_forwarded_ipv6_client_is_its_64_too() -> None:
    assert client_ip({"REMOTE_ADDR": "10.0.0.1", "HTTP_X_FORWARDED_FOR": "2001:db8:aa:bb:1:2:3:4"}) == (
        "2001:db8:aa:bb::/64")
    assert client_ip({"REMOTE_ADDR": "fd00::1", "HTTP_X_FORWARDED_FOR": "198.51.100.4"}) == "198.51.100.4"
    # The proxy itself on IPv6 but not trusted at that address: the peer's own /64.
    assert client_ip({"REMOTE_ADDR": "fd00::2", "HTTP_X_FORWARDED_FOR": "198.51.100.4"}) == "fd00::/64"


@pytest.mark.django_db
@override_settings(COUPONS_RATE_LIMIT_IP_PER_SECOND=2)
def test_addresses_of_one_64_share_the_claims_per_address_limit_and_another_64_does_not(
        client, live_campaign) -> None:
    """A client rotating through the addresses of its /64 (2^64 of them) is one client."""
    campaign = live_campaign(total_stock=100, per_user_limit=1)

    def claim(user: str, remote: str) -> int:
        return client.post(f"/api/v1/campaigns/{campaign.pk}/claim", "{}", "application/json",
                           **shopper_headers(user, REMOTE_ADDR=remote)).status_code

    rotating, other = in_one_second(lambda run: (
        [claim(f"r{run}-{i}", f"2001:db8:1:2::{i + 1:x}") for i in range(5)],
        claim(f"o{run}", "2001:db8:1:3::1")))

    assert rotating == [200, 200, 429, 429, 429] and other == 200
