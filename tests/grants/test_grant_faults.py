"""Grants exact under concurrency with shoppers' claims, and after a crash mid-batch (docs/api.md, Grants)."""
from __future__ import annotations

import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from django.db import connections
from django.db.models import Count

from grants import services
from grants.models import GrantBatch, GrantStatus
from orders.claim import ClaimOutcome
from orders.models import Claim

from ..conftest import ROOT, claims_in_threads, process_env
from .conftest import drained_and_balanced, grant_file, remaining, run_grant

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_stock_and_limits_hold_while_shoppers_claim_during_a_grant_batch(
        live_campaign: Any, tmp_path: Path, monkeypatch: Any) -> None:
    # Given 600 coupons, shoppers s0..s399 claiming while a batch grants s200..s799 (chunks of 50, so that the
    # claims land between them): 800 shoppers want one each, s200..s399 twice over.
    campaign = live_campaign(total_stock=600, per_user_limit=1)
    monkeypatch.setattr(services, "CHUNK_SIZE", 50)
    path = grant_file(tmp_path, "\n".join(f"s{n}" for n in range(200, 800)))
    answers: list[Any] = []
    counts: dict[str, Any] = {}

    def grant() -> None:
        try:
            counts.update(run_grant(campaign, path, "--batch", "race")[0])
        finally:
            connections.close_all()

    granting = threading.Thread(target=grant)
    granting.start()
    shoppers = claims_in_threads(campaign.pk, 400, answers)
    for thread in [granting, *shoppers]:
        thread.join()
    # Then exactly the stock went out, to 600 shoppers, each at most once, and the books balance.
    claimed = sum(1 for a in answers if isinstance(a, ClaimOutcome) and a.status == "claimed")
    assert len(answers) == 400 and all(isinstance(a, ClaimOutcome) for a in answers), answers
    assert claimed + counts["granted"] == 600
    assert counts["granted"] + counts["limit_reached"] + counts["sold_out"] == 600
    assert remaining(campaign) == 0
    drained_and_balanced(campaign)
    per_user = Claim.objects.filter(campaign=campaign).values("user_id").annotate(n=Count("id"))
    assert len(per_user) == 600 and max(row["n"] for row in per_user) == 1
    assert GrantBatch.objects.get().status == GrantStatus.DONE


def test_a_batch_killed_mid_way_resumes_to_exact_totals(live_campaign: Any, tmp_path: Path) -> None:
    # Given a 40,000-line batch (40 chunks) whose process is killed (SIGKILL) once it has counted a chunk.
    campaign = live_campaign(total_stock=50_000, per_user_limit=1)
    path = grant_file(tmp_path, "\n".join(f"u{n}" for n in range(40_000)))
    process = subprocess.Popen([sys.executable, "manage.py", "grant", str(campaign.pk), path, "--batch", "crash"],
                               cwd=ROOT, env=process_env(), stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert process.stderr is not None
    for line in process.stderr:
        if line.startswith("chunk "):
            process.send_signal(signal.SIGKILL)
            break
    process.wait(timeout=60)
    assert process.returncode == -signal.SIGKILL
    batch = GrantBatch.objects.get()
    assert batch.status == GrantStatus.RUNNING and 0 < batch.chunks_done < batch.chunks
    # When the same command runs again, it resumes: every shopper granted once, each counted once.
    counts, progress = run_grant(campaign, path, "--batch", "crash")
    assert f"resuming batch crash at chunk {batch.chunks_done} of 40" in progress or "resuming batch crash" in progress
    assert counts == {"batch": "crash", "granted": 40_000, "limit_reached": 0, "sold_out": 0, "invalid": 0,
                      "duplicate": 0}
    assert remaining(campaign) == 10_000
    drained_and_balanced(campaign)
    assert Claim.objects.filter(campaign=campaign).count() == 40_000


def test_a_chunk_granted_in_redis_but_not_counted_before_a_crash_counts_as_granted_when_resumed(
        live_campaign: Any, tmp_path: Path, monkeypatch: Any) -> None:
    # Given a process that dies after Redis granted its third chunk, before PostgreSQL counted it.
    campaign = live_campaign(total_stock=5000, per_user_limit=1)
    path = grant_file(tmp_path, "\n".join(f"u{n}" for n in range(4500)))
    real, calls = services.grant_chunk, []

    def dying(**kwargs: Any) -> Any:
        calls.append(1)
        result = real(**kwargs)
        if len(calls) == 3:
            raise KeyboardInterrupt  # the process dies here
        return result

    monkeypatch.setattr(services, "grant_chunk", dying)
    with pytest.raises(KeyboardInterrupt):
        run_grant(campaign, path, "--batch", "b")
    assert GrantBatch.objects.get().granted == 2000 and remaining(campaign) == 2000
    # When it runs again, the third chunk's grants replay: counted granted (this run's), not again in Redis.
    counts, _ = run_grant(campaign, path, "--batch", "b")
    assert counts["granted"] == 4500 and remaining(campaign) == 500
    drained_and_balanced(campaign)
