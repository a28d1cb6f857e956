"""Every branch of claim.lua through its Python wrapper, against the real Redis."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.conf import settings
from django.utils import timezone

from campaigns.redis_state import (
    OWN_ANSWER_KEEP_MS,
    ClaimCode,
    campaign_keys,
    clear_drain_trigger,
    redis_client,
    redis_now_ms,
    run_claim,
    to_ms,
)
from campaigns.services import campaign_pause, campaign_preheat, campaign_resume, keys_expire_at

pytestmark = pytest.mark.django_db


def claim(campaign, user="alice", key=None):
    return run_claim(campaign_id=campaign.pk, user_id=user, idempotency_key=key)


def stock(campaign) -> int:
    return int(redis_client().get(campaign_keys(campaign.pk).stock))


def ledger_length(campaign) -> int:
    return redis_client().xlen(campaign_keys(campaign.pk).ledger)


def test_claim_decrements_stock_counts_the_user_and_appends_to_the_ledger(live_campaign) -> None:
    campaign = live_campaign(total_stock=3)

    result = claim(campaign, "alice")

    assert result.code == ClaimCode.CLAIMED and not result.replayed
    assert stock(campaign) == 2
    assert redis_client().hget(campaign_keys(campaign.pk).users, "alice") == b"1"
    [(entry_id, fields)] = redis_client().xrange(campaign_keys(campaign.pk).ledger)
    assert entry_id.decode() == result.ledger_id and fields == {b"u": b"alice"}


def test_second_claim_by_same_user_is_refused_at_the_limit(live_campaign) -> None:
    campaign = live_campaign(total_stock=5, per_user_limit=2)

    codes = [claim(campaign, "alice").code for _ in range(3)]

    assert codes == [ClaimCode.CLAIMED, ClaimCode.CLAIMED, ClaimCode.LIMIT_REACHED]
    assert stock(campaign) == 3 and ledger_length(campaign) == 2


def test_claim_after_the_last_coupon_is_sold_out_and_changes_nothing(live_campaign) -> None:
    campaign = live_campaign(total_stock=1)
    assert claim(campaign, "alice").code == ClaimCode.CLAIMED

    result = claim(campaign, "bob")

    assert result.code == ClaimCode.SOLD_OUT and result.ledger_id == ""
    assert stock(campaign) == 0 and ledger_length(campaign) == 1
    assert redis_client().hget(campaign_keys(campaign.pk).users, "bob") is None


def test_zero_stock_campaign_is_sold_out_from_the_start(live_campaign) -> None:
    assert claim(live_campaign(total_stock=0)).code == ClaimCode.SOLD_OUT


def test_claim_before_the_window_is_not_started(live_campaign) -> None:
    start = timezone.now() + timedelta(minutes=5)
    campaign = live_campaign(starts_at=start, ends_at=start + timedelta(hours=1))

    assert claim(campaign).code == ClaimCode.NOT_STARTED
    assert stock(campaign) == campaign.total_stock


def test_claim_after_the_window_is_ended(live_campaign) -> None:
    start = timezone.now() - timedelta(hours=2)
    campaign = live_campaign(starts_at=start, ends_at=start + timedelta(hours=1))

    assert claim(campaign).code == ClaimCode.ENDED
    assert stock(campaign) == campaign.total_stock


def test_claim_of_a_paused_campaign_is_paused_until_resumed(live_campaign) -> None:
    campaign = live_campaign()
    campaign_pause(campaign=campaign)

    assert claim(campaign).code == ClaimCode.PAUSED
    campaign_resume(campaign=campaign)
    assert claim(campaign).code == ClaimCode.CLAIMED


def test_campaign_without_state_is_never_treated_as_having_stock(live_campaign) -> None:
    campaign = live_campaign()
    redis_client().delete(campaign_keys(campaign.pk).stock)

    result = claim(campaign)

    assert result.code == ClaimCode.NO_STATE
    assert ledger_length(campaign) == 0
    assert redis_client().hget(campaign_keys(campaign.pk).users, "alice") is None


def test_unknown_campaign_has_no_state(db) -> None:
    assert run_claim(campaign_id=987654, user_id="alice", idempotency_key=None).code == ClaimCode.NO_STATE
    assert redis_client().dbsize() == 0


def test_same_idempotency_key_replays_the_first_answer_and_decrements_once(live_campaign) -> None:
    campaign = live_campaign(total_stock=5, per_user_limit=3)

    first = claim(campaign, "alice", key="k-1")
    again = claim(campaign, "alice", key="k-1")

    assert again.code == first.code == ClaimCode.CLAIMED
    assert again.ledger_id == first.ledger_id and again.replayed and not first.replayed
    assert stock(campaign) == 4 and ledger_length(campaign) == 1


def test_replayed_refusal_stays_the_same_refusal(live_campaign) -> None:
    campaign = live_campaign(total_stock=0)
    assert claim(campaign, "alice", key="k").code == ClaimCode.SOLD_OUT
    redis_client().set(campaign_keys(campaign.pk).stock, 5)  # stock appears later (e.g. a restock)

    again = claim(campaign, "alice", key="k")

    assert again.code == ClaimCode.SOLD_OUT and again.replayed
    assert claim(campaign, "alice", key="k2").code == ClaimCode.CLAIMED


def test_idempotency_key_is_scoped_to_the_user(live_campaign) -> None:
    campaign = live_campaign(total_stock=5)

    a, b = claim(campaign, "alice", key="same"), claim(campaign, "bob", key="same")

    assert a.code == b.code == ClaimCode.CLAIMED and a.ledger_id != b.ledger_id


def test_idempotent_answer_is_kept_24_hours(live_campaign) -> None:
    campaign = live_campaign()
    claim(campaign, "alice", key="k")

    ttl_ms = redis_client().pttl(campaign_keys(campaign.pk).idempotency("alice", "k"))

    assert 24 * 3600 * 1000 - 5000 < ttl_ms <= 24 * 3600 * 1000


def test_a_refusals_answer_is_kept_five_minutes_and_a_claims_24_hours(live_campaign) -> None:
    """A refusal under a key is kept for one click's retries, not a day: the same key later is decided again."""
    campaign = live_campaign(total_stock=1, per_user_limit=1)
    claim(campaign, "alice", key="won")
    claim(campaign, "alice", key="again")  # limit_reached
    claim(campaign, "bob", key="late")  # sold_out
    campaign_pause(campaign=campaign)
    claim(campaign, "cid", key="paused")

    def ttl_ms(user: str, key: str) -> int:
        return int(redis_client().pttl(campaign_keys(campaign.pk).idempotency(user, key)))

    assert 24 * 3600 * 1000 - 5000 < ttl_ms("alice", "won") <= 24 * 3600 * 1000
    for user, key in (("alice", "again"), ("bob", "late"), ("cid", "paused")):
        assert 5 * 60 * 1000 - 5000 < ttl_ms(user, key) <= 5 * 60 * 1000, key


def test_only_the_first_claim_asks_for_a_drain_until_the_drain_clears_the_flag(live_campaign) -> None:
    campaign = live_campaign(total_stock=5, per_user_limit=5)

    flags = [claim(campaign).trigger_drain for _ in range(3)]
    clear_drain_trigger(campaign.pk)  # what the drain does when it starts
    after_drain = claim(campaign).trigger_drain

    assert flags == [True, False, False] and after_drain is True


def test_every_key_expires_at_the_campaign_end_plus_grace(live_campaign) -> None:
    campaign = live_campaign(total_stock=5)
    claim(campaign, "alice")
    expected = to_ms(keys_expire_at(campaign))

    for key in campaign_keys(campaign.pk).state:
        assert abs(redis_client().pexpiretime(key) - expected) <= 1, key


def test_preheat_again_keeps_the_stock_and_claims(live_campaign) -> None:
    campaign = live_campaign(total_stock=5)
    claim(campaign, "alice")

    result = campaign_preheat(campaign=campaign)

    assert result.remaining == 4 and not result.stock_created
    assert claim(campaign, "alice").code == ClaimCode.LIMIT_REACHED


def test_claims_survive_a_script_flush(live_campaign) -> None:
    campaign = live_campaign(total_stock=5, per_user_limit=5)
    claim(campaign)

    redis_client().script_flush()

    assert claim(campaign).code == ClaimCode.CLAIMED and stock(campaign) == 3


def test_drain_flag_expires_so_a_lost_trigger_is_sent_again(live_campaign) -> None:
    campaign = live_campaign()
    claim(campaign)
    ttl = int(redis_client().hget(campaign_keys(campaign.pk).meta, "drain")) - redis_now_ms()
    assert 0 < ttl <= settings.COUPONS_DRAIN_TRIGGER_TTL_MS


def test_after_a_sell_out_claims_without_a_key_are_answered_from_memory_for_half_a_second(live_campaign) -> None:
    import time as clock

    from orders.claim import claim_create

    campaign = live_campaign(total_stock=1, per_user_limit=1)
    assert claim_create(campaign_id=campaign.pk, user_id="ann", idempotency_key=None).status == "claimed"
    assert claim_create(campaign_id=campaign.pk, user_id="bob", idempotency_key=None).status == "sold_out"
    redis_client().set(campaign_keys(campaign.pk).stock, 1)  # stock comes back (say, a cancel)

    from_memory = claim_create(campaign_id=campaign.pk, user_id="cid", idempotency_key=None)
    with_a_key = claim_create(campaign_id=campaign.pk, user_id="dan", idempotency_key="k")  # asks Redis
    redis_client().set(campaign_keys(campaign.pk).stock, 1)
    clock.sleep(0.55)
    later = claim_create(campaign_id=campaign.pk, user_id="eve", idempotency_key=None)

    assert (from_memory.status, with_a_key.status, later.status) == ("sold_out", "claimed", "claimed")
    assert redis_client().hget(campaign_keys(campaign.pk).users, "cid") is None  # Redis never saw cid


@pytest.mark.parametrize(("shopper_per_second", "counters"), [
    (5, {"c", "u:alice"}),
    (0, {"c"}),  # shoppers not limited: no counter of the shopper's
])
def test_a_rate_counter_is_kept_only_where_there_is_a_limit_in_its_seconds_hash_with_the_answer(
    live_campaign, settings, shopper_per_second, counters
) -> None:
    settings.COUPONS_RATE_LIMIT_SHOPPER_PER_SECOND = shopper_per_second
    campaign = live_campaign(total_stock=5)  # every campaign has a rate (10x its stock, at least 1,000/s)

    result = claim(campaign, "alice")
    assert result.code == ClaimCode.CLAIMED

    [key] = redis_client().scan_iter(match=campaign_keys(campaign.pk).second(0).replace(":s:0", ":s:*"))
    fields = {k.decode(): v.decode() for k, v in redis_client().hgetall(key).items()}
    answers = {k: v for k, v in fields.items() if k.startswith("a:")}
    assert set(fields) - set(answers) == counters and all(fields[c] == "1" for c in counters)
    assert list(answers.values()) == [f"0:{result.ledger_id}"]  # the claim's own answer, read after a lost reply
    assert 0 < redis_client().pttl(key) <= OWN_ANSWER_KEEP_MS
