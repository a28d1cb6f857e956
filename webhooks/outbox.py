"""Write events to the outbox, in the caller's transaction: the one way events go out (docs/design.md, Events out).

An event is written only when at least one active endpoint subscribes to its type, and with it one delivery per
such endpoint, in one statement (the endpoints are joined in SQL: no cache to go stale, and an event no endpoint
wants costs one empty INSERT ... SELECT). An endpoint added later receives the events written from then on, as
Stripe's do. Rolled back with the caller's transaction, committed with it: no event without its delivery, no
delivery of an event that rolled back.

Bulk writers (the drain, the expiry sweep) splice outbox_ctes() into their own statement: one INSERT ... SELECT
per batch, never a query per coupon.
"""
from __future__ import annotations

import json
import logging
from typing import Any

from django.core.cache import cache
from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection, transaction

from core.background import InBackground

from .models import Delivery, EventType, OutboxEvent, WebhookEndpoint

log = logging.getLogger(__name__)

_EVENT, _DELIVERY, _ENDPOINT = OutboxEvent._meta.db_table, Delivery._meta.db_table, WebhookEndpoint._meta.db_table
DELIVER_TASK = "webhooks.tasks.deliver_due"
TRIGGER_KEY = "webhooks:trigger"  # set while a trigger is on its way: at most one task message per second


def _subscribed(type_sql: str) -> str:
    return f"e.active AND {type_sql} = ANY(e.event_types)"


_ENQUEUE_SQL = f"""
WITH event AS (
    INSERT INTO {_EVENT} (type, key, campaign_id, data, once, created_at)
    SELECT %(type)s, %(key)s, %(campaign)s, %(data)s::jsonb, %(once)s, clock_timestamp()
    WHERE EXISTS (SELECT 1 FROM {_ENDPOINT} e WHERE {_subscribed("%(type)s")})
    ON CONFLICT (once) DO NOTHING
    RETURNING id, key, created_at
)
INSERT INTO {_DELIVERY} (event_id, endpoint_id, key, state, attempts, next_attempt_at, retry_from, created_at,
                         last_error)
SELECT event.id, e.id, event.key, 'pending', 0, event.created_at, event.created_at, event.created_at, ''
FROM event JOIN {_ENDPOINT} e ON {_subscribed("%(type)s")}
"""


def enqueue(type: EventType | str, *, key: str, campaign_id: int, data: dict[str, Any], once: str | None = None
            ) -> int:
    """Write one event and its deliveries to the outbox; return how many deliveries. Call inside the
    transaction that writes the event itself. `once`: a name that makes a second write of the event a no-op."""
    with connection.cursor() as cursor:
        cursor.execute(_ENQUEUE_SQL, {"type": str(type), "key": key, "campaign": campaign_id,
                                      "data": _json(data), "once": once})
        written = cursor.rowcount
    if written:
        transaction.on_commit(delivery_trigger.request)
    return written


def _json(data: dict[str, Any]) -> str:
    return json.dumps(data, cls=DjangoJSONEncoder, separators=(",", ":"))


def outbox_ctes(name: str, *, type: EventType, source: str, key: str, campaign: str, data: str) -> str:
    """Return `, <name> AS (...), <name>_deliveries AS (...)`: two data-modifying CTEs to append to a bulk
    statement's WITH list, writing one event of `type` per row of `source` (a FROM clause over its CTEs; key,
    campaign and data are SQL expressions over its columns), with its deliveries, when an active endpoint
    subscribes to `type`."""
    kind = f"'{EventType(type).value}'"  # an EventType member: a literal of our own, never input
    return f""", {name} AS (
    INSERT INTO {_EVENT} (type, key, campaign_id, data, created_at)
    SELECT {kind}, {key}, {campaign}, {data}, clock_timestamp() FROM {source}
    WHERE EXISTS (SELECT 1 FROM {_ENDPOINT} e WHERE {_subscribed(kind)})
    RETURNING id, key, created_at
), {name}_deliveries AS (
    INSERT INTO {_DELIVERY} (event_id, endpoint_id, key, state, attempts, next_attempt_at, retry_from, created_at,
                             last_error)
    SELECT o.id, e.id, o.key, 'pending', 0, o.created_at, o.created_at, o.created_at, ''
    FROM {name} o JOIN {_ENDPOINT} e ON {_subscribed(kind)}
)"""


class DeliveryTrigger(InBackground):
    """Ask a worker to deliver soon, from a background thread (a slow or absent broker never delays the request
    that committed the event), at most once a second; the beat sweep delivers anyway, so a lost trigger costs
    seconds. The bulk writers send none: their events wait for the sweep (every few seconds)."""

    thread_name = "webhook-trigger"

    def request(self) -> None:
        self._submit([True])

    def _handle(self, work: list[Any]) -> None:
        from celery import current_app

        try:
            if cache.add(TRIGGER_KEY, "1", timeout=1):
                current_app.send_task(DELIVER_TASK, retry=False, expires=30, ignore_result=True)
        except Exception:  # the broker or the cache is down: the beat sweep delivers
            log.warning("could not send a webhook delivery trigger", exc_info=True)


delivery_trigger = DeliveryTrigger()
