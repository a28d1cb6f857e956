# The production image: web (granian WSGI), worker and beat all run from it (see docker-compose.yml).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PYTHONPATH=/app \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app

# Dependencies first: this layer is rebuilt only when pyproject.toml changes.
COPY pyproject.toml ./
RUN pip install .

COPY . .
# Static files are collected at build time; collectstatic needs neither a database nor the secrets.
RUN DJANGO_SETTINGS_MODULE=config.settings.base python manage.py collectstatic --noinput -v 0 \
    && useradd --system --no-create-home --shell /usr/sbin/nologin app

USER app
ENV DJANGO_SETTINGS_MODULE=config.settings.production
EXPOSE 8000
# Same command as config/devstack.py web_command(), listening on all interfaces.
CMD ["granian", "--interface", "wsgi", "config.wsgi:application", "--host", "0.0.0.0", "--port", "8000", \
     "--workers", "2", "--backpressure", "16", "--static-path-route", "/static", "--static-path-mount", "/app/var/static"]
