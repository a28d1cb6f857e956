"""Every wait is bounded and paused (issue 33): reading a lost reply's answer pauses between tries on a thread as
on an event loop; a thread waits for other threads' batches (core.together) a bounded time, and what ran past it
is decided once; a reset of the Redis client resets what was cached with it, a running loop's client included.
Real sockets, real PostgreSQL and Redis."""
from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator, Sequence

import pytest
import redis as redis_py
from django.conf import settings as django_settings
from django.db import connection

from campaigns import redis_state
from campaigns.redis_state import async_client, buckets, clients, lua, recovery, reset_redis_client
from core.errors import OutcomeUnknown
from core.together import NotTakenInTime, Together
from coupons.idempotency import Answer, IdempotencyInFlight, run_idempotent
from coupons.models import IdempotencyRecord

from ..conftest import run_coroutine


@pytest.fixture
def cutting_redis() -> Iterator[tuple[str, list[int]]]:
    """A "Redis" that accepts every connection and cuts it at once (each read fails at once, as against a
    restarting server): its URL, and how many connections it took."""
    listener = socket.create_server(("127.0.0.1", 0), backlog=1024)
    accepted = [0]

    def cut() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            accepted[0] += 1
            conn.close()

    thread = threading.Thread(target=cut, daemon=True)
    thread.start()
    yield f"redis://127.0.0.1:{listener.getsockname()[1]}/0", accepted
    listener.close()


def test_reading_a_lost_replys_answer_pauses_between_tries_on_a_thread_as_on_a_loop(settings, cutting_redis) -> None:
    url, accepted = cutting_redis
    settings.REDIS_URL = url
    reset_redis_client()
    budget_tries = redis_state.RECOVERY_BUDGET_SECONDS / redis_state.RECOVERY_PAUSE_SECONDS + 1

    # When a thread reads the answer of a claim whose deadline has passed, every try failing at once
    started = time.monotonic()
    assert recovery.stored_answer_after("cpn:{c1}:s:1", "a:x", 0) is redis_state.UNREADABLE
    on_thread, thread_seconds = accepted[0], time.monotonic() - started

    # And an event loop does the same
    accepted[0] = 0
    assert run_coroutine(recovery.stored_answer_after_async("cpn:{c1}:s:1", "a:x", 0)) is redis_state.UNREADABLE
    on_loop = accepted[0]

    # Then both gave up within the budget, a pause between tries: no busy loop against the server
    print(f"tries in {redis_state.RECOVERY_BUDGET_SECONDS} s: thread {on_thread}, loop {on_loop}")
    assert thread_seconds < 0.5
    assert 10 <= on_thread <= budget_tries and 10 <= on_loop <= budget_tries, (on_thread, on_loop)


class LockedBatches:
    """Batches that wait in PostgreSQL: each takes and drops an advisory lock (of `lock_of(first item)`), which
    the test holds on its own connection while a batch must be stuck."""

    def __init__(self) -> None:
        self.ran: list[str] = []

    def __call__(self, items: Sequence[str]) -> list[str]:
        self.ran.extend(items)
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_lock(33, %s), pg_advisory_unlock(33, %s)",
                               [self.lock_of(items[0])] * 2)
        finally:
            connection.close()
        return [f"done {item}" for item in items]

    @staticmethod
    def lock_of(item: str) -> int:
        return 1 if item == "a" else 2


def hand_in(together: Together[str], item: str, results: dict[str, object]) -> threading.Thread:
    def run() -> None:
        try:
            results[item] = together.run(item)
        except Exception as exc:  # noqa: BLE001 - the test reads it
            results[item] = exc
    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_a_thread_behind_a_batch_stuck_in_postgresql_gets_a_503_in_time_and_its_item_never_runs(
        transactional_db) -> None:
    # Given a batch stuck in PostgreSQL (its lock held elsewhere)
    batches = LockedBatches()
    together: Together[str] = Together(batches, failed=None)  # the production bound: 2 s
    results: dict[str, object] = {}
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_lock(33, 1)")
    stuck = hand_in(together, "a", results)
    assert wait_until_ran(batches, ["a"])

    # When another thread hands its item in
    started = time.monotonic()
    behind = hand_in(together, "b", results)
    behind.join(4)
    waited = time.monotonic() - started

    # Then it is answered unavailable within the bound, and its item never ran, even once the batch is done
    try:
        assert not behind.is_alive(), "the thread behind the stuck batch is still waiting"
        assert isinstance(results["b"], NotTakenInTime) and results["b"].http_status == 503
        assert 1.9 < waited < 3.0
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(33, 1)")
        stuck.join(10)
    assert results["a"] == "done a" and batches.ran == ["a"]
    assert together.run("c") == "done c"  # the next batch runs as ever


def test_an_item_a_stuck_batch_took_is_decided_by_that_batch_alone_and_its_key_stays_in_flight(
        transactional_db) -> None:
    # Given a first batch stuck, two threads queued behind it, and the batch they go into stuck too
    batches = LockedBatches()
    together: Together[str] = Together(batches, failed=None)
    results: dict[str, object] = {}
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_lock(33, 1), pg_advisory_lock(33, 2)")
    first = hand_in(together, "a", results)
    assert wait_until_ran(batches, ["a"])
    queued = [hand_in(together, "b", results), hand_in(together, "c", results)]
    time.sleep(0.2)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_unlock(33, 1)")  # the first batch ends; b and c go in the next one
    assert wait_until_ran(batches, ["a", "b", "c"], any_order_after=1)

    # When the bound passes while that batch is stuck, and then the batch ends
    time.sleep(2.3)
    answered_early = {item: results.get(item) for item in ("b", "c")}
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_unlock(33, 2)")
    for thread in [first, *queued]:
        thread.join(10)

    # Then the thread whose item the batch took (not the one running it) was answered 503, outcome unknown,
    # while the batch went on to decide it, once
    unknown = [item for item, result in answered_early.items() if isinstance(result, OutcomeUnknown)]
    assert len(unknown) == 1, answered_early
    runner = ({"b", "c"} - set(unknown)).pop()
    assert results[runner] == f"done {runner}" and sorted(batches.ran) == ["a", "b", "c"]

    # And the Idempotency-Key of a request answered so stays in flight (its repeat is not decided again), while
    # one answered a plain 503 is free again
    def execute_raising(error: Exception) -> Answer:
        raise error

    for error, key in ((OutcomeUnknown(), "unknown"), (NotTakenInTime(), "withdrawn")):
        with pytest.raises(type(error)):
            run_idempotent(user_id="ann", endpoint="POST /api/v1/coupons/redeem", key=key, payload={"n": 1},
                           execute=lambda error=error: execute_raising(error), apart=True)
    assert list(IdempotencyRecord.objects.filter(user_id="ann").values_list("key", "in_flight")) == [
        ("unknown", True)]
    with pytest.raises(IdempotencyInFlight):
        run_idempotent(user_id="ann", endpoint="POST /api/v1/coupons/redeem", key="unknown", payload={"n": 1},
                       execute=lambda: Answer(200, {"code": 0}), apart=True)


def wait_until_ran(batches: LockedBatches, items: list[str], any_order_after: int | None = None) -> bool:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        ran = batches.ran
        if (ran == items if any_order_after is None else
                ran[:any_order_after] == items[:any_order_after] and sorted(ran) == sorted(items)):
            return True
        time.sleep(0.02)
    return False


def test_a_reset_of_the_redis_client_gives_a_running_loop_a_client_of_the_new_settings(settings) -> None:
    # Given an event loop whose claims go through its client, to one Redis database
    original = django_settings.REDIS_URL
    other = f"{original.rsplit('/', 1)[0]}/{django_settings.CELERY_BROKER_URL.rsplit('/', 1)[1]}"
    assert other != original
    buckets.empty_until[(1, 1)] = (time.monotonic() + 60, 0)  # cached key state: an empty bucket
    redis_state.scripts(), redis_state.redis_now_ms()  # the scripts registered, Redis's clock learnt

    async def scenario() -> tuple[object, object]:
        first = async_client()
        await first.execute("SET", "issue33:reset", "before")
        # When the settings name another Redis and the client is reset, while the loop runs
        settings.REDIS_URL = other
        reset_redis_client()
        second = async_client()
        await second.execute("SET", "issue33:reset", "after")
        return first, second

    try:
        first, second = run_coroutine(scenario())

        # Then the loop's next claim goes through a new client, to the new Redis; nothing cached is left
        assert second is not first
        assert redis_py.Redis.from_url(other).get("issue33:reset") == b"after"
        assert redis_py.Redis.from_url(original).get("issue33:reset") == b"before"
        assert buckets.empty_until == {} and buckets.known_buckets == {}
        assert lua._scripts is None and recovery._clock["measured"] < 0 and clients._client is None
    finally:
        redis_py.Redis.from_url(other).delete("issue33:reset")
