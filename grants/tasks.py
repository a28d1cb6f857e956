"""Celery tasks of grants (thin adapters over grants.services): a chunk a task, each sending the next."""
from __future__ import annotations

import logging

from celery import shared_task

from core.errors import Unavailable

from .claims import GrantStopped
from .models import GrantBatch, GrantStatus
from .services import grant_batch_step, stale_batches

log = logging.getLogger(__name__)


@shared_task(name="grants.tasks.grant_batch_continue", ignore_result=True)
def grant_batch_continue(batch_id: int) -> None:
    """Grant a running batch's next chunk (1,000 shoppers, ~50 ms), then send this task again for the next one.
    Safe to run twice at once: a chunk is counted once. A task lost with its worker is sent again by the sweep."""
    batch = GrantBatch.objects.select_related("campaign").filter(pk=batch_id, status=GrantStatus.RUNNING).first()
    if batch is None:
        return
    try:
        more = grant_batch_step(batch=batch)
    except (GrantStopped, Unavailable) as exc:
        log.warning("grant batch %s stopped: %s", batch_id, exc)
        return
    if more:
        grant_batch_continue.delay(batch_id)


@shared_task(name="grants.tasks.grant_batches_sweep", ignore_result=True)
def grant_batches_sweep() -> None:
    """Go on with the running batches whose runner died (no chunk counted for a minute): a crash resumes."""
    for batch_id in stale_batches():
        grant_batch_continue.delay(batch_id)
