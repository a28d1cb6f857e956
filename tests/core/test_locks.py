"""The advisory locks keep their numbers: a renumbered lock would not exclude the processes of the release
before it during a deploy."""
from __future__ import annotations

import psycopg
import pytest
from django.conf import settings
from django.db import connection, transaction

from core.locks import AdvisoryLock, lock_call, session_lock, xact_lock


def test_the_advisory_locks_keep_the_numbers_they_were_born_with() -> None:
    assert {lock.name: lock.value for lock in AdvisoryLock} == {
        "CAMPAIGN_REPAIR": 7301,
        "NEW_SHOPPER_USE": 7302,
        "VALIDITY_EXTENSION": 0x45585456,
        "SHARED_CODE": 0x53484344,
        "CODE_USE": 0x43555345,
        "ORDER_COUPONS": 0x4F524452,
    }


@pytest.mark.django_db
def test_a_lock_taken_by_its_name_is_the_lock_of_its_number() -> None:
    # given: the repair lock of campaign 42 taken by its name
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [AdvisoryLock.CAMPAIGN_REPAIR, 42])

        # when: PostgreSQL lists the advisory locks held
        cursor.execute("SELECT classid, objid FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()")

        # then: it is the lock (7301, 42)
        assert cursor.fetchall() == [(7301, 42)]


def _other_session() -> psycopg.Connection:
    db = settings.DATABASES["default"]
    return psycopg.connect(dbname=db["NAME"], user=db["USER"], password=db["PASSWORD"], host=db["HOST"],
                           port=db["PORT"], autocommit=True)


@pytest.mark.django_db(transaction=True)
def test_the_helper_takes_the_lock_the_sql_it_replaced_takes() -> None:
    # given: another session holding, by the SQL the callers wrote before core.locks, a text key's lock (a shared
    # code's use) and an int key's (a validity extension's batches)
    other = _other_session()
    try:
        other.execute("BEGIN")
        other.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", [int(AdvisoryLock.CODE_USE), "code:7:ab:"])
        other.execute("SELECT pg_advisory_xact_lock(%s, %s)", [int(AdvisoryLock.VALIDITY_EXTENSION), 12])

        # when: this session tries them through the helper, and a text key it does not hold
        with transaction.atomic():
            taken = [xact_lock(AdvisoryLock.CODE_USE, "code:7:ab:", wait=False),
                     xact_lock(AdvisoryLock.VALIDITY_EXTENSION, 12, wait=False),
                     xact_lock(AdvisoryLock.CODE_USE, "code:7:cd:", wait=False)]

        # then: the same two locks (not taken), the third free
        assert taken == [False, False, True]
        other.execute("ROLLBACK")
        with transaction.atomic():
            assert xact_lock(AdvisoryLock.CODE_USE, "code:7:ab:", wait=False)
    finally:
        other.close()


def test_a_statement_of_many_rows_takes_a_text_key_by_its_hashtext() -> None:
    assert lock_call(AdvisoryLock.ORDER_COUPONS, "i.ord", wait=False) == (
        "pg_try_advisory_xact_lock(1330791506, hashtext(i.ord))")
    assert lock_call(AdvisoryLock.CAMPAIGN_REPAIR, text=False, wait=False, session=True) == (
        "pg_try_advisory_lock(7301, %s)")


@pytest.mark.django_db(transaction=True)
def test_a_session_lock_excludes_another_session_until_left() -> None:
    other = _other_session()
    try:
        with session_lock(AdvisoryLock.CAMPAIGN_REPAIR, 42) as taken:
            theirs = other.execute("SELECT pg_try_advisory_lock(7301, 42)").fetchone()
        after = other.execute("SELECT pg_try_advisory_lock(7301, 42)").fetchone()
        assert taken and theirs == (False,) and after == (True,)
    finally:
        other.close()
