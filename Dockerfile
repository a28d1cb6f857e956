# The production image: web (config/server.py), worker, beat and Flower all run from it (see docker-compose.yml).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PYTHONPATH=/app \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app

# Dependencies first: this layer is rebuilt only when pyproject.toml changes. The extras: OpenTelemetry
# (tracing, off unless OTEL_EXPORTER_OTLP_ENDPOINT or COUPONS_TRACING is set) and Flower (compose profile).
COPY pyproject.toml ./
RUN pip install '.[otel,flower]'

COPY . .
# Static files are collected and the translation catalogs (locale/, docs/glossary.md) compiled at build time;
# neither needs a database nor the secrets. gettext (msgfmt) is only needed for that step.
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends gettext >/dev/null \
    && DJANGO_SETTINGS_MODULE=config.settings.base python manage.py compilemessages -v 0 --ignore 'var/*' \
    && apt-get purge -y -qq gettext >/dev/null && apt-get autoremove -y -qq >/dev/null && rm -rf /var/lib/apt/lists/* \
    && DJANGO_SETTINGS_MODULE=config.settings.base python manage.py collectstatic --noinput -v 0 \
    && useradd --system --no-create-home --shell /usr/sbin/nologin app

USER app
ENV DJANGO_SETTINGS_MODULE=config.settings.production
EXPOSE 8000 9808
# A fresh folder for the Prometheus counters (PROMETHEUS_MULTIPROC_DIR), then the command.
ENTRYPOINT ["/app/deploy/entrypoint.sh"]
# Same command as devstack/commands.py web_command(), listening on all interfaces (tests/test_compose.py).
CMD ["python", "-m", "config.server", "--host", "0.0.0.0", "--port", "8000", \
     "--static-path-route", "/static", "--static-path-mount", "/app/var/static"]
