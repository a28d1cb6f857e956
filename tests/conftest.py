"""Fixtures shared by every test: real PostgreSQL and Redis, never SQLite or a fake Redis."""
from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from django.conf import settings
from django.db import connections

from campaigns.models import Campaign
from campaigns.redis_state import redis_client, reset_redis_client
from campaigns.services import campaign_preheat, forget_live_codes
from core.auth import mint_token
from core.public_cache import forget_public_answers
from devstack import STATIC_ROOT, resolve, web_command
from orders.claim import forget_campaign_facts
from storefronts.keyring import KEYRING

from .factories import CampaignFactory

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session", autouse=True)
def storefront_keys_stop_before_the_test_database_goes(django_db_setup: Any) -> Iterator[None]:
    """The test process's storefront-key refresher (storefronts.keyring), started by a keyed token, reads
    PostgreSQL every second: stopped before pytest-django drops the test database, or its next read fails and
    logs to pytest's closed output ("--- Logging error ---" after the summary)."""
    yield
    KEYRING.forget()


@pytest.fixture(autouse=True)
def clean_redis() -> Iterator[None]:
    """Start every test with an empty Redis database of its own (settings.test keeps it apart)."""
    reset_redis_client()
    forget_campaign_facts()
    forget_live_codes()
    forget_public_answers()
    redis_client().flushdb()
    yield
    reset_redis_client()


def shopper_headers(user_id: str, **extra: str) -> dict[str, str]:
    """Headers of an authenticated shopper for Django's test client."""
    return {"HTTP_X_USER_ID": user_id, "HTTP_X_TOKEN": mint_token(user_id, ttl=600), **extra}


@pytest.fixture
def live_campaign(db: Any) -> Callable[..., Campaign]:
    """Make a published campaign, live now and loaded into Redis."""

    def make(**fields: Any) -> Campaign:
        campaign = CampaignFactory(**fields)
        campaign_preheat(campaign=campaign)
        campaign.refresh_from_db()
        return campaign

    return make


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def process_env() -> dict[str, str]:
    """Environment for a server or worker process that must see this test run's database and Redis."""
    env = dict(os.environ)
    env.update(
        DJANGO_SETTINGS_MODULE="config.settings.test",
        COUPONRUSH_TEST_DB_NAME=settings.DATABASES["default"]["NAME"],
        TEST_REDIS_URL=settings.REDIS_URL,
        TEST_CELERY_BROKER_URL=settings.CELERY_BROKER_URL,
        PYTHONPATH=str(ROOT),
    )
    return env


T = TypeVar("T")


@pytest.fixture
def http_server(transactional_db: Any) -> Iterator[str]:
    """Serve the project over real HTTP, as the run command does, against the test database."""
    port = free_port()
    with serving(resolve(web_command(port)), port) as url:  # the run command's own server and options
        yield url


@contextlib.contextmanager
def serving(argv: list[str], port: int) -> Iterator[str]:
    """Run a web server command against the test database until the block ends; yield its URL once /healthz
    answers."""
    STATIC_ROOT.mkdir(parents=True, exist_ok=True)
    # Its output goes to a file: a pipe nobody reads would stop the server once 64 KiB of log lines filled it.
    log = tempfile.TemporaryFile()
    proc = subprocess.Popen(
        argv, cwd=ROOT, env=process_env(), stdout=subprocess.DEVNULL, stderr=log,
        start_new_session=True,  # its own process group: the teardown stops the workers too
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(f"{url}/healthz", timeout=1).read()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                stop_group(proc)
                log.seek(0)
                raise RuntimeError(f"the web server did not start: {log.read().decode()[-2000:]}") from None
            time.sleep(0.2)
    try:
        yield url
    finally:
        stop_group(proc)
        log.close()


def wait_for(predicate: Callable[[], T], timeout: float = 10.0, interval: float = 0.1, what: str = "") -> T:
    """Poll `predicate` until it returns something truthy; return that, or fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}")
        time.sleep(interval)


def stop_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM a server's process group, SIGKILL it after 10 s: no worker may outlive its test."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        pass
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(10)


def unacknowledged(campaign: Campaign) -> int:
    """How many of the campaign's ledger entries the drain has not acknowledged (not in PostgreSQL yet)."""
    from orders.ledger import backlog_sizes

    return backlog_sizes([campaign.pk]).get(campaign.pk, 0)


def run_twice_at_once(job: Callable[[], Any]) -> list[Any]:
    """Run `job` in two threads that start together (two beat processes by mistake); return both results."""
    barrier = threading.Barrier(2)
    results: list[Any] = []

    def run() -> None:
        barrier.wait()
        try:
            results.append(job())
        finally:
            connections.close_all()  # this thread's own connection

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def claims_in_threads(campaign_id: int, count: int, answers: list[Any]) -> list[threading.Thread]:
    """Start `count` shoppers in threads of their own, shopper s<n> claiming once with the Idempotency-Key k<n>
    on the synchronous path; each appends its outcome, or the Unavailable it was answered, to `answers`. Return
    the started threads (the caller joins them)."""
    from core.errors import Unavailable
    from orders.claim import claim_create

    def shopper(n: int) -> None:
        try:
            answers.append(claim_create(campaign_id=campaign_id, user_id=f"s{n}", idempotency_key=f"k{n}"))
        except Unavailable as exc:
            answers.append(exc)

    threads = [threading.Thread(target=shopper, args=(n,)) for n in range(count)]
    for t in threads:
        t.start()
    return threads


def in_one_second(run: Callable[[int], Any]) -> Any:
    """Return run(attempt), started just after a second of the clock begins (the limits count per second);
    run again, with the next attempt number, when it still crossed into the next second (a slow machine)."""
    for attempt in range(5):
        time.sleep(1.02 - time.time() % 1)
        second = int(time.time())
        result = run(attempt)
        if int(time.time()) == second:
            return result
    pytest.fail("five runs in a row crossed a second's boundary")


def run_coroutine(coroutine: Any) -> Any:
    """asyncio.run() in a thread of its own: a test may run while another library's loop runs in this thread
    (pytest-playwright's, after the browser tests)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()
