"""Browser tests: Playwright driving Debian's Chromium against the real server, PostgreSQL and Redis.

Every test under tests/e2e is marked `e2e` (`pytest -m "not e2e"` leaves them out); the ones that need a
browser are skipped, with the reason, when /usr/bin/chromium is missing (`apt-get install chromium`; never
`playwright install`, which downloads a browser). The server is the run command's own (granian, through
tests.conftest.http_server) against the test database; static files are collected into var/static first,
which granian serves under /static as `make run` does. A drain thread stands in for the Celery worker, so
claims become coupons within a second. Screenshots go to var/screenshots/ (CI keeps them as artifacts).
"""
from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.core.management import call_command
from django.db import connections

from campaigns.models import Campaign
from orders.drain import drain_campaign

from ..conftest import ROOT

# Playwright's sync API runs an event loop in the test's thread; Django would refuse ORM calls there.
os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"

CHROMIUM = Path("/usr/bin/chromium")
SCREENSHOTS = ROOT / "var" / "screenshots"
E2E_DIR = Path(__file__).resolve().parent
BROWSER_FIXTURES = {"page", "context", "browser", "browser_type", "new_context", "launch_browser"}
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
    "--disable-component-update", "--no-first-run", "--disable-sync",
]
NO_CHROMIUM = f"{CHROMIUM} is missing: install Debian's Chromium (apt-get install -y chromium) to run browser tests"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "e2e: end-to-end tests in a real browser (Playwright + Chromium), tests/e2e")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if E2E_DIR not in Path(item.path).resolve().parents:
            continue
        item.add_marker(pytest.mark.e2e)
        if not CHROMIUM.exists() and BROWSER_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.skip(reason=NO_CHROMIUM))


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args: dict[str, Any]) -> dict[str, Any]:
    """pytest-playwright has no option for a browser path: Debian's Chromium, headless, never a download."""
    if not CHROMIUM.exists():
        pytest.skip(NO_CHROMIUM)
    return {**browser_type_launch_args, "executable_path": str(CHROMIUM), "headless": True, "args": CHROMIUM_ARGS}


@pytest.fixture(scope="session")
def browser_context_args(browser_context_args: dict[str, Any]) -> dict[str, Any]:
    return {**browser_context_args, "viewport": {"width": 1280, "height": 900}, "locale": "en-US"}


@pytest.fixture(scope="session")
def collected_static() -> Path:
    """Static files collected into var/static (settings.STATIC_ROOT), which the server mounts at /static."""
    call_command("collectstatic", interactive=False, verbosity=0)
    return ROOT / "var" / "static"


# The server fixtures name http_server as an argument (never getfixturevalue): pytest-django creates the test
# database only for tests whose fixtures it can see. The environment fixture comes first in their arguments,
# so it is in place when http_server starts the server process, which reads it.


@pytest.fixture
def demo_tokens_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COUPONS_DEMO_TOKENS", "true")


@pytest.fixture
def demo_tokens_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COUPONS_DEMO_TOKENS", raising=False)


@pytest.fixture
def storefront_server(demo_tokens_on: None, collected_static: Path, http_server: str) -> str:
    """The real server with the dev-only demo-shopper endpoint on (the test settings have DEBUG off)."""
    return on_test_database(http_server)


@pytest.fixture
def plain_server(demo_tokens_unset: None, collected_static: Path, http_server: str) -> str:
    """The real server as deployed: DEBUG off, no demo-shopper endpoint."""
    return on_test_database(http_server)


def on_test_database(url: str) -> str:
    name = settings.DATABASES["default"]["NAME"]
    assert name.startswith("test_"), f"the browser tests must run against pytest-django's test database, not {name}"
    return url


@pytest.fixture
def drain_loop(transactional_db: Any) -> Iterator[None]:
    """Stand-in for the Celery worker: drain every loaded campaign's ledger into PostgreSQL every 0.3 s."""
    stop = threading.Event()
    errors: list[BaseException] = []

    def loop() -> None:
        try:
            while not stop.is_set():
                try:
                    for pk in Campaign.objects.filter(preheated_at__isnull=False).values_list("pk", flat=True):
                        drain_campaign(campaign_id=pk, max_seconds=2.0)
                except Exception as exc:  # noqa: BLE001 - reported at teardown, the loop goes on
                    errors.append(exc)
                stop.wait(0.3)
        finally:
            connections.close_all()  # this thread's connections only

    thread = threading.Thread(target=loop, name="e2e-drain", daemon=True)
    thread.start()
    yield
    stop.set()
    thread.join(10)
    assert not errors, f"the drain failed: {errors[:3]!r}"


def save_screenshot(page: Any, name: str) -> Path:
    """Save a full-page screenshot as var/screenshots/<name>.png (CI artifacts) and return its path."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


