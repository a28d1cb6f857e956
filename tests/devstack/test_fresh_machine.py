"""`make run` on a fresh machine: the development entry point starts everything from nothing, a shopper can
claim a coupon end to end (web -> Redis ledger -> worker -> PostgreSQL), and Ctrl-C stops it all cleanly.

Runs `python -m devstack run` exactly as `make run` does, with no DATABASE_URL / REDIS_URL (so the
embedded PostgreSQL and Valkey start), a data folder of its own and free ports, so a running dev system
is not disturbed.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest

BASE_DIR = Path(__file__).resolve().parent.parent.parent
READY_TIMEOUT = 120
ISSUE_TIMEOUT = 60
STOP_TIMEOUT = 30

pytestmark = pytest.mark.slow
NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def token_for(user: str, ttl: int = 600) -> str:
    from config.settings.base import DEV_TOKEN_SECRET

    secret = os.environ.get("COUPONS_TOKEN_SECRET") or DEV_TOKEN_SECRET
    exp = int(time.time()) + ttl
    sig = hmac.new(secret.encode(), f"{user}.{exp}".encode(), hashlib.sha256).hexdigest()
    return f"{exp}.{sig}"


def http(method: str, url: str, headers: dict[str, str], body: Any = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers=dict(headers))
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with NO_PROXY.open(req, timeout=10) as resp:
            status, raw = resp.status, resp.read()
    except urllib.error.HTTPError as err:
        status, raw = err.code, err.read()
    try:
        return status, json.loads(raw or b"null")
    except ValueError:
        return status, raw.decode(errors="replace")


def campaigns_in(payload: Any) -> list[dict[str, Any]]:
    """The list answer's format is not pinned by the contract: a bare list or a page with a list in it."""
    if isinstance(payload, list):
        items = payload
    elif isinstance(payload, dict):
        lists = [payload[k] for k in ("results", "campaigns", "items", "data") if isinstance(payload.get(k), list)]
        items = lists[0] if lists else []
    else:
        items = []
    return [c for c in items if isinstance(c, dict) and "id" in c]


def pick_campaign(items: list[dict[str, Any]]) -> dict[str, Any] | None:
    def claimable(c: dict[str, Any]) -> bool:
        remaining = c.get("remaining")
        live = c.get("state", c.get("status")) in (None, "live", "active", "open")
        return live and (remaining is None or int(remaining) > 0)

    return next((c for c in items if claimable(c)), items[0] if items else None)


def processes_of(folder: Path) -> list[str]:
    """PostgreSQL / Valkey processes working in the data folder (both run with their data dir as cwd)."""
    import psutil

    found = []
    for proc in psutil.process_iter(["name", "pid"]):
        if proc.info["name"] not in ("postgres", "valkey-server"):
            continue
        try:
            cwd = proc.cwd()
        except (psutil.Error, OSError):
            continue
        if cwd == str(folder) or cwd.startswith(f"{folder}/"):
            found.append(f"{proc.info['name']} pid {proc.info['pid']} in {cwd}")
    return found


def kill_processes_of(folder: Path) -> None:
    import psutil

    for proc in psutil.process_iter(["name"]):
        if proc.info["name"] in ("postgres", "valkey-server"):
            with contextlib.suppress(psutil.Error, OSError):
                cwd = proc.cwd()
                if cwd == str(folder) or cwd.startswith(f"{folder}/"):
                    proc.kill()


class Devstack:
    def __init__(self, data: Path, web_port: int, valkey_port: int) -> None:
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("TEST_")
            and k not in ("DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL", "DJANGO_SETTINGS_MODULE")
        }
        env.update(
            COUPONRUSH_DATA_DIR=str(data),
            COUPONRUSH_WEB_PORT=str(web_port),
            COUPONRUSH_VALKEY_PORT=str(valkey_port),
            PYTHONUNBUFFERED="1",
            NO_COLOR="1",
        )
        self.lines: list[str] = []
        self.queue: queue.Queue[str | None] = queue.Queue()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "devstack", "run"],
            cwd=BASE_DIR,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = raw.decode(errors="replace").rstrip("\n")
            self.lines.append(line)
            self.queue.put(line)
        self.queue.put(None)

    def output(self, last: int = 80) -> str:
        return "\n".join(self.lines[-last:])

    def wait_for(self, predicate: Any, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                pytest.fail(f"timed out after {timeout}s; output:\n{self.output()}")
            try:
                line = self.queue.get(timeout=left)
            except queue.Empty:
                continue
            if line is None:
                rc = self.proc.wait()
                pytest.fail(f"devstack exited ({rc}) before it was ready; output:\n{self.output()}")
            if predicate(line):
                return line


@pytest.fixture
def data_dir() -> Any:
    # Inside the project (embedded PostgreSQL as root opens up its parent folders); short for the socket.
    folder = BASE_DIR / "var" / f"fresh-{uuid.uuid4().hex[:8]}"
    yield folder
    kill_processes_of(folder)
    shutil.rmtree(folder, ignore_errors=True)


def wait_issued(stack: Devstack, base: str, headers: dict[str, str], claim_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + ISSUE_TIMEOUT
    while True:
        status, claim = http("GET", f"{base}/api/v1/claims/{claim_id}", headers)
        assert status == 200, claim
        if claim.get("status") == "issued":
            return claim
        assert claim.get("status") == "pending", claim
        if time.monotonic() > deadline:
            pytest.fail(f"claim {claim_id} still {claim!r} after {ISSUE_TIMEOUT}s; output:\n{stack.output()}")
        time.sleep(0.5)


def celery_worker_of(devstack_pid: int) -> int:
    """The pid of the Celery worker's main process that devstack started."""
    import psutil

    for child in psutil.Process(devstack_pid).children():
        if "worker" in child.cmdline() and any("celery" in part for part in child.cmdline()):
            return child.pid
    raise AssertionError("no celery worker among devstack's children")


def test_run_claim_issue_and_ctrl_c(data_dir: Path) -> None:
    web_port, valkey_port = free_port(), free_port()
    stack = Devstack(data_dir, web_port, valkey_port)
    try:
        base = f"http://127.0.0.1:{web_port}"
        stack.wait_for(lambda line: line.startswith("[devstack] ready in ") and base in line, READY_TIMEOUT)
        assert (data_dir / "devstack.env").exists(), "the started servers' URLs are recorded for manage.py"

        user = f"fresh_{uuid.uuid4().hex[:10]}"
        headers = {"X-User-Id": user, "X-Token": token_for(user)}

        status, body = http("GET", f"{base}/api/v1/campaigns", headers)
        assert status == 200, body
        campaign = pick_campaign(campaigns_in(body))
        assert campaign is not None, f"no demo campaign in GET /api/v1/campaigns: {body!r}"

        status, body = http("POST", f"{base}/api/v1/campaigns/{campaign['id']}/claim", headers, {})
        assert status == 200, body
        assert body["code"] == 0 and body["status"] == "claimed", body
        claim_id = body["claim_id"]

        # The worker drains the claim ledger into PostgreSQL and issues the coupon.
        claim = wait_issued(stack, base, headers, claim_id)
        assert claim["coupon"], claim
        assert str(claim["claim_id"]) == str(claim_id)

        # A worker that dies is started again, and the next claim is issued all the same.
        worker = celery_worker_of(stack.proc.pid)
        os.kill(worker, signal.SIGKILL)
        stack.wait_for(lambda line: "worker exited unexpectedly" in line and "starting it again" in line, 30)
        other = f"fresh_{uuid.uuid4().hex[:10]}"
        other_headers = {"X-User-Id": other, "X-Token": token_for(other)}
        status, body = http("POST", f"{base}/api/v1/campaigns/{campaign['id']}/claim", other_headers, {})
        assert status == 200 and body["status"] == "claimed", body
        assert wait_issued(stack, base, other_headers, body["claim_id"])["coupon"]

        # Ctrl-C: everything stops, the servers too, and the exit status is 0.
        stack.proc.send_signal(signal.SIGINT)
        try:
            rc = stack.proc.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            pytest.fail(f"devstack still running {STOP_TIMEOUT}s after SIGINT; output:\n{stack.output()}")
        assert rc == 0, stack.output()
        time.sleep(0.5)  # the postmaster's last children exit just after pg_ctl returns
        assert processes_of(data_dir) == [], stack.output()
        assert not (data_dir / "devstack.env").exists()
    finally:
        if stack.proc.poll() is None:  # the test failed or was interrupted: stop it, gently first
            stack.proc.send_signal(signal.SIGINT)
            try:
                stack.proc.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                os.killpg(stack.proc.pid, signal.SIGKILL)
                stack.proc.wait(timeout=10)
