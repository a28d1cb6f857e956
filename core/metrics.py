"""/metrics (Prometheus text): the counters of every process (each app defines its own: orders/metrics.py,
coupons/metrics.py; see orders/metrics.py for multiprocess mode and the worker's own port), and figures read at
scrape time by the collectors the apps register (register_scraped), so every web process answers the same
without shared state; the Celery queue length is this module's own.
"""
from __future__ import annotations

import os
import urllib.parse
from collections.abc import Callable, Iterator
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest, multiprocess
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from redis import RedisError

ScrapedCollector = Callable[[], Collector]
_scraped: list[ScrapedCollector] = []
_before_scrape: list[Callable[[], None]] = []


def register_scraped(factory: ScrapedCollector) -> None:
    """Add a collector read at scrape time (an app registers its own in AppConfig.ready())."""
    if factory not in _scraped:
        _scraped.append(factory)


def before_scrape(flush: Callable[[], None]) -> None:
    """Call `flush` before each scrape (a counter that batches its updates in memory)."""
    if flush not in _before_scrape:
        _before_scrape.append(flush)



# kombu's Redis transport keeps a queue as lists: the name itself (priority 0) and name + "\x06\x16" + step.
_KOMBU_PRIORITY_SEP = "\x06\x16"
_KOMBU_PRIORITY_STEPS = (0, 3, 6, 9)
_broker_clients: dict[str, Any] = {}


def _broker_client(url: str) -> Any:
    import redis

    client = _broker_clients.get(url)
    if client is None:
        timeout = settings.COUPONS_REDIS_SOCKET_TIMEOUT
        if url.startswith("sentinel://"):  # the master the sentinels name (config.settings.base.follow_sentinels)
            from redis.sentinel import Sentinel

            first = urllib.parse.urlsplit(url.split(";", 1)[0])
            sentinel = Sentinel(settings.REDIS_SENTINELS, socket_timeout=timeout, socket_connect_timeout=timeout)
            client = sentinel.master_for(settings.CELERY_BROKER_TRANSPORT_OPTIONS["master_name"],
                                         socket_timeout=timeout, socket_connect_timeout=timeout,
                                         username=first.username, password=first.password,
                                         db=int(first.path.strip("/") or 0))
        else:
            client = redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout)
        _broker_clients[url] = client
    return client


def celery_queue_names() -> list[str]:
    from celery import current_app as app  # config.celery's app (config/__init__.py loads it first)

    names = [app.conf.task_default_queue]
    for queue in app.conf.task_queues or ():
        if queue.name not in names:
            names.append(queue.name)
    return names


class CeleryQueueCollector(Collector):
    """Tasks waiting in the broker's queues (LLEN), when the broker is Redis; nothing for another broker."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        url = settings.CELERY_BROKER_URL or ""
        if not url.startswith(("redis://", "rediss://", "unix://", "sentinel://")):
            return
        length = GaugeMetricFamily("couponrush_celery_queue_length", "tasks waiting in the broker's queue",
                                   labels=["queue"])
        up = GaugeMetricFamily("couponrush_celery_broker_up", "1 when the broker answered the scrape")
        try:
            pipe = _broker_client(url).pipeline(transaction=False)
            names = celery_queue_names()
            for name in names:
                for step in _KOMBU_PRIORITY_STEPS:
                    pipe.llen(f"{name}{_KOMBU_PRIORITY_SEP}{step}" if step else name)
            sizes = pipe.execute()
            per_queue = len(_KOMBU_PRIORITY_STEPS)
            for i, name in enumerate(names):
                length.add_metric([name], sum(sizes[i * per_queue:(i + 1) * per_queue]))
            up.add_metric([], 1)
        except RedisError:
            up.add_metric([], 0)
        yield from (length, up)


def metrics(request: HttpRequest) -> HttpResponse:
    """The process's own counters (or every web process's, in multiprocess mode) and the reconciliations."""
    for flush in _before_scrape:  # this process's counts up to now (the other processes' flush on their own)
        flush()
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        body = generate_latest(registry)
    else:
        body = generate_latest(REGISTRY)
    scraped = CollectorRegistry()
    for factory in (*_scraped, CeleryQueueCollector):
        scraped.register(factory())
    return HttpResponse(body + generate_latest(scraped), content_type=CONTENT_TYPE_LATEST)
