"""The supervisor of `make run`'s processes: each child in a session of its own (a terminal's Ctrl-C reaches
only devstack, which stops them in order), its output pumped line by line with its tag, and on Linux a child
that dies with devstack (PR_SET_PDEATHSIG) however devstack ends."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .commands import BASE_DIR, resolve
from .output import DevstackError, emit, say

CHILD_STOP_TIMEOUT = 10.0


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



# The preexec_fn of every child devstack starts (the embedded Valkey's too); None where prctl is missing.
CHILD_SETUP: Callable[[], None] | None = _child_setup if _PRCTL is not None else None


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
            preexec_fn=CHILD_SETUP,  # noqa: PLW1509
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

