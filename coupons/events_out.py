"""A coupon's events as webhooks: which of its event log's types go out, under which name, with what data.

Written to the outbox (webhooks.outbox) by every writer of a coupon's event, in the same transaction: one call
per event for the single changes (services._transition and the issued events of typed codes), one CTE per batch
for the drain's issued coupons and the expiry sweep (SQL below).

The payload's data: the coupon as it is after the event (coupon_id, code, campaign_id, user_id, status,
valid_from, expires_at) and the event's own data (order_id, order_amount, discount, ... as in the event log). A
lapsed hold goes out as coupon.released with "reason": "hold_lapsed" (the coupon is usable again, as after a
release); restocked, extended and compensated events stay inside.
"""
from __future__ import annotations

from typing import Any

from webhooks.models import EventType
from webhooks.outbox import enqueue, outbox_ctes

from .models import Coupon
from .outcomes import jsonable

OUT = {
    "issued": EventType.COUPON_ISSUED,
    "reserved": EventType.COUPON_RESERVED,
    "redeemed": EventType.COUPON_REDEEMED,
    "released": EventType.COUPON_RELEASED,
    "hold_lapsed": EventType.COUPON_RELEASED,
    "expired": EventType.COUPON_EXPIRED,
    "revoked": EventType.COUPON_REVOKED,
}


def coupon_event_out(coupon: Coupon, event: str, data: dict[str, Any], *, status: str) -> None:
    """Write the webhook of a coupon's event to the outbox (nothing for an event that stays inside). Call in the
    transaction that writes the event; `status` is the coupon's status after it."""
    kind = OUT.get(event)
    if kind is None:
        return
    enqueue(kind, key=f"coupon:{coupon.pk}", campaign_id=coupon.campaign_id,
            data=coupon_event_payload(coupon, event, data, status=status))


def coupon_event_payload(coupon: Coupon, event: str, data: dict[str, Any], *, status: str) -> dict[str, Any]:
    """The data of a coupon's event's webhook (coupon_id is None for a coupon not written yet)."""
    payload = {"coupon_id": coupon.pk, "code": coupon.code, "campaign_id": coupon.campaign_id,
               "user_id": coupon.user_id, "status": status, "valid_from": jsonable(coupon.valid_from),
               "expires_at": jsonable(coupon.expires_at)}
    payload.update({k: jsonable(v) for k, v in data.items()})
    if event == "hold_lapsed":
        payload["reason"] = "hold_lapsed"
    return payload


def new_coupon_out_ctes(name: str, event: str, *, source: str, alias: str, data: str) -> str:
    """The outbox CTEs of a statement that writes new coupons (each one's id in `alias`.id, one per row of
    `source`): their event's webhook, whose data is coupon_event_payload's as the JSON expression `data`, with
    coupon_id set in SQL."""
    return outbox_ctes(name, type=OUT[event], source=source, key=f"'coupon:' || {alias}.id",
                       campaign=f"{alias}.campaign_id",
                       data=f"jsonb_build_object('coupon_id', {alias}.id) || {data}")


def _coupon_json(alias: str, status: str, extra: str) -> str:
    return (f"jsonb_build_object('coupon_id', {alias}.id, 'code', {alias}.code, 'campaign_id', "
            f"{alias}.campaign_id, 'user_id', {alias}.user_id, 'status', '{status}', 'valid_from', "
            f"{alias}.valid_from, 'expires_at', {alias}.expires_at){extra}")


def bulk_ctes(name: str, *, event: str, source: str, alias: str, status: str, extra: str = "") -> str:
    """The outbox CTEs of a bulk statement: one webhook of `event` per row of `source` (a FROM clause over the
    statement's CTEs) whose `alias` has the changed coupon's id, code, campaign_id, user_id, valid_from and
    expires_at; `extra` is `|| jsonb_build_object(...)` of the event's own data."""
    return outbox_ctes(name, type=OUT[event], source=source, key=f"'coupon:' || {alias}.id",
                       campaign=f"{alias}.campaign_id", data=_coupon_json(alias, status, extra))
