"""Production settings refuse default secrets; with real ones, Django's deployment check is clean."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ..conftest import ROOT

GOOD = {"DJANGO_SECRET_KEY": "q8Zr-5vT_w2Lm9Yx0Pb7Kc4Nf6Hd1Js3Ga8Ue5Oi2Wy7Re4Tu9Ip", "COUPONS_TOKEN_SECRET": "t" * 40,
        "DATABASE_URL": "postgres://u:p@db.internal:5432/couponrush", "REDIS_URL": "redis://redis.internal:6379/0",
        "DJANGO_ALLOWED_HOSTS": "coupons.example.com",
        "COUPONS_STOREFRONT_ENCRYPTION_KEYS": "q0Tb1S4wKjq3G7bU1h2u8c3d9Yq5m2Zp4Xr6Vw7Ns0E="}


def run_with_production_settings(env_changes: dict[str, str | None], *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "COUPONS_"))}
    env["DJANGO_SETTINGS_MODULE"] = "config.settings.production"
    for name, value in env_changes.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=60)


@pytest.mark.parametrize(
    "changes, named",
    [
        ({"DJANGO_SECRET_KEY": None}, "DJANGO_SECRET_KEY"),
        ({"DJANGO_SECRET_KEY": "dev-only-insecure-django-secret-key"}, "DJANGO_SECRET_KEY"),
        ({"COUPONS_TOKEN_SECRET": None}, "COUPONS_TOKEN_SECRET"),
        ({"COUPONS_TOKEN_SECRET": "short"}, "COUPONS_TOKEN_SECRET"),
        ({"REDIS_URL": None}, "REDIS_URL"),
        ({"COUPONS_WEBHOOK_ALLOW_PRIVATE": "true"}, "COUPONS_WEBHOOK_ALLOW_PRIVATE"),
        ({"COUPONS_STOREFRONT_ENCRYPTION_KEYS": None}, "COUPONS_STOREFRONT_ENCRYPTION_KEYS"),
        ({"COUPONS_STOREFRONT_ENCRYPTION_KEYS": "ZGV2LW9ubHktaW5zZWN1cmUtc3RvcmVmcm9udC1rZXk="},
         "COUPONS_STOREFRONT_ENCRYPTION_KEYS"),
        ({"COUPONS_STOREFRONT_ENCRYPTION_KEYS": "not-a-fernet-key"}, "COUPONS_STOREFRONT_ENCRYPTION_KEYS"),
    ],
)
def test_production_settings_refuse_to_start_with_a_default_or_missing_secret(changes, named) -> None:
    result = run_with_production_settings({**GOOD, **changes}, "check")
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr and named in result.stderr


def test_production_settings_with_real_secrets_pass_the_deployment_check() -> None:
    result = run_with_production_settings(GOOD, "check", "--deploy", "--fail-level", "WARNING")
    assert result.returncode == 0, result.stdout + result.stderr


SHOW = ("import json, django; django.setup(); from django.conf import settings as s; print(json.dumps({"
        "'db': s.DATABASES['default'], 'redirect': s.SECURE_SSL_REDIRECT, 'session_secure': s.SESSION_COOKIE_SECURE, "
        "'csrf_secure': s.CSRF_COOKIE_SECURE, 'hsts': s.SECURE_HSTS_SECONDS, 'proxy': s.SECURE_PROXY_SSL_HEADER, "
        "'redis_timeout': s.COUPONS_REDIS_SOCKET_TIMEOUT, 'cache': s.CACHES['default']['OPTIONS'], "
        "'broker': s.CELERY_BROKER_TRANSPORT_OPTIONS, 'cluster': s.COUPONS_REDIS_CLUSTER, "
        "'acks': s.COUPONS_REDIS_REPLICA_ACKS}, default=str))")


def production_settings(changes: dict[str, str | None]) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "COUPONS_"))}
    env.update(DJANGO_SETTINGS_MODULE="config.settings.production", PYTHONPATH=str(ROOT))
    env.update({k: v for k, v in {**GOOD, **changes}.items() if v is not None})
    result = subprocess.run([sys.executable, "-c", SHOW], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    import json

    return json.loads(result.stdout)


def test_production_keeps_connections_with_health_checks_and_bounds_every_wait() -> None:
    shown = production_settings({})

    db = shown["db"]
    assert (db["CONN_MAX_AGE"], db["CONN_HEALTH_CHECKS"]) == (60, True)
    assert db["OPTIONS"]["connect_timeout"] == 3 and db["OPTIONS"]["keepalives"] == 1
    assert "-c statement_timeout=30000" in db["OPTIONS"]["options"]
    assert "-c idle_in_transaction_session_timeout=60000" in db["OPTIONS"]["options"]
    assert shown["redis_timeout"] == 0.5
    assert shown["cache"] == {"SOCKET_CONNECT_TIMEOUT": 0.5, "SOCKET_TIMEOUT": 0.5}
    assert shown["broker"]["socket_timeout"] == 5 and shown["broker"]["socket_connect_timeout"] == 5


def test_replica_acks_are_accepted_on_a_redis_cluster() -> None:
    on_cluster = {"REDIS_CLUSTER": "1", "CELERY_BROKER_URL": "redis://broker.internal:6379/0"}
    shown = production_settings({**on_cluster, "COUPONS_REDIS_REPLICA_ACKS": "1"})
    assert (shown["cluster"], shown["acks"]) == (True, 1)
    # the timeout must still leave room for the reply within the socket timeout
    result = run_with_production_settings({**GOOD, **on_cluster, "COUPONS_REDIS_REPLICA_ACKS": "1",
                                           "COUPONS_REDIS_REPLICA_ACK_TIMEOUT_MS": "400"}, "check")
    assert result.returncode != 0 and "COUPONS_REDIS_REPLICA_ACK_TIMEOUT_MS" in result.stderr


def test_https_settings_follow_the_environment() -> None:
    secure = production_settings({})
    plain = production_settings({"DJANGO_HTTPS": "false"})
    proxy_redirects = production_settings({"DJANGO_SECURE_SSL_REDIRECT": "false"})

    assert (secure["redirect"], secure["session_secure"], secure["csrf_secure"], secure["hsts"]) == \
        (True, True, True, 31536000)
    assert (plain["redirect"], plain["session_secure"], plain["csrf_secure"], plain["hsts"]) == (False, False, False, 0)
    assert (proxy_redirects["redirect"], proxy_redirects["session_secure"]) == (False, True)
    assert secure["proxy"] == ["HTTP_X_FORWARDED_PROTO", "https"]


def test_the_deployment_check_warns_when_https_is_turned_off() -> None:
    result = run_with_production_settings({**GOOD, "DJANGO_HTTPS": "false"}, "check", "--deploy", "--fail-level",
                                          "WARNING")
    assert result.returncode != 0 and "security.W008" in result.stderr + result.stdout


@pytest.mark.django_db
def test_a_production_connection_to_the_real_postgresql_has_the_statement_timeouts() -> None:
    from django.conf import settings as test_settings

    db = test_settings.DATABASES["default"]
    from urllib.parse import quote

    host = quote(db["HOST"] or "", safe="")  # the embedded PostgreSQL listens on a socket folder: %2F...
    url = f"postgres://{db['USER']}:{db['PASSWORD'] or ''}@{host}:{db['PORT'] or ''}/{db['NAME']}"
    code = ("from django.db import connection\n"
            "with connection.cursor() as c:\n"
            "    c.execute('SHOW statement_timeout'); a = c.fetchone()[0]\n"
            "    c.execute('SHOW idle_in_transaction_session_timeout'); b = c.fetchone()[0]\n"
            "print(a, b)\n")
    result = run_with_production_settings({**GOOD, "DATABASE_URL": url, "DATABASE_STATEMENT_TIMEOUT_MS": "7000"},
                                          "shell", "--no-imports", "-c", code)
    assert result.stdout.splitlines()[-1].split() == ["7s", "1min"], result.stdout + result.stderr
