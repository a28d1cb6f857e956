"""The Celery app `config`: `celery -A config worker` and `celery -A config beat`."""
import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.dev")

app = Celery("config")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

# kombu's Redis transport puts a worker's unacknowledged messages back on the queue when its channel closes.
# When the channel closes because the broker went away, that restore needs the broker too, fails inside kombu
# (AttributeError: 'NoneType' object has no attribute 'hostname') and the worker exits: nothing drains until
# something restarts it (found by tests/faults/test_celery_faults.py). Our tasks are idempotent and beat sends
# them again within seconds, and the message is still restored by the transport's visibility timeout, so the
# worker does not restore at shutdown.
from celery.signals import worker_init  # noqa: E402


@worker_init.connect
def _no_restore_at_shutdown(**kwargs: object) -> None:
    from kombu.transport.redis import QoS  # imported here: only a worker needs it (and it imports redis-py)

    QoS.restore_at_shutdown = False
