"""Tests: real PostgreSQL and Redis (never SQLite or a fake), a Redis database of their own."""
from .base import *  # noqa: F403
from .base import database_from_env, env, follow_sentinels, load_devstack_env

load_devstack_env()
DEBUG = False
DATABASES = {"default": database_from_env()}
# Tests flush their Redis database: keep it apart from the development data (database 15 by default).
REDIS_URL = env("TEST_REDIS_URL") or f"{(env('REDIS_URL') or '').rsplit('/', 1)[0]}/15"
CACHES["default"]["LOCATION"] = REDIS_URL  # noqa: F405
CELERY_BROKER_URL = env("TEST_CELERY_BROKER_URL") or f"{REDIS_URL.rsplit('/', 1)[0]}/14"
follow_sentinels(globals())
# Any host, unless a test's server process is given its own (TEST_ALLOWED_HOSTS: the Host check on every door).
ALLOWED_HOSTS = [h.strip() for h in env("TEST_ALLOWED_HOSTS", "*").split(",") if h.strip()]
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# A server or worker process started by a test runs against the test database pytest-django created.
if env("COUPONRUSH_TEST_DB_NAME"):
    DATABASES["default"]["NAME"] = env("COUPONRUSH_TEST_DB_NAME")

# Many tests claim for one shopper in a tight loop to test something else; the rate-limit tests set it.
COUPONS_RATE_LIMIT_SHOPPER_PER_SECOND = 1_000_000
