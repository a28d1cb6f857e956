"""The operator's console, set up after every migrate: a note on each periodic job, and a viewer role."""
from __future__ import annotations

from typing import Any

from django.conf import settings

# What each job in CELERY_BEAT_SCHEDULE does, shown in the admin's "Periodic tasks" (their description).
JOB_NOTES = {
    "drain-ledgers": "Moves every campaign's claim ledger (Redis) into PostgreSQL as claims + coupons; takes over "
                     "entries a dead worker read but never acknowledged; rebuilds a live campaign Redis lost. "
                     "Pausing it delays coupons, loses nothing.",
    "expiry-sweep": "Lapses holds past hold_until and expires coupons past their validity, in batches, one event "
                    "each; sets rows that drifted from their events back to the events' fold.",
    "reconcile-campaigns": "Compares each live campaign's Redis state with PostgreSQL, records it (Reconciliations) "
                           "and repairs only what is safe; rebuilds a campaign Redis lost.",
    "housekeeping": "Trims persisted ledger entries past retention, deletes idempotency records older than 24 h, "
                    "records the final figures of ended campaigns.",
    "preheat-due-campaigns": "Loads published campaigns starting within the hour into Redis ahead of their start.",
    "deliver-webhooks": "Sends the outbox's due webhook deliveries (signed, retried with backoff for 24 h, then "
                        "dead). Pausing it delays webhooks, loses none.",
    "grant-batches-sweep": "Goes on with grant batches whose runner died (no chunk counted for a minute): a crashed "
                           "batch resumes, each shopper granted once. Pausing it leaves such batches waiting.",
}

VIEWER_GROUP = "couponrush viewers"
VIEWED_APPS = ["campaigns", "coupons", "orders", "grants", "django_celery_beat"]


def describe_periodic_jobs(**kwargs: Any) -> None:
    """Create (or update) each periodic job's row with its note; beat keeps it in step with the schedule."""
    from django_celery_beat.models import IntervalSchedule, PeriodicTask

    for name, entry in settings.CELERY_BEAT_SCHEDULE.items():
        note = JOB_NOTES.get(name, "")
        task = PeriodicTask.objects.filter(name=name).first()
        if task is None:
            seconds: Any = entry["schedule"]
            interval, _ = IntervalSchedule.objects.get_or_create(every=int(seconds),
                                                                 period=IntervalSchedule.SECONDS)
            PeriodicTask.objects.create(name=name, task=entry["task"], interval=interval, description=note)
        elif task.description != note:
            PeriodicTask.objects.filter(pk=task.pk).update(description=note)


def ensure_viewer_group(**kwargs: Any) -> None:
    """A group whose members (staff) can look at everything operators use but change nothing."""
    from django.contrib.auth.models import Group, Permission

    group, _ = Group.objects.get_or_create(name=VIEWER_GROUP)
    group.permissions.set(Permission.objects.filter(content_type__app_label__in=VIEWED_APPS,
                                                    codename__startswith="view_"))


def set_up_console(sender: Any, **kwargs: Any) -> None:
    if getattr(sender, "name", "") == "orders":
        describe_periodic_jobs()
        ensure_viewer_group()
