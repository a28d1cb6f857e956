"""Celery adapters of the coupon jobs: thin, safe to run twice at once (SKIP LOCKED, conditional updates, row locks)."""
from __future__ import annotations

import logging

from celery import shared_task

from . import code_batches
from .compensation import expire_and_lapse_due, repair_drift

log = logging.getLogger(__name__)


@shared_task(name="coupons.tasks.expiry_sweep", ignore_result=True)
def expiry_sweep() -> dict:
    """Every minute: lapse overdue holds, expire overdue coupons, repair rows that drifted from their events.

    Works for at most 50 s; if coupons are still due then, it sends itself again for the rest.
    """
    report = expire_and_lapse_due(max_seconds=50.0)
    repair_drift(report=report)
    if report.lapsed or report.expired or report.repaired:
        log.info("expiry sweep: %d holds lapsed, %d coupons expired, %d rows repaired (coupon ids %s), %d batches",
                 report.lapsed, report.expired, report.repaired, ",".join(report.repairs[:20]), report.batches)
    if not report.finished:
        expiry_sweep.apply_async(expires=300)
    return {"lapsed": report.lapsed, "expired": report.expired, "repaired": report.repaired,
            "finished": report.finished}


@shared_task(name="coupons.tasks.code_batch_generate", ignore_result=True)
def code_batch_generate(batch_id: int) -> dict:
    """Fill a batch of unique codes (sent by coupons.code_batches.code_batch_send); safe to run twice: it
    resumes from the batch's committed count, and two runs at once keep it exact (a chunk counts only if it still
    fits)."""
    batch = code_batches.code_batch_generate(batch_id=batch_id)
    log.info("code batch %d: %d codes", batch.pk, batch.inserted)
    return {"batch": batch.pk, "count": batch.inserted}
