"""The Redis half of a rebuild (campaigns.rebuild), from claims handed in as ClaimRecords: campaigns reads no
table of orders. The whole rebuild (drain, then the claims read from PostgreSQL) is tested in tests/orders and
tests/test_commands.py."""
from __future__ import annotations

import time

import psycopg
import pytest
from django.conf import settings

from campaigns.models import CampaignEvent, CampaignEventType
from campaigns.rebuild import ClaimRecords, campaign_repair_lock, campaign_state_rebuild
from campaigns.redis_state import ClaimCode, campaign_keys, key_digest, redis_client, run_claim

pytestmark = pytest.mark.django_db


def test_a_lost_state_is_rebuilt_from_the_claims_handed_in(live_campaign) -> None:
    # given: a campaign of 10 whose Redis keys are gone, and its claims as PostgreSQL holds them
    campaign = live_campaign(total_stock=10, per_user_limit=2)
    keys = campaign_keys(campaign.pk)
    redis_client().delete(*keys.state)
    now_ms = int(time.time() * 1000)
    claims = ClaimRecords(per_user={"ann": 2, "bob": 1}, cancelled=[f"{campaign.pk}-{now_ms - 5}-0"],
                          last_ledger_id=f"{now_ms - 1}-0", keyed=[("bob", key_digest("k-1"), f"{now_ms - 1}-0")])

    # when
    stock = campaign_state_rebuild(campaign=campaign, claims=claims)

    # then: the stock is the total less the claims, counts, given-back claims and answers are back ("" is the
    # keys' placeholder)
    assert stock == 7 and int(redis_client().get(keys.stock)) == 7
    assert {u: n for u, n in redis_client().hgetall(keys.users).items() if u} == {b"ann": b"2", b"bob": b"1"}
    assert redis_client().smembers(keys.cancelled) - {b""} == {f"{campaign.pk}-{now_ms - 5}-0".encode()}
    answer = keys.idempotency_of_digest("bob", key_digest("k-1"))
    assert redis_client().get(answer) == f"0:{now_ms - 1}-0".encode()
    assert 0 < redis_client().pttl(answer) <= settings.COUPONS_IDEMPOTENCY_TTL_SECONDS * 1000
    event = CampaignEvent.objects.get(campaign=campaign, type=CampaignEventType.REBUILT)
    assert event.data == {"remaining": 7, "claims": 3, "given_back": 1, "answers_restored": 1}
    # and the claims go on from there: ann is at her limit, bob replays his key's first answer
    assert run_claim(campaign_id=campaign.pk, user_id="ann", idempotency_key=None).code == ClaimCode.LIMIT_REACHED
    replay = run_claim(campaign_id=campaign.pk, user_id="bob", idempotency_key="k-1")
    assert replay.code == ClaimCode.CLAIMED and replay.replayed and replay.ledger_id == f"{now_ms - 1}-0"


def test_the_repair_lock_is_one_holder_at_a_time_and_reentrant_for_its_holder(live_campaign) -> None:
    campaign = live_campaign()
    db = settings.DATABASES["default"]
    other = psycopg.connect(dbname=db["NAME"], user=db["USER"], password=db["PASSWORD"], host=db["HOST"],
                            port=db["PORT"], autocommit=True)
    try:
        with campaign_repair_lock(campaign.pk) as taken:
            # when: another session tries the same campaign's lock, and this one again
            theirs = other.execute("SELECT pg_try_advisory_lock(7301, %s)", [campaign.pk]).fetchone()[0]
            with campaign_repair_lock(campaign.pk) as again:
                pass

            # then
            assert taken and again and not theirs
        assert other.execute("SELECT pg_try_advisory_lock(7301, %s)", [campaign.pk]).fetchone()[0]
    finally:
        other.close()
