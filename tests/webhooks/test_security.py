"""Webhook security: no private address (SSRF) at registration or at delivery, and the secret goes nowhere."""
from __future__ import annotations

import logging
import socket
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.utils import timezone

from webhooks.addresses import Refused
from webhooks.delivery import deliver_due
from webhooks.models import Delivery, DeliveryState, WebhookEndpoint
from webhooks.services import endpoint_add

from ..coupons.helpers import claimed_coupon
from .conftest import SECRET

pytestmark = pytest.mark.django_db

REFUSED_URLS = [
    "http://127.0.0.1/hook",
    "http://127.8.9.10:8080/hook",
    "http://10.1.2.3/hook",
    "http://172.16.0.1/hook",
    "http://192.168.1.1/hook",
    "http://169.254.169.254/latest/meta-data/",
    "http://100.64.0.1/hook",
    "http://0.0.0.0/hook",
    "http://224.0.0.1/hook",
    "http://[::1]/hook",
    "http://[::ffff:127.0.0.1]/hook",
    "http://[::ffff:10.0.0.1]/hook",
    "http://[fe80::1]/hook",
    "http://[fc00::1]/hook",
    "http://[64:ff9b::7f00:1]/hook",
    "http://localhost:8000/hook",
    "ftp://example.com/hook",
    "http://user:pass@example.com/hook",
    "not a url",
]


@pytest.mark.parametrize("url", REFUSED_URLS)
def test_urls_to_private_addresses_are_refused_with_the_setting_off(url, settings) -> None:
    settings.COUPONS_WEBHOOK_ALLOW_PRIVATE = False
    with pytest.raises(Refused):
        endpoint_add(url=url, secret=SECRET)
    assert not WebhookEndpoint.objects.exists()


@pytest.mark.parametrize("url", ["http://169.254.169.254/latest/meta-data/", "http://[fe80::1]/hook",
                                 "http://0.0.0.0:9911/hook", "http://224.0.0.1/hook", "http://[::ffff:169.254.1.1]/h"])
def test_the_private_setting_lets_no_link_local_multicast_or_unspecified_address_through(url, settings) -> None:
    # Given the development setting that lets loopback and private addresses through
    settings.COUPONS_WEBHOOK_ALLOW_PRIVATE = True
    # Then the metadata service, link-local, multicast and 0.0.0.0 stay refused (all were let through)
    with pytest.raises(Refused):
        endpoint_add(url=url, secret=SECRET)
    assert not WebhookEndpoint.objects.exists()
    # And what the setting is for still goes
    assert endpoint_add(url="http://127.0.0.1:9/h", secret=SECRET) and endpoint_add(url="http://10.0.0.5/h",
                                                                                    secret=SECRET)


def resolving(monkeypatch, names: dict[str, str]) -> None:
    real = socket.getaddrinfo

    def fake(host, port, *args, **kwargs):  # the name server of this test
        if host in names:
            family = socket.AF_INET6 if ":" in names[host] else socket.AF_INET
            return [(family, socket.SOCK_STREAM, 6, "", (names[host], port))]
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", fake)


def test_a_name_resolving_to_loopback_is_refused(settings, monkeypatch) -> None:
    settings.COUPONS_WEBHOOK_ALLOW_PRIVATE = False
    resolving(monkeypatch, {"hooks.shop.example": "127.0.0.1", "v6.shop.example": "::ffff:127.0.0.1"})
    for url in ("http://hooks.shop.example/h", "https://v6.shop.example/h"):
        with pytest.raises(Refused, match="loopback"):
            endpoint_add(url=url, secret=SECRET)


def test_the_command_refuses_a_private_url_and_registers_a_public_one(settings, monkeypatch, capsys) -> None:
    settings.COUPONS_WEBHOOK_ALLOW_PRIVATE = False
    resolving(monkeypatch, {"hooks.shop.example": "93.184.215.14"})
    with pytest.raises(CommandError, match="private"):
        call_command("webhook_add", "http://10.0.0.5/h", "--secret", SECRET)
    call_command("webhook_add", "https://hooks.shop.example/h", "--secret", SECRET, "--events",
                 "coupon.redeemed,campaign.sold_out")
    import json

    printed = json.loads(capsys.readouterr().out)
    endpoint = WebhookEndpoint.objects.get(pk=printed["id"])
    assert endpoint.event_types == ["coupon.redeemed", "campaign.sold_out"] and endpoint.secret == SECRET
    with pytest.raises(CommandError, match="Unknown event types: coupon.used"):
        call_command("webhook_add", "https://hooks.shop.example/h", "--secret", SECRET, "--events", "coupon.used")


def test_a_name_that_resolves_to_loopback_at_delivery_is_not_connected_to(settings, monkeypatch, receiver,
                                                                          live_campaign) -> None:
    # Registered while the name resolved to a public address; at delivery it resolves to the receiver on loopback
    # (DNS rebinding): refused, nothing is sent.
    settings.COUPONS_WEBHOOK_ALLOW_PRIVATE = False
    port = receiver.url.split(":")[2].split("/")[0]
    resolving(monkeypatch, {"hooks.shop.example": "93.184.215.14"})
    endpoint_add(url=f"http://hooks.shop.example:{port}/hook", secret=SECRET)
    claimed_coupon(live_campaign(total_stock=5), "alice")
    resolving(monkeypatch, {"hooks.shop.example": "127.0.0.1"})

    deliver_due(max_seconds=5)

    assert receiver.received == []
    delivery = Delivery.objects.get()
    assert delivery.state == DeliveryState.PENDING and "loopback" in delivery.last_error
    assert delivery.attempt_log.get().address == ""


def test_the_secret_is_never_in_the_outbox_the_deliveries_or_the_logs(endpoint, receiver, live_campaign,
                                                                       caplog) -> None:
    caplog.set_level(logging.DEBUG)
    answers = iter([500, 200] + [200] * 10)
    receiver.answer = lambda got: next(answers)
    claimed_coupon(live_campaign(total_stock=5), "alice")
    claimed_coupon(live_campaign(total_stock=5), "bob")
    for _ in range(4):
        Delivery.objects.update(next_attempt_at=timezone.now() - timedelta(seconds=1))
        deliver_due(max_seconds=5)
    Delivery.objects.update(retry_from=timezone.now() - timedelta(days=2))
    assert len(receiver.received) >= 3

    with connection.cursor() as cursor:
        for table in ("webhooks_outboxevent", "webhooks_delivery", "webhooks_deliveryattempt"):
            cursor.execute(f"SELECT coalesce(string_agg(t::text, ' '), '') FROM {table} t")
            assert SECRET not in cursor.fetchone()[0], table
    assert SECRET not in caplog.text
    assert SECRET not in repr(endpoint) and SECRET not in str(endpoint)
    assert all(SECRET.encode() not in got.body and SECRET not in str(got.headers) for got in receiver.received)


def test_a_slow_or_huge_answer_cannot_tie_up_a_worker(monkeypatch, allow_private) -> None:
    import threading
    import time

    from webhooks import delivery

    monkeypatch.setattr(delivery, "TOTAL_TIMEOUT", 1.0)
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    sent = {"huge": 0}

    def answer() -> None:
        for kind in ("huge", "drip"):
            conn, _ = server.accept()
            conn.recv(65536)
            try:
                if kind == "huge":  # 20 MB announced and sent as fast as the client reads
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 20000000\r\n\r\n")
                    for _ in range(2000):
                        conn.sendall(b"x" * 10_000)
                        sent["huge"] += 10_000
                else:  # a status line a byte every 0.3 s: each read is quick, the whole never ends
                    for byte in b"HTTP/1.1 200 OK\r\n" * 10:
                        conn.sendall(bytes([byte]))
                        time.sleep(0.3)
            except OSError:
                pass
            finally:
                conn.close()

    threading.Thread(target=answer, daemon=True).start()
    url = f"http://127.0.0.1:{port}/h"
    started = time.monotonic()
    huge = delivery.post(url, b"{}", {})
    drip = delivery.post(url, b"{}", {})
    took = time.monotonic() - started
    server.close()

    assert huge.status == 200 and len(huge.head) == delivery.HEAD_KEPT  # read up to the cap, then hung up
    assert sent["huge"] < 20_000_000
    assert drip.status is None and "timed out" in drip.error
    assert took < 3.5
