"""Faults of the campaign's Redis under an HTTP claim load: stopped, killed, frozen, wiped, its scripts flushed
and its clients killed. Every test checks I1-I7 (harness.check) with zero tolerance."""
from __future__ import annotations

import time

import pytest

from .harness import Load, Window, run_fault

pytestmark = [pytest.mark.slow]

DOWN_SECONDS = 3.0  # how long a stopped or killed Redis stays down


def test_redis_killed_with_sigkill_restarts_from_its_aof_and_loses_no_claim(fault_stack) -> None:
    campaign = fault_stack.boot(stock=450)
    window = Window()

    def inject(load: Load) -> None:
        window.open()
        fault_stack.redis.kill()
        time.sleep(DOWN_SECONDS)
        fault_stack.redis.start()
        window.close()

    _, problems = run_fault(fault_stack, campaign, window, inject, fault="Redis SIGKILL, restart from AOF")
    assert not problems
