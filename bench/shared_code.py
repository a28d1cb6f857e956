"""One shared code typed by 100 shoppers at once (issue 19): uses/s of coupons.services.coupon_redeem with the
code's uses taken in Redis (code_take.lua, the service as it is) beside the same uses with the limit on one
PostgreSQL row (the naive way: a conditional UPDATE of one counter row for each use in the use's transaction,
the transaction of the batch of first uses written together, so its lock is held until the commit), and
whether the cap held exactly.

    .venv/bin/python bench/shared_code.py [--connections 100] [--processes 4] [--stock 20000]

Stores: DATABASE_URL / REDIS_URL, or embedded servers under var/bench/ (bench/common.py). The shoppers are
threads in --processes processes (each thread its own PostgreSQL connection), calling the service function
directly (no HTTP, no Idempotency-Key record): every thread redeems the code for new shoppers until it is
sold out. Prints one JSON line per mode and a summary line; the figures are ratios of one run.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (  # noqa: E402
    BASE_DIR,
    BackendCPU,
    BenchError,
    child_env,
    log,
    manage,
    run_step,
    set_name,
    start_stores,
)

CODE = "BENCH50"
NAIVE_TABLE = "bench_code_counter"


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--connections", type=int, default=100, help="shoppers at once (threads in all)")
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--stock", type=int, default=20000, help="uses of the code (each mode sells them out)")
    parser.add_argument("--modes", default="redis,postgres",
                        help="the modes to run, in order (redis, postgres; http: the same uses through the web "
                             "server, the run command's, with an Idempotency-Key each)")
    parser.add_argument("--workers", type=int, default=2, help="the web server's workers (http mode)")
    parser.add_argument("--rounds", type=int, default=1, help="rounds of every mode, interleaved (1)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # "<mode>:<campaign>:<index>:<threads>:<start at>"
    return parser.parse_args()


# --- a worker process: threads redeeming the code until it is sold out ----------------------------------


def worker(spec: str) -> None:
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.dev")
    django.setup()
    from decimal import Decimal

    from django.db import connection, connections

    from campaigns import redis_state
    from campaigns.models import Campaign
    from coupons import services
    from coupons.outcomes import UseCode, refused
    from coupons.services import first_uses, shared, takes, unique

    mode, campaign_id, index, threads, start_at = spec.split(":")
    campaign = Campaign.objects.get(pk=int(campaign_id))
    if mode == "postgres":
        def take_on_one_row(campaign: Any, coupon: Any) -> Any:
            with connection.cursor() as cursor:  # the use's transaction holds this row's lock until it commits
                cursor.execute(f"UPDATE {NAIVE_TABLE} SET uses_left = uses_left - 1 "  # noqa: S608 (constant)
                               "WHERE campaign_id = %s AND uses_left > 0", [campaign.pk])
                if cursor.rowcount == 0:
                    return refused(UseCode.SOLD_OUT)
            return None

        def takes_on_one_row(coupons: list[Any]) -> list[Any]:  # a batch of first uses: a conditional UPDATE each
            take = redis_state.TakeCode
            return [take.SOLD_OUT if take_on_one_row(coupon.campaign, coupon) else take.TAKEN for coupon in coupons]

        # Each in the modules of coupons.services that call it; the rollback gives the row's unit back.
        patches = [(shared, "_take", take_on_one_row), (unique, "_take", take_on_one_row),
                   (first_uses, "_run_takes", takes_on_one_row)]
        patches += [(module, "_give_back_after_failure", lambda taken: None)
                    for module in (shared, unique, first_uses, takes)]
        for module, name, value in patches:
            setattr(module, name, value)

    counts = {"redeemed": 0, "sold_out": 0, "other": 0, "errors": 0}
    lock = threading.Lock()
    last_use = [0.0]

    def run(t: int) -> None:
        connection.ensure_connection()
        time.sleep(max(0.0, float(start_at) - time.time()))
        n = 0
        while True:
            n += 1
            user = f"c{campaign_id}-w{index}-{t}-{n}"  # new shoppers and orders in every round and run
            try:
                outcome = services.coupon_redeem(user_id=user, code=CODE, order=services.Order(
                    f"o-{user}", Decimal("350.00"), "CNY"))
                status = outcome.status if outcome.status in counts else "other"
            except Exception:  # noqa: BLE001 (counted and reported)
                status = "errors"
            with lock:
                counts[status] += 1
                if status == "redeemed":
                    last_use[0] = time.time()
            if status == "sold_out":
                break
        connections.close_all()

    pool = [threading.Thread(target=run, args=(t,)) for t in range(int(threads))]
    for thread in pool:
        thread.start()
    time.sleep(max(0.0, float(start_at) - time.time()))
    cpu_at_start = time.process_time()  # this process's user + system CPU, all threads
    for thread in pool:
        thread.join()
    print(json.dumps({**counts, "last_use": last_use[0], "cpu": time.process_time() - cpu_at_start}), flush=True)
    del campaign


# --- the driver ------------------------------------------------------------------------------------------


def create_campaign(env: dict[str, str], stock: int, code: str) -> int:
    out = run_step("campaign_create", manage("campaign_create", "--name", f"bench {code}", "--stock", str(stock),
                                             "--kind", "codes", "--code", code, "--ends", "+2h", "--publish"), env)
    return int(json.loads(out.stdout.decode().strip().splitlines()[-1])["id"])


async def _redeem_over_http(port: int, secret: str, connections: int, campaign_id: int) -> dict[str, Any]:
    """`connections` keep-alive connections to the web server, each redeeming the code for new shoppers (a
    token, an order and an Idempotency-Key of their own) until it is told sold_out."""
    import asyncio

    from bench.common import shopper_token

    counts = {"redeemed": 0, "sold_out": 0, "other": 0, "errors": 0}
    last_use = [0.0]
    expires = int(time.time()) + 1800
    body = b'{"order_id":"o","order_amount":"350.00","currency":"CNY"}'

    async def shopper_loop(c: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        n = 0
        while True:
            n += 1
            user = f"h{campaign_id}-{c}-{n}"
            writer.write(f"POST /api/v1/coupons/{CODE}/redeem HTTP/1.1\r\nHost: 127.0.0.1\r\nX-User-Id: {user}\r\n"
                         f"X-Token: {shopper_token(user, expires, secret)}\r\nIdempotency-Key: k-{user}\r\n"
                         "Content-Type: application/json"
                         f"\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length:"))
            answer = json.loads(await reader.readexactly(length)) if length else {}
            status = answer.get("status")
            if status in counts:
                counts[status] += 1
                if status == "redeemed":
                    last_use[0] = time.time()
            else:
                counts["other" if head.startswith(b"HTTP/1.1 200") else "errors"] += 1
            if status == "sold_out":
                break
        writer.close()

    await asyncio.gather(*(shopper_loop(c) for c in range(connections)))
    return {**counts, "last_use": last_use[0]}


def _http_round(args: argparse.Namespace, env: dict[str, str], campaign_id: int) -> list[dict[str, Any]]:
    """Start the run command's web server (`--workers`), redeem through it, stop it: the report of the round,
    the server's CPU (master and workers) as the round's Python."""
    import asyncio

    from bench.common import Processes, free_port, http_ok, session_cpu, wait_until, web_argv

    procs, port = Processes(), free_port()
    try:
        web = procs.start("web", web_argv(port, args.workers, []), env)
        wait_until("web", lambda: http_ok(f"http://127.0.0.1:{port}/healthz"), procs)
        cpu, started = session_cpu(web.proc.pid), time.time()
        report = asyncio.run(_redeem_over_http(port, env["COUPONS_TOKEN_SECRET"], args.connections, campaign_id))
        report["cpu"], report["started"] = session_cpu(web.proc.pid) - cpu, started
        return [report]
    finally:
        procs.stop_all()


def round_of(mode: str, args: argparse.Namespace, env: dict[str, str]) -> dict[str, Any]:
    import psycopg

    from bench.naive_claim import connect_params

    with psycopg.connect(**connect_params(env["DATABASE_URL"]), autocommit=True) as db:
        # a fresh code each round: the previous round's campaign is ended first (its code is then free)
        db.execute("UPDATE campaigns_campaign SET ends_at = now() WHERE code = %s AND ends_at > now()", [CODE])
    campaign_id = create_campaign(env, args.stock, CODE)
    with psycopg.connect(**connect_params(env["DATABASE_URL"]), autocommit=True) as db:
        db.execute(f"CREATE TABLE IF NOT EXISTS {NAIVE_TABLE} (campaign_id bigint PRIMARY KEY, uses_left integer)")
        db.execute(f"INSERT INTO {NAIVE_TABLE} VALUES (%s, %s) ON CONFLICT (campaign_id) DO UPDATE "  # noqa: S608
                   "SET uses_left = EXCLUDED.uses_left", [campaign_id, args.stock])
    per = [args.connections // args.processes + (i < args.connections % args.processes) for i in range(args.processes)]
    start_at = time.time() + 3.0
    with BackendCPU(env["DATABASE_URL"]) as backends:
        if mode == "http":
            reports = _http_round(args, env, campaign_id)
            start_at = reports[0]["started"]
        else:
            procs = [subprocess.Popen([sys.executable, __file__, "--worker",
                                       f"{mode}:{campaign_id}:{i}:{n}:{start_at}"],
                                      cwd=BASE_DIR, env=env, stdout=subprocess.PIPE) for i, n in enumerate(per)]
            reports = [json.loads(p.communicate()[0].decode().strip().splitlines()[-1]) for p in procs]
    seconds = max(r["last_use"] for r in reports) - start_at
    redeemed = sum(r["redeemed"] for r in reports)
    with psycopg.connect(**connect_params(env["DATABASE_URL"]), autocommit=True) as db:
        rows = db.execute("SELECT count(*) FROM coupons_coupon WHERE campaign_id = %s AND status = 'redeemed'",
                          [campaign_id]).fetchone()
    verified = None
    if mode in ("redis", "http"):
        try:
            run_step("verify_campaign", manage("verify_campaign", str(campaign_id)), env)
            verified = True
        except BenchError as exc:
            log(str(exc))
            verified = False
    result = {
        "mode": mode, "campaign": campaign_id, "connections": args.connections, "processes": args.processes,
        "stock": args.stock, "redeemed": redeemed, "redeemed_rows": rows[0] if rows else None,
        "sold_out_answers": sum(r["sold_out"] for r in reports), "errors": sum(r["errors"] for r in reports),
        "seconds": round(seconds, 2), "uses_per_second": round(redeemed / seconds) if seconds > 0 else None,
        "cap_exact": redeemed == args.stock == (rows[0] if rows else -1),
        # CPU per use (load-independent, unlike uses/s on a busy machine): the workers' Python (user + system,
        # from the start signal) and PostgreSQL's backends of the database (bench.common.BackendCPU)
        "python_cpu_us_per_use": round(sum(r["cpu"] for r in reports) / redeemed * 1e6) if redeemed else None,
        "postgres_cpu_us_per_use": (round(backends.seconds / redeemed * 1e6)
                                    if redeemed and backends.seconds is not None else None),
        "verify_balanced": verified,
    }
    print(json.dumps(result), flush=True)
    return result


def main() -> None:
    args = parse()
    if args.worker:
        worker(args.worker)
        return
    set_name("shared_code")
    stores = start_stores()
    try:
        env = child_env(stores, "bench-secret-" + "x" * 20)
        env["COUPONS_CODE_MISSES_PER_MINUTE"] = "1000000"
        run_step("migrate", manage("migrate", "--noinput"), env)
        import psycopg

        from bench.naive_claim import connect_params

        with psycopg.connect(**connect_params(env["DATABASE_URL"]), autocommit=True) as db:
            limit = int(db.execute("SHOW max_connections").fetchone()[0])  # type: ignore[index]
        if limit < args.connections + 10 and stores.embedded:  # our own embedded server: allow more
            with psycopg.connect(**connect_params(env["DATABASE_URL"]), autocommit=True) as db:
                db.execute(f"ALTER SYSTEM SET max_connections = {args.connections + 50}")
            stores.embedded[0].stop()
            stores.embedded[0].start()
            limit = args.connections + 50
        if limit < args.connections + 10:
            raise SystemExit(f"PostgreSQL allows {limit} connections; --connections {args.connections} needs "
                             f"{args.connections + 10} (ALTER SYSTEM SET max_connections, restart)")
        rounds: list[dict[str, Any]] = []
        for n in range(args.rounds):
            for mode in args.modes.split(","):
                rounds.append({"round": n + 1, **round_of(mode, args, env)})
        for r in rounds:
            log(f"round {r['round']} {r['mode']}: {r['uses_per_second']} uses/s, cap exact: {r['cap_exact']}, "
                f"CPU per use: Python {r['python_cpu_us_per_use']} us + PostgreSQL {r['postgres_cpu_us_per_use']} us")
    finally:
        stores.stop()


if __name__ == "__main__":
    main()
