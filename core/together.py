"""Work of this process's threads done together, as a database's group commit does: the first use of a shared
code (coupons.services) is written in one transaction with the others that arrived meanwhile."""
from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

from .errors import OutcomeUnknown, Unavailable

Item = TypeVar("Item")

log = logging.getLogger(__name__)

_PENDING = object()


class NotTakenInTime(Unavailable):
    """An item waited too long behind other threads' batches and was withdrawn: nothing was done."""


class _Slot:
    __slots__ = ("item", "result")

    def __init__(self, item: Any) -> None:
        self.item = item
        self.result: Any = _PENDING


class Together(Generic[Item]):
    """A thread hands its item in and gets its result back. When no batch is running, that thread runs one
    at once, of its item and every item handed in meanwhile (at most `most`), in its own thread (so on its own
    database connection); otherwise it waits, and the batch running when it arrived, or the next, takes its
    item. No thread of its own, no timer: a thread alone runs a batch of one without waiting.

    `run_batch(items)` returns one result per item, in order; if it raises, each item's result is `failed`
    (the callers decide again on their own) and the exception is not passed on.

    A thread waits for others' batches at most `wait` seconds (a batch stuck in PostgreSQL must not hold every
    thread queued behind it): past that, an item no batch took yet is withdrawn, never run (NotTakenInTime: a
    503, nothing done), and an item a batch took is that batch's to decide (OutcomeUnknown: a 503 whose
    Idempotency-Key stays in flight)."""

    def __init__(self, run_batch: Callable[[Sequence[Item]], Sequence[Any]], *, failed: Any, most: int = 64,
                 wait: float = 2.0) -> None:
        self._run_batch = run_batch
        self._failed = failed
        self._most = most
        self._wait = wait
        self._fresh()
        os.register_at_fork(after_in_child=self._fresh)  # a child forked mid-batch would wait for it forever

    def _fresh(self) -> None:
        self._cond = threading.Condition()
        self._queue: list[_Slot] = []
        self._busy = False

    def run(self, item: Item) -> Any:
        slot = _Slot(item)
        give_up = time.monotonic() + self._wait
        with self._cond:
            self._queue.append(slot)
            while slot.result is _PENDING and self._busy:
                left = give_up - time.monotonic()
                if left <= 0:
                    self._give_up(slot)
                self._cond.wait(left)
            if slot.result is not _PENDING:
                return slot.result
            self._busy = True  # this thread runs the next batch: its own item and the oldest of the others
            others = [s for s in self._queue if s is not slot][: self._most - 1]
            batch = [slot, *others]
            taken = set(map(id, batch))
            self._queue = [s for s in self._queue if id(s) not in taken]
        results: Sequence[Any] = ()
        try:
            results = self._run_batch([s.item for s in batch])
        except Exception:
            log.exception("a batch of %d failed: each decides again on its own", len(batch))
            results = ()
        finally:
            with self._cond:
                for index, waiting in enumerate(batch):
                    waiting.result = results[index] if index < len(results) else self._failed
                self._busy = False
                self._cond.notify_all()
        return slot.result

    def _give_up(self, slot: _Slot) -> None:
        """Raise for an item waited for too long (call holding the condition's lock): withdrawn if no batch took
        it yet, else the running batch decides it alone."""
        if slot in self._queue:
            self._queue.remove(slot)
            log.warning("an item waited %s s for other threads' batches: withdrawn, answered 503", self._wait)
            raise NotTakenInTime()
        log.warning("a batch ran past %s s: its item is answered 503 and decided by the batch alone", self._wait)
        raise OutcomeUnknown()
