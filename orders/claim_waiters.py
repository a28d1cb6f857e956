"""The long polls of GET /claims/{id}?wait=S waiting in this process, woken when their claim settles.

One subscriber per process: a thread on the sync client's pub/sub (campaigns.claim_settled.CHANNEL, where whoever
settles claims PUBLISHes their ids: orders/settle.py) wakes the waiters of the claims named, an event loop's
through loop.call_soon_threadsafe, a thread's through its threading.Event. A woken waiter reads its claim again;
it never decides from the message. Whenever the subscription is (re)made, every waiter is woken to read again, so
a settle published while the subscriber was away is never waited out.
"""
from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from typing import Any

from campaigns.claim_settled import CHANNEL
from campaigns.redis_state import redis_client

log = logging.getLogger(__name__)


class ThreadWaiter:
    __slots__ = ("claim_id", "event")

    def __init__(self, claim_id: str) -> None:
        self.claim_id, self.event = claim_id, threading.Event()

    def wake(self) -> None:
        self.event.set()

    def wait(self, seconds: float) -> None:
        self.event.wait(seconds)
        self.event.clear()


class LoopWaiter:
    __slots__ = ("claim_id", "loop", "future")

    def __init__(self, claim_id: str) -> None:
        self.claim_id = claim_id
        self.loop = asyncio.get_running_loop()
        self.future: asyncio.Future[None] = self.loop.create_future()

    def wake(self) -> None:
        self.loop.call_soon_threadsafe(self._woken)

    def _woken(self) -> None:
        if not self.future.done():
            self.future.set_result(None)

    async def wait(self, seconds: float) -> None:
        try:
            await asyncio.wait_for(asyncio.shield(self.future), seconds)
        except TimeoutError:
            pass
        self.future = self.loop.create_future()


Waiter = ThreadWaiter | LoopWaiter


class Waiters:
    """Claim id -> its waiters in this process, and the subscriber thread (started by the first waiter)."""

    RECONNECT_PAUSE_SECONDS = 0.5

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.waiting: dict[str, set[Any]] = {}
        self.thread: threading.Thread | None = None
        self.subscribed = threading.Event()

    def thread_waiter(self, claim_id: str) -> ThreadWaiter:
        waiter = ThreadWaiter(claim_id)
        self._add(waiter)
        return waiter

    def loop_waiter(self, claim_id: str) -> LoopWaiter:
        waiter = LoopWaiter(claim_id)
        self._add(waiter)
        return waiter

    def _add(self, waiter: Waiter) -> None:
        with self.lock:
            self.waiting.setdefault(waiter.claim_id, set()).add(waiter)
            if self.thread is None:
                self.thread = threading.Thread(target=self._subscribe, name="claim-waiters", daemon=True)
                self.thread.start()

    def forget(self, waiter: Waiter) -> None:
        with self.lock:
            others = self.waiting.get(waiter.claim_id)
            if others is not None:
                others.discard(waiter)
                if not others:
                    del self.waiting[waiter.claim_id]

    def wake(self, claim_ids: list[str] | None) -> int:
        """Wake the waiters of these claims (None: every waiter); return how many."""
        with self.lock:
            if claim_ids is None:
                woken = [w for waiters in self.waiting.values() for w in waiters]
            else:
                woken = [w for claim_id in claim_ids for w in self.waiting.get(claim_id, ())]
        for waiter in woken:
            try:
                waiter.wake()
            except RuntimeError:  # its loop closed: nobody waits there any more
                pass
        return len(woken)

    def _subscribe(self) -> None:
        while True:
            pubsub = None
            try:
                pubsub = redis_client().pubsub(ignore_subscribe_messages=False)
                pubsub.subscribe(CHANNEL)
                while True:
                    message = pubsub.get_message(timeout=1.0)
                    if message is None:
                        continue
                    if message["type"] == "subscribe":
                        self.subscribed.set()
                        self.wake(None)  # anything settled before we listened: every waiter reads again
                    elif message["type"] == "message":
                        data = message["data"]
                        self.wake((data.decode() if isinstance(data, bytes) else str(data)).split())
            except Exception as exc:  # Redis away: read again when it is back (the waiters time out meanwhile)
                self.subscribed.clear()
                log.warning("claim waiters: subscription lost (%r); again in %.1f s", exc,
                            self.RECONNECT_PAUSE_SECONDS)
                time.sleep(self.RECONNECT_PAUSE_SECONDS)
            finally:
                if pubsub is not None:
                    try:
                        pubsub.close()
                    except Exception:  # noqa: S110 (a connection already broken)
                        pass


WAITERS = Waiters()


def _forked() -> None:  # a forked child has no subscriber thread and none of the parent's waiters
    WAITERS.__init__()  # type: ignore[misc]  # in place: importers hold this object


os.register_at_fork(after_in_child=_forked)
