"""Celery adapter of webhook delivery: thin, safe to run in several workers at once."""
from __future__ import annotations

import logging

from celery import shared_task
from django.core.cache import cache

from . import delivery
from .outbox import TRIGGER_KEY

log = logging.getLogger(__name__)


@shared_task(name="webhooks.tasks.deliver_due", ignore_result=True)
def deliver_due() -> dict:
    """Send the due webhook deliveries (beat every few seconds, and a trigger after an event commits)."""
    try:
        cache.delete(TRIGGER_KEY)  # an event committed from now on sends a new trigger
    except Exception:
        log.warning("webhooks: the cache is unavailable; delivering anyway", exc_info=True)
    # A run sends CONCURRENCY at a time for up to 20 s; each attempt takes at most delivery.TOTAL_TIMEOUT.
    report = delivery.deliver_due(max_seconds=20.0)
    if report.taken:
        log.info("webhooks: %d deliveries sent: %d delivered, %d to retry, %d dead", report.taken,
                 report.delivered, report.retried, report.dead)
    return {"taken": report.taken, "delivered": report.delivered, "retried": report.retried, "dead": report.dead}
