"""A checkout's statements on coupons are the prepared ones (coupons.hot_reads, coupons.services.transitions), and
what they read is what Django's ORM reads: the same model objects, field by field.

Real PostgreSQL and Redis, requests through Django's test client.
"""
from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from coupons import hot_reads
from coupons.models import Coupon, CouponStatus

from .helpers import assert_rows_agree_with_events, events_of, issued_coupon
from .use_helpers import ORDER, answer, use

# Django's ORM quotes its table names; the prepared statements name them bare.
ORM_TABLES = ('"coupons_coupon"', '"campaigns_campaign"')


def _fields(coupon: Coupon) -> dict[str, Any]:
    campaign = coupon.campaign
    return {"coupon": {f.attname: getattr(coupon, f.attname) for f in Coupon._meta.concrete_fields},
            "campaign": {f.attname: getattr(campaign, f.attname) for f in type(campaign)._meta.concrete_fields}}


def test_reserve_confirm_release_of_a_claimed_coupon_read_and_change_it_through_prepared_statements(
        client, live_campaign) -> None:
    # given: a shopper's claimed coupon
    coupon = issued_coupon(live_campaign, "alice")

    # when: reserved, confirmed and released over the API
    with CaptureQueriesContext(connection) as queries:
        reserved = use(client, coupon.code, "reserve")
        confirmed = use(client, coupon.code, "confirm")
        released = use(client, coupon.code, "release")

    # then: the answers and events as ever, no statement on coupons or campaigns compiled by the ORM, none
    # asking whether a claimed coupon's code is a live shared code (it is the shopper's own, looked up first),
    # and the coupon read once a use, by the guard's check that the code is the shopper's own (its row the one
    # the use decides on: not read again by id)
    assert [answer(r) for r in (reserved, confirmed, released)] == [
        (200, 0, "reserved"), (200, 0, "redeemed"), (200, 0, "released")]
    assert [t for t, _ in events_of(coupon)] == ["issued", "reserved", "redeemed", "released"]
    assert_rows_agree_with_events()
    compiled = [q["sql"] for q in queries.captured_queries if any(table in q["sql"] for table in ORM_TABLES)]
    assert compiled == []
    campaign_reads = [q["sql"] for q in queries.captured_queries if "k.published_at IS NOT NULL" in q["sql"]]
    assert campaign_reads == []
    own_reads = [q["sql"] for q in queries.captured_queries if "AS one LEFT JOIN" in q["sql"]]
    by_id = [q["sql"] for q in queries.captured_queries if "WHERE c.id = %(id)s::bigint" in q["sql"]]
    assert len(own_reads) == 3 and by_id == []


def test_the_prepared_reads_build_the_objects_the_orm_builds(client, live_campaign) -> None:
    # given: a coupon held for an order sent with lines (its shares are JSON), of a campaign with a scope (arrays)
    coupon = issued_coupon(live_campaign, "alice", include_categories=["tea"])
    lines = {**ORDER, "lines": [{"sku": "TEA-1", "category": "tea", "quantity": 2, "unit_price": "175.00"}]}
    del lines["order_amount"]
    assert answer(use(client, coupon.code, "reserve", body=lines)) == (200, 0, "reserved")
    orm = Coupon.objects.select_related("campaign").get(pk=coupon.pk)
    assert orm.status == CouponStatus.HELD and isinstance(orm.shares, dict)

    # when: read by each prepared statement
    now = timezone.now()
    by_id = hot_reads.coupon_by_id(coupon.pk)
    in_cart = hot_reads.cart_coupons(user_id="alice", now=now, currency="CNY", codes=[coupon.code])
    of_order = hot_reads.order_coupons(user_id="alice", order_id=ORDER["order_id"], now=now, exclude=None)

    # then: the same objects, field by field
    own = hot_reads.own_coupon(code=coupon.code, user_id="alice")
    assert own is not None and hot_reads.own_coupon(code=coupon.code, user_id="bob") is None
    is_own, of_check = hot_reads.own_coupon_or_use(code=coupon.code, user_id="alice", use="-", kind="codes",
                                                   shared=None)
    assert is_own and of_check is not None
    assert hot_reads.own_coupon_or_use(code=coupon.code, user_id="bob", use="-", kind="codes", shared=None) == (
        False, None)
    for read in (by_id, own, of_check, *in_cart, *of_order):
        assert _fields(read) == _fields(orm)
    assert len(in_cart) == 1 and len(of_order) == 1
    assert hot_reads.order_coupons(user_id="alice", order_id=ORDER["order_id"], now=now + timedelta(hours=2),
                                   exclude=None) == []  # a hold lapsed by then bears on no pricing
    assert hot_reads.order_coupons(user_id="alice", order_id=ORDER["order_id"], now=now, exclude=coupon.pk) == []


@pytest.mark.django_db(transaction=True)  # a reserve's or redeem's transaction commits (its answer counts once it has)
def test_a_coupons_use_stores_its_keys_answer_in_the_statement_that_changes_it(client, live_campaign) -> None:
    from django.db import reset_queries

    from coupons.models import IdempotencyRecord

    # given: two of alice's claimed coupons
    first, second = issued_coupon(live_campaign, "alice"), issued_coupon(live_campaign, "alice")

    # when: one is redeemed, the other reserved then confirmed, each under an Idempotency-Key
    answers, statements = [], []
    for code, action, key in ((first.code, "redeem", "k1"), (second.code, "reserve", "k2"),
                              (second.code, "confirm", "k3")):
        reset_queries()  # as each request's start does: the capture's slice starts at 0
        with CaptureQueriesContext(connection) as queries:
            answers.append(use(client, code, action, key=key, body={**ORDER, "order_id": "B-1"}
                               if action != "confirm" else {"order_id": "B-1"}))
        statements += [q["sql"] for q in queries.captured_queries]
    replays = [use(client, code, action, key=key, body={**ORDER, "order_id": "B-1"}
                   if action != "confirm" else {"order_id": "B-1"})
               for code, action, key in ((first.code, "redeem", "k1"), (second.code, "reserve", "k2"))]

    # then: each key's answer was written by the use's own statement (atomic with it), none by one of its own
    assert [answer(r) for r in answers] == [(200, 0, "redeemed"), (200, 0, "reserved"), (200, 0, "redeemed")]
    assert [sql for sql in statements if sql.startswith("UPDATE coupons_idempotency")] == []
    records = {r.key: r for r in IdempotencyRecord.objects.filter(user_id="alice")}
    for response, key in zip(answers, ("k1", "k2", "k3"), strict=True):
        assert (records[key].in_flight, records[key].response_status) == (False, 200)
        assert json.loads(records[key].response_body) == response.json()
    assert [(r.content, r["Idempotent-Replayed"]) for r in replays] == [
        (answers[0].content, "true"), (answers[1].content, "true")]
