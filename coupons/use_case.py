"""A coupon's use as a request asks it (redeem, reserve, confirm, release), written once for Django's view
(coupons.apis.CouponUseApi) and the event loop's door (coupons/use_door.py).

A use is two parts. First its reads, before its transaction: the shopper's coupon of the typed code (unless the
code is a live shared code this process remembers: the guard checks that one without a lookup) and the claim of
its Idempotency-Key (a committed 'in flight' row: coupons.idempotency). Each is a `core.db.Read`, run where the
caller runs it: in the view's thread (`run()`), or awaited on the loop by the door (`run_async()`), where a round
trip costs the worker a third of what it costs a Django thread (the GIL handed back and forth: docs/design.md).
Then the use itself, in a Django thread (`answer(results)`): the unknown-code guard, the Idempotency-Key's
replay or the use case under it, its transaction.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from core.db import Read

from .guard import guarded, refuse_unknown
from .idempotency import Answer, key_claim_read, run_idempotent
from .metrics import USES
from .models import Coupon
from .outcomes import UseOutcome
from .services import code_is_own_read, known_shared_code, typed_code_form


class UseCall(NamedTuple):
    """What a use's request asks, once checked: its order, what a repeat of its Idempotency-Key must match, and
    the use case to run on the canonical code (with the shopper's coupon of that code, if the guard read it)."""

    order_id: str
    payload: dict[str, Any]
    run: Callable[[str, Coupon | None], UseOutcome]


class UseRequest:
    """The use `call.run(canonical code, own coupon)` for the order, of the coupon the shopper typed as `code`,
    under the request's Idempotency-Key (`call.payload`: what a repeat of the key must match) and, unless the code
    is the shopper's own, the unknown-code guard (coupons.guard). The check of the shopper's own reads the
    shopper's coupon of that code: the use decides on that row (services._retrying), not reading it again.
    `operation`: redeem, reserve, confirm or release; `apart`: the use commits itself (run_idempotent's)."""

    def __init__(self, operation: str, apart: bool, code: str, user_id: str, ip: str | None, key: str | None,
                 call: UseCall) -> None:
        self.apart, self.user_id, self.ip, self.key, self.call = apart, user_id, ip, key, call
        self.canonical = typed_code_form(code)
        self.endpoint = f"POST /api/v1/coupons/{self.canonical}/{operation}"
        # A live shared code the process remembers is checked by the guard without a lookup (guarded's `known`)
        self.known = self.canonical is not None and known_shared_code(self.canonical)

    def reads(self) -> list[Read]:
        """What precedes the use's transaction, in order: the shopper's coupon of the code, the key's claim."""
        if self.canonical is None:  # no code at all: answer() refuses it as an unknown one, nothing read
            return []
        reads = [] if self.known else [code_is_own_read(code=self.canonical, user_id=self.user_id,
                                                        order_id=self.call.order_id)]
        if self.key is not None:
            reads.append(key_claim_read(user_id=self.user_id, endpoint=self.endpoint, key=self.key,
                                        payload=self.call.payload))
        return reads

    def run(self) -> Answer:
        """The whole use in this thread (the view's)."""
        return self.answer([read.run() for read in self.reads()])

    def answer(self, results: list[Any]) -> Answer:
        """The use, given its reads' `results` (in a Django thread)."""
        if self.canonical is None:
            refuse_unknown(self.user_id, self.ip)  # raises: TooManyMisses or NotFound (counted as one)
        canonical: str = self.canonical
        done = iter(results)
        own_read: tuple[bool, Coupon | None] | None = None if self.known else next(done)
        claimed: bool | None = next(done) if self.key is not None else None
        own_coupon = own_read[1] if own_read is not None else None

        def own() -> bool:  # asked by the guard for a code that is not a remembered shared code, or past its limit
            nonlocal own_coupon
            if own_read is not None:
                return own_read[0]
            is_own, own_coupon = code_is_own_read(code=canonical, user_id=self.user_id,
                                                  order_id=self.call.order_id).run()
            return is_own  # type: ignore[no-any-return]

        return run_idempotent(
            user_id=self.user_id, endpoint=self.endpoint, key=self.key, payload=self.call.payload, apart=self.apart,
            claimed=claimed, execute=guarded(self.user_id, self.ip, own=own, known=lambda: self.known,
                                             execute=lambda: Answer(200, self.call.run(canonical, own_coupon).body())),
        )


def count_use(operation: str, http_status: int, body: Any) -> None:
    """Count a use's answer by its outcome (the body's status; else the HTTP status): USES."""
    outcome = body.get("status") if isinstance(body, dict) else None
    USES.labels(operation, outcome if isinstance(outcome, str) else str(http_status)).inc()
