"""Grants: how fast `manage.py grant` moves a file of shoppers into the ledger (grants through the claim script,
pipelined a chunk of 1,000), beside the claim script's own pipelined rate, and whether the drain keeps up.

    DATABASE_URL=postgres://... REDIS_URL=redis://HOST:PORT/N .venv/bin/python bench/grants_bench.py [--lines 1000000]

A benchmark, not a test. In one run it

  1. migrates the database DATABASE_URL names (created when missing), flushes the Redis db of REDIS_URL (only when
     it is empty or marked as a bench's, see common.flush_redis; --force-flush otherwise) and creates two published
     campaigns: a grant campaign (--kind grant, stock --lines) and a grab campaign for the claim's figure;
  2. the claim's figure: --claims claims of distinct shoppers through the claim script pipelined --pipeline at a
     time (drain_bench.fill_ledger: what a grant does but for its grant argument and Idempotency-Key);
  3. writes a file of --lines distinct shopper ids and runs `manage.py grant` on it in this process (from reading
     the file to its JSON line); a drain process (orders.drain.drain_campaign in a loop, as the worker's drain
     task) moves the ledger into PostgreSQL once it ended (--drain after: each's own rate) or meanwhile
     (--drain alongside: sharing the cores); then waits for the drain to catch up;
  4. checks: the JSON line's granted == --lines, one claim row a line in PostgreSQL, verify_campaign balances;
  5. prints a summary and writes bench/results/grants_bench-<timestamp>.json (--no-results: don't).

Settings config.settings.dev with DJANGO_DEBUG=false. Exit code 0: ran and the checks passed; 2: a check failed;
1: could not run.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import platform
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

BASE_DIR = Path(__file__).resolve().parent.parent
if str(BASE_DIR) not in sys.path:
    sys.path.insert(0, str(BASE_DIR))

import common  # noqa: E402 - bench/ is on sys.path when this runs as a script
from common import (  # noqa: E402
    BENCH_VAR,
    RESULTS_DIR,
    BenchError,
    Interrupted,
    Stores,
    child_env,
    create_campaign,
    flush_redis,
    git_revision,
    install_signal_handlers,
    log,
    manage,
    redact,
    rel,
    run_step,
    start_stores,
)
from drain_bench import fill_ledger  # noqa: E402

# The drain process: drain_campaign in a loop (the worker's drain task) until the stop file exists and the ledger
# is empty; a line a loop: seconds since its start, entries moved in all.
DRAIN_LOOP = """
import os, sys, time, django
django.setup()
from orders.drain import drain_campaign
from orders.ledger import backlog_sizes
campaign, stop = int(sys.argv[1]), sys.argv[2]
t0, total = time.monotonic(), 0
while True:
    report = drain_campaign(campaign_id=campaign, max_seconds=2.0)
    total += report.read
    print(f"{time.monotonic() - t0:.3f} {total}", flush=True)
    if os.path.exists(stop) and not backlog_sizes([campaign]).get(campaign, 0):
        break
    if not report.read:
        time.sleep(0.05)
"""


def grant_campaign(env: dict[str, str], stock: int) -> int:
    out = run_step("campaign_create --kind grant", manage(
        "campaign_create", "--name", "grants bench", "--kind", "grant", "--stock", str(stock), "--per-user-limit",
        "1", "--publish"), env)
    line = [x for x in out.stdout.decode().splitlines() if x.strip().startswith("{")][-1]
    campaign_id = int(json.loads(line)["id"])
    log(f"grant campaign {campaign_id}: stock {stock:,}, per-user limit 1, published")
    return campaign_id


def write_file(lines: int) -> Path:
    path = BENCH_VAR / f"grants-{lines}.txt"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"vip-{n}\n" for n in range(lines)))
    log(f"file: {rel(path)}, {lines:,} lines, {path.stat().st_size:,} bytes")
    return path


def run_grant(campaign_id: int, path: Path, env: dict[str, str], *, alongside: bool) -> dict[str, Any]:
    """`manage.py grant` in this process, a drain process emptying the ledger meanwhile (`alongside`) or once it
    ended; the grant's and the drain's figures."""
    from django.core.management import call_command

    from orders.ledger import backlog_sizes

    stop = BENCH_VAR / f"grants-drain-{os.getpid()}.stop"
    stop.unlink(missing_ok=True)

    def start_drain() -> subprocess.Popen[str]:
        return subprocess.Popen([sys.executable, "-c", DRAIN_LOOP, str(campaign_id), str(stop)], cwd=BASE_DIR,
                                env=env, stdout=subprocess.PIPE, text=True)

    drainer = start_drain() if alongside else None
    try:
        out = io.StringIO()
        t0 = time.monotonic()
        call_command("grant", str(campaign_id), str(path), "--batch", "bench", stdout=out, stderr=sys.stderr)
        grant_s = time.monotonic() - t0
        if drainer is None:
            drainer = start_drain()
        backlog_at_end = backlog_sizes([campaign_id]).get(campaign_id, 0)
        counts = json.loads(out.getvalue().strip().splitlines()[-1])
        log(f"grant: {counts}; {counts['granted']:,} in {grant_s:.2f}s = {counts['granted'] / grant_s:,.0f}/s; "
            f"ledger backlog at its end {backlog_at_end:,}")
        stop.touch()
        assert drainer.stdout is not None
        progress, shown = ["0 0"], time.monotonic()
        for line in drainer.stdout:  # the drain's progress every 2 s
            progress.append(line)
            if time.monotonic() - shown >= 2:
                shown = time.monotonic()
                log(f"  drain: {int(line.split()[1]):,} entries persisted")
        drainer.wait(timeout=600)
        drain_s = time.monotonic() - t0
    finally:
        stop.unlink(missing_ok=True)
        if drainer is not None and drainer.poll() is None:
            drainer.kill()
    drained = int(progress[-1].split()[1])
    drain_own_s = drain_s if alongside else drain_s - grant_s  # the drain's own time
    log(f"drain ({'alongside' if alongside else 'after'}): {drained:,} entries persisted in {drain_own_s:.2f}s = "
        f"{drained / drain_own_s:,.0f}/s; caught up {drain_s - grant_s:.2f}s after the grant ended")
    return {"drain": "alongside" if alongside else "after", "counts": counts, "grant_seconds": round(grant_s, 3),
            "grants_per_s": round(counts["granted"] / grant_s), "backlog_at_grant_end": backlog_at_end,
            "drained": drained, "drain_seconds": round(drain_own_s, 3), "drain_per_s": round(drained / drain_own_s),
            "drain_caught_up_after_s": round(drain_s - grant_s, 3)}


def check(campaign_id: int, lines: int, granted: dict[str, Any]) -> dict[str, Any]:
    from django.conf import settings

    from campaigns.models import Campaign
    from campaigns.redis_state import reset_redis_client
    from orders.models import Claim
    from orders.verify import campaign_verify

    # verify reads the whole ledger's cut in one reply: a million entries outlast the 0.5 s socket timeout
    settings.COUPONS_REDIS_SOCKET_TIMEOUT = 60
    reset_redis_client()
    claims = Claim.objects.filter(campaign_id=campaign_id).count()
    balance = campaign_verify(campaign=Campaign.objects.get(pk=campaign_id))
    ok = granted["counts"]["granted"] == lines == claims and balance.balanced
    log(f"check: granted {granted['counts']['granted']:,}, {claims:,} claims in PostgreSQL for {lines:,} lines, "
        f"verify {'BALANCED' if balance.balanced else 'NOT BALANCED'} -> {'OK' if ok else 'FAILED'}")
    return {"claims": claims, "balanced": balance.balanced, "ok": ok}


def bench(args: argparse.Namespace, stores: Stores) -> dict[str, Any]:
    loadavg = [round(x, 2) for x in os.getloadavg()]
    flush_redis(stores.redis_url, what="grants bench", allowed=True, force=args.force_flush)
    env = child_env(stores, os.environ.get("COUPONS_TOKEN_SECRET") or "grants-bench")
    run_step("migrate", manage("migrate", "--noinput", "-v", "0"), env)
    granting = grant_campaign(env, args.lines)
    claiming = create_campaign(env, args.claims)
    os.environ.update({k: env[k] for k in ("DJANGO_SETTINGS_MODULE", "DJANGO_DEBUG", "DATABASE_URL", "REDIS_URL")})
    import django

    django.setup()
    claimed = fill_ledger(claiming, args.claims, args.pipeline)
    claims_per_s = args.claims / claimed["seconds"]
    log(f"claim script, pipelined {args.pipeline}: {claims_per_s:,.0f} claims/s")
    granted = run_grant(granting, write_file(args.lines), env, alongside=args.drain == "alongside")
    checks = check(granting, args.lines, granted)
    return {"timestamp": datetime.now(UTC).isoformat(timespec="seconds"), "git": git_revision(),
            "host": {"cpus": os.cpu_count(), "loadavg_before": loadavg,
                     "loadavg_after": [round(x, 2) for x in os.getloadavg()], "python": platform.python_version()},
            "config": {"lines": args.lines, "claims": args.claims, "pipeline": args.pipeline, "drain": args.drain,
                       "database": redact(stores.database_url), "redis": redact(stores.redis_url),
                       "grant_campaign": granting, "claim_campaign": claiming},
            "claims": {**claimed, "claims_per_s": round(claims_per_s)}, "grants": granted,
            "ratios": {"grants_over_claims": round(granted["grants_per_s"] / claims_per_s, 3)},
            "goal": {"grants_per_s": 20_000, "met": granted["grants_per_s"] >= 20_000}, "checks": checks}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=1_000_000, help="shoppers in the grant file (1000000)")
    parser.add_argument("--claims", type=int, default=200_000, help="claims for the claim's figure (200000)")
    parser.add_argument("--pipeline", type=int, default=1000, help="claims per round trip, as a grant chunk (1000)")
    parser.add_argument("--drain", choices=["after", "alongside"], default="after",
                        help="the drain process runs once the grant ended (its own rate), or alongside (both share "
                             "the machine's cores) (after)")
    parser.add_argument("--force-flush", action="store_true", help="flush REDIS_URL's db even if not a bench's")
    parser.add_argument("--no-results", dest="results", action="store_false", help="do not write the JSON")
    args = parser.parse_args(argv)
    if args.lines < 1000 or args.claims < 1000:
        parser.error("--lines and --claims must be >= 1000")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    common.set_name("grants_bench")
    install_signal_handlers()
    stores: Stores | None = None
    try:
        stores = start_stores()
        summary = bench(args, stores)
    except Interrupted as exc:
        log(f"{exc}: stopping ...")
        return 130
    except BenchError as exc:
        log(f"ERROR: {exc}")
        return 1
    finally:
        if stores is not None:
            stores.stop()
    if args.results:
        RESULTS_DIR.mkdir(parents=True, exist_ok=True)
        path = RESULTS_DIR / f"grants_bench-{datetime.now().strftime('%Y%m%d-%H%M%S')}.json"
        path.write_text(json.dumps(summary, indent=2) + "\n")
        log(f"results: {rel(path)}")
    grants, claims = summary["grants"], summary["claims"]
    print(f"\ngrants bench  {summary['timestamp']}  load average before {summary['host']['loadavg_before']}")
    print(f"  claim script pipelined {args.pipeline}: {args.claims:,} claims in {claims['seconds']} s = "
          f"{claims['claims_per_s']:,}/s")
    print(f"  manage.py grant, file to ledger: {grants['counts']['granted']:,} grants in {grants['grant_seconds']} s = "
          f"{grants['grants_per_s']:,}/s ({summary['ratios']['grants_over_claims']}x the claim's); goal 20,000/s "
          f"{'met' if summary['goal']['met'] else 'NOT met'}")
    print(f"  drain ({grants['drain']}): {grants['drained']:,} persisted in {grants['drain_seconds']} s = "
          f"{grants['drain_per_s']:,}/s; backlog at the grant's end {grants['backlog_at_grant_end']:,}, caught up "
          f"{grants['drain_caught_up_after_s']} s later; checks {'OK' if summary['checks']['ok'] else 'FAILED'}")
    return 0 if summary["checks"]["ok"] else 2


if __name__ == "__main__":
    sys.exit(main())
