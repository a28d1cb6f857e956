"""Production: everything from the environment; refuses to start with a default secret."""
from django.core.exceptions import ImproperlyConfigured

from .base import *  # noqa: F403
from .base import DEV_SECRET_KEY, DEV_TOKEN_SECRET, database_from_env, env, env_bool, env_int

DEBUG = False
for _name, _value, _default in (
    ("DJANGO_SECRET_KEY", SECRET_KEY, DEV_SECRET_KEY),  # noqa: F405
    ("COUPONS_TOKEN_SECRET", COUPONS_TOKEN_SECRET, DEV_TOKEN_SECRET),  # noqa: F405
):
    if not _value or _value == _default or len(_value) < 32:
        raise ImproperlyConfigured(f"{_name} must be set to a secret of at least 32 characters in production.")
if not env("REDIS_URL"):
    raise ImproperlyConfigured("REDIS_URL must be set in production.")
DATABASES = {"default": database_from_env()}

# HTTPS: on by default, off only where TLS ends in front of a trusted proxy that says so.
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_SSL_REDIRECT = env_bool("DJANGO_SECURE_SSL_REDIRECT", True)
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^metrics$"]
SESSION_COOKIE_SECURE = True
CSRF_COOKIE_SECURE = True
SECURE_HSTS_SECONDS = env_int("DJANGO_SECURE_HSTS_SECONDS", 31536000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = True
SECURE_HSTS_PRELOAD = True
SECURE_CONTENT_TYPE_NOSNIFF = True
CSRF_TRUSTED_ORIGINS = [o for o in env("DJANGO_CSRF_TRUSTED_ORIGINS", "").split(",") if o]
