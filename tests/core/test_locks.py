"""The advisory locks keep their numbers: a renumbered lock would not exclude the processes of the release
before it during a deploy."""
from __future__ import annotations

import pytest
from django.db import connection

from core.locks import AdvisoryLock


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
