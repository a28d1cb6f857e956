"""Django's PostgreSQL backend with a bounded health check (core/postgresql/base.py)."""
