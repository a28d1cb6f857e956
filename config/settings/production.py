"""Production: everything from the environment; refuses to start with a default secret.

`manage.py check --deploy` is clean with the defaults (tests/config/test_settings.py).
"""
from typing import Any

from cryptography.fernet import Fernet
from django.core.exceptions import ImproperlyConfigured

from .base import *  # noqa: F403
from .base import (
    DEV_SECRET_KEY,
    DEV_STOREFRONT_ENCRYPTION_KEY,
    DEV_TOKEN_SECRET,
    database_from_env,
    env,
    env_bool,
    env_int,
)

DEBUG = False
for _name, _value, _default in (
    ("DJANGO_SECRET_KEY", SECRET_KEY, DEV_SECRET_KEY),  # noqa: F405
    ("COUPONS_TOKEN_SECRET", COUPONS_TOKEN_SECRET, DEV_TOKEN_SECRET),  # noqa: F405
):
    if not _value or _value == _default or len(_value) < 32:
        raise ImproperlyConfigured(f"{_name} must be set to a secret of at least 32 characters in production.")
# Storefront keys' secrets are encrypted with these (a database dump alone must not hand them out).
_FERNET_HINT = "python -c 'from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())'"
if not env("COUPONS_STOREFRONT_ENCRYPTION_KEYS") or (
        DEV_STOREFRONT_ENCRYPTION_KEY in COUPONS_STOREFRONT_ENCRYPTION_KEYS):  # noqa: F405
    raise ImproperlyConfigured(f"COUPONS_STOREFRONT_ENCRYPTION_KEYS must be set in production: {_FERNET_HINT}")
try:
    for _key in COUPONS_STOREFRONT_ENCRYPTION_KEYS:  # noqa: F405
        Fernet(_key)
except (ValueError, TypeError):
    raise ImproperlyConfigured("COUPONS_STOREFRONT_ENCRYPTION_KEYS: each key is 32 url-safe base64-encoded bytes "
                               f"(a Fernet key): {_FERNET_HINT}") from None
if not env("REDIS_URL"):
    raise ImproperlyConfigured("REDIS_URL must be set in production.")
if COUPONS_WEBHOOK_ALLOW_PRIVATE:  # noqa: F405
    raise ImproperlyConfigured("COUPONS_WEBHOOK_ALLOW_PRIVATE is for development and tests: production sends "
                               "webhooks to public addresses only.")
if any(host == "*" or host.startswith("*") for host in ALLOWED_HOSTS):  # noqa: F405
    # Django builds absolute links (admin, password reset, redirects) from the request's Host.
    raise ImproperlyConfigured("DJANGO_ALLOWED_HOSTS must name the service's hosts in production, not a wildcard.")

# PostgreSQL: persistent connections with a health check before reuse (base: DJANGO_CONN_MAX_AGE, 60 s), a
# connect timeout (DATABASE_CONNECT_TIMEOUT, 3 s), and server-side limits so that a stuck statement or a
# transaction left open can't hold locks for long. The claim never waits on PostgreSQL; the slowest statements
# are the drain's and the sweep's batches (well under a second); migrations run with the same limit.
DATABASES = {"default": database_from_env()}
_STATEMENT_TIMEOUT_MS = env_int("DATABASE_STATEMENT_TIMEOUT_MS", 30_000)
_IDLE_IN_TRANSACTION_TIMEOUT_MS = env_int("DATABASE_IDLE_IN_TRANSACTION_TIMEOUT_MS", 60_000)
_db_options: dict[str, Any] = DATABASES["default"].setdefault("OPTIONS", {})
_db_options["options"] = (
    f"-c statement_timeout={_STATEMENT_TIMEOUT_MS} "
    f"-c idle_in_transaction_session_timeout={_IDLE_IN_TRANSACTION_TIMEOUT_MS}"
)
# TCP keepalives: a PostgreSQL that vanished (failover, network cut) is noticed, not waited on forever.
_db_options.update(keepalives=1, keepalives_idle=30, keepalives_interval=10, keepalives_count=3)

# Redis: the campaigns' client and the cache time out in COUPONS_REDIS_SOCKET_TIMEOUT (base, 0.5 s). The
# broker's connection gets timeouts too (a dead broker must not hang a drain trigger or a beat tick) and a
# health check of idle connections (beside base's master_name when the broker is found through Sentinel).
CELERY_BROKER_TRANSPORT_OPTIONS = {
    **CELERY_BROKER_TRANSPORT_OPTIONS,  # noqa: F405
    "socket_timeout": env_int("CELERY_BROKER_SOCKET_TIMEOUT", 5),
    "socket_connect_timeout": env_int("CELERY_BROKER_SOCKET_TIMEOUT", 5),
    "socket_keepalive": True,
    "health_check_interval": 25,
    "retry_on_timeout": True,
}

# HTTPS, by environment. DJANGO_HTTPS=true (the default): secure cookies, HSTS, and a redirect of plain HTTP
# (DJANGO_SECURE_SSL_REDIRECT=false when the proxy in front redirects itself). TLS usually ends at that proxy,
# which must set X-Forwarded-Proto (and strip a client's). DJANGO_HTTPS=false only for a trial over plain
# HTTP (docker compose on a laptop): check --deploy then warns, as it should.
_HTTPS = env_bool("DJANGO_HTTPS", True)
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_SSL_REDIRECT = env_bool("DJANGO_SECURE_SSL_REDIRECT", _HTTPS)
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^metrics$"]  # probes and scrapes inside the network
SESSION_COOKIE_SECURE = _HTTPS
CSRF_COOKIE_SECURE = _HTTPS
SECURE_HSTS_SECONDS = env_int("DJANGO_SECURE_HSTS_SECONDS", 31_536_000 if _HTTPS else 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS", True)
SECURE_HSTS_PRELOAD = env_bool("DJANGO_SECURE_HSTS_PRELOAD", True)
SECURE_CONTENT_TYPE_NOSNIFF = True
CSRF_TRUSTED_ORIGINS = [o for o in env("DJANGO_CSRF_TRUSTED_ORIGINS", "").split(",") if o]
