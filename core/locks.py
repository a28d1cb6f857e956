"""The project's PostgreSQL advisory locks, by name: the first key of pg_advisory_lock(key1, key2) and its kin.

Never renumber a member, and never reuse a number: a lock is the same lock only while every process, of this
release and of the one it replaces during a deploy, takes it under the same number. Add new ones at the end.
The same holds for the second key: a text's is PostgreSQL's hashtext of it (lock_key), an int's the int itself.

Every lock is taken here: lock_key (the SQL of a second key), lock_call (the SQL taking a lock, blocking or
try, for a transaction or a session: a statement of many rows takes one a row with it), xact_lock (take a
transaction lock now) and session_lock (hold a session lock while free).
"""
from __future__ import annotations

import contextlib
import enum
from collections.abc import Iterator

from django.db import connection


class AdvisoryLock(enum.IntEnum):
    # Session lock (campaigns.rebuild.campaign_repair_lock), second key the campaign id: one rebuild or repair
    # (reconciliation) of a campaign at a time.
    CAMPAIGN_REPAIR = 7301
    # Transaction lock (coupons.services), second key hashtext(shopper id): one use of a new-shopper coupon per
    # shopper at a time, so two at once can't both count as the shopper's first.
    NEW_SHOPPER_USE = 7302
    # Transaction lock (coupons.extension), second key the extension's id: the batches of one validity extension
    # take turns. "EXTV" in ASCII.
    VALIDITY_EXTENSION = 0x45585456
    # Transaction lock (campaigns.services), second key hashtext(the upper-case code): a shared code is checked
    # unique among campaigns not ended and saved (create, edit, publish) one at a time. "SHCD" in ASCII.
    SHARED_CODE = 0x53484344
    # Transaction lock (coupons.services), second key hashtext of a shared code's use (campaign, shopper, order)
    # or of a shopper in a unique-codes campaign: the use's Redis take and its coupon row are written by one
    # request at a time, and a shopper's unique codes are counted against the per-user limit one at a time.
    # "CUSE" in ASCII.
    CODE_USE = 0x43555345
    # Transaction lock (coupons.services), second key hashtext of (shopper, order id): the coupons of one order
    # are reserved and redeemed one at a time, so each new one is priced after every other the order holds
    # (two at once can't both pass the combination check). "ORDR" in ASCII.
    ORDER_COUPONS = 0x4F524452


def lock_key(value: str = "%s", *, text: bool = True) -> str:
    """The SQL of a lock's second key from the SQL expression `value`: a text's is hashtext(value) (an int4;
    never derive it otherwise: old and new processes must compute the same key during a deploy), an int's the
    int itself."""
    return f"hashtext({value})" if text else value


def lock_call(lock: AdvisoryLock, value: str = "%s", *, text: bool = True, wait: bool = True,
              session: bool = False) -> str:
    """The SQL call that takes `lock` on the second key of `value` (lock_key): pg_advisory_xact_lock, or its
    try_ (true when taken, false at once when held by another) or session kin."""
    name = f"pg_{'' if wait else 'try_'}advisory_{'' if session else 'xact_'}lock"
    return f"{name}({int(lock)}, {lock_key(value, text=text)})"


def xact_lock(lock: AdvisoryLock, key: str | int, *, wait: bool = True) -> bool:
    """Take the transaction lock (lock, key) until the transaction ends (call inside one); a text key by its
    hashtext. Waits for it, or with wait=False returns at once whether it was taken."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {lock_call(lock, text=isinstance(key, str), wait=wait)}", [key])
        return wait or bool(cursor.fetchone()[0])


@contextlib.contextmanager
def session_lock(lock: AdvisoryLock, key: int) -> Iterator[bool]:
    """Hold the session lock (lock, key) if free, not waiting (re-entrant in a session); yield whether taken.
    Released on leaving, whatever the transaction did."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {lock_call(lock, text=False, wait=False, session=True)}", [key])
        taken = bool(cursor.fetchone()[0])
    try:
        yield taken
    finally:
        if taken:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s, %s)", [int(lock), key])
