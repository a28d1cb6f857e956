"""core.together.Together: threads' items run in batches, each thread gets its own result back (real threads)."""
from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Sequence

from core.together import Together


def test_a_thread_alone_runs_a_batch_of_its_own_item_at_once() -> None:
    batches: list[list[int]] = []
    together: Together[int] = Together(lambda items: batches.append(list(items)) or [i * 10 for i in items],
                                       failed=None)
    assert [together.run(1), together.run(2)] == [10, 20]
    assert batches == [[1], [2]]


def test_items_handed_in_while_a_batch_runs_go_together_into_the_next_and_each_gets_its_result() -> None:
    # Given a batch that takes a while (the first thread's)
    batches: list[list[int]] = []
    started = threading.Event()

    def run(items: Sequence[int]) -> list[int]:
        batches.append(list(items))
        started.set()
        time.sleep(0.2)
        return [i * 10 for i in items]

    together: Together[int] = Together(run, failed=None, most=8)
    results: dict[int, int] = {}

    def hand_in(item: int) -> None:
        results[item] = together.run(item)

    first = threading.Thread(target=hand_in, args=(0,))
    first.start()
    assert started.wait(5)

    # When 20 more threads hand in items meanwhile
    others = [threading.Thread(target=hand_in, args=(i,)) for i in range(1, 21)]
    for thread in others:
        thread.start()
    time.sleep(0.05)
    for thread in [first, *others]:
        thread.join(10)

    # Then every item ran once, in batches of at most 8, the later ones together, and each got its own result
    assert sorted(i for batch in batches for i in batch) == list(range(21))
    assert batches[0] == [0] and max(map(len, batches)) == 8 and len(batches) <= 5
    assert results == {i: i * 10 for i in range(21)}


def test_a_batch_that_fails_gives_each_item_the_failed_result_and_the_next_batch_runs() -> None:
    calls: list[list[int]] = []

    def run(items: Sequence[int]) -> list[str]:
        calls.append(list(items))
        if len(calls) == 1:
            raise RuntimeError("the database went away")
        return ["ok" for _ in items]

    together: Together[int] = Together(run, failed="alone")
    assert together.run(1) == "alone"
    assert together.run(2) == "ok"


def test_a_process_forked_while_a_batch_runs_starts_with_none_running() -> None:
    # Given a batch running in another thread of this process

    started, release = threading.Event(), threading.Event()

    def run(items: Sequence[int]) -> list[int]:
        if items[0] == 0:
            started.set()
            release.wait(10)
        return [i + 1 for i in items]

    together: Together[int] = Together(run, failed=None)
    busy = threading.Thread(target=together.run, args=(0,))
    busy.start()
    assert started.wait(5)

    # When the process forks, Then the child's own items run (it would wait for the parent's batch forever)
    pid = os.fork()
    if pid == 0:
        signal.alarm(5)  # a child that waits for the parent's batch dies of SIGALRM
        os._exit(0 if together.run(41) == 42 else 1)
    _, status = os.waitpid(pid, 0)
    release.set()
    busy.join(5)
    assert os.waitstatus_to_exitcode(status) == 0
