"""Drain: how fast orders.drain.drain_campaign moves a campaign's ledger into PostgreSQL, against batch size 1.

    DATABASE_URL=postgres://... REDIS_URL=redis://HOST:PORT/N .venv/bin/python bench/drain_bench.py [--claims 200000]

A benchmark, not a test. In one run it

  1. migrates the database DATABASE_URL names (created when missing), flushes the Redis db of REDIS_URL (only when
     it is empty or marked as a bench's, see common.flush_redis; --force-flush otherwise) and creates a published
     campaign (manage.py campaign_create --publish, stock --claims);
  2. fills the campaign's ledger with N claims of N shoppers through the real claim script
     (campaigns.redis_state.claim_call + the registered claim.lua, pipelined --pipeline at a time; a claim that
     ran after its deadline, TOO_LATE on a busy machine, changed nothing and is sent again);
  3. drains it the way the suite's drain phase does: first drain_campaign(batch_size=1) for --baseline-seconds
     (the row-by-row yardstick), then drain_campaign(max_seconds=2) in a loop until it catches up (the worker's
     drain task), measuring claims/s and the CPU seconds of PostgreSQL's backends and of this process per claim;
  4. checks that every claim is one claim row, one coupon and one 'issued' event in PostgreSQL, and the ledger's
     pending list is empty;
  5. prints a summary and writes bench/results/drain_bench-<timestamp>.json (--no-results: don't).

Settings config.settings.dev with DJANGO_DEBUG=false; the drain runs in this process, as the suite's does.
Exit code 0: ran and the checks passed; 2: a check failed; 1: could not run.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
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
    measure_drain,
    redact,
    rel,
    run_step,
    start_stores,
)


def fill_ledger(campaign_id: int, claims: int, pipeline: int) -> dict[str, Any]:
    """N claims of N distinct shoppers through the claim script, `pipeline` per round trip. A claim Redis ran
    after its deadline (TOO_LATE: a busy machine) changed nothing and is sent again in the next round trip."""
    from campaigns.redis_state import ClaimCode, claim_call, claim_reply, redis_client, redis_now_ms, scripts

    client = redis_client()
    script = scripts().claim
    t0 = time.monotonic()
    sent = claimed = 0
    codes: dict[int, int] = {}
    retry: list[str] = []
    next_log = t0 + 2
    while claimed < claims:
        users = retry[:pipeline]
        retry = retry[pipeline:]
        fresh = min(pipeline - len(users), claims - sent)
        users += [f"drain-{i}" for i in range(sent, sent + fresh)]
        sent += fresh
        if not users:
            break
        now_ms = redis_now_ms()
        pipe = client.pipeline(transaction=False)
        for user in users:
            call = claim_call(campaign_id=campaign_id, user_id=user, idempotency_key=None, client_ip=None,
                              now_ms=now_ms)
            script.registered(keys=call.keys, args=call.args, client=pipe)
        for user, raw in zip(users, pipe.execute(), strict=True):
            code = claim_reply(raw)[0]
            codes[code] = codes.get(code, 0) + 1
            claimed += code == ClaimCode.CLAIMED
            if code == ClaimCode.TOO_LATE:
                retry.append(user)
        if time.monotonic() >= next_log:
            next_log += 2
            log(f"  ledger: {claimed:,} / {claims:,} claims in ({claimed / (time.monotonic() - t0):,.0f}/s)")
    seconds = time.monotonic() - t0
    log(f"ledger filled: {claimed:,} of {claims:,} claimed in {seconds:.1f}s (answers {codes})")
    if claimed != claims:
        raise BenchError(f"only {claimed:,} of {claims:,} claims were claimed (answers {codes})")
    return {"claims": claims, "seconds": round(seconds, 2), "answers": {str(k): v for k, v in codes.items()}}


def drain(database_url: str, campaign_id: int, args: argparse.Namespace) -> dict[str, Any]:
    """The suite's drain phase (common.measure_drain), with --batch-size when given."""
    from django.conf import settings

    if args.batch_size:
        settings.COUPONS_DRAIN_BATCH = args.batch_size
    return measure_drain(database_url, campaign_id, baseline_seconds=args.baseline_seconds,
                         max_seconds=args.max_seconds)


def check(campaign_id: int, claims: int) -> dict[str, Any]:
    """Every claim once in PostgreSQL (claim, coupon, 'issued' event); nothing left pending in the ledger."""
    from django.db import connection

    from orders import ledger

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT (SELECT count(*) FROM orders_claim WHERE campaign_id = %(c)s), "
            "(SELECT count(*) FROM coupons_coupon WHERE campaign_id = %(c)s), "
            "(SELECT count(*) FROM coupons_couponevent WHERE campaign_id = %(c)s AND type = 'issued'), "
            "(SELECT count(*) FROM coupons_coupon c JOIN orders_claim k USING (claim_id) "
            " WHERE c.campaign_id = %(c)s AND c.user_id = k.user_id)", {"c": campaign_id})
        rows, coupons, events, matched = cursor.fetchone()
    backlog = ledger.backlog_sizes([campaign_id]).get(campaign_id, 0)
    ok = rows == coupons == events == matched == claims and backlog == 0
    log(f"check: {rows:,} claims, {coupons:,} coupons, {events:,} 'issued' events, {matched:,} coupons matching "
        f"their claim, for {claims:,} claimed; ledger backlog {backlog} -> {'OK' if ok else 'FAILED'}")
    return {"claims": rows, "coupons": coupons, "issued_events": events, "matched": matched, "backlog": backlog,
            "ok": ok}


def webhook_endpoints(subscribed: bool) -> None:
    """--webhook: one active endpoint subscribed to every type (nothing is delivered during the bench: the drain
    only writes the outbox); without it, no active endpoint (the database may hold one of an earlier run)."""
    from webhooks.models import WebhookEndpoint

    WebhookEndpoint.objects.update(active=False)
    if subscribed:
        WebhookEndpoint.objects.create(url="http://127.0.0.1:9/drain-bench", secret="drain-bench-secret")
    log(f"webhook endpoints: {'one subscribed to every type' if subscribed else 'none active'}")


def bench(args: argparse.Namespace, stores: Stores) -> dict[str, Any]:
    loadavg = [round(x, 2) for x in os.getloadavg()]
    flush_redis(stores.redis_url, what="drain bench", allowed=True, force=args.force_flush)
    env = child_env(stores, os.environ.get("COUPONS_TOKEN_SECRET") or "drain-bench")
    run_step("migrate", manage("migrate", "--noinput", "-v", "0"), env)
    campaign_id = create_campaign(env, args.claims)
    os.environ.update({k: env[k] for k in ("DJANGO_SETTINGS_MODULE", "DJANGO_DEBUG", "DATABASE_URL", "REDIS_URL")})
    import django

    django.setup()
    webhook_endpoints(args.webhook)
    filled = fill_ledger(campaign_id, args.claims, args.pipeline)
    drained = drain(stores.database_url, campaign_id, args)
    checks = check(campaign_id, args.claims)
    if args.webhook:
        from webhooks.models import Delivery, OutboxEvent

        checks["outbox_events"] = OutboxEvent.objects.filter(campaign_id=campaign_id, type="coupon.issued").count()
        checks["deliveries"] = Delivery.objects.filter(event__campaign_id=campaign_id).count()
        log(f"webhooks: {checks['outbox_events']:,} coupon.issued outbox events, {checks['deliveries']:,} deliveries")
        checks["ok"] = checks["ok"] and checks["outbox_events"] == args.claims
    return {"timestamp": datetime.now(UTC).isoformat(timespec="seconds"), "git": git_revision(),
            "host": {"cpus": os.cpu_count(), "loadavg_before": loadavg,
                     "loadavg_after": [round(x, 2) for x in os.getloadavg()], "python": platform.python_version()},
            "config": {"claims": args.claims, "batch_size_option": args.batch_size, "pipeline": args.pipeline,
                       "webhook": args.webhook,
                       "database": redact(stores.database_url), "redis": redact(stores.redis_url),
                       "campaign": campaign_id},
            "fill": filled, **drained, "checks": checks}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--claims", type=int, default=200_000, help="claims in the ledger (200000)")
    parser.add_argument("--batch-size", type=int, help="override COUPONS_DRAIN_BATCH for the drain")
    parser.add_argument("--baseline-seconds", type=float, default=3.0, help="batch size 1 runs this long (3)")
    parser.add_argument("--max-seconds", type=float, default=300.0, help="give up the drain after this (300)")
    parser.add_argument("--pipeline", type=int, default=500, help="claims per round trip when filling (500)")
    parser.add_argument("--force-flush", action="store_true", help="flush REDIS_URL's db even if not a bench's")
    parser.add_argument("--no-results", dest="results", action="store_false", help="do not write the JSON")
    parser.add_argument("--webhook", action="store_true",
                        help="an active webhook endpoint subscribed to every type: the drain writes the outbox too")
    args = parser.parse_args(argv)
    if args.claims < 1000 or (args.batch_size is not None and args.batch_size < 1):
        parser.error("--claims must be >= 1000, --batch-size >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    common.set_name("drain_bench")
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
        path = RESULTS_DIR / f"drain_bench-{datetime.now().strftime('%Y%m%d-%H%M%S')}.json"
        path.write_text(json.dumps(summary, indent=2) + "\n")
        log(f"results: {rel(path)}")
    bulk, row = summary["bulk"], summary["row_by_row"]
    print(f"\ndrain bench  {summary['timestamp']}  load average before {summary['host']['loadavg_before']}")
    print(f"  drain_campaign (batch {bulk['batch_size']}, {bulk['connections']} connections): {bulk['claims']:,} "
          f"claims in {bulk['seconds']} s = {bulk['claims_per_s']:,.0f}/s; PostgreSQL "
          f"{bulk.get('backend_cpu_us_per_claim', '-')} us + Python {bulk.get('python_cpu_us_per_claim', '-')} us "
          f"CPU per claim")
    print(f"  batch size 1: {row['claims']:,} claims in {row['seconds']} s = {row['claims_per_s']:,.0f}/s; "
          f"PostgreSQL {row.get('backend_cpu_us_per_claim', '-')} us + Python "
          f"{row.get('python_cpu_us_per_claim', '-')} us CPU per claim")
    print(f"  bulk / batch 1: {summary['ratios']['bulk_over_row_by_row']}x; goal 10,000/s "
          f"{'met' if summary['goal']['met'] else 'NOT met'}; checks {'OK' if summary['checks']['ok'] else 'FAILED'}")
    return 0 if summary["checks"]["ok"] else 2


if __name__ == "__main__":
    sys.exit(main())
