"""A thread of this process that work is handed to: the base of orders.claim's drain trigger and claim voider,
and of webhooks.outbox's delivery trigger."""
from __future__ import annotations

import os
import threading
from typing import Any


class InBackground:
    """Work handed to a thread of this process (started on first use, and again in a forked child), so that
    the request that hands it over never waits for it."""

    thread_name = "background"

    def __init__(self) -> None:
        self._pending: list[Any] = []
        self._cond = threading.Condition()
        self._pid = 0

    def _submit(self, items: list[Any]) -> None:
        with self._cond:
            if self._pid != os.getpid():
                self._pid = os.getpid()
                self._pending = []
                threading.Thread(target=self._run, name=self.thread_name, daemon=True).start()
            self._pending.extend(items)
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending:
                    self._cond.wait()
                work, self._pending = self._pending, []
            self._handle(work)

    def _handle(self, work: list[Any]) -> None:
        raise NotImplementedError
