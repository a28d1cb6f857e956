"""Settings shared by every environment; everything that differs comes from the environment."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, overload
from urllib.parse import urlsplit

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent.parent

# Placeholders that only development and tests may run with; production.py refuses them.
DEV_SECRET_KEY = "dev-only-insecure-django-secret-key"
DEV_TOKEN_SECRET = "dev-only-insecure-token-secret"
# base64 of "dev-only-insecure-storefront-key": a Fernet key for development and tests only
DEV_STOREFRONT_ENCRYPTION_KEY = "ZGV2LW9ubHktaW5zZWN1cmUtc3RvcmVmcm9udC1rZXk="


@overload
def env(name: str) -> str | None: ...
@overload
def env(name: str, default: str) -> str: ...
@overload
def env(name: str, default: str | None) -> str | None: ...
def env(name: str, default: str | None = None) -> str | None:
    value = os.environ.get(name)
    return value if value else default


def env_bool(name: str, default: bool) -> bool:
    value = env(name)
    return default if value is None else value.lower() in ("1", "true", "yes", "on")


def env_float(name: str, default: float) -> float:
    value = env(name)
    return default if value is None else float(value)


def env_int(name: str, default: int) -> int:
    value = env(name)
    return default if value is None else int(value)


# Development runs without a .env: the dev entry point (devstack/stack.py) records the URLs of the
# embedded servers it started in var/devstack.env, so a second terminal's manage.py finds them.
def load_devstack_env() -> None:
    env_file = Path(os.environ.get("COUPONRUSH_DATA_DIR") or BASE_DIR / "var") / "devstack.env"
    if not env_file.exists():
        return
    for line in env_file.read_text().splitlines():
        name, _, value = line.partition("=")
        if name and value and not os.environ.get(name):
            os.environ[name] = value


SECRET_KEY = env("DJANGO_SECRET_KEY", DEV_SECRET_KEY)
DEBUG = env_bool("DJANGO_DEBUG", False)
ALLOWED_HOSTS = [h.strip() for h in env("DJANGO_ALLOWED_HOSTS", "localhost,127.0.0.1").split(",") if h]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "django_celery_beat",
    "webhooks",
    "campaigns",
    "coupons",
    "orders",
    "grants",
    "storefronts",
]

MIDDLEWARE = [
    "core.http.ForwardedHeadersMiddleware",
    "core.logs.RequestIdMiddleware",
    "core.handlers.PrivateByDefaultMiddleware",  # API answers: Cache-Control private, no-store unless public
    "core.api.HostCheckMiddleware",
    "core.api.DatabaseUnavailableMiddleware",
    "django.middleware.security.SecurityMiddleware",
    # the API's end here (API_MIDDLEWARE: the six above); the console's, storefront's and service endpoints' go on
    "django.contrib.sessions.middleware.SessionMiddleware",
    "core.i18n.ConsoleLocaleMiddleware",  # the console's language; the API's answers stay English
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "core.admin.AdminSessionMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "config.urls"
# The middleware of the API's routes (/api/v1/, core/handlers.py): token-authenticated or public JSON needs none of
# the console's (sessions, language, CSRF, auth user, messages, frame options), which cost half of a JSON 404.
API_MIDDLEWARE = MIDDLEWARE[:6]  # MIDDLEWARE lists the API's first: forwarded headers ... security headers
WSGI_APPLICATION = "config.wsgi.application"
ADMIN_URL = env("DJANGO_ADMIN_URL", "admin/")
# An operator's session ends 12 h after the login, or after 30 minutes without a console page, whichever comes
# first (core.admin.AdminSessionMiddleware: only the console's paths look at the session).
ADMIN_SESSION_SECONDS = env_int("DJANGO_ADMIN_SESSION_SECONDS", 12 * 3600)
ADMIN_IDLE_SECONDS = env_int("DJANGO_ADMIN_IDLE_SECONDS", 30 * 60)
SESSION_COOKIE_AGE = ADMIN_SESSION_SECONDS  # the sessions are the operators'

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]


def database_from_env() -> dict[str, Any]:
    url = env("DATABASE_URL")
    if not url:
        raise ImproperlyConfigured(
            "DATABASE_URL is not set. Start the system with `make run` (which starts embedded servers) "
            "or set DATABASE_URL=postgres://..."
        )
    # Persistent connections with a health check: a PostgreSQL restart costs one failed query at most.
    db: dict[str, Any] = dict(
        dj_database_url.parse(url, conn_max_age=env_int("DJANGO_CONN_MAX_AGE", 60), conn_health_checks=True)
    )
    db.setdefault("OPTIONS", {})["connect_timeout"] = env_int("DATABASE_CONNECT_TIMEOUT", 3)
    db["ENGINE"] = "core.postgresql"  # Django's, with a bounded health check of kept connections
    # Statements through core.db.prepared_cursor (a few hot ones) are prepared at their first run; Django's
    # own cursors bind on the client and never prepare (Django's default here, None, disables preparing).
    db["OPTIONS"]["prepare_threshold"] = 0
    return db


DATABASES = {"default": database_from_env()} if env("DATABASE_URL") else {}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

# Times are stored in UTC; operators read them in their own zone. The console (admin, storefront) speaks the
# language the operator picks (the switch in its header, else the browser's Accept-Language, else
# DJANGO_LANGUAGE_CODE); catalogs in locale/, compiled by `python manage.py compilemessages` (Debian's gettext).
LANGUAGE_CODE = env("DJANGO_LANGUAGE_CODE", "en")
LANGUAGES = [("en", "English"), ("zh-hans", "简体中文")]
LOCALE_PATHS = [BASE_DIR / "locale"]
USE_I18N = True
USE_TZ = True
TIME_ZONE = env("COUPONS_OPERATOR_TIME_ZONE", "Asia/Shanghai")

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "var" / "static"
STATICFILES_DIRS = [BASE_DIR / "static"]  # the demo storefront's JS and CSS (static/storefront/)

# Redis: hot state of every campaign. Timeouts well under a second so that a dead Redis is a fast 503.
REDIS_URL = env("REDIS_URL", "")
# REDIS_CLUSTER=1: REDIS_URL is a seed node of a Redis Cluster (database 0); the campaigns' keys spread over its
# shards by their {c<id>} hash tags. The broker and the cache then need a plain Redis (see CELERY_BROKER_URL).
COUPONS_REDIS_CLUSTER = env_bool("REDIS_CLUSTER", False)
COUPONS_REDIS_SOCKET_TIMEOUT = env_float("COUPONS_REDIS_SOCKET_TIMEOUT", 0.5)
COUPONS_REDIS_MAX_CONNECTIONS = env_int("COUPONS_REDIS_MAX_CONNECTIONS", 64)
# Replicas (docs/design.md, "Replicas and failover"): a claim (and every script that changes stock) is answered
# only after WAIT confirms that this many replicas hold it, within the timeout (then: 503, the claim taken back).
# 0: no WAIT (a failover may lose claims already answered). The timeout must be well under the socket timeout.
# On a cluster (REDIS_CLUSTER=1) each WAIT goes to the master of the call's slot, on the call's own connection.
COUPONS_REDIS_REPLICA_ACKS = env_int("COUPONS_REDIS_REPLICA_ACKS", 0)
COUPONS_REDIS_REPLICA_ACK_TIMEOUT_MS = env_int("COUPONS_REDIS_REPLICA_ACK_TIMEOUT_MS", 100)
if COUPONS_REDIS_REPLICA_ACKS and COUPONS_REDIS_REPLICA_ACK_TIMEOUT_MS * 2 > COUPONS_REDIS_SOCKET_TIMEOUT * 1000:
    raise ImproperlyConfigured("COUPONS_REDIS_REPLICA_ACK_TIMEOUT_MS must be at most half of "
                               "COUPONS_REDIS_SOCKET_TIMEOUT")
# Sentinel: REDIS_SENTINELS=host:port,host:port and REDIS_SENTINEL_MASTER=<name> find the master (REDIS_URL then
# gives only the password and the database, its host is ignored); every client follows a failover.
REDIS_SENTINELS = [(h.rsplit(":", 1)[0], int(h.rsplit(":", 1)[1])) for h in env("REDIS_SENTINELS", "").split(",")
                   if h.strip()]
REDIS_SENTINEL_MASTER = env("REDIS_SENTINEL_MASTER", "mymaster")
CACHES = {
    "default": {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": REDIS_URL,
        "OPTIONS": {
            "SOCKET_CONNECT_TIMEOUT": COUPONS_REDIS_SOCKET_TIMEOUT,
            "SOCKET_TIMEOUT": COUPONS_REDIS_SOCKET_TIMEOUT,
        },
        "KEY_PREFIX": "cache",
    }
}

# Shopper tokens (docs/api.md, Shoppers): HMAC-SHA256 over "<user id>.<expires>".
COUPONS_TOKEN_SECRET = env("COUPONS_TOKEN_SECRET", DEV_TOKEN_SECRET)
COUPONS_TOKEN_MAX_TTL = env_int("COUPONS_TOKEN_MAX_TTL", 3600)
# Tokens without a key id, signed with COUPONS_TOKEN_SECRET (the default key): false once every storefront signs
# with its own key (storefronts/, docs/deployment.md), and such tokens are refused like a bad signature.
COUPONS_TOKEN_DEFAULT_KEY = env_bool("COUPONS_TOKEN_DEFAULT_KEY", True)
# Storefront keys' secrets are stored encrypted (Fernet) with these keys (comma-separated, each 32 url-safe base64
# bytes: the first encrypts, all decrypt, so a new one goes first and `storefront_reencrypt` retires the old).
COUPONS_STOREFRONT_ENCRYPTION_KEYS = [key.strip() for key in env(
    "COUPONS_STOREFRONT_ENCRYPTION_KEYS", DEV_STOREFRONT_ENCRYPTION_KEY).split(",") if key.strip()]
# The demo storefront's dev-only token endpoint (POST /dev/demo-shopper, config/storefront.py): unset follows
# DEBUG; never under config.settings.production, whatever this says.
COUPONS_DEMO_TOKENS = env_bool("COUPONS_DEMO_TOKENS", False) if env("COUPONS_DEMO_TOKENS") is not None else None

# Rate limits of the claim (per second, counted in the claim script). A campaign admits its own rate_limit
# (default 10 x its stock). The per-IP limit needs the shoppers' real addresses: behind a proxy, set
# COUPONS_TRUSTED_PROXY_HOPS to the number of proxies that append to X-Forwarded-For; 0 turns it off.
COUPONS_RATE_LIMIT_SHOPPER_PER_SECOND = env_int("COUPONS_RATE_LIMIT_SHOPPER_PER_SECOND", 10)
COUPONS_RATE_LIMIT_IP_PER_SECOND = env_int("COUPONS_RATE_LIMIT_IP_PER_SECOND", 0)
COUPONS_TRUSTED_PROXY_HOPS = env_int("COUPONS_TRUSTED_PROXY_HOPS", 0)
# The proxies in front (addresses or networks, comma-separated): X-Forwarded-For / -Proto / -Host and Forwarded
# count only on a connection from one of them (and only with COUPONS_TRUSTED_PROXY_HOPS > 0); from anyone else
# they are dropped before Django or the claim reads them (core.http.ForwardedHeadersMiddleware).
COUPONS_TRUSTED_PROXIES = [n.strip() for n in env("COUPONS_TRUSTED_PROXIES", "127.0.0.1/32,::1/128").split(",")
                           if n.strip()]
# Unknown coupon codes one shopper may try per minute on redeem/reserve/confirm/release before a 429.
COUPONS_CODE_MISSES_PER_MINUTE = env_int("COUPONS_CODE_MISSES_PER_MINUTE", 20)
# ... and from one client address (core.http.client_ip), whichever shoppers it sends them as.
COUPONS_CODE_MISSES_PER_IP_PER_MINUTE = env_int("COUPONS_CODE_MISSES_PER_IP_PER_MINUTE", 100)

# Campaign keys live until the campaign's end plus this grace (PEXPIREAT), long enough to drain the ledger.
COUPONS_KEY_GRACE_SECONDS = env_int("COUPONS_KEY_GRACE_SECONDS", 7 * 86400)
COUPONS_IDEMPOTENCY_TTL_SECONDS = 24 * 3600
# Grants (grants/): the largest file `grant` and the admin's upload take (larger: refused before anything is
# granted); the operator API keys that may call POST /api/v1/campaigns/{id}/grants (comma-separated: long random
# strings; none: the route answers 401), an interim until storefront keys (docs/deployment.md).
COUPONS_GRANTS_MAX_FILE_BYTES = env_int("COUPONS_GRANTS_MAX_FILE_BYTES", 64 * 1024 * 1024)
COUPONS_SERVICE_API_KEYS = [key.strip() for key in (env("COUPONS_SERVICE_API_KEYS") or "").split(",") if key.strip()]
# Ledger drain: entries per transaction, and how long a read entry may stay unacknowledged before another
# worker takes it over (longer than any batch takes, so a slow worker is not robbed).
COUPONS_DRAIN_BATCH = env_int("COUPONS_DRAIN_BATCH", 500)
COUPONS_DRAIN_RECLAIM_IDLE_MS = env_int("COUPONS_DRAIN_RECLAIM_IDLE_MS", 30_000)
COUPONS_DRAIN_TRIGGER_TTL_MS = 10_000
# Acknowledged ledger entries stay this long, so reconciliation can re-persist a claim PostgreSQL lost.
COUPONS_LEDGER_RETENTION_SECONDS = env_int("COUPONS_LEDGER_RETENTION_SECONDS", 600)

# Webhooks (webhooks/): true lets endpoints be on loopback and private addresses (development and tests only; an
# endpoint's URL and every delivery's resolved address are checked against them otherwise: SSRF).
COUPONS_WEBHOOK_ALLOW_PRIVATE = env_bool("COUPONS_WEBHOOK_ALLOW_PRIVATE", False)

# Celery: the broker defaults to the Redis server; results are not kept (tasks report through the DB).
CELERY_BROKER_URL = env("CELERY_BROKER_URL", REDIS_URL)
if COUPONS_REDIS_CLUSTER:  # Celery and django-redis speak to one server, not to a cluster
    if not env("CELERY_BROKER_URL"):
        raise ImproperlyConfigured("REDIS_CLUSTER=1 needs CELERY_BROKER_URL: the broker (and the cache) must be a "
                                   "plain Redis, not a node of the cluster")
    CACHES["default"]["LOCATION"] = CELERY_BROKER_URL
CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, Any] = {}


def follow_sentinels(conf: dict[str, Any]) -> None:
    """With REDIS_SENTINELS, point the Django cache (django-redis's SentinelConnectionFactory) and Celery's
    broker (kombu's sentinel:// transport, master_name in CELERY_BROKER_TRANSPORT_OPTIONS) at the master the
    sentinels name, as the campaign clients are: each new connection asks the sentinels, so after a failover
    they reach the new master. Each keeps its URL's password and database; one on another server than
    REDIS_URL's (a broker of its own) is left alone. `conf` is a settings module's globals(): dev and test call
    it again after setting their own URLs."""
    sentinels, master = conf["REDIS_SENTINELS"], conf["REDIS_SENTINEL_MASTER"]
    if not sentinels:
        return
    server = urlsplit(conf["REDIS_URL"] or "redis://").netloc.rpartition("@")[2]

    def on_master(url: str) -> tuple[str, str] | None:  # (user:password@, db) of a URL of REDIS_URL's server
        parts = urlsplit(url or "redis://")
        auth, _, where = parts.netloc.rpartition("@")
        if parts.scheme not in ("redis", "rediss") or where != server:
            return None
        return (f"{auth}@" if auth else ""), (parts.path.strip("/") or "0")

    cache = conf["CACHES"]["default"]
    found = on_master(cache["LOCATION"])
    if found is not None:
        cache["LOCATION"] = f"redis://{found[0]}{master}/{found[1]}"  # its host part names the master
        cache["OPTIONS"] = {**cache["OPTIONS"], "CONNECTION_FACTORY": "django_redis.pool.SentinelConnectionFactory",
                            "SENTINELS": sentinels}
    found = on_master(conf["CELERY_BROKER_URL"])
    if found is not None:
        conf["CELERY_BROKER_URL"] = ";".join(f"sentinel://{found[0]}{host}:{port}/{found[1]}"
                                             for host, port in sentinels)
        conf["CELERY_BROKER_TRANSPORT_OPTIONS"] = {**conf["CELERY_BROKER_TRANSPORT_OPTIONS"], "master_name": master}


follow_sentinels(globals())
CELERY_BROKER_CONNECTION_TIMEOUT = 2
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_IGNORE_RESULT = True
# Messages are acknowledged when a task starts, not when it ends. Nothing depends on a task message: every
# task is idempotent and periodic (beat sends the drain sweep every 2 s; the drain's own safety is the ledger's
# consumer group, XAUTOCLAIM taking over a dead worker's entries). A late ack, on the other hand, made the
# worker exit when the broker went away mid-task: the ack then ran on the dead channel inside kombu's Redis
# transport (AttributeError in _connparams; tests/faults/test_celery_faults.py).
CELERY_TASK_ACKS_LATE = False
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TIMEZONE = "UTC"
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
# Every periodic job, once. Operators see and pause them in the admin (django-celery-beat).
CELERY_BEAT_SCHEDULE = {
    "drain-ledgers": {
        "task": "orders.tasks.drain_sweep",
        "schedule": 2.0,
        "options": {"expires": 10},
    },
    "expiry-sweep": {
        "task": "coupons.tasks.expiry_sweep",
        "schedule": 60.0,
        "options": {"expires": 120},
    },
    "grant-batches-sweep": {  # grants/: a batch whose runner died goes on (grants.tasks)
        "task": "grants.tasks.grant_batches_sweep",
        "schedule": 30.0,
        "options": {"expires": 60},
    },
    "reconcile-campaigns": {
        "task": "orders.tasks.reconcile_campaigns",
        "schedule": 180.0,
        "options": {"expires": 300},
    },
    "housekeeping": {
        "task": "orders.tasks.housekeeping",
        "schedule": 60.0,
        "options": {"expires": 120},
    },
    "deliver-webhooks": {
        "task": "webhooks.tasks.deliver_due",
        "schedule": 5.0,
        "options": {"expires": 10},
    },
    "preheat-due-campaigns": {
        "task": "orders.tasks.preheat_due_campaigns",
        "schedule": 30.0,
        "options": {"expires": 60},
    },
}

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [],
    "DEFAULT_PERMISSION_CLASSES": [],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["core.parsers.StrictJSONParser"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "core.api.exception_handler",
    "DEFAULT_METADATA_CLASS": None,  # OPTIONS is the contract's 405, as on the claim (DRF answered its metadata)
    "DEFAULT_CONTENT_NEGOTIATION_CLASS": "core.negotiation.ApiContentNegotiation",  # DRF's, remembered
    "UNAUTHENTICATED_USER": None,
}

SPECTACULAR_SETTINGS = {
    "TITLE": "couponrush API",
    "DESCRIPTION": "Coupon campaigns and flash sales. Business outcomes are HTTP 200 with a code and status.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    "ENUM_NAME_OVERRIDES": {
        "CouponStatusEnum": "coupons.models.CouponStatus",
        "ClaimStatusEnum": "orders.models.ClaimStatus",
        "CampaignStateEnum": "campaigns.models.CampaignState",
    },
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "core.api.schema_postprocess",
    ],
}

DATA_UPLOAD_MAX_MEMORY_SIZE = 64 * 1024

# Logs: one JSON object per line with the request id (DJANGO_LOG_FORMAT=json, the default outside
# development), or plain lines for a developer's terminal.
LOG_FORMAT = env("DJANGO_LOG_FORMAT", "json")
LOGGING: dict[str, Any] = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"request_id": {"()": "core.logs.RequestIdFilter"}},
    "formatters": {
        "json": {"()": "core.logs.JsonFormatter"},
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s"},
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": LOG_FORMAT,
                             "filters": ["request_id"]}},
    "root": {"handlers": ["console"], "level": env("DJANGO_LOG_LEVEL", "INFO")},
    "loggers": {
        "django.request": {"level": "ERROR"},
        # A drain every 2 s would drown the logs: Celery's per-task lines only from WARNING; the tasks
        # log what they did themselves when they did something.
        "celery.app.trace": {"level": "WARNING"},
        "celery.worker.strategy": {"level": "WARNING"},
        "celery.beat": {"level": "WARNING"},
    },
}
# Celery logs through the LOGGING above instead of replacing it.
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
