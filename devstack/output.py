"""What devstack prints: every line tagged with the process it came from (coloured on a terminal), and the
two exceptions that end a run: a problem the user can fix, and a stop signal."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import IO

from .commands import BASE_DIR


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

