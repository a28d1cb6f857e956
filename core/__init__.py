"""The shared package below the apps: errors and codes, HTTP helpers, shopper auth, DRF base classes,
advisory locks, logs, metrics, tracing and health. It imports no app (tests/test_layering.py)."""
