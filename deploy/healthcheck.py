"""Health checks of the compose services (docker-compose.yml), one per kind of process:

    python deploy/healthcheck.py web [PORT]    GET /healthz answers 200 (default port 8000)
    python deploy/healthcheck.py flower [PORT] GET /healthcheck answers 200 (default port 5555)
    python deploy/healthcheck.py beat          the beat scheduled drain-ledgers within BEAT_MAX_AGE_SECONDS

Beat (django-celery-beat's DatabaseScheduler) writes each job's last_run_at to PostgreSQL at most every three
minutes (its sync interval): a last run older than five minutes means beat is stuck or gone. The worker's
check is Celery's own (`celery inspect ping`), in the compose file. Exit 0 healthy, 1 not.
"""
from __future__ import annotations

import os
import sys
import urllib.request
from datetime import timedelta

BEAT_JOB = "drain-ledgers"
BEAT_MAX_AGE_SECONDS = 300


def http_ok(url: str) -> bool:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=3) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def beat_ok() -> bool:
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.production")
    import django

    django.setup()
    from django.utils import timezone
    from django_celery_beat.models import PeriodicTask

    last = PeriodicTask.objects.filter(name=BEAT_JOB).values_list("last_run_at", flat=True).first()
    return last is not None and timezone.now() - last < timedelta(seconds=BEAT_MAX_AGE_SECONDS)


def main(argv: list[str]) -> int:
    kind = argv[0] if argv else ""
    if kind in ("web", "flower"):
        port = argv[1] if len(argv) > 1 else ("8000" if kind == "web" else "5555")
        path = "/healthz" if kind == "web" else "/healthcheck"
        return 0 if http_ok(f"http://127.0.0.1:{port}{path}") else 1
    if kind == "beat":
        return 0 if beat_ok() else 1
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
