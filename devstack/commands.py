"""The process commands `make run` supervises, and how a command runs from this interpreter's environment.

docs/ (deployment.md, operating.md) and docker-compose.yml mirror these (tests/test_compose.py keeps them equal):
change them together. The tests' own servers (tests/conftest.py, tests/faults/) and bench/ run the same lines.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
STATIC_ROOT = BASE_DIR / "var" / "static"  # settings.STATIC_ROOT; the web server serves it under /static


def web_command(port: int, host: str = "127.0.0.1") -> list[str]:
    # The project's server (config/server.py): the claim on each worker's event loop with an auto-pipelined
    # Redis connection, the rest of the API through Django's WSGI handler in a thread pool. See docs/benchmarks.md.
    return [
        "python", "-m", "config.server",
        "--host", host, "--port", str(port),
        "--static-path-route", "/static", "--static-path-mount", str(STATIC_ROOT),
    ]  # fmt: skip


def worker_command() -> list[str]:
    return ["celery", "-A", "config", "worker", "-l", "info", "--concurrency", "2"]


def beat_command() -> list[str]:
    return ["celery", "-A", "config", "beat", "-l", "info"]


def resolve(argv: Sequence[str]) -> list[str]:
    """Run console scripts from this interpreter's environment, whatever PATH says."""
    script = Path(sys.executable).parent / argv[0]
    if script.exists():
        return [str(script), *argv[1:]]
    if argv[0] in ("granian", "celery", "pytest"):
        return [sys.executable, "-m", argv[0], *argv[1:]]
    return list(argv)

