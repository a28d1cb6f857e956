"""The console: an endpoint's secret shown once on creation, deliveries with their attempts, a retry of dead
ones; a campaign's report page with its chart and a streamed CSV."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from webhooks.delivery import deliver_due
from webhooks.models import Delivery, DeliveryState, WebhookEndpoint

from ..coupons.helpers import claimed_coupon

pytestmark = pytest.mark.django_db


def test_a_new_endpoints_secret_is_shown_once_and_never_again(admin_client, allow_private, receiver) -> None:
    answer = admin_client.post(reverse("admin:webhooks_webhookendpoint_add"),
                               {"url": receiver.url, "event_types": ["coupon.redeemed"], "active": "on"})
    endpoint = WebhookEndpoint.objects.get()
    assert answer.status_code == 200 and endpoint.secret.startswith("whsec_")
    assert endpoint.secret in answer.content.decode() and "no-store" in answer["Cache-Control"]
    assert endpoint.event_types == ["coupon.redeemed"]
    for page in (reverse("admin:webhooks_webhookendpoint_change", args=[endpoint.pk]),
                 reverse("admin:webhooks_webhookendpoint_changelist"),
                 reverse("admin:webhooks_webhookendpoint_history", args=[endpoint.pk])):
        shown = admin_client.get(page)
        assert shown.status_code == 200 and endpoint.secret not in shown.content.decode()


def test_the_admin_refuses_an_endpoint_on_a_private_address(admin_client, settings) -> None:
    settings.COUPONS_WEBHOOK_ALLOW_PRIVATE = False
    answer = admin_client.post(reverse("admin:webhooks_webhookendpoint_add"),
                               {"url": "http://169.254.169.254/latest", "active": "on"})
    assert answer.status_code == 200 and b"link-local" in answer.content and not WebhookEndpoint.objects.exists()


def test_deliveries_show_their_attempts_and_a_dead_one_is_retried(admin_client, endpoint, receiver,
                                                                  live_campaign) -> None:
    receiver.answer = lambda got: 500
    claimed_coupon(live_campaign(total_stock=5), "alice")
    deliver_due(max_seconds=5)
    Delivery.objects.update(next_attempt_at=timezone.now() - timedelta(seconds=1),
                            retry_from=timezone.now() - timedelta(days=2))
    deliver_due(max_seconds=5)
    delivery = Delivery.objects.get()
    assert delivery.state == DeliveryState.DEAD

    page = admin_client.get(reverse("admin:webhooks_delivery_change", args=[delivery.pk])).content.decode()
    assert page.count("500") >= 2 and "coupon.issued" in page and "ok" in page  # two attempts, their answers

    admin_client.post(reverse("admin:webhooks_delivery_changelist"),
                      {"action": "retry", "_selected_action": [delivery.pk]})
    receiver.answer = lambda got: 200
    deliver_due(max_seconds=5)
    delivery.refresh_from_db()
    assert delivery.state == DeliveryState.DELIVERED and delivery.attempts == 3


def test_the_campaign_report_page_has_a_chart_and_a_streamed_csv(admin_client, live_campaign) -> None:
    campaign = live_campaign(total_stock=5)
    claimed_coupon(campaign, "alice")
    claimed_coupon(campaign, "bob")

    change = admin_client.get(reverse("admin:campaigns_campaign_change", args=[campaign.pk])).content.decode()
    page = admin_client.get(reverse("admin:campaigns_campaign_report", args=[campaign.pk]))
    csv = admin_client.get(reverse("admin:campaigns_campaign_report_csv", args=[campaign.pk]))

    assert reverse("admin:campaigns_campaign_report", args=[campaign.pk]) in change
    assert page.status_code == 200 and b'id="report-chart"' in page.content and b"<svg" in page.content
    assert csv.streaming and csv["Content-Type"].startswith("text/csv")
    lines = b"".join(csv.streaming_content).decode().splitlines()
    assert lines[0].startswith("day,claims,issued") and lines[-1].startswith("total,2,2,")
    assert admin_client.get(reverse("admin:campaigns_campaign_report", args=[999999])).status_code == 404
