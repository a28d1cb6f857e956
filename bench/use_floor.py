"""A coupon's use with no server at all: each use's CPU in one thread of the bench's own process, calling the one
use case both doors call (coupons.apis.use_answer, its real statements on the bench's PostgreSQL and Redis), and
what that allows beside the claim: the claim's server CPU per request of the same run divided by it, the most a
use could reach in requests/s as a multiple of the claim's (x claim) if serving it cost nothing but the use.

Called by bench/api_routes.py --floor N after its rounds, on the run's stores and campaigns: N uses of each kind,
timed by the thread's CPU clock (time.thread_time: the use's Python, its drivers and their system calls, not
PostgreSQL's or Redis's). A claimed coupon's uses each use a coupon never dealt before (the bench's `take`);
SAVE50's are the first use of an order of a new shopper each; a confirm or release finishes an order reserved
just before it (not timed). Every answer must be the one meant (code 0 and its status), or the bench stops.
"""
from __future__ import annotations

import gc
import time
import uuid
from collections.abc import Callable
from typing import Any

from common import BenchError, log  # bench/ is on sys.path (api_routes.py puts it there)

USE_BODY = {"order_amount": "350.00", "currency": "CNY"}
ROUTES = ("redeem", "reserve", "confirm", "release",
          "redeem_claimed", "reserve_claimed", "confirm_claimed", "release_claimed")


def _use(operation: str, code: str, user: str, order: str) -> dict[str, Any]:
    """One use through coupons.apis.use_answer, as the use door runs it (a new Idempotency-Key); its body."""
    from core.api import Shopper, validated
    from coupons.apis import CouponUseApi, use_answer
    from coupons.use_door import OPERATIONS

    view: type[CouponUseApi] = OPERATIONS[operation]
    body: dict[str, Any] = {"order_id": order}
    if operation in ("redeem", "reserve"):
        body.update(USE_BODY, **({"hold_seconds": 900} if operation == "reserve" else {}))
    data = validated(view.InputSerializer, body)
    answer = use_answer(view, code, user, None, uuid.uuid4().hex, view.call(data, Shopper(user)))
    return answer.body


_MEANT = {"redeem": "redeemed", "reserve": "reserved", "confirm": "redeemed", "release": "released"}


def _used(operation: str, uses: list[tuple[str, str, str]]) -> None:
    """`operation` of each of `uses` (code, user, order); an answer not the one meant stops the bench."""
    for code, user, order in uses:
        body = _use(operation, code, user, order)
        if body.get("code") != 0 or body.get("status") != _MEANT[operation]:
            raise BenchError(f"{operation} of {code} for {user} answered {body}")


def _timed(operation: str, uses: list[tuple[str, str, str]]) -> float:
    """CPU seconds of this thread per use of `operation` over `uses`."""
    start = time.thread_time()
    _used(operation, uses)
    return (time.thread_time() - start) / len(uses)


def _held(uses: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    _used("reserve", uses)
    return uses


def measure(code: str, take: Callable[[int], list[tuple[str, str]]], n: int, routes: set[str]) -> dict[str, Any]:
    """Each use in `routes` (ROUTES' keys) n times in this thread: its CPU us a use. `code`: the shared code;
    `take(k)`: k claimed coupons (user, code) never used."""
    def shared(k: int) -> list[tuple[str, str, str]]:  # new shoppers, each an order of its own
        tag = uuid.uuid4().hex[:6]
        return [(code, f"f{tag}{i:06d}", f"f{tag}-{i}") for i in range(k)]

    def claimed(k: int) -> list[tuple[str, str, str]]:
        return [(coupon, user, f"f-{user}") for user, coupon in take(k)]

    plans: dict[str, Callable[[], tuple[str, list[tuple[str, str, str]]]]] = {
        "redeem": lambda: ("redeem", shared(n)),
        "reserve": lambda: ("reserve", shared(n)),
        "confirm": lambda: ("confirm", _held(shared(n))),
        "release": lambda: ("release", _held(shared(n))),
        "redeem_claimed": lambda: ("redeem", claimed(n)),
        "reserve_claimed": lambda: ("reserve", claimed(n)),
        "confirm_claimed": lambda: ("confirm", _held(claimed(n))),
        "release_claimed": lambda: ("release", _held(claimed(n))),
    }
    out: dict[str, Any] = {}
    gc.collect()
    gc.freeze()  # as the server's worker does after starting (webserver/worker.py): the bench's own objects
    try:  # (its pools, its report) would otherwise make every full collection walk them, timed as the use's
        for key in ROUTES:
            if key in routes:
                out[key] = _measured(key, *plans[key](), n)
    finally:
        gc.unfreeze()
    return out


def _measured(key: str, operation: str, uses: list[tuple[str, str, str]], n: int) -> dict[str, Any]:
    warm = max(n // 10, 1)
    _timed(operation, uses[:warm])  # warm: prepared statements, connections, caches
    cpu = _timed(operation, uses[warm:])
    log(f"floor {key}: {cpu * 1e6:,.0f} us of CPU a use, in one thread with no server")
    return {"cpu_us_per_use": round(cpu * 1e6, 1), "uses": len(uses) - warm}
