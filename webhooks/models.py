"""Webhook endpoints, the outbox of events to send them, and each delivery's attempts.

The outbox sits below every app that writes events (core < webhooks < campaigns < coupons < orders): campaigns,
coupons and orders write an event's outbox row in their own transaction through webhooks.outbox.
"""
from __future__ import annotations

from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models import Q
from django.utils.translation import gettext, pgettext_lazy
from django.utils.translation import gettext_lazy as _


class EventType(models.TextChoices):
    """The contract's webhook event types (docs/api.md, Webhooks)."""

    COUPON_ISSUED = "coupon.issued", "coupon.issued"
    COUPON_RESERVED = "coupon.reserved", "coupon.reserved"
    COUPON_REDEEMED = "coupon.redeemed", "coupon.redeemed"
    COUPON_RELEASED = "coupon.released", "coupon.released"
    COUPON_EXPIRED = "coupon.expired", "coupon.expired"
    COUPON_REVOKED = "coupon.revoked", "coupon.revoked"
    CAMPAIGN_SOLD_OUT = "campaign.sold_out", "campaign.sold_out"
    CAMPAIGN_ENDED = "campaign.ended", "campaign.ended"
    CAMPAIGN_BUDGET_EXHAUSTED = "campaign.budget_exhausted", "campaign.budget_exhausted"


def all_event_types() -> list[str]:
    return [t.value for t in EventType]


class WebhookEndpoint(models.Model):
    """A receiver of events. Its secret signs every delivery; it is stored here only, never in the outbox,
    a delivery, an attempt or a log line, and the admin shows it once, when the endpoint is created."""

    url = models.URLField(max_length=500, help_text=_("http(s) URL; private and loopback addresses are refused."),
        verbose_name=_("url"))
    secret = models.CharField(max_length=200, editable=False, verbose_name=_("secret"))
    event_types = ArrayField(models.CharField(max_length=30, choices=EventType.choices), default=all_event_types,
                             help_text=_("The event types sent to this endpoint."), verbose_name=_("event types"))
    active = models.BooleanField(default=True, verbose_name=pgettext_lazy("endpoint flag", "active"))
    description = models.CharField(max_length=200, blank=True, verbose_name=_("description"))
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))

    class Meta:
        verbose_name = _("webhook endpoint")
        verbose_name_plural = _("webhook endpoints")
        ordering = ["id"]

    def __str__(self) -> str:
        return self.url

    def __repr__(self) -> str:  # never the secret
        return f"<WebhookEndpoint {self.pk} {self.url}>"


class OutboxEvent(models.Model):
    """One event to send, written in the same transaction as the coupon's or campaign's own event, and only when
    an active endpoint subscribes to its type (webhooks.outbox). Its id is the payload's stable `id`."""

    type = models.CharField(max_length=30, choices=EventType.choices, verbose_name=_("type"))
    # The ordering key: an endpoint receives the events of one key in id order ("coupon:<id>", "campaign:<id>").
    key = models.CharField(max_length=40, verbose_name=_("key"))
    campaign_id = models.BigIntegerField(help_text=_("The campaign the event belongs to (no constraint: a log)."),
        verbose_name=_("campaign id"))
    data = models.JSONField(verbose_name=_("data"))
    # Events that happen once (campaign.sold_out): a second writer's insert does nothing.
    once = models.CharField(max_length=60, null=True, blank=True, unique=True, verbose_name=_("once"))  # noqa: DJ001 (NULL = no such rule)
    created_at = models.DateTimeField(verbose_name=_("created at"))

    class Meta:
        verbose_name_plural = _("outbox events")
        ordering = ["-id"]
        verbose_name = _("outbox event")

    def __str__(self) -> str:
        return f"{self.type} {self.key} (#{self.pk})"


class DeliveryState(models.TextChoices):
    PENDING = "pending", _("Pending")
    DELIVERED = "delivered", _("Delivered")
    DEAD = "dead", _("Dead (retry window over)")


class Delivery(models.Model):
    """One outbox event for one endpoint: retried with backoff until a 2xx or the end of the retry window.

    next_attempt_at is also the lease of a delivery being sent: taking one moves it a lease ahead under the
    row's lock, so no other worker sends it during that attempt (webhooks.delivery)."""

    # No foreign-key constraints: both rows are written by the same statement (outbox.py), and a check at every
    # insert would sit on the drain's path. PROTECT still guards deletes made through Django.
    event = models.ForeignKey(OutboxEvent, on_delete=models.PROTECT, related_name="deliveries",
                              db_constraint=False, db_index=False, verbose_name=_("event"))
    endpoint = models.ForeignKey(WebhookEndpoint, on_delete=models.PROTECT, related_name="deliveries",
                                 db_constraint=False, db_index=False, verbose_name=_("endpoint"))
    key = models.CharField(max_length=40, help_text=_("The event's ordering key (copied)."), verbose_name=_("key"))
    state = models.CharField(max_length=10, choices=DeliveryState.choices, default=DeliveryState.PENDING,
        verbose_name=_("state"))
    attempts = models.PositiveIntegerField(default=0, verbose_name=_("attempts"))
    next_attempt_at = models.DateTimeField(verbose_name=_("next attempt at"))
    # Retries go on until retry_from + the retry window (24 h); an operator's retry of a dead one starts it again.
    retry_from = models.DateTimeField(verbose_name=_("retry from"))
    created_at = models.DateTimeField(verbose_name=_("created at"))
    delivered_at = models.DateTimeField(null=True, blank=True, verbose_name=_("delivered at"))
    last_status = models.PositiveSmallIntegerField(null=True, blank=True, verbose_name=_("last status"))
    last_error = models.CharField(max_length=300, blank=True, default="", verbose_name=_("last error"))

    class Meta:
        verbose_name = _("delivery")
        ordering = ["-id"]
        verbose_name_plural = _("deliveries")
        indexes = [
            models.Index(fields=["next_attempt_at", "id"], condition=Q(state="pending"), name="delivery_due"),
            # The head of each (endpoint, key): only the oldest pending event of a key is sent.
            models.Index(fields=["endpoint", "key", "event"], condition=Q(state="pending"), name="delivery_order"),
        ]

    def __str__(self) -> str:
        return gettext("delivery %(delivery)s of event %(event)s to endpoint %(endpoint)s") % {
            "delivery": self.pk, "event": self.event_id, "endpoint": self.endpoint_id}


class DeliveryAttempt(models.Model):
    """One POST of a delivery and what came back: never the secret, never the signature."""

    delivery = models.ForeignKey(Delivery, on_delete=models.CASCADE, related_name="attempt_log",
        verbose_name=_("delivery"))
    number = models.PositiveIntegerField(verbose_name=_("number"))
    started_at = models.DateTimeField(verbose_name=_("started at"))
    duration_ms = models.PositiveIntegerField(verbose_name=_("duration ms"))
    address = models.CharField(max_length=60, blank=True, help_text=_("The address connected to (checked)."),
        verbose_name=_("address"))
    status_code = models.PositiveSmallIntegerField(null=True, blank=True, verbose_name=_("status code"))
    response_head = models.TextField(blank=True, help_text=_("The answer's first bytes."),
        verbose_name=_("response head"))
    error = models.CharField(max_length=300, blank=True, verbose_name=_("error"))

    class Meta:
        verbose_name = _("delivery attempt")
        verbose_name_plural = _("delivery attempts")
        ordering = ["delivery", "number"]

    def __str__(self) -> str:
        return gettext("attempt %(number)s of delivery %(delivery)s") % {"number": self.number,
                                                                          "delivery": self.delivery_id}
