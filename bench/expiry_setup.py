"""bench/expiry_sweep.py's database and data: the bench's own database on the server of DATABASE_URL or an
embedded one (created, marked by its comment, dropped), the due coupons and their 'issued' events inserted
set-based, VACUUM ANALYZE and the EXPLAIN of one batch, and the checks after the runs (steps 1, 2 and 6 of
expiry_sweep.py's docstring). The progress lines and the error the user can fix (log, BenchError) are this
module's, so that both modules print and raise the same ones. Imported by expiry_sweep.py, which runs it.
"""
from __future__ import annotations

import contextlib
import os
import re
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import common

BASE_DIR = Path(__file__).resolve().parent.parent
BENCH_VAR = BASE_DIR / "var" / "bench"
DB_MARKER = "created by bench/expiry_sweep.py; dropped at the end of its run"
SPREAD = timedelta(days=7)  # the due coupons expired over the last 7 days, in id order
EXPIRED_AGO = timedelta(minutes=5)  # the most recent of them expired 5 minutes ago

T_START = time.monotonic()


class BenchError(Exception):
    """A problem the user can fix; printed without a traceback."""


def log(text: str) -> None:
    print(f"[expiry_sweep {time.monotonic() - T_START:6.1f}s] {text}", flush=True)


def redact(url: str) -> str:
    parts = urlsplit(url)
    if parts.password:
        return urlunsplit(parts._replace(netloc=parts.netloc.replace(f":{parts.password}@", ":***@")))
    return url


def rel(path: Path) -> str:
    try:
        return str(path.relative_to(BASE_DIR))
    except ValueError:
        return str(path)


# ---------------------------------------------------------------------------------------------------------
# The database


def with_db(url: str, name: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path=f"/{name}"))


def _admin_connect(url: str) -> Any:
    import dj_database_url
    import psycopg

    cfg = dj_database_url.parse(url)
    params = {"host": cfg.get("HOST"), "port": cfg.get("PORT"), "user": cfg.get("USER"),
              "password": cfg.get("PASSWORD"), "dbname": "postgres", "connect_timeout": 5}
    try:
        return psycopg.connect(autocommit=True, **{k: v for k, v in params.items() if v})
    except psycopg.Error as exc:
        raise BenchError(f"PostgreSQL at {redact(url)}: {exc}") from exc


def create_database(server_url: str, name: str) -> None:
    """Create the bench's own database; one left by an earlier run (marked by its comment) is dropped first.
    A database of that name the bench did not create is refused, never dropped."""
    from psycopg import sql

    with _admin_connect(server_url) as conn:
        row = conn.execute("SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = %s",
                           (name,)).fetchone()
        if row is not None:
            if row[0] != DB_MARKER:
                raise BenchError(f"database {name} exists and was not created by this bench: pick another with "
                                 f"--database, or drop it yourself")
            log(f"dropping {name}, left by an earlier run")
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


@dataclass
class Server:
    url: str  # any database on the server (we only change the name)
    embedded: Any = None
    server_version: str = ""

    def stop(self) -> None:
        if self.embedded is not None:
            with contextlib.suppress(Exception):
                self.embedded.stop()
            self.embedded = None


def start_server() -> Server:
    url = os.environ.get("DATABASE_URL") or ""
    if url:
        log(f"PostgreSQL: the server of DATABASE_URL {redact(url)}")
        return Server(url)
    pgdata = BENCH_VAR / "pg-expiry"  # not claim_storm's var/bench/pg: the two benches must not stop each other's
    log(f"DATABASE_URL unset: starting an embedded PostgreSQL in {rel(pgdata)} ...")

    pg = common.embedded_postgres_server(pgdata)
    server = Server(pg.start(), embedded=pg)
    return server


# ---------------------------------------------------------------------------------------------------------
# Set-up (in the bench process, through Django's connection)


_INSERT_SQL = """
WITH c AS (
    INSERT INTO coupons_coupon (code, campaign_id, user_id, claim_id, status, valid_from, expires_at, version,
                                created_at, updated_at)
    SELECT %(prefix)s || lpad(g::text, 9, '0'), %(campaign)s, 'u' || g, %(prefix)s || '-' || g, 'active',
           %(last)s - (%(n)s - g) * %(step)s - interval '30 days', %(last)s - (%(n)s - g) * %(step)s, 1,
           now(), now()
    FROM generate_series(%(lo)s::bigint, %(hi)s::bigint) g
    RETURNING id, campaign_id, claim_id, user_id
)
INSERT INTO coupons_couponevent (coupon_id, campaign_id, type, data, source, created_at)
SELECT id, campaign_id, 'issued', jsonb_build_object('claim_id', claim_id, 'user_id', user_id), 'bench', now()
FROM c
"""


def create_campaign(name: str, stock: int) -> int:
    from decimal import Decimal

    from django.utils import timezone

    from campaigns.models import Campaign

    now = timezone.now()
    campaign = Campaign.objects.create(
        name=name, starts_at=now - timedelta(days=40), ends_at=now - timedelta(days=30), total_stock=stock,
        per_user_limit=1, discount_value=Decimal("10.00"), valid_days=30, published_at=now - timedelta(days=41),
    )
    return campaign.pk


def insert_due(campaign_id: int, n: int, chunk: int, label: str) -> dict[str, Any]:
    """N active coupons past their validity with their 'issued' events: one statement per chunk."""
    from django.db import connection, transaction
    from django.utils import timezone

    last = timezone.now() - EXPIRED_AGO
    step = SPREAD / max(n, 1)
    t0 = time.monotonic()
    done = 0
    while done < n:
        lo, hi = done + 1, min(done + chunk, n)
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(_INSERT_SQL, {"prefix": f"E{campaign_id}-", "campaign": campaign_id, "last": last,
                                         "n": n, "step": step, "lo": lo, "hi": hi})
        done = hi
        rate = done / max(time.monotonic() - t0, 1e-9)
        log(f"{label}: inserted {done:,} / {n:,} due coupons + 'issued' events ({rate:,.0f}/s)")
    return {"seconds": round(time.monotonic() - t0, 2), "rows": n}


def vacuum_analyze(*tables: str) -> float:
    from django.db import connection

    t0 = time.monotonic()
    with connection.cursor() as cursor:
        for table in tables:
            cursor.execute(f"VACUUM ANALYZE {table}")
    took = time.monotonic() - t0
    log(f"VACUUM ANALYZE {', '.join(tables)}: {took:.1f}s")
    return round(took, 2)


def explain_batch(batch_size: int | None) -> dict[str, Any]:
    """EXPLAIN (ANALYZE, BUFFERS) of the first batch statement of the sweep, rolled back."""
    from django.db import connection, transaction
    from django.utils import timezone

    from coupons import compensation

    limit = batch_size or compensation.BATCH_SIZE
    params = {"cutoff": timezone.now() - timedelta(seconds=1), "after_at": compensation._EPOCH, "after_id": 0,
              "limit": limit}
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + compensation._EXPIRE_SQL, params)
        plan = [row[0] for row in cursor.fetchall()]
        transaction.set_rollback(True)
    text = "\n".join(plan)
    execution = next((float(line.split(":")[1].split()[0]) for line in plan if line.startswith("Execution Time")),
                     None)
    due_scan = next((re.sub(r"\s*\(cost=[^)]*\)", "", line).strip().lstrip("-> ").strip() for line in plan
                     if ("Index" in line or "Seq Scan" in line) and "coupons_coupon" in line), None)
    info = {"batch_size": limit, "uses_coupon_active_expiry": "coupon_active_expiry" in text,
            "due_scan": due_scan, "execution_ms": execution, "plan": plan}
    log(f"EXPLAIN ANALYZE of one batch ({limit} rows, rolled back): {execution} ms; scan of due rows: {due_scan}")
    print("\n".join(f"    {line}" for line in plan), flush=True)
    return info


# ---------------------------------------------------------------------------------------------------------
# Checks


_FULL_CHECK_SQL = """
SELECT count(*) AS coupons,
       count(*) FILTER (WHERE c.status <> 'expired' OR c.version <> 2 OR e.n IS DISTINCT FROM 2
                        OR e.issued IS DISTINCT FROM 1 OR e.expired IS DISTINCT FROM 1) AS wrong
FROM coupons_coupon c
LEFT JOIN (SELECT coupon_id, count(*) AS n, count(*) FILTER (WHERE type = 'issued') AS issued,
                  count(*) FILTER (WHERE type = 'expired') AS expired
           FROM coupons_couponevent WHERE campaign_id = %(campaign)s GROUP BY coupon_id) e ON e.coupon_id = c.id
WHERE c.campaign_id = %(campaign)s
"""


def check(campaigns: dict[str, tuple[int, int]], sample: int) -> dict[str, Any]:
    """Exactly one 'expired' event per coupon, none left active, the row equal to the fold of its events."""
    from django.db import connection

    from coupons.models import Coupon, CouponEvent
    from coupons.replay import disagreements

    out: dict[str, Any] = {"campaigns": {}}
    ok = True
    for label, (campaign_id, expected) in campaigns.items():
        t0 = time.monotonic()
        events = CouponEvent.objects.filter(campaign_id=campaign_id, type="expired")
        expired_events = events.count()
        not_compensation = events.exclude(source="compensation").count()
        active = Coupon.objects.filter(campaign_id=campaign_id, status="active").count()
        with connection.cursor() as cursor:
            cursor.execute(_FULL_CHECK_SQL, {"campaign": campaign_id})
            coupons, wrong = cursor.fetchone()
        sql_s = time.monotonic() - t0
        t0 = time.monotonic()
        if coupons <= sample:
            ids = None
            queryset = Coupon.objects.filter(campaign_id=campaign_id)
            checked = coupons
        else:
            with connection.cursor() as cursor:
                cursor.execute("SELECT id FROM coupons_coupon WHERE campaign_id = %s ORDER BY random() LIMIT %s",
                               [campaign_id, sample])
                ids = [row[0] for row in cursor.fetchall()]
            queryset = Coupon.objects.filter(pk__in=ids)
            checked = len(ids)
        disagree = sum(1 for _ in disagreements(queryset))
        replay_s = time.monotonic() - t0
        good = (expired_events == expected and not_compensation == 0 and active == 0 and coupons == expected
                and wrong == 0 and disagree == 0)
        ok = ok and good
        out["campaigns"][label] = {
            "campaign_id": campaign_id, "coupons": coupons, "expected_expired_events": expected,
            "expired_events": expired_events, "expired_events_not_compensation": not_compensation,
            "left_active": active, "sql_check_wrong": wrong, "sql_check_s": round(sql_s, 2),
            "replay_checked": checked, "replay_sample": ids is not None, "replay_disagreements": disagree,
            "replay_s": round(replay_s, 2), "ok": good,
        }
        log(f"check {label}: {expired_events:,} 'expired' events for {expected:,} due coupons "
            f"({not_compensation} not from 'compensation'), {active} left active, SQL pass over all {coupons:,}: "
            f"{wrong} wrong ({sql_s:.1f}s); fold of the events on {checked:,} coupons"
            f"{' (random sample)' if ids is not None else ' (all)'}: {disagree} disagree ({replay_s:.1f}s) "
            f"-> {'OK' if good else 'FAILED'}")
    out["ok"] = ok
    return out
