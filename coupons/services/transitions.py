"""A coupon's change of state: a conditional UPDATE (status and version in the WHERE clause), its event and its
webhook, in one transaction; a change that loses a race re-reads the coupon and decides again (_retrying). What
time does to a coupon (coupon_settle: a hold lapses, validity ends) is such a change too.

The change is one prepared statement. _transition runs on every reserve, confirm, redeem and release of a coupon
the shopper holds, and twice on a release of a shared code's use. Through Django's ORM it was three statements
compiled on every request (the UPDATE, the event's INSERT, the outbox's INSERT ... SELECT): the query compiler cost
a use more than PostgreSQL did. Here they are one statement whose text depends only on which columns the change
sets and which it is guarded by, prepared once per connection (core.db) and run with the values: the same rows as
before, the UPDATE still conditional on status and version (a change that loses a race writes nothing, neither
event nor webhook), the event and its webhook written only when the coupon was.
"""
from __future__ import annotations

import copy
import functools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from campaigns.claim_settled import claims_changed
from core.db import prepared_cursor
from core.errors import Unavailable
from webhooks.outbox import delivery_trigger, outbox_ctes

from .. import budget
from ..events_out import OUT, coupon_event_payload
from ..idempotency import PendingAnswer, answer_pending
from ..models import Coupon, CouponEvent, CouponEventType, CouponStatus, IdempotencyRecord
from ..outcomes import UseOutcome, jsonable

_COUPON, _EVENT = Coupon._meta.db_table, CouponEvent._meta.db_table
_FIELDS = {f.attname: f for f in Coupon._meta.concrete_fields}
# A value may be None (SQL NULL): each parameter is cast to its column's type (server-side binding).
_CASTS = {"order_id": "varchar", "hold_until": "timestamptz", "order_amount": "numeric", "discount": "numeric",
          "shares": "jsonb", "redeemed_at": "timestamptz", "expires_at": "timestamptz", "status": "varchar"}


@functools.cache
def _statement(event: str, fields: tuple[str, ...], guards: tuple[str, ...], answers: bool = False) -> str:
    """The statement of a change of `event` setting `fields` (besides status, version, updated_at) on a coupon
    unchanged since it was read (its status and version, and `guards`' values); `answers`: and storing the
    request's Idempotency-Key's answer if it did (coupons.idempotency.PendingAnswer)."""
    sets = "".join(f", {_FIELDS[name].column} = %({name})s::{_CASTS[name]}" for name in fields)
    where = "".join(f" AND {_FIELDS[name].column} = %(g_{name})s::{_CASTS[name]}" for name in guards)
    out = OUT.get(event)
    webhook = outbox_ctes("out", type=out, source="u", key="'coupon:' || u.id", campaign="u.campaign_id",
                          data="%(out)s::jsonb") if out is not None else ""
    return f"""WITH u AS (
    UPDATE {_COUPON} SET status = %(to)s::varchar, version = version + 1, updated_at = %(now)s::timestamptz{sets}
    WHERE id = %(id)s::bigint AND status = %(status)s::varchar AND version = %(version)s::integer{where}
    RETURNING id, campaign_id
), ev AS (
    INSERT INTO {_EVENT} (coupon_id, campaign_id, type, data, source, created_at)
    SELECT u.id, u.campaign_id, %(event)s::varchar, %(data)s::jsonb, %(source)s::varchar, %(now)s::timestamptz
    FROM u
){webhook}{_ANSWERED if answers else ""}
SELECT (SELECT count(*) FROM u), {"(SELECT count(*) FROM out)" if out is not None else "0"}"""


_ANSWERED = f""", answered AS (
    UPDATE {IdempotencyRecord._meta.db_table} SET in_flight = false, response_status = 200,
                                                response_body = %(answer)s::text
    WHERE EXISTS (SELECT 1 FROM u) AND user_id = %(key_user)s::varchar AND endpoint = %(key_endpoint)s::varchar
      AND key = %(key)s::varchar
)"""


def _db_value(name: str, value: Any) -> Any:
    """A field's value as its parameter: JSON as text (None stays SQL NULL, as Django stores it)."""
    if name == "shares" and value is not None:
        return json.dumps(value)
    return value


def transition_write(coupon: Coupon, *, to: str, event: str, source: str, data: dict[str, Any], now: datetime,
                     guard: dict[str, Any], fields: dict[str, Any], key: PendingAnswer | None = None,
                     answer: str | None = None) -> bool:
    """Move `coupon` to `to` with `fields` if its row still has the status and version it was read with (and
    `guard`'s values), writing its `event` (with `data`) and the event's webhook, and `key`'s `answer` (the
    request's Idempotency-Key: key.written()); False, nothing written, when it changed meanwhile. Call inside
    the transaction of the change. The coupon object is left as it was."""
    names: Sequence[str] = tuple(sorted(fields))
    guards: Sequence[str] = tuple(sorted(guard))
    params: dict[str, Any] = {
        "to": str(to), "now": now, "id": coupon.pk, "status": str(coupon.status), "version": coupon.version,
        "event": str(event),
        "source": source, "data": json.dumps({k: jsonable(v) for k, v in data.items()}),
        **{name: _db_value(name, fields[name]) for name in names},
        **{f"g_{name}": guard[name] for name in guards},
    }
    if event in OUT:
        params["out"] = json.dumps(coupon_event_payload(coupon, event, data, status=to), separators=(",", ":"))
    answers = key is not None and answer is not None
    if key is not None and answer is not None:
        params.update(answer=answer, key_user=key.user_id, key_endpoint=key.endpoint, key=key.key)
    with prepared_cursor() as cursor:
        cursor.execute(_statement(event, tuple(names), tuple(guards), answers), params)
        changed, webhooks = cursor.fetchone()
    if webhooks:
        transaction.on_commit(delivery_trigger.request)
    if changed and key is not None and answers:
        key.written()
    return bool(changed)


_EVENT_SQL = (f"INSERT INTO {_EVENT} (coupon_id, campaign_id, type, data, source, created_at) "
              "VALUES (%(id)s::bigint, %(campaign)s::bigint, %(event)s::varchar, %(data)s::jsonb, %(source)s::varchar, "
              "%(now)s::timestamptz)")


def event_write(coupon: Coupon, *, event: str, source: str, data: dict[str, Any]) -> None:
    """Write one more event of a coupon that stays inside (no webhook: a restock): the INSERT of
    CouponEvent.objects.create, prepared. Call inside the transaction of the change it belongs to."""
    assert event not in OUT, "an event that goes out is written by transition_write, with its webhook"
    with prepared_cursor() as cursor:
        cursor.execute(_EVENT_SQL, {"id": coupon.pk, "campaign": coupon.campaign_id, "event": str(event),
                                    "data": json.dumps(data), "source": source, "now": timezone.now()})


MAX_ATTEMPTS = 5


class Contention(Unavailable):
    """The coupon changed under us MAX_ATTEMPTS times in a row; nothing was changed by this request."""

    message = "The coupon is changing too fast; retry."


def _transition(
    coupon: Coupon, *, to: str, event: str, source: str, data: dict[str, Any], guard: dict[str, Any] | None = None,
    answer: Callable[[Coupon], UseOutcome] | None = None, **fields: Any,
) -> bool:
    """Move the coupon to `to` if nobody changed it since it was read; write the event. Call in atomic.

    `guard` adds conditions on fields a change depends on that are not state changes (expires_at). `answer`:
    the use's answer once changed, stored under the request's Idempotency-Key by the same statement.
    """
    if coupon.version == 1:  # its claim's settled record shows it as issued: PostgreSQL answers from this change on
        claims_changed([coupon.claim_id])
    was = budget.holds(coupon.status, coupon.discount)
    key = answer_pending() if answer is not None else None
    text = None
    if key is not None and answer is not None:  # the answer the request gives if the change is written
        after = copy.copy(coupon)
        after.status, after.version = to, coupon.version + 1
        for name, value in fields.items():
            setattr(after, name, value)
        text = PendingAnswer.answer_text(answer(after).body())
    # The UPDATE, its event, its webhook and the answer (in this transaction): one prepared statement
    if not transition_write(coupon, to=to, event=event, source=source, data=data, now=timezone.now(),
                            guard=guard or {}, fields=fields, key=key, answer=text):
        return False
    coupon.status = to
    coupon.version += 1
    for name, value in fields.items():
        setattr(coupon, name, value)
    budget.given_back(coupon, was, budget.holds(to, coupon.discount))  # a release, a lapse: at the commit
    return True


_NO_ORDER = {"order_id": None, "hold_until": None, "discount": None, "order_amount": None, "shares": None}


def coupon_settle(*, coupon: Coupon, now: datetime, source: str = "lazy") -> bool:
    """Apply what time did to the coupon: a hold past hold_until lapses; validity past its end expires.

    Return False when the coupon changed under us (re-read it). Call inside transaction.atomic.
    """
    if coupon.hold_lapsed_at(now):
        lapsed = {"order_id": coupon.order_id, "hold_until": coupon.hold_until}
        if not _transition(coupon, to=CouponStatus.ACTIVE, event=CouponEventType.HOLD_LAPSED, source=source,
                           data=lapsed, **_NO_ORDER):
            return False
    if coupon.status == CouponStatus.ACTIVE and coupon.is_expired_at(now):
        # Guarded by expires_at: a validity extension committed since the read keeps the coupon alive.
        if not _transition(coupon, to=CouponStatus.EXPIRED, event=CouponEventType.EXPIRED, source=source,
                           data={"expires_at": coupon.expires_at}, guard={"expires_at": coupon.expires_at}):
            return False
    return True


Decide = Callable[[Coupon, datetime], "UseOutcome | None"]


def _retrying(find: Callable[[], Coupon], decide: Decide, read: Coupon | None = None) -> UseOutcome:
    """Run `decide(coupon)` on a settled read of the coupon (`find`) until it is not beaten by a race. `read`: the
    coupon as just read (outside the transaction: one round trip fewer), which the first attempt decides on: what
    it writes is conditional on the row's status and version (_transition), so a row changed since is a race
    lost, decided again on a fresh read."""
    for _ in range(MAX_ATTEMPTS):
        with budget.kept(), transaction.atomic():
            coupon = read if read is not None else find()
            read = None  # a later attempt reads afresh
            now = timezone.now()
            if not coupon_settle(coupon=coupon, now=now):
                continue
            outcome = decide(coupon, now)
            if outcome is not None:
                return outcome
    raise Contention()


@dataclass(frozen=True)
class Change:
    """What a use does to an active (or held) coupon whose checks passed: _transition's arguments."""

    to: str
    event: str
    data: dict[str, Any]
    fields: dict[str, Any]

    def arguments(self) -> dict[str, Any]:
        return {"to": self.to, "event": self.event, "data": self.data, **self.fields}

