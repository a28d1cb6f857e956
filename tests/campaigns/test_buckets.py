"""A campaign split into buckets (Campaign.buckets) on the single Valkey: each bucket its own slot and share of
the stock, a shopper's bucket by a stable hash, a dry bucket served by stock moved from the others, a move cut
in half finished later, sold_out only once every bucket is empty, and verify_campaign exact throughout."""
from __future__ import annotations

import zlib

import pytest

from campaigns.redis_state import (
    ClaimCode,
    bucket_of,
    campaign_keys,
    finish_moves,
    redis_client,
    remaining_many,
    run_claim,
    scripts,
)
from orders import ledger
from orders.cancel import claim_cancel
from orders.claim import claim_create
from orders.drain import drain_campaign
from orders.sold_out import sold_out_until
from orders.verify import campaign_verify

pytestmark = pytest.mark.django_db


def shoppers_of(bucket: int, buckets: int, count: int) -> list[str]:
    """`count` user ids whose bucket is `bucket`."""
    found = [user for user in (f"u{i}" for i in range(100_000)) if bucket_of(user, buckets) == bucket]
    return found[:count]


def move_out(campaign, donor: int, move_id: str, to: int) -> int:
    """The first half of a move (move_out.lua) alone, as when its process dies before the second."""
    keys = campaign_keys(campaign.pk, donor)
    return scripts().move_out(keys=[keys.meta, keys.stock, keys.moves, keys.sent], args=[move_id, to])[0]


def stocks(campaign) -> list[int]:
    return [int(redis_client().get(campaign_keys(campaign.pk, b).stock)) for b in range(campaign.buckets)]


def balanced(campaign) -> None:
    drain_campaign(campaign_id=campaign.pk)
    balance = campaign_verify(campaign=campaign)
    assert balance.balanced, balance


def test_a_shoppers_bucket_is_a_stable_hash_of_the_user_id_and_each_bucket_its_own_slot(live_campaign) -> None:
    assert bucket_of("alice", 1) == 0
    assert bucket_of("alice", 9) == zlib.crc32(b"alice") % 9 == bucket_of("alice", 9)
    campaign = live_campaign(total_stock=10, buckets=4)

    assert stocks(campaign) == [3, 3, 2, 2]
    assert campaign_keys(campaign.pk).stock == f"cpn:{{c{campaign.pk}}}:stock"  # bucket 0: today's layout
    assert campaign_keys(campaign.pk, 3).stock == f"cpn:{{c{campaign.pk}.3}}:stock"
    shares = [int(redis_client().hget(campaign_keys(campaign.pk, b).meta, "share")) for b in range(4)]
    assert shares == [3, 3, 2, 2] and remaining_many([campaign.pk]) == {campaign.pk: 10}


def test_shoppers_of_one_bucket_get_the_whole_stock_then_sold_out(live_campaign) -> None:
    campaign = live_campaign(total_stock=8, buckets=4, per_user_limit=1)
    users = shoppers_of(1, 4, 10)

    codes = [run_claim(campaign_id=campaign.pk, user_id=u, idempotency_key=None).code for u in users]

    assert codes == [ClaimCode.CLAIMED] * 8 + [ClaimCode.SOLD_OUT] * 2
    assert stocks(campaign) == [0, 0, 0, 0]
    assert {ledger.parse_claim_id(f"{campaign.pk}-1-0-1")[1]} == {"1-0-1"}
    balanced(campaign)


def test_the_local_sold_out_flag_waits_for_every_bucket(live_campaign) -> None:
    campaign = live_campaign(total_stock=2, buckets=2, per_user_limit=1)
    first, second = shoppers_of(0, 2, 2)

    assert claim_create(campaign_id=campaign.pk, user_id=first, idempotency_key=None).status == "claimed"
    # bucket 0 is dry now, bucket 1 still holds one: served from it, and this process does not think it sold out
    outcome = claim_create(campaign_id=campaign.pk, user_id=second, idempotency_key=None)
    assert outcome.status == "claimed" and campaign.pk not in sold_out_until
    assert outcome.claim_id.count("-") == 2  # claimed on bucket 0, with stock moved there
    late = shoppers_of(1, 2, 1)[0]
    assert claim_create(campaign_id=campaign.pk, user_id=late, idempotency_key=None).status == "sold_out"
    assert campaign.pk in sold_out_until
    balanced(campaign)


def test_a_move_cut_in_half_is_in_transit_then_finished_once(live_campaign) -> None:
    campaign = live_campaign(total_stock=8, buckets=2)
    keys0, keys1 = campaign_keys(campaign.pk, 0), campaign_keys(campaign.pk, 1)

    # Given a process that took stock out of bucket 0 for bucket 1 and died before bucket 1 received it
    units = move_out(campaign, 0, "m1", 1)
    assert units == 2 and stocks(campaign) == [2, 4]
    balance = campaign_verify(campaign=campaign)
    assert balance.in_transit == 2 and balance.balanced, balance  # total == shares + in transit

    # When the recovery finishes it (twice), Then bucket 1 holds it once
    assert finish_moves(campaign.pk, 2, older_than_ms=0) == 1
    assert finish_moves(campaign.pk, 2, older_than_ms=0) == 0
    assert stocks(campaign) == [2, 6] and redis_client().hlen(keys0.moves) == 0
    balance = campaign_verify(campaign=campaign)
    assert balance.in_transit == 0 and balance.balanced, balance

    # And a receive repeated by hand changes nothing
    assert scripts().move_in(keys=[keys1.meta, keys1.stock, keys1.received], args=["m1", 2]) == 0
    assert stocks(campaign) == [2, 6]


def test_an_idempotent_claim_replays_across_a_move_and_its_final_sold_out_too(live_campaign) -> None:
    campaign = live_campaign(total_stock=2, buckets=2, per_user_limit=1)
    ann, bob, cid = shoppers_of(0, 2, 3)
    assert run_claim(campaign_id=campaign.pk, user_id=ann, idempotency_key=None).code == ClaimCode.CLAIMED

    first = run_claim(campaign_id=campaign.pk, user_id=bob, idempotency_key="k-bob")  # bucket 0 dry: a move
    again = run_claim(campaign_id=campaign.pk, user_id=bob, idempotency_key="k-bob")
    refused = run_claim(campaign_id=campaign.pk, user_id=cid, idempotency_key="k-cid")
    refused_again = run_claim(campaign_id=campaign.pk, user_id=cid, idempotency_key="k-cid")

    assert first.code == ClaimCode.CLAIMED and (again.code, again.ledger_id, again.replayed) == (
        ClaimCode.CLAIMED, first.ledger_id, True)
    assert refused.code == refused_again.code == ClaimCode.SOLD_OUT and refused_again.replayed
    assert int(redis_client().hget(campaign_keys(campaign.pk).users, bob)) == 1
    balanced(campaign)


def test_a_cancel_gives_the_coupon_back_to_its_shoppers_bucket(live_campaign) -> None:
    campaign = live_campaign(total_stock=4, buckets=2, per_user_limit=1)
    [user] = shoppers_of(1, 2, 1)
    result = run_claim(campaign_id=campaign.pk, user_id=user, idempotency_key=None)
    claim_id = f"{campaign.pk}-{result.ledger_id}"
    assert claim_id.endswith("-1") and stocks(campaign) == [2, 1]

    assert claim_cancel(user_id=user, claim_id=claim_id).status == "cancelled"  # still pending in bucket 1's ledger

    assert stocks(campaign) == [2, 2]
    drain_campaign(campaign_id=campaign.pk)
    assert claim_cancel(user_id=user, claim_id=claim_id).status == "cancelled"  # a repeat gives nothing more
    assert stocks(campaign) == [2, 2]
    balanced(campaign)


def test_a_claim_with_a_stale_bucket_count_is_sent_to_the_right_bucket(live_campaign) -> None:
    from campaigns import redis_state

    campaign = live_campaign(total_stock=3, buckets=3, per_user_limit=1)
    redis_state.forget_bucket_counts()  # this process assumes 1: claim.lua answers -4 with the real count
    [user] = shoppers_of(2, 3, 1)

    result = run_claim(campaign_id=campaign.pk, user_id=user, idempotency_key=None)

    assert result.code == ClaimCode.CLAIMED and result.ledger_id.endswith("-2") and stocks(campaign) == [1, 1, 0]


def lose(campaign, bucket: int) -> None:
    """Redis loses one bucket's state (its master restarted empty), ledger and all."""
    keys = campaign_keys(campaign.pk, bucket)
    redis_client().delete(*keys.state, keys.moves, keys.received)


@pytest.mark.parametrize("lost", [[1], [0, 1, 2]])
def test_a_rebuild_gives_the_lost_buckets_their_claims_and_what_the_others_leave(live_campaign, lost) -> None:
    from orders.rebuild import campaign_rebuild

    campaign = live_campaign(total_stock=12, buckets=3, per_user_limit=2)
    users = [u for b in range(3) for u in shoppers_of(b, 3, 2)]
    claims = {u: run_claim(campaign_id=campaign.pk, user_id=u, idempotency_key=f"k-{u}") for u in users}
    ann = users[2]  # a shopper of bucket 1
    assert claim_cancel(user_id=ann, claim_id=f"{campaign.pk}-{claims[ann].ledger_id}").status == "cancelled"
    move_out(campaign, 0, "m-cut", 1)  # a move cut in half
    drain_campaign(campaign_id=campaign.pk)
    for bucket in lost:
        lose(campaign, bucket)

    left = campaign_rebuild(campaign=campaign)

    assert left + (1 if 0 not in lost else 0) == 12 - 5  # 6 claims, 1 given back (the move's unit in transit)
    finish_moves(campaign.pk, 3, older_than_ms=0)
    assert remaining_many([campaign.pk]) == {campaign.pk: 7}
    balanced(campaign)
    # the shoppers of the rebuilt buckets go on where they were: the key's answer replays, the limit holds
    bob = users[3]
    replay = run_claim(campaign_id=campaign.pk, user_id=bob, idempotency_key=f"k-{bob}")
    assert replay.replayed and replay.ledger_id == claims[bob].ledger_id
    assert run_claim(campaign_id=campaign.pk, user_id=bob, idempotency_key=None).code == ClaimCode.CLAIMED
    assert run_claim(campaign_id=campaign.pk, user_id=bob, idempotency_key=None).code == ClaimCode.LIMIT_REACHED
    balanced(campaign)


def test_an_extension_and_a_pause_reach_every_bucket(live_campaign) -> None:
    from datetime import timedelta

    from campaigns.extension import campaign_extend_end
    from campaigns.services import campaign_pause

    campaign = live_campaign(total_stock=6, buckets=3)
    keys0 = campaign_keys(campaign.pk, 0)
    move_out(campaign, 0, "m1", 2)  # a moves key to extend too
    new_end = campaign.ends_at + timedelta(hours=3)

    campaign_extend_end(campaign=campaign, new_end=new_end, actor="test")

    ends = {int(redis_client().hget(campaign_keys(campaign.pk, b).meta, "ends_ms")) for b in range(3)}
    assert ends == {int(new_end.timestamp() * 1000)}
    expiries = {redis_client().pexpiretime(key) for b in range(3)
                for key in campaign_keys(campaign.pk, b).state} | {redis_client().pexpiretime(keys0.moves)}
    assert len(expiries) == 1 and expiries.pop() > int(new_end.timestamp() * 1000)

    campaign_pause(campaign=campaign)
    codes = {run_claim(campaign_id=campaign.pk, user_id=shoppers_of(b, 3, 1)[0], idempotency_key=None).code
             for b in range(3)}
    assert codes == {ClaimCode.PAUSED}


def test_reconciliation_finishes_a_cut_move_and_repairs_each_bucket(live_campaign) -> None:
    from orders.reconciliation import campaign_reconcile

    campaign = live_campaign(total_stock=9, buckets=3, per_user_limit=3)
    [ann] = shoppers_of(1, 3, 1)
    assert run_claim(campaign_id=campaign.pk, user_id=ann, idempotency_key=None).code == ClaimCode.CLAIMED
    drain_campaign(campaign_id=campaign.pk)
    keys0, keys1, keys2 = (campaign_keys(campaign.pk, b) for b in range(3))
    move_out(campaign, 0, "m-cut", 2)  # cut in half
    redis_client().incrby(keys2.stock, 3)  # drift: bucket 2 would sell 3 coupons that do not exist
    redis_client().hset(keys1.users, ann, 0)  # and forgets ann's claim
    redis_client().hset(keys0.moves, "m-cut", "2:2:0")  # (taken long ago)
    assert not campaign_verify(campaign=campaign).balanced

    record = campaign_reconcile(campaign=campaign, repair=True, source="test")

    assert record.balanced, record.problems
    assert stocks(campaign) == [1, 2, 5] and int(redis_client().hget(keys1.users, ann)) == 1
    assert any("finished 1 moves" in r for r in record.repairs)
    assert any("lowered bucket 2" in r for r in record.repairs)


def test_verify_stays_exact_while_claims_and_moves_run_between_buckets(live_campaign) -> None:
    import random
    import threading
    import time

    from campaigns.redis_state import move_stock

    campaign = live_campaign(total_stock=4000, buckets=4, per_user_limit=1, rate_limit=1_000_000)
    stop = threading.Event()
    errors: list[BaseException] = []

    def busy(seed: int) -> None:
        rng = random.Random(seed)
        try:
            n = 0
            while not stop.is_set():
                donor, to = rng.sample(range(4), 2)
                move_stock(campaign.pk, donor, to)
                run_claim(campaign_id=campaign.pk, user_id=f"t{seed}-{n}", idempotency_key=None)
                n += 1
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    workers = [threading.Thread(target=busy, args=(i,)) for i in range(3)]
    for w in workers:
        w.start()
    results = []
    try:
        until = time.monotonic() + 3
        while time.monotonic() < until:
            balance = campaign_verify(campaign=campaign)
            results.append((balance.balanced, balance))
    finally:
        stop.set()
        for w in workers:
            w.join()
    assert not errors, errors
    assert len(results) > 5 and any(balance.in_transit for _, balance in results)  # cuts between moves' halves
    assert all(ok for ok, _ in results), [b for ok, b in results if not ok][0]
    balanced(campaign)


def test_the_event_loop_claim_moves_stock_too_and_the_figures_add_up(live_campaign, admin_client) -> None:
    from django.core.management import call_command

    from orders.claim import claim_create_async
    from orders.metrics import LiveCampaignCollector
    from tests.conftest import run_coroutine

    campaign = live_campaign(total_stock=4, buckets=2, per_user_limit=1)
    users = shoppers_of(1, 2, 3)

    async def claims() -> list[str]:
        return [(await claim_create_async(campaign_id=campaign.pk, user_id=u, idempotency_key=None)).status
                for u in users]

    assert run_coroutine(claims()) == ["claimed", "claimed", "claimed"]  # bucket 1 held 2: one moved from 0
    assert stocks(campaign) == [0, 1] or stocks(campaign) == [1, 0]
    # the admin's live figures, the metrics and verify_campaign sum the buckets
    page = admin_client.get(f"/admin/campaigns/campaign/{campaign.pk}/change/").content.decode()
    assert 'id="live-remaining">1<' in page and 'id="live-backlog">3<' in page
    families = {f.name: f for f in LiveCampaignCollector().collect()}
    assert [s.value for s in families["couponrush_remaining_stock"].samples] == [1]
    assert [s.value for s in families["couponrush_ledger_backlog"].samples] == [3]
    drain_campaign(campaign_id=campaign.pk)
    call_command("verify_campaign", str(campaign.pk))  # exits non-zero when it does not balance


def test_the_drain_sweep_rebuilds_a_campaign_that_lost_one_bucket_within_seconds(live_campaign) -> None:
    from orders import tasks

    campaign = live_campaign(total_stock=6, buckets=3, per_user_limit=1)
    [ann] = shoppers_of(2, 3, 1)
    assert run_claim(campaign_id=campaign.pk, user_id=ann, idempotency_key=None).code == ClaimCode.CLAIMED
    drain_campaign(campaign_id=campaign.pk)
    lose(campaign, 2)
    assert run_claim(campaign_id=campaign.pk, user_id=ann, idempotency_key=None).code == ClaimCode.NO_STATE

    assert tasks.drain_sweep()["rebuilt"] == [campaign.pk]

    assert stocks(campaign) == [2, 2, 1]
    assert run_claim(campaign_id=campaign.pk, user_id=ann, idempotency_key=None).code == ClaimCode.LIMIT_REACHED
    balanced(campaign)


def test_after_a_sell_out_a_claim_asks_no_bucket_this_process_found_empty_until_stock_comes_back(
        live_campaign) -> None:
    campaign = live_campaign(total_stock=3, buckets=3, per_user_limit=1)
    users = shoppers_of(0, 3, 4)
    claimed = [run_claim(campaign_id=campaign.pk, user_id=u, idempotency_key=None) for u in users[:3]]
    assert [c.code for c in claimed] == [ClaimCode.CLAIMED] * 3 and stocks(campaign) == [0, 0, 0]

    def scripts_run(user: str) -> tuple[ClaimCode, int]:
        before = redis_client().info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0)
        code = run_claim(campaign_id=campaign.pk, user_id=user, idempotency_key=f"k-{user}").code
        return code, redis_client().info("commandstats")["cmdstat_evalsha"]["calls"] - before

    # sold_out answers (with a key: the sold-out flag never answers them) ask only the buckets not yet found
    # empty: at the third, none (dry, then the final answer)
    first, second = scripts_run(users[3]), scripts_run(shoppers_of(1, 3, 1)[0])
    assert first[0] == second[0] == ClaimCode.SOLD_OUT and 2 <= first[1] <= 4 and 2 <= second[1] <= 3
    late, again = shoppers_of(2, 3, 2)
    assert scripts_run(late) == (ClaimCode.SOLD_OUT, 2)
    # a cancel in this process: the stock it gives back (to bucket 0, its claim's) is drawn on at once, from
    # another bucket too (dry, the move's two halves, the claim; and bucket 1's nothing if it was asked first)
    assert claim_cancel(user_id=users[0], claim_id=f"{campaign.pk}-{claimed[0].ledger_id}").status == "cancelled"
    code, scripts_of_claim = scripts_run(again)
    assert code == ClaimCode.CLAIMED and scripts_of_claim in (4, 5)
