"""Production settings refuse default secrets; with real ones, Django's deployment check is clean."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from .conftest import ROOT

GOOD = {"DJANGO_SECRET_KEY": "q8Zr-5vT_w2Lm9Yx0Pb7Kc4Nf6Hd1Js3Ga8Ue5Oi2Wy7Re4Tu9Ip", "COUPONS_TOKEN_SECRET": "t" * 40,
        "DATABASE_URL": "postgres://u:p@db.internal:5432/couponrush", "REDIS_URL": "redis://redis.internal:6379/0",
        "DJANGO_ALLOWED_HOSTS": "coupons.example.com"}


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
    ],
)
def test_production_settings_refuse_to_start_with_a_default_or_missing_secret(changes, named) -> None:
    result = run_with_production_settings({**GOOD, **changes}, "check")
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr and named in result.stderr


def test_production_settings_with_real_secrets_pass_the_deployment_check() -> None:
    result = run_with_production_settings(GOOD, "check", "--deploy", "--fail-level", "WARNING")
    assert result.returncode == 0, result.stdout + result.stderr
