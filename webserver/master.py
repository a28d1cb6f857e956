"""The master process and the entry point: it listens (one socket a worker on one port, SO_REUSEPORT: the kernel
spreads connections over them), forks the workers (webserver.worker), starts a worker again when one dies (and
gives up when they die too often), and stops them gracefully on SIGTERM / SIGINT. `main` parses the command line
(webserver.options) and runs a master; a port another process listens on is exit code 2.
"""
from __future__ import annotations

import argparse
import ctypes
import errno
import logging
import os
import signal
import socket
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any

from .options import RESTART_WINDOW, RESTARTS, STOP_GRACE_SECONDS, ApplicationFactory, parse_args
from .worker import Worker

_STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT}


def listening_sockets(host: str, port: int, count: int) -> list[socket.socket]:
    """`count` sockets listening on one port (SO_REUSEPORT), one per worker. The master keeps them open, so
    a worker started again takes over its socket's queue of connections: none is refused meanwhile."""
    sockets: list[socket.socket] = []
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # SO_REUSEPORT would let these sockets join another server's on the port (any process of this user):
    # a bind without it fails when anything listens there (EADDRINUSE), and port 0 takes a free port.
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a closed connection's TIME_WAIT is no owner
        probe.bind((host, port))
        port = probe.getsockname()[1]
    try:
        for _ in range(count):
            sock = socket.socket(family, socket.SOCK_STREAM)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.bind((host, port))
            sock.listen(2048)
            sock.set_inheritable(True)
    except OSError:
        for sock in sockets:
            sock.close()
        raise
    return sockets


def _die_with_parent() -> None:
    """A worker gets SIGTERM when its master dies, however it died (Linux)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGTERM), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class Master:
    def __init__(self, args: argparse.Namespace, application_factory: ApplicationFactory) -> None:
        self.args = args
        self.application_factory = application_factory
        self.static = (args.static_path_route.rstrip("/"), Path(args.static_path_mount).resolve()) \
            if args.static_path_mount else None
        self.sockets = listening_sockets(args.host, args.port, args.workers)
        self.port = self.sockets[0].getsockname()[1]
        self.children: dict[int, int] = {}  # pid -> worker index
        self.deaths: deque[float] = deque()
        self.stopping = False

    def say(self, message: str) -> None:
        print(f"[server {os.getpid()}] {message}", file=sys.stderr, flush=True)

    def spawn(self, index: int) -> None:
        # The stop signals wait until the child has its own handlers and the master knows the child's pid:
        # the master's handler must not run in the child, nor miss a child it has not recorded yet.
        signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
        pid = os.fork()
        if pid == 0:
            status = 1
            try:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                signal.signal(signal.SIGALRM, signal.SIG_DFL)
                signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)
                _die_with_parent()
                sock = self.sockets[index]
                for other in self.sockets:
                    if other is not sock:
                        other.close()
                Worker(sock, self.args, self.static, self.application_factory).run()
                status = 0
            except BaseException:  # noqa: BLE001  (the worker's last word, then it exits)
                logging.getLogger("couponrush.server").exception("worker failed")
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(status)
        self.children[pid] = index
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)

    def on_stop(self, signum: int, frame: Any) -> None:
        if not self.stopping:
            self.say(f"{signal.Signals(signum).name}: stopping the workers")
            self.stop()

    def stop(self) -> None:
        """SIGTERM to the workers (SIGKILL after the grace period), and the listening sockets closed here:
        once each worker has closed its own, a new connection is refused instead of waiting in a queue no
        one reads."""
        self.stopping = True
        for sock in self.sockets:
            sock.close()
        self.signal_children(signal.SIGTERM)
        signal.alarm(int(STOP_GRACE_SECONDS) + 2)

    def on_alarm(self, signum: int, frame: Any) -> None:
        self.say("workers still running after the grace period: killing them")
        self.signal_children(signal.SIGKILL)

    def signal_children(self, signum: int) -> None:
        for pid in list(self.children):
            try:
                os.kill(pid, signum)
            except ProcessLookupError:
                pass

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self.on_stop)
        signal.signal(signal.SIGINT, self.on_stop)
        signal.signal(signal.SIGALRM, self.on_alarm)
        for index in range(self.args.workers):
            self.spawn(index)
        self.say(f"listening on http://{self.args.host}:{self.port} with {self.args.workers} workers")
        exit_code = 0
        while self.children:
            try:
                pid, status = os.wait()
            except ChildProcessError:
                break
            index = self.children.pop(pid, -1)
            if index < 0 or self.stopping:
                continue
            code = os.waitstatus_to_exitcode(status)
            now = time.monotonic()
            self.deaths.append(now)
            while self.deaths and now - self.deaths[0] > RESTART_WINDOW:
                self.deaths.popleft()
            if len(self.deaths) > RESTARTS:
                self.say(f"worker {pid} exited ({code}): {RESTARTS} restarts within {RESTART_WINDOW:.0f}s, "
                         "giving up")
                exit_code = 1
                self.stop()  # and wait for the others, as on SIGTERM
                continue
            self.say(f"worker {pid} exited ({code}): starting another")
            self.spawn(index)
        self.say("stopped")
        return exit_code


def main(argv: list[str] | None, application_factory: ApplicationFactory, prog: str = "couponrush server") -> int:
    """Serve what application_factory(args) returns in each worker until SIGTERM / SIGINT."""
    args = parse_args(argv, prog)
    try:
        master = Master(args, application_factory)
    except OSError as exc:
        detail = "the port is in use" if exc.errno == errno.EADDRINUSE else exc.strerror
        print(f"{prog}: cannot listen on {args.host}:{args.port}: {detail}", file=sys.stderr)
        return 2
    return master.run()

