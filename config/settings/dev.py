"""Development: DEBUG on, embedded servers' URLs picked up from var/devstack.env."""
from .base import *  # noqa: F403
from .base import database_from_env, env, env_bool, follow_sentinels, load_devstack_env

load_devstack_env()
DEBUG = env_bool("DJANGO_DEBUG", True)
DATABASES = {"default": database_from_env()}
REDIS_URL = env("REDIS_URL", "")
CACHES["default"]["LOCATION"] = REDIS_URL  # noqa: F405
CELERY_BROKER_URL = env("CELERY_BROKER_URL", REDIS_URL)
follow_sentinels(globals())
ALLOWED_HOSTS = ["*"]
LOG_FORMAT = env("DJANGO_LOG_FORMAT", "plain")  # a developer's terminal reads plain lines
LOGGING["handlers"]["console"]["formatter"] = LOG_FORMAT  # noqa: F405
