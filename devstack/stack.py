"""A mode's stack: its data folder (var/ or COUPONRUSH_DATA_DIR, inside the project), the servers it needs
(`run`: var/pg and Valkey on 6390; `test`: var/test-pg and Valkey on 6391), started only for URLs that are not
set, one devstack per data folder and mode (a lock), and the file the started servers' URLs go to."""

from __future__ import annotations

import fcntl
import os
from dataclasses import dataclass
from pathlib import Path

from .commands import BASE_DIR
from .embedded import EmbeddedPostgres, EmbeddedValkey
from .output import DevstackError, rel, say


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

