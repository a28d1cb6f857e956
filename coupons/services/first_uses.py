"""An order's first use of a live shared code, written together with the process's other first uses of the
moment (core.together): one transaction, three statements and one Redis round trip a batch."""
from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from campaigns import redis_state
from campaigns.models import Audience, Campaign
from core.db import prepared_cursor
from core.errors import ApplicationError
from core.locks import AdvisoryLock, lock_call
from core.together import Together
from webhooks.outbox import delivery_trigger

from ..codes import new_codes
from ..events_out import coupon_event_payload, new_coupon_out_ctes
from ..idempotency import PendingAnswer, answer_pending
from ..models import Coupon, CouponEvent, IdempotencyRecord
from ..outcomes import UseCode, UseOutcome, jsonable, refused
from .order import Order, _order_lock_key
from .takes import _give_back_after_failure, _run_takes
from .transitions import Change
from .typed import _use_prefix

# A use's checks and change (redeem_change, reserve_change: `others` as _price_on_order's), and its answer.
Plan = Callable[[Coupon, datetime, "tuple[Coupon, ...] | None"], "UseOutcome | Change"]


FirstUse = tuple[Plan, Callable[[Coupon], UseOutcome]]


_COUPON, _EVENT, _KEY = Coupon._meta.db_table, CouponEvent._meta.db_table, IdempotencyRecord._meta.db_table


# A batch of first uses (_write_first_uses), its three statements. The locks of each use, in _shared_use's order
# (the use's, then the order's), without waiting: a use whose locks another request holds is decided alone.
_FIRST_USES_LOCKS = f"""SELECT i.n FROM jsonb_to_recordset(%s::jsonb) AS i (n int, use text, ord text)
WHERE {lock_call(AdvisoryLock.CODE_USE, "i.use", wait=False)}
  AND {lock_call(AdvisoryLock.ORDER_COUPONS, "i.ord", wait=False)}"""


# Read after the locks (a statement of its own: its snapshot follows them): the uses this path may write, those
# whose shopper owns no coupon of that code (path (a) decides), whose order holds or used no other coupon (its
# coupons then change the pricing) and whose coupon does not exist (the claim id is taken: not a first use).
_FIRST_USES_FREE = f"""SELECT i.n
FROM jsonb_to_recordset(%s::jsonb) AS i (n int, code text, usr text, ord text, claim text)
WHERE NOT EXISTS (SELECT 1 FROM {_COUPON} c WHERE c.code = i.code AND c.user_id = i.usr)
  AND NOT EXISTS (SELECT 1 FROM {_COUPON} o WHERE o.user_id = i.usr AND o.order_id = i.ord
                  AND (o.status = 'redeemed' OR o.status = 'held' AND o.hold_until > %s))
  AND NOT EXISTS (SELECT 1 FROM {_COUPON} c WHERE c.claim_id = i.claim)"""


def _first_uses_sql() -> str:
    """The uses' coupons in their state after the use, their issued events and use events, their webhooks and
    their Idempotency-Keys' answers: one statement for the batch; a coupon whose code is taken after all is not
    written (ON CONFLICT), nor its answer."""
    used = {event: f"(SELECT * FROM w WHERE w.event = '{event}') AS u" for event in ("redeemed", "reserved")}
    return f"""WITH i AS MATERIALIZED (
    SELECT * FROM jsonb_to_recordset(%s::jsonb) AS r (
        code varchar, campaign int, usr varchar, claim varchar, status varchar, valid_from timestamptz,
        expires_at timestamptz, ord varchar, hold_until timestamptz, order_amount numeric, discount numeric,
        shares jsonb, redeemed_at timestamptz, issued_at timestamptz, used_at timestamptz, event varchar,
        source varchar, issued jsonb, used jsonb, issued_out jsonb, used_out jsonb, key_user varchar,
        key_endpoint varchar, key varchar, answer text)
), c AS (
    INSERT INTO {_COUPON} (code, campaign_id, user_id, claim_id, status, valid_from, expires_at, order_id,
                           hold_until, order_amount, discount, shares, redeemed_at, version, created_at, updated_at)
    SELECT code, campaign, usr, claim, status, valid_from, expires_at, ord, hold_until, order_amount, discount,
           shares, redeemed_at, 2, issued_at, used_at FROM i
    ON CONFLICT DO NOTHING
    RETURNING id, campaign_id, claim_id
), w AS (
    SELECT c.id, c.campaign_id, i.* FROM c JOIN i ON i.claim = c.claim_id
), events AS (
    INSERT INTO {_EVENT} (coupon_id, campaign_id, type, data, source, created_at)
    SELECT w.id, w.campaign_id, v.type, v.data, w.source, v.at
    FROM w CROSS JOIN LATERAL (VALUES (1, 'issued', w.issued, w.issued_at),
                                      (2, w.event, w.used, w.used_at)) AS v (n, type, data, at)
    ORDER BY w.id, v.n
), answered AS (
    UPDATE {_KEY} r SET in_flight = false, response_status = 200, response_body = w.answer
    FROM w WHERE w.key IS NOT NULL AND r.user_id = w.key_user AND r.endpoint = w.key_endpoint AND r.key = w.key
){new_coupon_out_ctes("issued_out", "issued", source="w", alias="w", data="w.issued_out")}{
        new_coupon_out_ctes("redeemed_out", "redeemed", source=used["redeemed"], alias="u", data="u.used_out")}{
        new_coupon_out_ctes("reserved_out", "reserved", source=used["reserved"], alias="u", data="u.used_out")}
SELECT w.claim, w.id, (SELECT count(*) FROM issued_out) + (SELECT count(*) FROM redeemed_out)
                      + (SELECT count(*) FROM reserved_out) FROM w"""


_FIRST_USES_SQL = _first_uses_sql()


@dataclass
class _FirstUse:
    """One order's first use of a live shared code, checked and priced (on an order with no other coupon):
    what _write_first_uses writes if its locks and the order allow, and its answer."""

    campaign: Campaign
    typed: str  # the code as typed (canonical)
    coupon: Coupon
    change: Change
    now: datetime
    source: str
    answer: Callable[[Coupon], UseOutcome]
    key: PendingAnswer | None  # the request's Idempotency-Key, its answer stored with the use

    def outcome(self) -> UseOutcome:
        """The use's answer as written (its coupon's fields set; its id once the statement gives it)."""
        coupon = self.coupon
        coupon.status, coupon.version = self.change.to, 2
        for name, value in self.fields.items():
            setattr(coupon, name, value)
        return self.answer(coupon)

    @property
    def lock(self) -> str:  # the use's lock (_use_prefix)
        return self.coupon.claim_id[:-1]

    @property
    def order_lock(self) -> str:
        return _order_lock_key(self.coupon.user_id, self.change.fields["order_id"])

    @property
    def fields(self) -> dict[str, Any]:  # the coupon's fields after the use (those the use leaves unset: None)
        return {"hold_until": None, "redeemed_at": None, **self.change.fields}

    def row(self, outcome: UseOutcome) -> dict[str, Any]:
        coupon, change, campaign, fields, key = self.coupon, self.change, self.campaign, self.fields, self.key
        return {
            "code": coupon.code, "campaign": campaign.pk, "usr": coupon.user_id, "claim": coupon.claim_id,
            "status": change.to, "valid_from": jsonable(coupon.valid_from), "expires_at": jsonable(coupon.expires_at),
            "ord": fields["order_id"], "hold_until": jsonable(fields["hold_until"]),
            "order_amount": str(fields["order_amount"]), "discount": str(fields["discount"]),
            "shares": fields["shares"], "redeemed_at": jsonable(fields["redeemed_at"]),
            "issued_at": jsonable(self.now), "used_at": jsonable(timezone.now()), "event": change.event,
            "source": self.source, "issued": {"code": campaign.code, "order_id": fields["order_id"]},
            "used": {k: jsonable(v) for k, v in change.data.items()},
            "issued_out": _out_data(coupon, "issued", {"shared_code": campaign.code,
                                                      "order_id": fields["order_id"]}, "active"),
            "used_out": _out_data(coupon, change.event, change.data, change.to),
            "key_user": key and key.user_id, "key_endpoint": key and key.endpoint, "key": key and key.key,
            "answer": key and PendingAnswer.answer_text(outcome.body()),
        }


def _first_shared_use(campaign: Campaign, code: str, user_id: str, order: Order, first_use: FirstUse, *,
                      source: str) -> UseOutcome | None:
    """The order's first use of a live shared code, written together with this process's other first uses of
    the moment (_FIRST_USES: one transaction, three statements and one Redis round trip a batch, not a
    transaction and a round trip a use): the same checks as every use (`first_use`'s plan, on an order that
    holds no other coupon). Return None when this is not the order's first use or it would not pass (an own
    coupon of that code, another coupon on the order, a use of the code for it already, a refusal of the
    checks, its locks held by another request, a campaign not live in Redis): _shared_use decides. A caller
    inside a transaction writes its use alone, in it."""
    if campaign.audience == Audience.NEW or campaign.audience_tags or campaign.channels:
        return None  # its checks read the shopper's other coupons under a lock of its own, or whom it admits
    if campaign.budget is not None:
        return None  # its discount is taken from the budget before its coupon is written: _shared_use
    plan, answer = first_use
    now = timezone.now()
    valid_from, expires_at = campaign.coupon_validity(now)
    coupon = Coupon(code=new_codes(1)[0], campaign=campaign, user_id=user_id,
                    claim_id=f"{_use_prefix(campaign.pk, user_id, order.order_id)}0",
                    valid_from=valid_from, expires_at=expires_at)
    try:
        change = plan(coupon, now, ())
    except ApplicationError:
        return None  # e.g. another currency: answered as the general path does
    if isinstance(change, UseOutcome):
        return None
    use = _FirstUse(campaign=campaign, typed=code, coupon=coupon, change=change, now=now, source=source, answer=answer,
                    key=answer_pending())
    if connection.in_atomic_block:
        return _write_first_uses([use])[0]
    outcome: UseOutcome | None = _FIRST_USES.run(use)
    return outcome


def _write_first_uses(uses: Sequence[_FirstUse]) -> list[UseOutcome | None]:
    """Write a batch of first uses in one transaction: their locks (not waited for), which of them this path
    may write (read after the locks), their takes in Redis (code_take.lua, one pipelined round trip: stock and
    per-user limit), the coupons of those taken with their events and webhooks (one statement), the commit.
    One outcome per use: its answer, its refusal (sold out, limit reached), or None (_shared_use decides). A
    take whose coupon was not written after all is given back."""
    outcomes: list[UseOutcome | None] = [None] * len(uses)
    first: dict[str, int] = {}
    for n, use in enumerate(uses):  # one use an order (the locks are the session's: a second would pass them)
        first.setdefault(use.lock, n)
        first.setdefault(use.order_lock, n)
    alone = [n for n, use in enumerate(uses) if first[use.lock] == n and first[use.order_lock] == n]
    attempted: list[int] = []  # whose takes were sent (given back after a failure: once, so harmless if not taken)
    taken: list[int] = []
    try:
        with transaction.atomic():
            with prepared_cursor() as cursor:
                cursor.execute(_FIRST_USES_LOCKS, [json.dumps([
                    {"n": n, "use": uses[n].lock, "ord": uses[n].order_lock} for n in alone])])
                locked = [row[0] for row in cursor.fetchall()]
                if not locked:
                    return outcomes
                cursor.execute(_FIRST_USES_FREE, [json.dumps([
                    {"n": n, "code": uses[n].typed, "usr": uses[n].coupon.user_id,
                     "ord": uses[n].change.fields["order_id"], "claim": uses[n].coupon.claim_id} for n in locked]),
                    min(uses[n].now for n in locked)])
                free = sorted(row[0] for row in cursor.fetchall())
                if not free:
                    return outcomes
                attempted = free
                takes = _run_takes([uses[n].coupon for n in free])
                for n, take in zip(free, takes, strict=True):
                    if take in (redis_state.TakeCode.TAKEN, redis_state.TakeCode.ALREADY):
                        taken.append(n)
                    elif take == redis_state.TakeCode.LIMIT_REACHED:
                        outcomes[n] = refused(UseCode.LIMIT_REACHED)
                    elif take == redis_state.TakeCode.SOLD_OUT:
                        outcomes[n] = refused(UseCode.SOLD_OUT)
                    elif take == redis_state.TakeCode.GROUP_LIMIT_REACHED:
                        outcomes[n] = refused(UseCode.GROUP_LIMIT_REACHED)
                    # else not live in Redis or no state there: _shared_use's take decides (preheat, 404, 503)
                if not taken:
                    return outcomes
                answers = {n: uses[n].outcome() for n in taken}
                cursor.execute(_FIRST_USES_SQL, [json.dumps([uses[n].row(answers[n]) for n in taken])])
                rows = cursor.fetchall()
            written = {claim: pk for claim, pk, _ in rows}
            if rows and rows[0][2]:
                transaction.on_commit(delivery_trigger.request)
            for n in taken:
                pk = written.get(uses[n].coupon.claim_id)
                if pk is not None:
                    uses[n].coupon.pk = pk
                    outcomes[n] = answers[n]
        not_written = [n for n in taken if outcomes[n] is None]
        for n in taken:  # committed: their keys' answers are stored
            key = uses[n].key
            if key is not None and outcomes[n] is not None:
                key.stored = key.answered = True
    except BaseException:
        for n in attempted:
            _give_back_after_failure(uses[n].coupon)
        raise
    for n in not_written:  # a coupon code taken meanwhile (ON CONFLICT): decided again by _shared_use
        _give_back_after_failure(uses[n].coupon)
    return outcomes


_FIRST_USES: Together[_FirstUse] = Together(_write_first_uses, failed=None)


def _out_data(coupon: Coupon, event: str, data: dict[str, Any], status: str) -> dict[str, Any]:
    payload = coupon_event_payload(coupon, event, data, status=status)
    del payload["coupon_id"]  # set in SQL
    return payload

