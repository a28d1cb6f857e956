"""Unique codes (issue 19): generate 1,000,000 codes into PostgreSQL and export them as CSV, in how much memory.

    .venv/bin/python bench/codes_bench.py [--codes 1000000] [--chunk 10000] [--keep]

A benchmark, not a test. In one run it

  1. creates a database of its own, `couponrush_bench_codes` (--database), on the server of DATABASE_URL, or in an
     embedded PostgreSQL under var/bench/pg-codes when DATABASE_URL is unset, and runs `manage.py migrate` on it
     (settings config.settings.dev with DJANGO_DEBUG=false; nothing here talks to Redis);
  2. creates a codes campaign and a pending batch of N codes (coupons.code_batches.code_batch_create);
  3. generates it in a child process (a fresh interpreter, `codes_bench.py --child generate`) with the worker's
     own function, coupons.code_batches.code_batch_generate (what the Celery task and `manage.py codes_generate`
     run): the child reports its time, its RSS before the work (after Django's start-up) and its peak RSS after
     (resource.getrusage ru_maxrss), and VmRSS at every 10% of the batch; PostgreSQL's backend CPU is sampled;
  4. exports the campaign in another child (`--child export`) with coupons.code_batches.unique_codes_csv (what
     `manage.py codes_export` and the admin download stream), the CSV written to /dev/null: rows/s and RSS;
  5. downloads the campaign's CSV from the admin (a staff session) through the run command's web server
     (`python -m config.server`, 2 workers): rows/s, the server's RSS (master + workers) before and at most during;
  6. runs the baseline, a check-then-insert loop (--baseline M codes: a random code, exists(), INSERT, a
     transaction each), and with --variant-rounds R the insert variants (code order or not, blocks written while
     the next is built or not, one, two or three writers, ...), R alternating rounds of --variant-codes each;
  7. checks: exactly N rows, N distinct codes, N CSV rows, a sample of 20,000 codes that pass the MAC check;
  8. prints a summary and writes the JSON to bench/results/codes_bench-<timestamp>.json; drops the database
     (--keep keeps it), also on Ctrl-C.

Exit code 0: ran and every check passed; 2: ran but a check failed; 1: could not run.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import signal
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
from common import BackendCPU, BenchError, log, redact  # noqa: E402
from expiry_setup import _admin_connect, with_db  # noqa: E402
from expiry_sweep import vmrss_kib  # noqa: E402

RESULTS_DIR = BASE_DIR / "bench" / "results"
SETTINGS_MODULE = "config.settings.dev"  # with DJANGO_DEBUG=false
DEFAULT_DB = "couponrush_bench_codes"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/9"  # the settings want one; nothing connects to it
DB_MARKER = "created by bench/codes_bench.py; dropped at the end of its run"
GOALS = {"generate_codes_per_s": 100_000, "export_rows_per_s": 200_000}


def _setup_django() -> None:
    import django

    django.setup()


def _peak_kib() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux


# ---------------------------------------------------------------------------------------------------------
# The child processes: the measured work in a fresh interpreter


VARIANTS = {
    "shipped": "as coupons.code_batches does it: code order, blocks of 1,000 written while the next is built",
    "unordered": "the codes in serial order (random places in the unique index)",
    "one-block": "each chunk's 10,000 codes built first, then written in one piece (no overlap)",
    "hmac-digest": "the MAC by hmac.digest for every code (the generator before coupons.unique_codes' hash states)",
    "one-writer": "one writer: the chunks one after another on one connection (the generator before two writers)",
    "three-writers": "three writers at once (one more than the shipped two)",
    "async-commit": "synchronous_commit off on the writers' connections (a chunk's commit does not wait for its WAL)",
}


def _unique_codes_by_hmac_digest(prefix: str, serials: Any) -> list[str]:
    """coupons.unique_codes.unique_codes as it was before its MAC used precomputed hash states: the same codes."""
    import hmac

    from django.conf import settings

    from coupons import unique_codes as uc

    key, head, tag = uc._key(settings.SECRET_KEY), f"{prefix}-" if prefix else "", f"{prefix}:".encode()
    digest, from_bytes, triples = hmac.digest, int.from_bytes, uc._TRIPLES
    out = []
    for serial in serials:
        if not 0 <= serial < uc.SERIALS:
            raise ValueError("serial out of range")
        scrambled = (serial * uc._SCRAMBLE + uc._OFFSET) % uc.SERIALS
        mac = from_bytes(digest(key, tag + str(serial).encode(), "sha256")[:8], "big") % uc._MACS
        a, b = triples[scrambled // uc._TRIPLE], triples[scrambled % uc._TRIPLE]
        c, d = triples[mac // uc._TRIPLE], triples[mac % uc._TRIPLE]
        out.append(f"{head}{a}{b[0]}-{b[1:]}{c[:2]}-{c[2]}{d}")
    return out


def child_generate(batch_id: int, chunk: int, variant: str = "shipped") -> dict[str, Any]:
    _setup_django()
    from coupons import code_batches
    from coupons.code_batches import code_batch_generate
    from coupons.models import CodeBatch

    writers = code_batches.WRITERS
    if variant == "one-writer":
        writers = 1
    elif variant == "three-writers":
        writers = 3
    if variant == "async-commit":
        from django.db.backends.signals import connection_created

        def async_commit(sender: Any, connection: Any, **kwargs: Any) -> None:
            with connection.cursor() as cursor:
                cursor.execute("SET synchronous_commit TO off")

        connection_created.connect(async_commit, weak=False)
    elif variant == "unordered":
        code_batches.in_code_order = list  # type: ignore[assignment]
    elif variant == "one-block":
        code_batches.COPY_BLOCK = chunk
    elif variant == "hmac-digest":
        code_batches.unique_codes = _unique_codes_by_hmac_digest  # type: ignore[assignment]

    batch = CodeBatch.objects.get(pk=batch_id)  # connection and models warm: the "before" is the worker at rest
    before_rss, before_peak = vmrss_kib(), _peak_kib()
    samples: list[dict[str, Any]] = []
    step = max(batch.requested // 10, 1)
    start, cpu_start = time.perf_counter(), time.process_time()

    def progress(b: Any) -> None:
        if b.inserted // step > len(samples) - 1 or b.inserted == b.requested:
            samples.append({"inserted": b.inserted, "s": round(time.perf_counter() - start, 2),
                            "vmrss_kib": vmrss_kib()})

    done = code_batch_generate(batch_id=batch_id, chunk=chunk, writers=writers, progress=progress)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    return {"codes": done.inserted, "seconds": round(seconds, 3), "codes_per_s": round(done.inserted / seconds),
            "python_cpu_us_per_code": round(cpu / done.inserted * 1e6, 2),
            "rss_before_kib": before_rss, "peak_before_kib": before_peak, "peak_after_kib": _peak_kib(),
            "vmrss_after_kib": vmrss_kib(), "samples": samples}


def child_baseline(campaign_id: int, n: int) -> dict[str, Any]:
    """The check-then-insert loop the service does not use: a random code, exists(), then INSERT, a
    transaction each (what a naive generator does to avoid collisions)."""
    _setup_django()
    from django.db import transaction

    from coupons.codes import new_codes
    from coupons.models import CodeBatch, CodeBatchSource, CodeBatchState, UniqueCode

    batch = CodeBatch.objects.create(campaign_id=campaign_id, source=CodeBatchSource.GENERATED, requested=n,
                                     state=CodeBatchState.RUNNING, created_by="bench baseline")
    start = time.perf_counter()
    made = 0
    while made < n:
        code = new_codes(1)[0]
        with transaction.atomic():
            if UniqueCode.objects.filter(code=code).exists():
                continue
            UniqueCode.objects.create(code=code, campaign_id=campaign_id, batch=batch)
        made += 1
    seconds = time.perf_counter() - start
    return {"codes": made, "seconds": round(seconds, 3), "codes_per_s": round(made / seconds)}


def child_export(campaign_id: int) -> dict[str, Any]:
    _setup_django()
    from coupons.code_batches import unique_codes_csv
    from coupons.models import UniqueCode

    UniqueCode.objects.filter(campaign_id=campaign_id).first()  # connection warm
    before_rss, before_peak = vmrss_kib(), _peak_kib()
    rows = size = 0
    start = time.perf_counter()
    with open(os.devnull, "w") as sink:
        for part in unique_codes_csv(campaign_id=campaign_id):
            sink.write(part)
            rows += part.count("\n")
            size += len(part)
    seconds = time.perf_counter() - start
    return {"rows": rows - 1, "bytes": size, "seconds": round(seconds, 3), "rows_per_s": round((rows - 1) / seconds),
            "rss_before_kib": before_rss, "peak_before_kib": before_peak, "peak_after_kib": _peak_kib()}


def session_rss_kib(pid: int) -> int:
    """VmRSS of a process and its children (the web server's master and workers)."""
    total = vmrss_kib(pid) or 0
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except FileNotFoundError:
        return total
    return total + sum(vmrss_kib(child) or 0 for child in children)


def download_through_server(campaign_id: int, env: dict[str, str]) -> dict[str, Any]:
    """GET the admin's campaign CSV from the run command's web server (2 workers) as a staff user: rows/s, and
    the server's RSS (master + workers) before and at its highest while it streams."""
    import http.client
    import threading

    from django.conf import settings
    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
    from django.contrib.auth.models import User
    from django.contrib.sessions.backends.db import SessionStore

    user = User.objects.create_superuser("bench-operator", password="unused")
    session = SessionStore()
    session.update({SESSION_KEY: str(user.pk), BACKEND_SESSION_KEY: "django.contrib.auth.backends.ModelBackend",
                    HASH_SESSION_KEY: user.get_session_auth_hash()})
    session.create()
    cookie = f"{settings.SESSION_COOKIE_NAME}={session.session_key}"
    port = common.free_port()
    argv = common.resolve(common.devstack.web_command(port))
    proc = subprocess.Popen(argv, cwd=BASE_DIR, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while not common.http_ok(f"http://127.0.0.1:{port}/healthz"):
            if time.monotonic() > deadline or proc.poll() is not None:
                raise BenchError("the web server did not start")
            time.sleep(0.2)
        before = session_rss_kib(proc.pid)
        peak = [before]
        done = threading.Event()

        def sample() -> None:
            while not done.wait(0.1):
                peak[0] = max(peak[0], session_rss_kib(proc.pid))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        start = time.perf_counter()
        connection.request("GET", f"/admin/coupons/codebatch/campaign/{campaign_id}/codes.csv",
                           headers={"Cookie": cookie})
        answer = connection.getresponse()
        if answer.status != 200:
            raise BenchError(f"the download answered {answer.status}")
        rows = size = 0
        while part := answer.read(1 << 16):
            rows += part.count(b"\n")
            size += len(part)
        seconds = time.perf_counter() - start
        done.set()
        sampler.join()
        connection.close()
        return {"rows": rows - 1, "bytes": size, "seconds": round(seconds, 3),
                "rows_per_s": round((rows - 1) / seconds),
                "chunked": answer.getheader("Transfer-Encoding") == "chunked",
                "server_rss_before_kib": before, "server_rss_peak_kib": peak[0]}
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # the server's session: master and workers
        proc.wait(15)


def run_child(args: list[str], env: dict[str, str]) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, __file__, "--child", *args], cwd=BASE_DIR, env=env, capture_output=True,
                          text=True, check=False)
    if proc.returncode != 0:
        raise BenchError(f"child {args[0]} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------------------------------------------
# The bench


def create_database(server_url: str, name: str) -> None:
    """Create the bench's database; one left by an earlier run (marked) is dropped first, any other refused."""
    from psycopg import sql

    with _admin_connect(server_url) as conn:
        row = conn.execute("SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = %s",
                           (name,)).fetchone()
        if row is not None:
            if row[0] != DB_MARKER:
                raise BenchError(f"database {name} exists and was not created by this bench: pick another with "
                                 "--database, or drop it yourself")
            conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        conn.execute(sql.SQL("COMMENT ON DATABASE {} IS {}").format(sql.Identifier(name), sql.Literal(DB_MARKER)))


def drop_database(server_url: str, name: str) -> None:
    from psycopg import sql

    with _admin_connect(server_url) as conn:
        row = conn.execute("SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = %s",
                           (name,)).fetchone()
        if row is not None and row[0] == DB_MARKER:
            conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


def bench(args: argparse.Namespace, state: dict[str, Any]) -> dict[str, Any]:
    loadavg = [round(x, 2) for x in os.getloadavg()]
    server_url = os.environ.get("DATABASE_URL") or ""
    if server_url:
        log(f"PostgreSQL: the server of DATABASE_URL {redact(server_url)}")
    else:
        log("DATABASE_URL unset: starting an embedded PostgreSQL in var/bench/pg-codes ...")
        pg = common.embedded_postgres_server(common.BENCH_VAR / "pg-codes")
        server_url = pg.start()
        state["embedded"] = pg
    state["server_url"] = server_url
    create_database(server_url, args.database)
    state["database"] = args.database
    db_url = with_db(server_url, args.database)
    env = dict(os.environ)
    env.update(DJANGO_SETTINGS_MODULE=SETTINGS_MODULE, DJANGO_DEBUG="false", DATABASE_URL=db_url,
               REDIS_URL=os.environ.get("REDIS_URL") or DEFAULT_REDIS_URL, PYTHONUNBUFFERED="1")
    proc = subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=BASE_DIR, env=env,
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise BenchError(f"manage.py migrate failed:\n{(proc.stderr + proc.stdout)[-3000:]}")
    os.environ.update({k: env[k] for k in ("DJANGO_SETTINGS_MODULE", "DJANGO_DEBUG", "DATABASE_URL", "REDIS_URL")})
    _setup_django()
    from datetime import timedelta
    from decimal import Decimal

    from django.db import connection
    from django.utils import timezone

    from campaigns.models import Campaign, CampaignKind
    from coupons.code_batches import code_batch_create
    from coupons.models import UniqueCode
    from coupons.unique_codes import canonical_unique_code

    now = timezone.now()
    campaign = Campaign.objects.create(name="bench codes", kind=CampaignKind.CODES, starts_at=now,
                                       ends_at=now + timedelta(days=30), total_stock=args.codes,
                                       discount_value=Decimal("10.00"), valid_days=30, published_at=now)
    batch = code_batch_create(campaign=campaign, count=args.codes, prefix="BENCH", created_by="bench")
    with connection.cursor() as cursor:
        cursor.execute("SHOW server_version")
        server_version = cursor.fetchone()[0]
        cursor.execute("SELECT pg_backend_pid()")
        own_pid = cursor.fetchone()[0]

    log(f"generating {args.codes:,} codes (batch {batch.pk}, chunks of {args.chunk:,}) in a child process ...")
    with BackendCPU(db_url, exclude=(own_pid,)) as cpu:
        generate = run_child(["generate", str(batch.pk), str(args.chunk)], env)
    generate["backend_cpu_s"] = cpu.seconds
    log(f"generated: {generate['codes_per_s']:,} codes/s; RSS {generate['rss_before_kib'] / 1024:.1f} MiB before, "
        f"peak {generate['peak_after_kib'] / 1024:.1f} MiB after")
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE coupons_uniquecode")
    log("exporting them in a child process ...")
    export = run_child(["export", str(campaign.pk)], env)
    log(f"exported: {export['rows_per_s']:,} rows/s; RSS {export['rss_before_kib'] / 1024:.1f} MiB before, "
        f"peak {export['peak_after_kib'] / 1024:.1f} MiB after")

    download = None
    if not args.no_download:
        log("downloading them from the admin through the run command's web server ...")
        download = download_through_server(campaign.pk, env)
        log(f"downloaded: {download['rows_per_s']:,} rows/s; the server's RSS "
            f"{download['server_rss_before_kib'] / 1024:.1f} MiB before, {download['server_rss_peak_kib'] / 1024:.1f} "
            f"MiB at most while streaming")
    baseline = None
    if args.baseline:
        log(f"baseline: {args.baseline:,} codes by a check-then-insert loop ...")
        baseline = run_child(["baseline", str(campaign.pk), str(args.baseline)], env)
        log(f"baseline: {baseline['codes_per_s']:,} codes/s")
    chosen = args.variants.split(",") if args.variants else list(VARIANTS)
    if set(chosen) - set(VARIANTS):
        raise BenchError(f"--variants: some of {', '.join(VARIANTS)}")
    variants: dict[str, list[int]] = {name: [] for name in chosen} if args.variant_rounds else {}
    variant_cpu: dict[str, list[float]] = {name: [] for name in VARIANTS}
    variant_py: dict[str, list[float]] = {name: [] for name in VARIANTS}
    for round_ in range(args.variant_rounds):
        names = chosen if round_ % 2 == 0 else list(reversed(chosen))  # alternate the order
        for name in names:
            extra = code_batch_create(campaign=campaign, count=args.variant_codes, created_by=f"bench {name}")
            with BackendCPU(db_url, exclude=(own_pid,)) as cpu:
                figures = run_child(["generate", str(extra.pk), str(args.chunk), name], env)
            variants[name].append(figures["codes_per_s"])
            variant_py[name].append(figures["python_cpu_us_per_code"])
            variant_cpu[name].append(round((cpu.seconds or 0) / args.variant_codes * 1e6, 2))
        log(f"variants, round {round_ + 1}: " + ", ".join(f"{n} {v[-1]:,}/s ({variant_py[n][-1]} us Python, "
                                                          f"{variant_cpu[n][-1]} us PostgreSQL CPU a code)"
                                                          for n, v in variants.items()))

    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*), count(DISTINCT code) FROM coupons_uniquecode WHERE batch_id = %s",
                       [batch.pk])
        rows, distinct = cursor.fetchone()
    sample = list(UniqueCode.objects.filter(batch=batch).order_by("?").values_list("code", flat=True)[:20_000])
    checks = {"rows": rows == args.codes, "distinct": distinct == args.codes, "exported": export["rows"] == args.codes,
              "downloaded": download is None or (download["rows"] == args.codes and download["chunked"]),
              "mac_sample": all(canonical_unique_code(code) == code for code in sample) and len(sample) > 0}
    return {
        "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
        "host": {"cpus": os.cpu_count(), "loadavg_before": loadavg,
                 "loadavg_after": [round(x, 2) for x in os.getloadavg()], "python": platform.python_version(),
                 "postgres": server_version},
        "config": {"codes": args.codes, "chunk": args.chunk, "database": redact(db_url),
                   "embedded": "embedded" in state},
        "generate": generate,
        "export": export,
        "download": download,
        "baseline_check_then_insert": baseline,
        "ratios": {"generate_over_check_then_insert": round(generate["codes_per_s"] / baseline["codes_per_s"], 1)}
        if baseline else {},
        "variants": {name: {"what": VARIANTS[name], "codes_per_s": rounds,
                            "median": sorted(rounds)[len(rounds) // 2],
                            "backend_cpu_us_per_code": variant_cpu[name], "python_cpu_us_per_code": variant_py[name]}
                     for name, rounds in variants.items()},
        "goals": GOALS,
        "checks": checks,
    }


def print_summary(s: dict[str, Any]) -> None:
    g, e = s["generate"], s["export"]
    mib = lambda kib: f"{(kib or 0) / 1024:.1f} MiB"  # noqa: E731
    print()
    print(f"{'':28}{'figure':>16}{'goal':>12}")
    print(f"{'generate codes/s':28}{g['codes_per_s']:>16,}{GOALS['generate_codes_per_s']:>12,}")
    print(f"{'export rows/s':28}{e['rows_per_s']:>16,}{GOALS['export_rows_per_s']:>12,}")
    print(f"{'generate RSS before -> peak':28}{mib(g['rss_before_kib']) + ' -> ' + mib(g['peak_after_kib']):>28}")
    print(f"{'export RSS before -> peak':28}{mib(e['rss_before_kib']) + ' -> ' + mib(e['peak_after_kib']):>28}")
    if s["download"]:
        d = s["download"]
        print(f"{'admin download rows/s':28}{d['rows_per_s']:>16,}")
        print(f"{'web server RSS before -> max':28}"
              f"{mib(d['server_rss_before_kib']) + ' -> ' + mib(d['server_rss_peak_kib']):>28}")
    if g.get("backend_cpu_s"):
        print(f"{'PostgreSQL CPU per code':28}{g['backend_cpu_s'] / g['codes'] * 1e6:>13.2f} us")
    print(f"{'worker CPU per code':28}{g['python_cpu_us_per_code']:>13.2f} us")
    print("VmRSS during generation (MiB): "
          + ", ".join(f"{x['inserted'] // 1000}k: {(x['vmrss_kib'] or 0) / 1024:.1f}" for x in g["samples"]))
    if s["baseline_check_then_insert"]:
        b = s["baseline_check_then_insert"]
        print(f"{'check-then-insert codes/s':28}{b['codes_per_s']:>16,}   (generate / it: "
              f"{s['ratios']['generate_over_check_then_insert']})")
    for name, v in s["variants"].items():
        print(f"variant {name:20}{v['median']:>16,}   rounds {', '.join(f'{x:,}' for x in v['codes_per_s'])}; "
              f"PostgreSQL us/code {', '.join(str(x) for x in v['backend_cpu_us_per_code'])}; "
              f"Python us/code {', '.join(str(x) for x in v['python_cpu_us_per_code'])}")
    print(f"checks: {s['checks']}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--codes", type=int, default=1_000_000, help="codes to generate and export (1000000)")
    parser.add_argument("--chunk", type=int, default=10_000, help="codes per transaction (10000)")
    parser.add_argument("--baseline", type=int, default=5_000, help="codes by a check-then-insert loop (5000; 0: none)")
    parser.add_argument("--variant-rounds", type=int, default=0,
                        help="rounds of the insert variants (shipped, one-writer, ...), alternating (0: none)")
    parser.add_argument("--variants", help=f"the variants to run, comma-separated (all: {','.join(VARIANTS)})")
    parser.add_argument("--variant-codes", type=int, default=200_000, help="codes per variant and round (200000)")
    parser.add_argument("--no-download", action="store_true", help="leave out the download through the web server")
    parser.add_argument("--database", default=DEFAULT_DB)
    parser.add_argument("--keep", action="store_true", help="keep the database afterwards")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        kind, *rest = args.child
        if kind == "generate":
            result = child_generate(int(rest[0]), int(rest[1]), *rest[2:])
        elif kind == "baseline":
            result = child_baseline(int(rest[0]), int(rest[1]))
        else:
            result = child_export(int(rest[0]))
        print(json.dumps(result))
        return 0
    common.set_name("codes_bench")
    state: dict[str, Any] = {}
    try:
        summary = bench(args, state)
    except BenchError as exc:
        log(f"error: {exc}")
        return 1
    except KeyboardInterrupt:
        log("interrupted")
        return 1
    finally:
        if state.get("database") and not args.keep:
            from django.db import connections

            connections.close_all()
            drop_database(state["server_url"], state["database"])
        if state.get("embedded") is not None:
            state["embedded"].stop()
    print_summary(summary)
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    out = RESULTS_DIR / f"codes_bench-{datetime.now(UTC):%Y%m%dT%H%M%S}.json"
    out.write_text(json.dumps(summary, indent=2) + "\n")
    log(f"results: {out.relative_to(BASE_DIR)}")
    return 0 if all(summary["checks"].values()) else 2


if __name__ == "__main__":
    sys.exit(main())
