"""The naive claim, as a baseline only: every claim is one PostgreSQL transaction on one stock row.

    granian --interface wsgi bench.naive_claim:app ...   (started by bench/suite.py; never part of the service)

POST /api/v1/campaigns/{id}/claim with the contract's token check (X-User-Id, X-Token), then in one transaction
`UPDATE bench_naive_stock SET stock = stock - 1 WHERE campaign_id = %s AND stock > 0` and
`INSERT INTO bench_naive_claim ... ON CONFLICT (campaign_id, user_id) DO NOTHING` (per-user limit 1; a repeat
rolls the decrement back). Every claim waits for the stock row's lock: this is what issue 6's table calls "the
naive PostgreSQL path". One psycopg connection per server thread. GET /healthz answers {"code":0}.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import dj_database_url
import psycopg

CLAIM_PATH = re.compile(r"/api/v1/campaigns/([1-9][0-9]{0,17})/claim")
SECRET = (os.environ.get("COUPONS_TOKEN_SECRET") or "").encode()
_local = threading.local()

SCHEMA = """
CREATE TABLE IF NOT EXISTS bench_naive_stock (campaign_id bigint PRIMARY KEY, stock integer NOT NULL);
CREATE TABLE IF NOT EXISTS bench_naive_claim (
    id bigserial PRIMARY KEY, campaign_id bigint NOT NULL, user_id varchar(64) NOT NULL,
    claimed_at timestamptz NOT NULL DEFAULT now(), UNIQUE (campaign_id, user_id));
"""


def connect_params(url: str) -> dict[str, Any]:
    cfg = dj_database_url.parse(url)
    params = {"host": cfg.get("HOST"), "port": cfg.get("PORT"), "user": cfg.get("USER"),
              "password": cfg.get("PASSWORD"), "dbname": cfg.get("NAME")}
    return {k: v for k, v in params.items() if v}


def _conn() -> psycopg.Connection:
    conn = getattr(_local, "conn", None)
    if conn is None or conn.closed:
        conn = _local.conn = psycopg.connect(**connect_params(os.environ["DATABASE_URL"]))
    return conn


def _valid(user: str, token: str) -> bool:
    exp_text, _, sig = token.partition(".")
    if not user or len(user) > 64 or not exp_text.isdigit():
        return False
    now = int(time.time())
    if not now <= int(exp_text) <= now + 3600:
        return False
    mac = hmac.new(SECRET, f"{user}.{exp_text}".encode(), hashlib.sha256).hexdigest()
    return hmac.compare_digest(mac, sig)


class _Refused(Exception):
    pass


def claim(campaign_id: int, user: str) -> tuple[int, dict[str, Any]]:
    conn = _conn()
    try:
        with conn.transaction():
            row = conn.execute("UPDATE bench_naive_stock SET stock = stock - 1 WHERE campaign_id = %s AND stock > 0 "
                               "RETURNING stock", (campaign_id,)).fetchone()
            if row is None:
                return 200, {"code": 2, "status": "sold_out"}
            new = conn.execute("INSERT INTO bench_naive_claim (campaign_id, user_id) VALUES (%s, %s) "
                               "ON CONFLICT (campaign_id, user_id) DO NOTHING RETURNING id",
                               (campaign_id, user)).fetchone()
            if new is None:
                raise _Refused  # rolls the decrement back
            return 200, {"code": 0, "status": "claimed", "claim_id": str(new[0])}
    except _Refused:
        return 200, {"code": 1, "status": "limit_reached"}
    except psycopg.Error:
        _local.conn = None
        return 503, {"code": 503, "status": "unavailable"}


def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    path = environ.get("PATH_INFO", "")
    match = CLAIM_PATH.fullmatch(path)
    if path == "/healthz":
        status, body = 200, {"code": 0, "status": "ok"}
    elif match is None or environ.get("REQUEST_METHOD") != "POST":
        status, body = 404, {"code": 404, "status": "not_found"}
    else:
        length = int(environ.get("CONTENT_LENGTH") or 0)
        if length:
            environ["wsgi.input"].read(min(length, 4096))
        if not _valid(environ.get("HTTP_X_USER_ID", ""), environ.get("HTTP_X_TOKEN", "")):
            status, body = 401, {"code": 401, "status": "unauthenticated"}
        else:
            status, body = claim(int(match.group(1)), environ["HTTP_X_USER_ID"])
    payload = json.dumps(body, separators=(",", ":")).encode()
    start_response(f"{status} {'OK' if status == 200 else 'Error'}",
                   [("Content-Type", "application/json"), ("Content-Length", str(len(payload)))])
    return [payload]


def prepare(url: str, campaign_id: int, stock: int) -> None:
    """Create the tables (in the bench's database) and set one campaign's stock, forgetting its claims."""
    with psycopg.connect(**connect_params(url), autocommit=True) as conn:
        conn.execute(SCHEMA)
        conn.execute("DELETE FROM bench_naive_claim WHERE campaign_id = %s", (campaign_id,))
        conn.execute("INSERT INTO bench_naive_stock VALUES (%s, %s) ON CONFLICT (campaign_id) DO UPDATE "
                     "SET stock = EXCLUDED.stock", (campaign_id, stock))


def balance(url: str, campaign_id: int) -> dict[str, int]:
    with psycopg.connect(**connect_params(url), autocommit=True) as conn:
        stock = conn.execute("SELECT stock FROM bench_naive_stock WHERE campaign_id = %s", (campaign_id,)).fetchone()
        claims = conn.execute("SELECT count(*), count(DISTINCT user_id) FROM bench_naive_claim WHERE campaign_id = %s",
                              (campaign_id,)).fetchone()
    return {"remaining": stock[0] if stock else -1, "claims": claims[0], "distinct_users": claims[1]}
