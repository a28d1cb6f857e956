"""Faults of the campaign's Redis under an HTTP claim load: stopped, killed, frozen, wiped, its scripts flushed
and its clients killed. Every test checks I1-I7 (harness.check) with zero tolerance."""
from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from campaigns.models import CampaignEvent, CampaignEventType
from coupons.models import Coupon

from .harness import Answer, Load, Stack, Watch, Window, get, run_fault, wait_until

pytestmark = [pytest.mark.slow]

DOWN_SECONDS = 3.0  # how long a stopped or killed Redis stays down
READY_SECONDS = 3.0  # /readyz with Redis frozen: its check times out (COUPONS_REDIS_SOCKET_TIMEOUT, 0.5 s)
FREEZE_SECONDS = 10.0  # the SIGSTOP; a 503 must still come within FAST_503_SECONDS meanwhile
FAST_503_SECONDS = 1.0
REBUILD_SECONDS = 10.0  # an empty Redis: the beat sweep (every 2 s) rebuilds a live campaign within this


def restart_after(stack: Stack, window: Window, stop_redis: str) -> None:
    window.open()
    getattr(stack.redis, stop_redis)()
    time.sleep(DOWN_SECONDS)
    stack.redis.start()
    window.close()


def test_redis_killed_with_sigkill_restarts_from_its_aof_and_loses_no_claim(fault_stack) -> None:
    campaign = fault_stack.boot(stock=450)
    # Zero loss across a kill is what Redis promises with `appendfsync always`: with everysec, while
    # the previous second's fsync still runs (a busy disk), Redis holds up to 2 s of AOF data in memory and
    # still answers, so a kill then may lose answered claims (seen once in CI; docs/deployment.md, "Redis durability").
    # Under `always` the AOF holds every answered claim, and this checks that couponrush loses none of them.
    fault_stack.redis.admin().config_set("appendfsync", "always")
    assert fault_stack.redis.admin().config_get("appendfsync") == {"appendfsync": "always"}
    window = Window()

    _, problems = run_fault(fault_stack, campaign, window, lambda load: restart_after(fault_stack, window, "kill"),
                            fault="Redis SIGKILL, restart from AOF")
    assert not problems


def test_redis_stopped_with_shutdown_and_restarted_loses_no_claim(fault_stack) -> None:
    campaign = fault_stack.boot(stock=450)
    window = Window()

    _, problems = run_fault(fault_stack, campaign, window,
                            lambda load: restart_after(fault_stack, window, "shutdown"),
                            fault="Redis SHUTDOWN, restart")
    assert not problems


def test_a_frozen_redis_is_a_503_within_a_second_and_healthz_does_not_notice(fault_stack) -> None:
    campaign = fault_stack.boot(stock=450)
    window = Window()

    def inject(load: Load) -> None:
        window.open()
        os.kill(fault_stack.redis.pid, signal.SIGSTOP)
        try:
            time.sleep(FREEZE_SECONDS)
        finally:
            os.kill(fault_stack.redis.pid, signal.SIGCONT)
        window.close()

    with Watch(lambda: get(fault_stack.url, "/healthz")[0], every=0.25) as health, \
            Watch(lambda: get(fault_stack.url, "/readyz")[0], every=0.5) as ready:
        load, problems = run_fault(fault_stack, campaign, window, inject, fault="Redis SIGSTOP 10 s, SIGCONT")

    frozen = [a for a in load.answers if window.start < a.sent and a.answered < window.end]
    assert frozen and all(a.status == 503 for a in frozen), "a claim was decided while Redis was frozen"
    assert max(a.latency for a in frozen) < FAST_503_SECONDS
    checks = [(took, value) for started, took, value in health.samples if window.start < started < window.end]
    assert checks and all(value == 200 and took < FAST_503_SECONDS for took, value in checks), checks
    # Readiness says the store is gone, and in bounded time (its broker check hung on the frozen broker before)
    readiness = [(took, value) for started, took, value in ready.samples
                 if window.start + 1 < started < window.end - READY_SECONDS]
    assert readiness and all(value == 503 and took < READY_SECONDS for took, value in readiness), readiness
    # A claim Redis ran the instant it froze, whose reply it had not yet written, was answered 503: it has
    # been taken back since (orders.claim.ClaimVoider), so no coupon is left for it (I4).
    assert not problems


def test_redis_restarted_empty_answers_503_until_the_campaign_is_rebuilt_with_the_right_stock(fault_stack) -> None:
    campaign = fault_stack.boot(stock=450)
    window = Window(grace=REBUILD_SECONDS)
    persisted_before: list[int] = []

    def inject(load: Load) -> None:
        # What Redis accepted and the drain has not yet taken is gone with Redis's data (only its AOF
        # protects it): hold the shoppers until the drain has caught up, then throw the data away.
        load.hold()
        claimed = {a.claim_id for a in load.answers if a.outcome == "claimed"}
        assert wait_until(lambda: fault_stack.backlog(campaign) == 0 and claimed <= set(
            Coupon.objects.filter(campaign_id=campaign.id).values_list("claim_id", flat=True)), 30)
        persisted_before.append(Coupon.objects.filter(campaign_id=campaign.id).count())
        window.open()
        fault_stack.redis.shutdown(nosave=True)
        fault_stack.redis.wipe()
        load.release()
        time.sleep(DOWN_SECONDS)
        fault_stack.redis.start()
        window.close()
        rebuilt = wait_until(lambda: fault_stack.remaining(campaign) is not None, REBUILD_SECONDS + 5)
        window.notes["rebuilt_after_s"] = None if rebuilt is None else round(rebuilt - window.end, 1)

    load, problems = run_fault(fault_stack, campaign, window, inject, fault="Redis restarted empty")

    rebuilds = list(CampaignEvent.objects.filter(campaign_id=campaign.id, type=CampaignEventType.REBUILT))
    assert len(rebuilds) == 1, rebuilds
    figures = rebuilds[0].data  # what the rebuild found in PostgreSQL and loaded into Redis
    assert figures["claims"] == persisted_before[0] and figures["remaining"] == campaign.total_stock - figures["claims"]
    assert window.notes["rebuilt_after_s"] is not None and window.notes["rebuilt_after_s"] < REBUILD_SECONDS
    rebuilt_at = window.end + window.notes["rebuilt_after_s"]
    lost_state = [a for a in load.answers if window.start < a.sent and a.answered < rebuilt_at - 0.5]
    assert lost_state and all(a.status == 503 for a in lost_state), "a sale was decided before the rebuild"
    assert any(a.outcome == "claimed" and a.sent > rebuilt_at for a in load.answers), "sales never resumed"
    # The claims' Idempotency-Keys are restored with the rebuild (I6), and verify reads PostgreSQL in one
    # snapshot, so the reconciliation right after the rebuild sets nothing wrong (I5).
    assert not problems


def test_script_flush_and_client_kill_during_the_load_change_no_totals(fault_stack) -> None:
    campaign = fault_stack.boot(stock=450)
    window = Window()

    def inject(load: Load) -> None:
        admin = fault_stack.redis.admin()
        stop = threading.Event()

        def saboteur() -> None:
            while not stop.is_set():
                admin.script_flush()
                admin.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
                time.sleep(0.05)

        chaos = threading.Thread(target=saboteur)
        window.open()
        chaos.start()
        time.sleep(5)
        stop.set()
        chaos.join()
        window.close()

    load, problems = run_fault(fault_stack, campaign, window, inject, fault="SCRIPT FLUSH + CLIENT KILL every 50 ms")

    during: list[Answer] = [a for a in load.answers if window.start < a.sent and a.answered < window.end]
    assert any(a.outcome == "claimed" for a in during), "no claim went through the chaos"
    assert not problems  # I7: only 200 and 503, so no NOSCRIPT reached a shopper; I1-I5: no double decrement
