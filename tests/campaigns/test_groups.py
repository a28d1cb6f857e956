"""Group limits (docs/api.md, "Grants, budgets, groups"): one shopper holds at most the group's limit of coupons of
all its campaigns together, claims, grants and code uses alike, counted in the same atomic step as each claim (the
group's hash in the group's slot), on the real Redis and PostgreSQL."""
from __future__ import annotations

import threading
from collections import Counter

import pytest

from campaigns import redis_state
from campaigns.redis_state import ClaimCode, TakeCode, campaign_keys, redis_client, run_claim
from campaigns.redis_state.keys import forget_groups, known_groups

pytestmark = pytest.mark.django_db(transaction=True)


def held(campaign, user: str) -> int:
    return int(redis_client().hget(campaign_keys(campaign.pk).group, user) or 0)


def stock(campaign) -> int:
    return int(redis_client().get(campaign_keys(campaign.pk).stock))


def test_a_grouped_campaigns_keys_carry_its_groups_tag_and_an_ungrouped_ones_are_unchanged(live_campaign) -> None:
    plain = live_campaign()
    grouped = live_campaign(group="spring:sale", group_limit=2)

    assert campaign_keys(plain.pk).stock == f"cpn:{{c{plain.pk}}}:stock" and campaign_keys(plain.pk).group == ""
    keys = campaign_keys(grouped.pk)
    assert keys.stock == f"cpn:{{gspring:sale}}:c{grouped.pk}:stock"
    assert keys.group == "cpn:{gspring:sale}:held" and keys.group_limit == 2
    # its own slot holds only its home: which group, which limit
    assert redis_client().hgetall(keys.home) == {b"group": b"spring:sale", b"group_limit": b"2"}
    assert redis_client().exists(keys.stock) and redis_client().exists(keys.group)


def test_a_process_that_never_met_the_group_learns_it_from_the_claim_script_once(live_campaign) -> None:
    campaign = live_campaign(group="g", group_limit=1)
    forget_groups()  # another process: it never loaded the campaign

    assert run_claim(campaign_id=campaign.pk, user_id="alice", idempotency_key=None).code == ClaimCode.CLAIMED
    assert known_groups[campaign.pk] == ("g", 1) and held(campaign, "alice") == 1
    forget_groups()  # what any other caller learns from the campaign's home
    assert campaign_keys(campaign.pk).group == "cpn:{gg}:held"


def test_concurrent_claims_on_two_campaigns_of_a_group_never_exceed_its_limit_per_shopper(live_campaign) -> None:
    """10 shoppers, each claiming 12 times on each of two campaigns of a group of limit 3 (per-user limit 5 each),
    40 threads released at once: exactly 3 coupons a shopper in all, the rest refused 23 with nothing changed."""
    first = live_campaign(group="pair", group_limit=3, per_user_limit=5, total_stock=1000, rate_limit=100_000)
    second = live_campaign(group="pair", group_limit=3, per_user_limit=5, total_stock=1000, rate_limit=100_000)
    forget_groups()  # the claims learn it (-6) as a fresh process would, all at once
    shoppers = [f"s{n}" for n in range(10)]
    start = threading.Barrier(40)
    codes: list[tuple[str, int, ClaimCode]] = []
    lock = threading.Lock()

    def shopper(user: str, campaign_id: int) -> None:
        start.wait()
        for _ in range(6):
            code = run_claim(campaign_id=campaign_id, user_id=user, idempotency_key=None).code
            with lock:
                codes.append((user, campaign_id, code))

    threads = [threading.Thread(target=shopper, args=(user, campaign.pk))
               for user in shoppers for campaign in (first, second) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    claimed = Counter(user for user, _, code in codes if code == ClaimCode.CLAIMED)
    assert claimed == {user: 3 for user in shoppers}
    assert Counter(code for _, _, code in codes) == {ClaimCode.CLAIMED: 30, ClaimCode.GROUP_LIMIT_REACHED: 210}
    assert stock(first) + stock(second) == 2000 - 30
    ledgers = sum(redis_client().xlen(campaign_keys(c.pk).ledger) for c in (first, second))
    assert ledgers == 30
    assert {user: held(first, user) for user in shoppers} == {user: 3 for user in shoppers}
    users = Counter()
    for campaign in (first, second):
        for user, count in redis_client().hgetall(campaign_keys(campaign.pk).users).items():
            if user:
                users[user.decode()] += int(count)
    assert users == {user: 3 for user in shoppers}


def test_a_refusal_23_changes_nothing_and_is_replayed_under_its_key(live_campaign) -> None:
    first = live_campaign(group="g", group_limit=1, total_stock=5)
    second = live_campaign(group="g", group_limit=1, total_stock=5)
    assert run_claim(campaign_id=first.pk, user_id="alice", idempotency_key="k1").code == ClaimCode.CLAIMED
    users_before = redis_client().hgetall(campaign_keys(second.pk).users)

    refused = run_claim(campaign_id=second.pk, user_id="alice", idempotency_key="k2")

    assert refused.code == ClaimCode.GROUP_LIMIT_REACHED and refused.status == "group_limit_reached"
    assert stock(second) == 5 and redis_client().xlen(campaign_keys(second.pk).ledger) == 0
    assert redis_client().hgetall(campaign_keys(second.pk).users) == users_before
    assert held(first, "alice") == 1
    again = run_claim(campaign_id=second.pk, user_id="alice", idempotency_key="k2")
    assert again.code == ClaimCode.GROUP_LIMIT_REACHED and again.replayed
    assert run_claim(campaign_id=second.pk, user_id="bob", idempotency_key=None).code == ClaimCode.CLAIMED


def test_an_ungrouped_claim_sends_what_it_always_sent(live_campaign) -> None:
    campaign = live_campaign()
    call = redis_state.claim_call(campaign_id=campaign.pk, user_id="alice", idempotency_key=None, client_ip=None,
                                  now_ms=redis_state.redis_now_ms())
    assert len(call.keys) == 5 and len(call.args) == 9  # no group key, no group argument

    grouped = live_campaign(group="g", group_limit=2)
    call = redis_state.claim_call(campaign_id=grouped.pk, user_id="alice", idempotency_key=None, client_ip=None,
                                  now_ms=redis_state.redis_now_ms())
    assert call.keys[-1] == "cpn:{gg}:held" and call.args[-1] == 2 and len(call.args) == 16


def test_a_cancelled_claim_gives_its_group_unit_back(live_campaign) -> None:
    from orders.cancel import claim_cancel

    first = live_campaign(group="g", group_limit=1, total_stock=5)
    second = live_campaign(group="g", group_limit=1, total_stock=5)
    claimed = run_claim(campaign_id=first.pk, user_id="alice", idempotency_key=None)
    assert run_claim(campaign_id=second.pk, user_id="alice", idempotency_key=None).code == 23

    assert claim_cancel(user_id="alice", claim_id=claimed.claim_id).status == "cancelled"
    assert claim_cancel(user_id="alice", claim_id=claimed.claim_id).status == "cancelled"  # once

    assert held(first, "alice") == 0
    assert run_claim(campaign_id=second.pk, user_id="alice", idempotency_key=None).code == ClaimCode.CLAIMED
    assert held(first, "alice") == 1


def test_grants_count_in_the_group(live_campaign) -> None:
    from grants.claims import grant_chunk

    claimable = live_campaign(group="g", group_limit=2, total_stock=10)
    granted = live_campaign(group="g", group_limit=2, total_stock=10, kind="grant", per_user_limit=5)
    assert run_claim(campaign_id=claimable.pk, user_id="alice", idempotency_key=None).code == ClaimCode.CLAIMED
    forget_groups()

    counts = grant_chunk(campaign_id=granted.pk, user_ids=["alice", "bob"], batch="b1",
                         started_ms=redis_state.redis_now_ms())
    assert (counts.granted, counts.limit_reached) == (2, 0)
    assert held(granted, "alice") == 2 and held(granted, "bob") == 1
    counts = grant_chunk(campaign_id=granted.pk, user_ids=["alice", "bob"], batch="b2",
                         started_ms=redis_state.redis_now_ms())
    assert (counts.granted, counts.limit_reached) == (1, 1)  # bob's second; alice is at the group's limit
    assert run_claim(campaign_id=claimable.pk, user_id="bob", idempotency_key=None).code == 23
    assert stock(granted) == 7


def test_code_uses_count_in_the_group_and_a_give_back_returns_the_unit(live_campaign) -> None:
    grab = live_campaign(group="g", group_limit=2, total_stock=10)
    codes = live_campaign(group="g", group_limit=2, total_stock=10, kind="codes", code="GROUP10", per_user_limit=5)
    assert run_claim(campaign_id=grab.pk, user_id="alice", idempotency_key=None).code == ClaimCode.CLAIMED
    forget_groups()

    assert redis_state.run_code_take(campaign_id=codes.pk, user_id="alice", member="u1/alice") == TakeCode.TAKEN
    uses_before = redis_client().get(campaign_keys(codes.pk).uses)
    assert redis_state.run_code_take(campaign_id=codes.pk, user_id="alice", member="u2/alice") == 23
    assert redis_client().get(campaign_keys(codes.pk).uses) == uses_before  # nothing taken
    assert redis_state.run_code_takes([(codes.pk, "alice", "u3/alice"), (codes.pk, "bob", "u3/bob")]) == [
        TakeCode.GROUP_LIMIT_REACHED, TakeCode.TAKEN]
    assert held(grab, "alice") == 2 and held(grab, "bob") == 1

    redis_state.run_code_give_back(campaign_id=codes.pk, user_id="alice", member="u1/alice")
    redis_state.run_code_give_back(campaign_id=codes.pk, user_id="alice", member="u1/alice")  # once
    assert held(grab, "alice") == 1
    assert run_claim(campaign_id=grab.pk, user_id="alice", idempotency_key=None).code == 1  # its own limit: 1
    assert redis_state.run_code_take(campaign_id=codes.pk, user_id="alice", member="u4/alice") == TakeCode.TAKEN


def test_a_lost_group_hash_is_no_state_until_rebuilt(live_campaign) -> None:
    campaign = live_campaign(group="g", group_limit=2, total_stock=10)
    redis_client().delete(campaign_keys(campaign.pk).group)

    assert run_claim(campaign_id=campaign.pk, user_id="alice", idempotency_key=None).code == ClaimCode.NO_STATE
    assert stock(campaign) == 10


def test_the_group_hash_lives_as_long_as_its_longest_campaign(live_campaign) -> None:
    from datetime import timedelta

    from django.utils import timezone

    live_campaign(group="g", group_limit=2, ends_at=timezone.now() + timedelta(hours=1))  # makes the hash
    long = live_campaign(group="g", group_limit=2, ends_at=timezone.now() + timedelta(days=3))  # moves it later
    live_campaign(group="g", group_limit=2, ends_at=timezone.now() + timedelta(hours=2))  # never earlier
    ttl = redis_client().pttl(campaign_keys(long.pk).group)
    assert ttl == pytest.approx(redis_client().pttl(campaign_keys(long.pk).stock), abs=5000)
    assert ttl > 2 * 86400 * 1000
