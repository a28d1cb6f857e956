"""POST /api/v1/claims/{claim_id}/cancel: an unused coupon given back, its stock returned exactly once.

Every test asserts the answer and the state on both sides: the coupon, its events and the Claim row in
PostgreSQL; stock, the shopper's count and the given-back set in Redis; and that verify still balances.
Races are real: threads with their own PostgreSQL connection, or requests to the real granian server.
"""
from __future__ import annotations

import http.client
import io
import json
import threading
import urllib.parse
from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection, connections
from django.utils import timezone

from campaigns.models import Campaign
from campaigns.redis_state import campaign_keys, redis_client, run_claim
from core.auth import mint_token
from core.errors import NotFound
from coupons.models import Coupon, CouponEvent, CouponEventType, CouponStatus, IdempotencyRecord
from coupons.outcomes import UseOutcome
from coupons.replay import disagreements
from coupons.services import Order, coupon_redeem, coupon_reserve
from orders import ledger
from orders.cancel import claim_cancel
from orders.drain import drain_campaign
from orders.models import Claim, ClaimStatus
from orders.rebuild import campaign_rebuild
from orders.verify import campaign_verify
from tests.conftest import shopper_headers, unacknowledged

AMOUNT = Decimal("350.00")  # the factory's rule: spend 300.00, get 50.00 off


# --- helpers -------------------------------------------------------------------------------------------


def claim(campaign: Campaign, user_id: str) -> str:
    """Claim one coupon in Redis (the claim stays pending in the ledger); return its claim id."""
    result = run_claim(campaign_id=campaign.pk, user_id=user_id, idempotency_key=None)
    assert result.code == 0
    return f"{campaign.pk}-{result.ledger_id}"


def issue(campaign: Campaign, user_id: str) -> tuple[str, Coupon]:
    """Claim and drain: return the claim id and its issued coupon."""
    claim_id = claim(campaign, user_id)
    drain_campaign(campaign_id=campaign.pk)
    return claim_id, Coupon.objects.get(claim_id=claim_id)


def stock(campaign: Campaign) -> int | None:
    value = redis_client().get(campaign_keys(campaign.pk).stock)
    return None if value is None else int(value)


def users(campaign: Campaign) -> dict[str, int]:
    """Per-user claim counts (without the "" field that keeps the hash alive)."""
    counts = redis_client().hgetall(campaign_keys(campaign.pk).users)
    return {k.decode(): int(v) for k, v in counts.items() if k != b""}


def given_back(campaign: Campaign) -> set[str]:
    """The claim ids cancel.lua gave back to the stock."""
    return {m.decode() for m in redis_client().smembers(campaign_keys(campaign.pk).cancelled)} - {""}


def event_types(coupon: Coupon) -> list[str]:
    return list(CouponEvent.objects.filter(coupon=coupon).order_by("created_at", "id").values_list("type", flat=True))


def world(campaign: Campaign) -> tuple[Any, ...]:
    """Everything a cancel could change, in Redis and in PostgreSQL."""
    return (
        stock(campaign),
        users(campaign),
        given_back(campaign),
        redis_client().xlen(campaign_keys(campaign.pk).ledger),
        sorted(Claim.objects.filter(campaign=campaign).values_list("claim_id", "user_id", "status")),
        sorted(Coupon.objects.filter(campaign=campaign).values_list("code", "status", "version", "order_id")),
        sorted(CouponEvent.objects.filter(campaign=campaign).values_list("coupon_id", "type")),
    )


def balanced(campaign: Campaign) -> bool:
    balance = campaign_verify(campaign=campaign)
    assert balance.problems == [] and balance.users_over_limit == [], balance
    return balance.balanced


def cancel_url(claim_id: str) -> str:
    return f"/api/v1/claims/{claim_id}/cancel"


def cancel(client: Any, claim_id: str, user_id: str = "alice", **extra: str) -> Any:
    return client.post(cancel_url(claim_id), data="", content_type="application/json",
                       **shopper_headers(user_id, **extra))


def all_at_once(jobs: list[Callable[[], Any]]) -> list[Any]:
    """Run every job in its own thread, released together by a barrier; return results or exceptions."""
    barrier = threading.Barrier(len(jobs))
    results: list[Any] = [None] * len(jobs)

    def run(index: int, job: Callable[[], Any]) -> None:
        try:
            connection.ensure_connection()  # connect before the barrier, so the race is the service's
            barrier.wait(timeout=60)
            results[index] = job()
        except BaseException as exc:  # noqa: B036 (reported to the test, which asserts on it)
            results[index] = exc
        finally:
            connections.close_all()  # this thread's own connection

    threads = [threading.Thread(target=run, args=(i, job)) for i, job in enumerate(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads), "a racer hung"
    return results


class Storefront:
    """A storefront backend talking to the real server over its own keep-alive HTTP connection."""

    def __init__(self, base_url: str, user_id: str) -> None:
        url = urllib.parse.urlsplit(base_url)
        self.conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
        self.headers = {"X-User-Id": user_id, "X-Token": mint_token(user_id, ttl=600),
                        "Content-Type": "application/json"}

    def post(self, path: str, body: dict[str, Any], key: str | None = None) -> tuple[int, dict[str, Any]]:
        headers = dict(self.headers, **({"Idempotency-Key": key} if key else {}))
        self.conn.request("POST", path, body=json.dumps(body), headers=headers)
        response = self.conn.getresponse()
        return response.status, json.loads(response.read())


# --- the cancel and what it gives back -----------------------------------------------------------------


@pytest.mark.django_db
def test_cancel_through_http_revokes_the_coupon_and_returns_the_stock_and_the_shoppers_count(
    client, live_campaign,
) -> None:
    # Given alice's issued coupon of a campaign of 10, one per shopper
    campaign = live_campaign(total_stock=10, per_user_limit=1)
    claim_id, coupon = issue(campaign, "alice")
    assert (stock(campaign), users(campaign)) == (9, {"alice": 1})

    # When she cancels the claim
    response = cancel(client, claim_id)

    # Then it is cancelled: coupon revoked with 'revoked' and 'restocked' events, the Claim row cancelled
    assert response.status_code == 200
    assert response.json() == {"code": 0, "status": "cancelled", "claim_id": claim_id}
    coupon.refresh_from_db()
    assert (coupon.status, coupon.version) == (CouponStatus.REVOKED, 2)
    assert event_types(coupon) == [CouponEventType.ISSUED, CouponEventType.REVOKED, CouponEventType.RESTOCKED]
    assert Claim.objects.get(claim_id=claim_id).status == ClaimStatus.CANCELLED
    # And Redis has the stock back, alice's count down to 0, the claim recorded as given back
    assert (stock(campaign), users(campaign), given_back(campaign)) == (10, {"alice": 0}, {claim_id})
    assert balanced(campaign)
    assert list(disagreements(Coupon.objects.filter(campaign=campaign))) == []
    # And alice may claim again
    again = run_claim(campaign_id=campaign.pk, user_id="alice", idempotency_key=None)
    assert again.code == 0
    assert (stock(campaign), users(campaign)) == (9, {"alice": 1})
    assert balanced(campaign)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_fifty_concurrent_cancels_of_one_claim_return_the_stock_exactly_once(live_campaign) -> None:
    # Given alice's issued coupon
    campaign = live_campaign(total_stock=10, per_user_limit=1)
    claim_id, coupon = issue(campaign, "alice")
    before = stock(campaign)

    # When 50 cancels of her claim run at the same moment
    results = all_at_once([(lambda: claim_cancel(user_id="alice", claim_id=claim_id)) for _ in range(50)])

    # Then all 50 answer cancelled, and the stock came back once
    assert not [r for r in results if not isinstance(r, UseOutcome)], results
    assert Counter((r.code, r.status) for r in results) == {(0, "cancelled"): 50}
    assert stock(campaign) == before + 1
    assert users(campaign) == {"alice": 0}
    assert given_back(campaign) == {claim_id}
    coupon.refresh_from_db()
    assert (coupon.status, coupon.version) == (CouponStatus.REVOKED, 2)
    assert Counter(event_types(coupon)) == {CouponEventType.ISSUED: 1, CouponEventType.REVOKED: 1,
                                            CouponEventType.RESTOCKED: 1}
    assert Claim.objects.get(claim_id=claim_id).status == ClaimStatus.CANCELLED
    assert balanced(campaign)
    print(f"50 concurrent cancels: {dict(Counter(r.status for r in results))}, stock {before} -> {stock(campaign)}")


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_fifty_concurrent_cancels_through_http_return_the_stock_exactly_once(http_server, live_campaign) -> None:
    # Given alice's issued coupon and 50 storefront connections to the real server
    campaign = live_campaign(total_stock=10, per_user_limit=1)
    claim_id, coupon = issue(campaign, "alice")
    before = stock(campaign)
    fronts = [Storefront(http_server, "alice") for _ in range(50)]
    for front in fronts:
        front.conn.connect()

    # When they all cancel her claim at once (half with their own Idempotency-Key, half without)
    try:
        results = all_at_once([
            (lambda i=i: fronts[i].post(cancel_url(claim_id), {}, key=f"cancel-{i}" if i % 2 else None))
            for i in range(50)
        ])
    finally:
        for front in fronts:
            front.conn.close()

    # Then 50 answers 200 cancelled (no 5xx), and the stock came back once
    assert not [r for r in results if isinstance(r, BaseException)], results
    assert Counter(status for status, _ in results) == {200: 50}
    assert Counter((b["code"], b["status"]) for _, b in results) == {(0, "cancelled"): 50}
    assert stock(campaign) == before + 1
    assert users(campaign) == {"alice": 0}
    assert given_back(campaign) == {claim_id}
    coupon.refresh_from_db()
    assert (coupon.status, coupon.version) == (CouponStatus.REVOKED, 2)
    assert Counter(event_types(coupon)) == {CouponEventType.ISSUED: 1, CouponEventType.REVOKED: 1,
                                            CouponEventType.RESTOCKED: 1}
    assert Claim.objects.get(claim_id=claim_id).status == ClaimStatus.CANCELLED
    assert balanced(campaign)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_cancel_and_redeem_racing_on_twenty_coupons_have_exactly_one_winner_each(live_campaign) -> None:
    # Given 20 shoppers with one issued coupon each
    campaign = live_campaign(total_stock=30, per_user_limit=1)
    shoppers = [f"s{i:02d}" for i in range(20)]
    claim_ids = [claim(campaign, user) for user in shoppers]
    drain_campaign(campaign_id=campaign.pk)
    coupons = [Coupon.objects.get(claim_id=claim_id) for claim_id in claim_ids]
    assert stock(campaign) == 10

    # When each shopper cancels the claim while an order redeems its coupon, all 40 at the same moment
    jobs: list[Callable[[], Any]] = []
    for i, user in enumerate(shoppers):
        jobs.append(lambda user=user, claim_id=claim_ids[i]: claim_cancel(user_id=user, claim_id=claim_id))
        jobs.append(lambda user=user, code=coupons[i].code, i=i: coupon_redeem(
            user_id=user, code=code, order=Order(f"order-{i}", AMOUNT, "CNY")))
    results = all_at_once(jobs)

    # Then for every coupon exactly one of them won
    assert not [r for r in results if not isinstance(r, UseOutcome)], results
    pairs = [((results[2 * i].code, results[2 * i].status), (results[2 * i + 1].code, results[2 * i + 1].status))
             for i in range(20)]
    cancel_won = {((0, "cancelled"), (14, "revoked"))}
    redeem_won = {((11, "already_redeemed"), (0, "redeemed"))}
    assert set(pairs) <= cancel_won | redeem_won, pairs
    cancelled = [i for i, pair in enumerate(pairs) if pair in cancel_won]
    redeemed = [i for i, pair in enumerate(pairs) if pair in redeem_won]
    for i, coupon in enumerate(coupons):
        coupon.refresh_from_db()
        claim_row = Claim.objects.get(claim_id=claim_ids[i])
        if i in cancelled:
            assert (coupon.status, coupon.version, claim_row.status) == (CouponStatus.REVOKED, 2, ClaimStatus.CANCELLED)
            assert event_types(coupon) == [CouponEventType.ISSUED, CouponEventType.REVOKED, CouponEventType.RESTOCKED]
        else:
            assert (coupon.status, coupon.order_id, coupon.version) == (CouponStatus.REDEEMED, f"order-{i}", 2)
            assert claim_row.status == ClaimStatus.ISSUED
            assert event_types(coupon) == [CouponEventType.ISSUED, CouponEventType.REDEEMED]
    # And the stock came back for the cancelled ones only
    assert stock(campaign) == 10 + len(cancelled)
    assert given_back(campaign) == {claim_ids[i] for i in cancelled}
    assert users(campaign) == {user: (0 if i in cancelled else 1) for i, user in enumerate(shoppers)}
    assert balanced(campaign)
    assert list(disagreements(Coupon.objects.filter(campaign=campaign))) == []
    print(f"cancel vs redeem on 20 coupons: cancel won {len(cancelled)}, redeem won {len(redeemed)}")


# --- a claim still pending in the ledger ---------------------------------------------------------------


@pytest.mark.django_db
def test_cancel_of_a_pending_claim_is_recorded_as_cancelled_and_the_drain_never_issues_it(
    client, live_campaign,
) -> None:
    # Given alice's claim, still pending in the ledger
    campaign = live_campaign(total_stock=10, per_user_limit=1)
    claim_id = claim(campaign, "alice")
    assert (stock(campaign), users(campaign)) == (9, {"alice": 1})

    # When she cancels it
    response = cancel(client, claim_id)

    # Then it is cancelled at once: the stock and her count are back, the Claim row says cancelled
    assert (response.status_code, response.json()) == (200, {"code": 0, "status": "cancelled", "claim_id": claim_id})
    assert (stock(campaign), users(campaign), given_back(campaign)) == (10, {"alice": 0}, {claim_id})
    assert Claim.objects.get(claim_id=claim_id).status == ClaimStatus.CANCELLED
    assert not Coupon.objects.filter(claim_id=claim_id).exists()
    assert balanced(campaign)
    # And the drain then takes the entry out of the ledger without issuing a coupon
    report = drain_campaign(campaign_id=campaign.pk)
    assert (report.read, report.persisted) == (1, 0)
    assert not Coupon.objects.filter(claim_id=claim_id).exists()
    assert Claim.objects.get(claim_id=claim_id).status == ClaimStatus.CANCELLED
    assert unacknowledged(campaign) == 0
    assert stock(campaign) == 10
    assert balanced(campaign)
    # And a second cancel changes nothing
    assert cancel(client, claim_id).json() == {"code": 0, "status": "cancelled", "claim_id": claim_id}
    assert (stock(campaign), users(campaign)) == (10, {"alice": 0})


@pytest.mark.django_db
def test_a_cancelled_pending_claim_reads_back_as_cancelled(client, live_campaign) -> None:
    # Given alice's pending claim, cancelled before the drain ran
    campaign = live_campaign(total_stock=10, per_user_limit=1)
    claim_id = claim(campaign, "alice")
    assert cancel(client, claim_id).json()["code"] == 0

    # When she reads the claim back
    response = client.get(f"/api/v1/claims/{claim_id}", **shopper_headers("alice"))

    # Then it says cancelled, as the cancel answered
    assert response.status_code == 200
    assert (response.json()["status"], response.json()["coupon"]) == ("cancelled", None)


@pytest.mark.django_db(transaction=True)
def test_cancel_while_the_drain_moves_the_pending_claim_still_cancels_it(live_campaign, monkeypatch) -> None:
    # Given alice's pending claim, and a drain that runs (in another thread, committing) exactly after the
    # cancel found no Claim row and before it looks at the ledger: the interleaving of a real race, pinned
    campaign = live_campaign(total_stock=10, per_user_limit=1)
    claim_id = claim(campaign, "alice")
    real_pending_entry = ledger.pending_entry

    def drain_first(campaign_id: int, entry_id: str) -> Any:
        def drain() -> None:
            try:
                drain_campaign(campaign_id=campaign_id)
            finally:
                connections.close_all()

        worker = threading.Thread(target=drain)
        worker.start()
        worker.join(60)
        return real_pending_entry(campaign_id, entry_id)

    monkeypatch.setattr(ledger, "pending_entry", drain_first)

    # When she cancels
    try:
        outcome: Any = claim_cancel(user_id="alice", claim_id=claim_id)
    except NotFound as exc:
        outcome = exc

    # Then the claim is cancelled (its coupon, issued meanwhile, revoked) and the stock is back
    assert isinstance(outcome, UseOutcome) and (outcome.code, outcome.status) == (0, "cancelled"), outcome
    assert Claim.objects.get(claim_id=claim_id).status == ClaimStatus.CANCELLED
    assert Coupon.objects.get(claim_id=claim_id).status == CouponStatus.REVOKED
    assert stock(campaign) == 10
    assert balanced(campaign)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_cancels_of_pending_claims_racing_the_drain_give_every_stock_back_once(live_campaign) -> None:
    # Given 30 pending claims of 30 shoppers
    campaign = live_campaign(total_stock=40, per_user_limit=1)
    shoppers = [f"p{i:02d}" for i in range(30)]
    claim_ids = [claim(campaign, user) for user in shoppers]

    # When every shopper cancels while two drains move the ledger into PostgreSQL, all at once
    jobs: list[Callable[[], Any]] = [
        (lambda user=user, claim_id=claim_id: claim_cancel(user_id=user, claim_id=claim_id))
        for user, claim_id in zip(shoppers, claim_ids, strict=True)
    ]
    jobs += [(lambda name=name: drain_campaign(campaign_id=campaign.pk, consumer=name, batch_size=3))
             for name in ("d1", "d2")]
    results = all_at_once(jobs)
    drain_campaign(campaign_id=campaign.pk, reclaim_idle_ms=0)

    # Then each cancel that was answered 'cancelled' gave its stock back once and left no usable coupon
    cancels = results[:30]
    assert not [r for r in results[30:] if isinstance(r, BaseException)], results[30:]
    assert all(isinstance(r, UseOutcome) and (r.code, r.status) == (0, "cancelled") for r in cancels), cancels
    done = list(claim_ids)
    assert given_back(campaign) == set(done)
    assert stock(campaign) == 10 + len(done)
    for claim_id in done:
        assert Claim.objects.get(claim_id=claim_id).status == ClaimStatus.CANCELLED
        coupon = Coupon.objects.filter(claim_id=claim_id).first()
        assert coupon is None or coupon.status == CouponStatus.REVOKED
    assert Claim.objects.filter(campaign=campaign).count() == 30
    assert balanced(campaign)
    assert list(disagreements(Coupon.objects.filter(campaign=campaign))) == []
    issued_then_revoked = Coupon.objects.filter(claim_id__in=done).count()
    print(f"30 pending cancels racing 2 drains: cancelled {len(done)} ({issued_then_revoked} after the drain "
          f"issued them, {len(done) - issued_then_revoked} never issued)")


# --- refusals, and what they leave unchanged -----------------------------------------------------------


@pytest.mark.django_db
def test_cancel_of_a_redeemed_coupons_claim_is_refused_and_changes_nothing(client, live_campaign) -> None:
    campaign = live_campaign(total_stock=10)
    claim_id, coupon = issue(campaign, "alice")
    assert coupon_redeem(user_id="alice", code=coupon.code, order=Order("o-1", AMOUNT, "CNY")).code == 0
    before = world(campaign)

    response = cancel(client, claim_id)

    assert response.status_code == 200
    assert (response.json()["code"], response.json()["status"]) == (11, "already_redeemed")
    assert world(campaign) == before
    assert Claim.objects.get(claim_id=claim_id).status == ClaimStatus.ISSUED
    assert balanced(campaign)


@pytest.mark.django_db
def test_cancel_of_a_held_coupons_claim_is_refused_as_on_hold_and_changes_nothing(client, live_campaign) -> None:
    campaign = live_campaign(total_stock=10)
    claim_id, coupon = issue(campaign, "alice")
    assert coupon_reserve(user_id="alice", code=coupon.code, order=Order("o-1", AMOUNT, "CNY")).code == 0
    before = world(campaign)

    response = cancel(client, claim_id)

    assert response.status_code == 200
    assert (response.json()["code"], response.json()["status"]) == (16, "on_hold")
    assert world(campaign) == before
    coupon.refresh_from_db()
    assert (coupon.status, coupon.order_id) == (CouponStatus.HELD, "o-1")


@pytest.mark.django_db
@pytest.mark.parametrize("drained", [True, False], ids=["issued", "pending"])
def test_cancel_of_another_shoppers_claim_is_not_found_and_changes_nothing(client, live_campaign, drained) -> None:
    campaign = live_campaign(total_stock=10)
    claim_id = issue(campaign, "alice")[0] if drained else claim(campaign, "alice")
    before = world(campaign)

    response = cancel(client, claim_id, user_id="mallory")

    assert (response.status_code, response.json()["code"], response.json()["status"]) == (404, 404, "not_found")
    assert world(campaign) == before
    assert balanced(campaign)


@pytest.mark.django_db
@pytest.mark.parametrize("claim_id", ["abc", "0-1700000000000-0", "1-1700000000000", "1-1700000000000-0-1-2",
                                      "1-1700000000000-0-0", "1-1700000000000-0-64",
                                      "1-1700000000000-x", "-1-1700000000000-0", "1-1700000000000-0 "])
def test_cancel_of_a_malformed_claim_id_is_a_bad_request(client, live_campaign, claim_id) -> None:
    campaign = live_campaign(total_stock=10)
    issue(campaign, "alice")
    before = world(campaign)

    response = cancel(client, claim_id)

    assert (response.status_code, response.json()["status"]) == (400, "invalid_request")
    assert world(campaign) == before


@pytest.mark.django_db
@pytest.mark.parametrize("pad", ["ms", "seq"])
def test_a_zero_padded_alias_of_a_pending_claim_is_no_claim_id(client, live_campaign, pad) -> None:
    # Given alice's claim, still pending in the ledger (Redis reads the entry 01-0 as 1-0)
    campaign = live_campaign(total_stock=10, per_user_limit=1)
    claim_id = claim(campaign, "alice")
    cid, ms, seq = claim_id.split("-")
    alias = f"{cid}-0{ms}-{seq}" if pad == "ms" else f"{cid}-{ms}-0{seq}"
    before = (stock(campaign), users(campaign), unacknowledged(campaign))

    # When she reads and cancels it by a zero-padded alias of its id
    read = client.get(f"/api/v1/claims/{alias}", **shopper_headers("alice"))
    cancelled = cancel(client, alias)

    # Then both are the 400 of a malformed id (they were a false pending and a 500), and the claim stands
    assert (read.status_code, read.json()["status"]) == (400, "invalid_request")
    assert (cancelled.status_code, cancelled.json()["status"]) == (400, "invalid_request")
    assert (stock(campaign), users(campaign), unacknowledged(campaign)) == before
    assert client.get(f"/api/v1/claims/{claim_id}", **shopper_headers("alice")).json()["status"] == "pending"


@pytest.mark.django_db
def test_cancel_of_an_unknown_claim_is_not_found(client, live_campaign) -> None:
    campaign = live_campaign(total_stock=10)
    issue(campaign, "alice")
    before = world(campaign)

    unknown_of_campaign = cancel(client, f"{campaign.pk}-1700000000000-0")
    unknown_campaign = cancel(client, f"{campaign.pk + 1000}-1700000000000-0")

    for response in (unknown_of_campaign, unknown_campaign):
        assert (response.status_code, response.json()["code"], response.json()["status"]) == (404, 404, "not_found")
    assert world(campaign) == before


@pytest.mark.django_db
@pytest.mark.parametrize("drained", [True, False], ids=["issued", "pending"])
def test_cancel_after_the_campaign_ended_is_refused_as_ended_and_changes_nothing(
    client, live_campaign, drained,
) -> None:
    # Given alice's claim, and the campaign's end moved into the past in PostgreSQL (what the service reads)
    campaign = live_campaign(total_stock=10)
    claim_id = issue(campaign, "alice")[0] if drained else claim(campaign, "alice")
    Campaign.objects.filter(pk=campaign.pk).update(ends_at=timezone.now() - timedelta(seconds=1))
    before = world(campaign)

    # When she cancels
    response = cancel(client, claim_id)

    # Then it is refused with code 4 and nothing changed
    assert response.status_code == 200
    assert (response.json()["code"], response.json()["status"]) == (4, "ended")
    assert world(campaign) == before
    if drained:
        assert Coupon.objects.get(claim_id=claim_id).status == CouponStatus.ACTIVE
        assert Claim.objects.get(claim_id=claim_id).status == ClaimStatus.ISSUED
    else:
        assert not Claim.objects.filter(claim_id=claim_id).exists()
    assert balanced(campaign)


@pytest.mark.django_db
def test_a_repeated_cancel_with_the_same_idempotency_key_replays_the_first_answer(client, live_campaign) -> None:
    # Given alice's cancelled claim, cancelled with an Idempotency-Key
    campaign = live_campaign(total_stock=10)
    claim_id, coupon = issue(campaign, "alice")
    first = cancel(client, claim_id, HTTP_IDEMPOTENCY_KEY="cancel-once")
    assert first.status_code == 200 and first.json()["code"] == 0
    assert "Idempotent-Replayed" not in first.headers
    after_first = world(campaign)

    # When the same request comes again with the same key
    again = cancel(client, claim_id, HTTP_IDEMPOTENCY_KEY="cancel-once")

    # Then the first answer is replayed, byte for byte, and nothing changed
    assert again.status_code == 200
    assert again.content == first.content
    assert again.headers["Idempotent-Replayed"] == "true"
    assert world(campaign) == after_first
    assert stock(campaign) == 10
    assert IdempotencyRecord.objects.filter(user_id="alice", key="cancel-once").count() == 1


# --- the books after a cancel: verify, and a rebuild of lost Redis state --------------------------------


@pytest.mark.django_db
def test_verify_balances_after_a_cancel_and_a_rebuild_of_lost_redis_state_restocks_nothing_twice(
    client, live_campaign,
) -> None:
    # Given a campaign of 10: alice, bob and carol hold coupons, alice cancelled, dave's claim is pending
    campaign = live_campaign(total_stock=10, per_user_limit=1)
    alice_claim, _ = issue(campaign, "alice")
    issue(campaign, "bob")
    issue(campaign, "carol")
    assert cancel(client, alice_claim).json()["code"] == 0
    claim(campaign, "dave")
    assert stock(campaign) == 7

    # Then verify_campaign exits 0 (a failure would be SystemExit(1))
    out = io.StringIO()
    call_command("verify_campaign", str(campaign.pk), stdout=out)
    assert out.getvalue().strip().splitlines()[-1] == "BALANCED"

    # When Redis loses the campaign's stock, counts and given-back claims, and the operator rebuilds them
    keys = campaign_keys(campaign.pk)
    redis_client().delete(keys.stock, keys.users, keys.cancelled)
    campaign.refresh_from_db()
    rebuilt = campaign_rebuild(campaign=campaign)

    # Then the stock is the total minus the claims not cancelled (dave's pending claim drained first)
    assert rebuilt == 7 and stock(campaign) == 7
    assert users(campaign) == {"bob": 1, "carol": 1, "dave": 1}
    assert given_back(campaign) == {alice_claim}
    assert Coupon.objects.filter(campaign=campaign, user_id="dave").exists()
    assert balanced(campaign)
    # And a second cancel of alice's claim gives nothing back twice
    again = cancel(client, alice_claim)
    assert again.json() == {"code": 0, "status": "cancelled", "claim_id": alice_claim}
    assert stock(campaign) == 7
    assert users(campaign) == {"bob": 1, "carol": 1, "dave": 1}
    assert Counter(CouponEvent.objects.filter(campaign=campaign, type=CouponEventType.RESTOCKED)
                   .values_list("data__claim_id", flat=True)) == {alice_claim: 1}
    out = io.StringIO()
    call_command("verify_campaign", str(campaign.pk), stdout=out)
    assert out.getvalue().strip().splitlines()[-1] == "BALANCED"
