"""Phase `syscalls` (issue 24, goal 3): each side's server at a moderate fixed rate, once clean (CPU, user and
kernel, and context switches per claim, from /proc) and once under `strace -c -f` (system calls per claim).
"""
from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from common import LOG_DIR, log, proc_stat

from phases.context import Suite
from phases.loadgen import run_loadgen


def run(suite: Suite) -> None:
    """Where a claim's time goes at a moderate fixed rate (issue 24, goal 3): for each side, a clean run
    (server CPU, user and kernel, and context switches per claim, from /proc) and a run under `strace -c -f`
    (system calls per claim by name; strace slows the server, so its latencies are not reported)."""
    a = suite.args
    strace = shutil.which("strace")
    rate = a.syscall_rate
    sides = "both sides" if suite.seed else "couponrush"
    log(f"== syscalls: {sides} at {rate:,} claims/s, {a.duration:g} s clean, then {a.duration:g} s under "
        f"strace -c -f ({strace or 'not installed: counts skipped'})")
    suite.pause_worker(True)
    result: dict[str, Any] = {"rate": rate, "seed_go": suite.no_seed}
    for side in ("couponrush", "seed_go") if suite.seed is not None else ("couponrush",):
        port = suite.port if side == "couponrush" else suite.seed_port
        figures: dict[str, Any] = {}
        for traced in (False, True):
            if traced and strace is None:
                continue
            if side == "couponrush":
                path, offset = f"/api/v1/campaigns/{suite.sell_id}/claim", suite.offsets[suite.sell_id]
            else:
                path, offset = f"/api/v1/campaigns/{suite.seed_campaign(60 + traced, a.sell_stock)}/claim", 0
            tasks = _side_tasks(suite, side)
            cpu0, sw0 = _task_cpu(tasks), _switches(tasks)
            tracer = None
            out = LOG_DIR / f"strace-{side}.txt"
            if traced:
                tids = [x for t in tasks for x in ("-p", t.rsplit("/", 1)[1])]
                argv = [str(strace), "-c", "-f", "-q", "-o", str(out), *tids]
                tracer = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                          start_new_session=True)
                time.sleep(1.0)
            run = run_loadgen(suite.loadgen, f"{side} syscalls{' traced' if traced else ''}", port=port,
                              path=path, rate=rate, duration=a.duration, connections=a.connections,
                              tokens=suite.tokens, offset=offset, repeat=a.repeat)
            if side == "couponrush":
                suite.offsets[suite.sell_id] += run["sent"] + a.connections
            claims = max(1, run["completed"])
            if tracer is not None:
                tracer.send_signal(signal.SIGINT)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    tracer.wait(timeout=30)
                calls = parse_strace_summary(out.read_text(errors="replace")) if out.exists() else {}
                total = sum(calls.values())
                figures["syscalls_per_claim"] = round(total / claims, 2)
                figures["by_call"] = {name: round(n / claims, 2) for name, n in
                                      sorted(calls.items(), key=lambda kv: -kv[1])[:12]}
                log(f"{side}: {total / claims:.1f} system calls per claim: " + ", ".join(
                    f"{k} {v}" for k, v in figures["by_call"].items()))
            else:
                (u1, s1), sw1 = _task_cpu(tasks), _switches(tasks)
                figures.update({
                    "claims": claims, "p99_ms_from_intent": run["latency_from_intent"].get("p99_ms"),
                    "user_us_per_claim": round((u1 - cpu0[0]) / claims * 1e6, 1),
                    "kernel_us_per_claim": round((s1 - cpu0[1]) / claims * 1e6, 1),
                    "switches_per_claim": round((sw1 - sw0) / claims, 2),
                })
                log(f"{side}: server CPU per claim {figures['user_us_per_claim']} us user + "
                    f"{figures['kernel_us_per_claim']} us kernel, {figures['switches_per_claim']} context "
                    f"switches per claim, p99 {figures['p99_ms_from_intent']} ms")
        result[side] = figures
    suite.report["scenarios"]["syscalls"] = result


def _side_tasks(suite: Suite, side: str) -> list[str]:
    """Every thread of one side's server (/proc/PID/task/TID; /proc/TID alone would give the whole process's
    figures): couponrush's master and workers (its session), or seed-go's."""
    if side == "couponrush":
        sid = suite.web.proc.pid
        pids = [int(e.name) for e in os.scandir("/proc")
                if e.name.isdigit() and (f := proc_stat(e.name)) is not None and int(f[3]) == sid]
    else:
        assert suite.seed is not None, "seed-go's side is measured only when it runs"
        pids = [suite.seed.proc.pid]
    return [f"/proc/{pid}/task/{t.name}" for pid in pids for t in os.scandir(f"/proc/{pid}/task")]


def _switches(tasks: list[str]) -> int:
    total = 0
    for task in tasks:
        with contextlib.suppress(OSError):
            for line in Path(f"{task}/status").read_text().splitlines():
                if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                    total += int(line.split()[1])
    return total


def _task_cpu(tasks: list[str]) -> tuple[float, float]:
    user = system = 0.0
    tick = os.sysconf("SC_CLK_TCK")
    for task in tasks:
        with contextlib.suppress(OSError, IndexError):
            fields = Path(f"{task}/stat").read_text().rsplit(")", 1)[1].split()
            user += int(fields[11]) / tick
            system += int(fields[12]) / tick
    return user, system


def parse_strace_summary(text: str) -> dict[str, int]:
    """System calls by name from `strace -c`'s table (% time, seconds, usecs/call, calls, [errors,] syscall)."""
    calls: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 5 and parts[0].replace(".", "", 1).isdigit() and parts[-1] != "total":
            calls[parts[-1]] = int(parts[3])
    return calls
