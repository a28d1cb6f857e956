"""Expiry sweep: how fast the worker expires 1,000,000 due coupons, in how much memory, against row by row.

    .venv/bin/python bench/expiry_sweep.py [--coupons 1000000] [--baseline 20000] [--batch-size N] [--keep]

A benchmark, not a test. In one run it

  1. creates a database of its own, `couponrush_bench_expiry` (--database), on the server of DATABASE_URL, or in
     an embedded PostgreSQL under var/bench/pg-expiry when DATABASE_URL is unset, and runs `manage.py migrate` on
     it (settings config.settings.dev with DJANGO_DEBUG=false; REDIS_URL defaults to redis://127.0.0.1:6379/9,
     only because the settings want one: nothing here talks to Redis);
  2. creates a campaign and inserts N due coupons with their 'issued' events, set-based (generate_series, one
     statement per chunk of 100,000), expiring over the last 7 days in id order; VACUUM ANALYZE; EXPLAIN
     (ANALYZE, BUFFERS) of one batch statement of coupons.compensation, rolled back;
  3. runs coupons.compensation.expire_and_lapse_due(max_seconds=3600) once in a child process, as the worker runs
     it: the child reports its time, coupons expired, batches, the duration of every batch statement and its
     ru_maxrss; the bench samples the child's VmRSS every 0.5 s and counts expired coupons every 2 s;
  4. runs a second sweep at once (nothing due: the cost of the every-minute run after a mass expiry);
  5. inserts M more due coupons in a second campaign and expires them row by row in another child, the way a
     naive job would (ORM iterator + coupons.services.coupon_settle in a transaction per coupon);
  6. checks: exactly N + M 'expired' events (source 'compensation'), none left active, every coupon exactly
     'issued' + 'expired' at version 2 (one SQL pass over all of them), and the event fold
     (coupons.replay.disagreements, what `manage.py replay_events --check` runs) on a random sample of the sweep's
     coupons and on all of the baseline's;
  7. prints a summary table, writes the JSON to bench/results/expiry_sweep-<timestamp>.json and drops the
     database (--keep keeps it), also on Ctrl-C.

Exit code 0: ran and every check passed; 2: ran but a check failed; 1: could not run.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import resource
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

BASE_DIR = Path(__file__).resolve().parent.parent
if str(BASE_DIR) not in sys.path:
    sys.path.insert(0, str(BASE_DIR))

from common import BackendCPU  # noqa: E402 - bench/ is on sys.path when this runs as a script
from expiry_setup import (  # noqa: E402 - the database, the due coupons, the checks
    EXPIRED_AGO,
    SPREAD,
    BenchError,
    check,
    create_campaign,
    create_database,
    drop_database,
    explain_batch,
    insert_due,
    log,
    redact,
    rel,
    start_server,
    vacuum_analyze,
    with_db,
)

RESULTS_DIR = BASE_DIR / "bench" / "results"
SETTINGS_MODULE = "config.settings.dev"  # with DJANGO_DEBUG=false
DEFAULT_DB = "couponrush_bench_expiry"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/9"  # the settings want one; the sweep never connects to it
RSS_INTERVAL = 0.5


class Interrupted(Exception):
    """Raised by the SIGINT / SIGTERM handler."""


def mib(kib: float | None) -> str:
    return "-" if kib is None else f"{kib / 1024:.1f}"


def vmrss_kib(pid: int | str = "self") -> int | None:
    """VmRSS of a process in KiB (None once it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError, ValueError):
        return None
    return None


# ---------------------------------------------------------------------------------------------------------
# The child processes: the measured work, in a fresh interpreter (nothing the bench did inflates its memory)


def _emit(record: dict[str, Any]) -> None:
    sys.stdout.write("@@" + json.dumps(record) + "\n")
    sys.stdout.flush()


def child_main(kind: str, batch_size: int | None) -> int:
    import django

    django.setup()
    from array import array

    from django.db import connection, transaction
    from django.utils import timezone

    from coupons import compensation
    from coupons.models import Coupon, CouponStatus
    from coupons.services import coupon_settle

    connection.ensure_connection()
    _emit({"event": "ready", "rss_kib": vmrss_kib(), "maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss})
    result: dict[str, Any] = {"event": "done", "kind": kind}
    if kind == "sweep":
        if batch_size:
            compensation.BATCH_SIZE = batch_size  # read by _run_batches at each batch
        durations = array("d")  # 8 bytes per batch: the timing itself does not grow the heap noticeably

        def timer(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return execute(sql, params, many, context)
            finally:
                if sql == compensation._EXPIRE_SQL:
                    durations.append(time.perf_counter() - t0)

        # The sweep's other connections (compensation.SWEEP_CONNECTIONS) are opened in its threads: time theirs too.
        from django.db.backends.signals import connection_created

        def time_new_connection(sender: Any, connection: Any, **kwargs: Any) -> None:
            if timer not in connection.execute_wrappers:
                connection.execute_wrappers.append(timer)

        connection_created.connect(time_new_connection)
        t0 = time.perf_counter()
        with connection.execute_wrapper(timer):
            report = compensation.expire_and_lapse_due(max_seconds=3600)
        elapsed = time.perf_counter() - t0
        result.update(expired=report.expired, lapsed=report.lapsed, batches=report.batches,
                      finished=report.finished, batch_size=compensation.BATCH_SIZE,
                      connections=getattr(compensation, "SWEEP_CONNECTIONS", 1),
                      batch_ms=[round(d * 1000, 2) for d in durations])
    elif kind == "baseline":
        now = timezone.now()
        cutoff = now - timedelta(seconds=1)
        rows = expired = 0
        t0 = time.perf_counter()
        for coupon in Coupon.objects.filter(status=CouponStatus.ACTIVE, expires_at__lte=cutoff).iterator():
            with transaction.atomic():
                coupon_settle(coupon=coupon, now=now, source="compensation")
            rows += 1
            expired += coupon.status == CouponStatus.EXPIRED
        elapsed = time.perf_counter() - t0
        result.update(rows=rows, expired=expired)
    else:
        raise SystemExit(f"unknown child kind {kind!r}")
    result.update(elapsed_s=round(elapsed, 3), rss_end_kib=vmrss_kib(),
                  maxrss_kib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    _emit(result)
    return 0


def _child_setup() -> None:
    """Between fork and exec: have Linux SIGTERM the child if the bench dies."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, int(signal.SIGTERM), 0, 0, 0)  # PR_SET_PDEATHSIG


# ---------------------------------------------------------------------------------------------------------
# Running a child and watching it


@dataclass
class Watch:
    records: list[dict[str, Any]] = field(default_factory=list)
    rss: list[tuple[float, int]] = field(default_factory=list)  # (seconds since the child was ready, KiB)
    progress: list[tuple[float, int]] = field(default_factory=list)  # (seconds since ready, coupons expired)
    ready_at: float | None = None
    poll_ms: list[float] = field(default_factory=list)
    stderr: str = ""


CURRENT_CHILD: list[subprocess.Popen[bytes]] = []


def run_child(kind: str, args: argparse.Namespace, env: dict[str, str], campaign_id: int, total: int) -> Watch:
    """Start `kind` in a child, sample its RSS every 0.5 s and the campaign's expired coupons every --poll s."""
    from coupons.models import Coupon

    argv = [sys.executable, str(Path(__file__).resolve()), "--child", kind]
    if args.batch_size:
        argv += ["--batch-size", str(args.batch_size)]
    watch = Watch()
    proc = subprocess.Popen(argv, cwd=BASE_DIR, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True, preexec_fn=_child_setup)  # noqa: PLW1509
    CURRENT_CHILD.append(proc)
    ready = threading.Event()

    def read_stdout() -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.decode(errors="replace").rstrip()
            if line.startswith("@@"):
                record = json.loads(line[2:])
                if record["event"] == "ready":
                    watch.ready_at = time.monotonic()
                    ready.set()
                watch.records.append(record)
            elif line:
                print(f"    [{kind}] {line}", flush=True)

    def read_stderr() -> None:
        assert proc.stderr is not None
        watch.stderr = proc.stderr.read().decode(errors="replace")

    threads = [threading.Thread(target=read_stdout, daemon=True), threading.Thread(target=read_stderr, daemon=True)]
    for t in threads:
        t.start()
    log(f"{kind}: child pid {proc.pid} started: {' '.join(argv[1:])}")
    while not ready.wait(0.1):
        if proc.poll() is not None:
            break
    if watch.ready_at is None:
        for t in threads:
            t.join(timeout=5)
        raise BenchError(f"{kind} child exited with code {proc.returncode} before starting:\n{watch.stderr[-3000:]}")
    log(f"{kind}: child ready (RSS {mib(watch.records[0]['rss_kib'])} MiB after django.setup()); working ...")
    next_poll = watch.ready_at + args.poll
    while proc.poll() is None:
        now = time.monotonic()
        rss = vmrss_kib(proc.pid)
        if rss is not None:
            watch.rss.append((round(now - watch.ready_at, 2), rss))
        if args.poll > 0 and now >= next_poll:
            next_poll += args.poll
            t0 = time.monotonic()
            count = Coupon.objects.filter(campaign_id=campaign_id, status="expired").count()
            watch.poll_ms.append((time.monotonic() - t0) * 1000)
            at = now - watch.ready_at
            watch.progress.append((round(at, 2), count))
            log(f"{kind}: {count:,} / {total:,} expired ({100 * count / max(total, 1):.0f}%), "
                f"{count / max(at, 1e-9):,.0f}/s, RSS {mib(rss)} MiB")
        time.sleep(RSS_INTERVAL)
    for t in threads:
        t.join(timeout=10)
    CURRENT_CHILD.remove(proc)
    done = next((r for r in watch.records if r["event"] == "done"), None)
    if proc.returncode != 0 or done is None:
        raise BenchError(f"{kind} child exited with code {proc.returncode}:\n{watch.stderr[-3000:]}")
    watch.progress.append((done["elapsed_s"], Coupon.objects.filter(campaign_id=campaign_id, status="expired").count()))
    return watch


def _time_at_fraction(progress: list[tuple[float, int]], target: float) -> float | None:
    """When the count reached `target`, interpolated between polls (the first poll is at time 0, count 0)."""
    prev_t, prev_c = 0.0, 0
    for t, c in progress:
        if c >= target:
            if c == prev_c:
                return t
            return prev_t + (target - prev_c) / (c - prev_c) * (t - prev_t)
        prev_t, prev_c = t, c
    return None


def memory_figures(watch: Watch, done: dict[str, Any], total: int) -> dict[str, Any]:
    ready = watch.records[0]
    samples = [kib for _, kib in watch.rss]
    t10 = _time_at_fraction(watch.progress, 0.1 * total)
    if t10 is None:
        t10 = 0.1 * done["elapsed_s"]
    early = [kib for t, kib in watch.rss if t <= t10]
    return {
        "start_kib": ready["rss_kib"],  # after django.setup() and the connection, before the work
        "end_kib": done["rss_end_kib"],
        "peak_sampled_kib": max(samples) if samples else None,
        "peak_first_10pct_kib": max(early) if early else ready["rss_kib"],
        "first_10pct_until_s": round(t10, 2),
        "ru_maxrss_kib": done["maxrss_kib"],  # the child's own peak (getrusage, KiB on Linux)
        "samples": len(samples),
        "sample_interval_s": RSS_INTERVAL,
    }


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)


# ---------------------------------------------------------------------------------------------------------
# Summary


def print_summary(s: dict[str, Any]) -> None:
    cfg, sweep, base = s["config"], s["sweep"], s.get("baseline")
    print()
    print(f"expiry sweep  {s['timestamp']}  {s['host']['cpus']} CPUs, load average before "
          f"{s['host']['loadavg_before']}  PostgreSQL {s['host']['postgres']}")
    print(f"  {cfg['coupons']:,} due coupons for the sweep (batch size {sweep['batch_size']}), "
          f"{cfg['baseline']:,} for the row-by-row baseline")
    header = (f"  {'run':<24} {'coupons':>10} {'seconds':>9} {'coupons/s':>10} {'batches':>8} "
              f"{'RSS start':>9} {'@10%':>7} {'peak':>7} {'end':>7} {'maxrss':>7}  (MiB)")
    print(header)
    print("  " + "-" * (len(header) - 2))
    for name, run in (("sweep (worker)", sweep), ("row by row (baseline)", base)):
        if not run:
            print(f"  {name:<24} {'(not run)':>10}")
            continue
        m = run["rss"]
        print(f"  {name:<24} {run['expired']:>10,} {run['elapsed_s']:>9.2f} {run['coupons_per_s']:>10,.0f} "
              f"{run.get('batches', '-'):>8} {mib(m['start_kib']):>9} {mib(m['peak_first_10pct_kib']):>7} "
              f"{mib(m['peak_sampled_kib']):>7} {mib(m['end_kib']):>7} {mib(m['ru_maxrss_kib']):>7}")
    print()
    r = s["ratios"]
    for name, run in (("sweep", sweep), ("row by row", base)):
        if run and run.get("backend_cpu_us_per_coupon"):
            print(f"  PostgreSQL CPU, {name:<10} {run['backend_cpu_us_per_coupon']} us per coupon = "
                  f"{run['coupons_per_backend_cpu_s']:,.0f} coupons per CPU second (load-independent)")
    if r.get("sweep_over_baseline"):
        print(f"  sweep / row by row         {r['sweep_over_baseline']:.1f}x coupons/s")
        print(f"  {'row by row for ' + format(cfg['coupons'], ','):<26} {r['baseline_extrapolated_s']:,.0f} s "
              f"({r['baseline_extrapolated_s'] / 60:.1f} min, extrapolated) vs the sweep's {sweep['elapsed_s']:.1f} s")
    b = sweep["batch_ms"]
    print(f"  batch statement            p50 {b['p50']} ms, p95 {b['p95']} ms, max {b['max']} ms "
          f"({b['count']} expiry statements of up to {sweep['batch_size']} rows; 'batches' also counts "
          f"the hold-lapse statement)")
    m = sweep["rss"]
    print(f"  sweep RSS growth           {mib(m['peak_sampled_kib'] - m['peak_first_10pct_kib'])} MiB between the "
          f"peak of the first 10% ({m['first_10pct_until_s']} s) and the peak of the whole run")
    e = s["explain"]
    print(f"  EXPLAIN ANALYZE 1 batch    {e['execution_ms']} ms, due rows by: {e['due_scan']} "
          f"(coupon_active_expiry {'used' if e['uses_coupon_active_expiry'] else 'NOT used'})")
    rerun = s.get("second_sweep")
    if rerun:
        print(f"  second sweep at once       {rerun['expired']} expired in {rerun['elapsed_s']:.2f} s "
              f"({rerun['batches']} batch(es)); after VACUUM: {rerun['after_vacuum_s']:.3f} s")
    for label, c in s["checks"]["campaigns"].items():
        print(f"  check {label:<20} {c['expired_events']:,} 'expired' events of {c['expected_expired_events']:,}, "
              f"{c['left_active']} left active, {c['sql_check_wrong']} wrong of {c['coupons']:,}, "
              f"fold: {c['replay_disagreements']} of {c['replay_checked']:,} disagree -> "
              f"{'OK' if c['ok'] else 'FAILED'}")
    st = s["setup"]
    print(f"  set-up                     insert {st['insert_sweep']['seconds']:.1f} s "
          f"({cfg['coupons'] / max(st['insert_sweep']['seconds'], 1e-9):,.0f} coupons+events/s), "
          f"VACUUM ANALYZE {st['vacuum_sweep_s']:.1f} s")
    print(f"  progress polls             {sweep['poll']['count']} counts of the sweep's expired coupons, "
          f"{_fmt_ms(sweep['poll']['mean_ms'])} each on average")
    print(f"  results                    {s.get('results_file', '-')}")
    print(f"  database                   {s.get('database_fate', '-')}")
    print(flush=True)


def _fmt_ms(value: float | None) -> str:
    return "-" if value is None else f"{value} ms"


def write_results(summary: dict[str, Any]) -> Path:
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"expiry_sweep-{datetime.now().strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(summary, indent=2) + "\n")
    return path


def git_revision() -> str | None:
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=BASE_DIR, capture_output=True, text=True,
                             check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=BASE_DIR,
                               capture_output=True, text=True, check=True).stdout.strip()
        return rev + ("+local-changes" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return None


# ---------------------------------------------------------------------------------------------------------
# Main


def run_figures(watch: Watch, total: int, kind: str) -> dict[str, Any]:
    done = next(r for r in watch.records if r["event"] == "done")
    out = {k: v for k, v in done.items() if k not in ("event", "batch_ms", "maxrss_kib", "rss_end_kib")}
    out["coupons_per_s"] = round(done["expired"] / max(done["elapsed_s"], 1e-9), 1)
    out["rss"] = memory_figures(watch, done, total)
    out["rss_timeline"] = watch.rss
    out["progress"] = watch.progress
    out["poll"] = {"count": len(watch.poll_ms), "mean_ms": round(sum(watch.poll_ms) / len(watch.poll_ms), 1)
                   if watch.poll_ms else None}
    if kind == "sweep":
        batch = done["batch_ms"]
        out["batch_ms"] = {"count": len(batch), "p50": _pct(batch, 0.5), "p95": _pct(batch, 0.95),
                           "max": round(max(batch), 2) if batch else None,
                           "mean": round(sum(batch) / len(batch), 2) if batch else None,
                           "first_10": batch[:10], "last_10": batch[-10:]}
    m = out["rss"]
    log(f"{kind}: {done['expired']:,} expired in {done['elapsed_s']:.2f}s = {out['coupons_per_s']:,.0f} coupons/s; "
        f"RSS start {mib(m['start_kib'])}, peak in the first 10% {mib(m['peak_first_10pct_kib'])}, peak "
        f"{mib(m['peak_sampled_kib'])}, end {mib(m['end_kib'])}, ru_maxrss {mib(m['ru_maxrss_kib'])} MiB")
    return out


def add_backend_cpu(figures: dict[str, Any], cpu: Any) -> None:
    """PostgreSQL's CPU per coupon during a run (all backends of the bench's database), and what that makes per
    CPU core: the figure that other jobs on the machine hardly move."""
    n = figures.get("expired") or 0
    figures["backend_cpu_s"] = cpu.seconds
    if cpu.seconds and n:
        figures["backend_cpu_us_per_coupon"] = round(cpu.seconds / n * 1e6, 1)
        figures["coupons_per_backend_cpu_s"] = round(n / cpu.seconds, 1)
        log(f"PostgreSQL backends: {cpu.seconds:.2f} CPU s = {figures['backend_cpu_us_per_coupon']} us per coupon "
            f"({figures['coupons_per_backend_cpu_s']:,.0f} coupons per CPU second)")
    elif cpu.error:
        log(f"PostgreSQL backend CPU not measured: {cpu.error}")


def second_sweep() -> dict[str, Any]:
    """The next every-minute run right after the mass expiry (nothing due; dead index entries not vacuumed yet),
    then the same after VACUUM."""
    from coupons.compensation import expire_and_lapse_due

    t0 = time.perf_counter()
    report = expire_and_lapse_due(max_seconds=60)
    first = time.perf_counter() - t0
    vacuum_analyze("coupons_coupon")
    t0 = time.perf_counter()
    again = expire_and_lapse_due(max_seconds=60)
    after = time.perf_counter() - t0
    log(f"second sweep right after: {report.expired} expired in {first:.2f}s; after VACUUM: {again.expired} in "
        f"{after:.3f}s")
    return {"expired": report.expired, "batches": report.batches, "elapsed_s": round(first, 3),
            "after_vacuum_expired": again.expired, "after_vacuum_s": round(after, 4)}


def bench(args: argparse.Namespace, state: dict[str, Any]) -> dict[str, Any]:
    loadavg = [round(x, 2) for x in os.getloadavg()]
    server = start_server()
    state["server"] = server
    create_database(server.url, args.database)
    state["database"] = args.database
    db_url = with_db(server.url, args.database)
    log(f"database {args.database} created on {redact(server.url)}")

    env = dict(os.environ)
    env.update(DJANGO_SETTINGS_MODULE=SETTINGS_MODULE, DJANGO_DEBUG="false", DATABASE_URL=db_url,
               REDIS_URL=os.environ.get("REDIS_URL") or DEFAULT_REDIS_URL, PYTHONUNBUFFERED="1")
    env.pop("CELERY_BROKER_URL", None)
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=BASE_DIR, env=env,
                          capture_output=True, text=True, start_new_session=True, check=False)
    if proc.returncode != 0:
        raise BenchError(f"manage.py migrate failed:\n{(proc.stderr + proc.stdout)[-3000:]}")
    log(f"manage.py migrate: {time.monotonic() - t0:.1f}s")
    os.environ.update({k: env[k] for k in ("DJANGO_SETTINGS_MODULE", "DJANGO_DEBUG", "DATABASE_URL", "REDIS_URL")})
    import django

    django.setup()
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SHOW server_version")
        server.server_version = cursor.fetchone()[0]
        cursor.execute("SHOW shared_buffers")
        shared_buffers = cursor.fetchone()[0]

    setup: dict[str, Any] = {}
    sweep_campaign = create_campaign("bench expiry sweep", args.coupons)
    log(f"campaign {sweep_campaign} (sweep): inserting {args.coupons:,} due coupons in chunks of {args.chunk:,} ...")
    setup["insert_sweep"] = insert_due(sweep_campaign, args.coupons, args.chunk, "sweep set")
    setup["vacuum_sweep_s"] = vacuum_analyze("coupons_coupon", "coupons_couponevent")
    explain = explain_batch(args.batch_size)
    vacuum_analyze("coupons_coupon")  # the rolled-back batch left dead row versions

    with connection.cursor() as cursor:  # the progress counts run on it: not the sweep's work
        cursor.execute("SELECT pg_backend_pid()")
        own_pid = cursor.fetchone()[0]
    with BackendCPU(db_url, exclude=(own_pid,)) as cpu:
        watch = run_child("sweep", args, env, sweep_campaign, args.coupons)
    sweep = run_figures(watch, args.coupons, "sweep")
    add_backend_cpu(sweep, cpu)
    rerun = second_sweep()

    base = None
    base_campaign = None
    if args.baseline:
        base_campaign = create_campaign("bench expiry baseline", args.baseline)
        log(f"campaign {base_campaign} (baseline): inserting {args.baseline:,} due coupons ...")
        setup["insert_baseline"] = insert_due(base_campaign, args.baseline, args.chunk, "baseline set")
        setup["vacuum_baseline_s"] = vacuum_analyze("coupons_coupon", "coupons_couponevent")
        with BackendCPU(db_url, exclude=(own_pid,)) as cpu:
            watch = run_child("baseline", args, env, base_campaign, args.baseline)
        base = run_figures(watch, args.baseline, "baseline")
        add_backend_cpu(base, cpu)

    campaigns = {"sweep": (sweep_campaign, args.coupons)}
    if base_campaign is not None:
        campaigns["baseline"] = (base_campaign, args.baseline)
    checks = check(campaigns, args.sample)

    ratios: dict[str, Any] = {}
    if base and base["coupons_per_s"]:
        ratios["sweep_over_baseline"] = round(sweep["coupons_per_s"] / base["coupons_per_s"], 2)
        if sweep.get("backend_cpu_us_per_coupon") and base.get("backend_cpu_us_per_coupon"):
            ratios["backend_cpu_per_coupon_baseline_over_sweep"] = round(
                base["backend_cpu_us_per_coupon"] / sweep["backend_cpu_us_per_coupon"], 2)
        ratios["baseline_extrapolated_s"] = round(args.coupons / base["coupons_per_s"], 1)
    return {
        "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
        "git": git_revision(),
        "host": {"cpus": os.cpu_count(), "loadavg_before": loadavg, "loadavg_after": [round(x, 2) for x in
                 os.getloadavg()], "python": platform.python_version(), "postgres": server.server_version,
                 "shared_buffers": shared_buffers},
        "config": {"coupons": args.coupons, "baseline": args.baseline, "batch_size_option": args.batch_size,
                   "chunk": args.chunk, "settings": SETTINGS_MODULE, "debug": False,
                   "database": redact(db_url), "embedded": server.embedded is not None,
                   "campaigns": {"sweep": sweep_campaign, "baseline": base_campaign},
                   "due_spread": f"expired between {SPREAD + EXPIRED_AGO} and {EXPIRED_AGO} ago, in id order"},
        "setup": setup,
        "explain": explain,
        "sweep": sweep,
        "second_sweep": rerun,
        "baseline": base,
        "ratios": ratios,
        "checks": checks,
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--coupons", type=int, default=1_000_000, help="due coupons for the sweep (1000000)")
    parser.add_argument("--baseline", type=int, default=20_000,
                        help="due coupons expired row by row for the baseline (20000; 0: skip)")
    parser.add_argument("--batch-size", type=int, help="override coupons.compensation.BATCH_SIZE in the sweep")
    parser.add_argument("--database", default=DEFAULT_DB, help=f"the bench's own database ({DEFAULT_DB})")
    parser.add_argument("--keep", action="store_true", help="keep the database at the end")
    parser.add_argument("--chunk", type=int, default=100_000, help="coupons per insert statement (100000)")
    parser.add_argument("--poll", type=float, default=2.0, help="seconds between progress counts (2; 0: none, "
                        "the first 10%% is then taken by time)")
    parser.add_argument("--sample", type=int, default=10_000,
                        help="coupons whose events are folded and compared (10000; all when fewer)")
    parser.add_argument("--no-results", dest="results", action="store_false", help="do not write the JSON")
    parser.add_argument("--child", choices=["sweep", "baseline"], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.coupons < 1 or args.baseline < 0 or (args.batch_size is not None and args.batch_size < 1):
        parser.error("--coupons must be >= 1, --baseline >= 0, --batch-size >= 1")
    if args.database in ("postgres", "template0", "template1"):
        parser.error("--database must name a database of the bench's own")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        return child_main(args.child, args.batch_size)

    def handler(signum: int, frame: Any) -> None:
        raise Interrupted(signal.Signals(signum).name)

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)
    state: dict[str, Any] = {}
    summary: dict[str, Any] | None = None
    exit_code = 0
    try:
        summary = bench(args, state)
    except Interrupted as exc:
        log(f"{exc}: stopping ...")
        exit_code = 130
    except BenchError as exc:
        log(f"ERROR: {exc}")
        exit_code = 1
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        for proc in list(CURRENT_CHILD):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        fate = None
        if "django" in sys.modules:
            with contextlib.suppress(Exception):
                from django.db import connections

                connections.close_all()
        server = state.get("server")
        if server is not None and state.get("database"):
            if args.keep:
                fate = f"{args.database} kept (--keep): drop it with DROP DATABASE {args.database}"
            else:
                try:
                    drop_database(server.url, args.database)
                    fate = f"{args.database} dropped"
                except Exception as exc:  # noqa: BLE001 - reported, not fatal
                    fate = f"{args.database} NOT dropped: {exc}"
            log(f"database {fate}")
        if server is not None and server.embedded is not None:
            log("stopping the embedded PostgreSQL ...")
            server.stop()
    if summary is not None:
        summary["database_fate"] = fate
        if args.results:
            summary["results_file"] = rel(write_results(summary))
        print_summary(summary)
        if not summary["checks"]["ok"]:
            exit_code = 2
    return exit_code


if __name__ == "__main__":
    sys.exit(main())
