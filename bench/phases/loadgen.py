"""bench/loadgen, the fixed-rate client (Go, standard library only): built with Debian's Go, run, summarized.
The suite's fixed-rate phases use it, and so do bench/sale.py and bench/ab.py.
"""
from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

from common import BENCH_VAR, LOG_DIR, BenchError, ensure_go, log, rel, run_step

LOADGEN_SRC = Path(__file__).resolve().parent.parent / "loadgen" / "main.go"


def build_loadgen() -> Path:
    """Build bench/loadgen (standard library only) with Debian's Go (installed when missing)."""
    out = BENCH_VAR / "loadgen" / "loadgen"
    if out.exists() and out.stat().st_mtime >= LOADGEN_SRC.stat().st_mtime:
        log(f"loadgen: reusing {rel(out)}")
        return out
    go = ensure_go()
    gopath = BENCH_VAR / "loadgen" / "gopath"
    src = gopath / "src" / "loadgen"
    src.mkdir(parents=True, exist_ok=True)
    shutil.copy2(LOADGEN_SRC, src / "main.go")
    env = {**os.environ, "GO111MODULE": "off", "GOPATH": str(gopath), "GOCACHE": str(BENCH_VAR / "loadgen" / "cache")}
    run_step("loadgen build", [go, "build", "-o", str(out), "."], env | {"PWD": str(src)}, cwd=src)
    if not out.exists():
        raise BenchError(f"go build did not produce {out}")
    return out


def run_summary(run: dict[str, Any]) -> dict[str, Any]:
    """A loadgen run in a few figures (the report keeps every round this way)."""
    return {"target_rate": run.get("target_rate"), "achieved_rate": run.get("achieved_rate"),
            "late_start_share": run.get("late_start_share"),
            **{f"{p}_from_intent": run["latency_from_intent"].get(p) for p in ("p50_ms", "p99_ms", "p999_ms")},
            "p99_ms_from_send": run["latency_from_send"].get("p99_ms")}


def from_intent(run: dict[str, Any], key: str) -> Any:
    """A loadgen run's latency from the intended send time (None for a side that was skipped)."""
    return (run.get("latency_from_intent") or {}).get(key)


def run_loadgen(binary: Path, label: str, *, port: int, path: str, rate: float, duration: float, connections: int,
                tokens: Path | None = None, offset: int = 0, repeat: float = 0.15,
                method: str = "POST") -> dict[str, Any]:
    argv = [str(binary), "-addr", f"127.0.0.1:{port}", "-method", method, "-path", path, "-rate", f"{rate:.0f}",
            "-d", f"{duration:g}s", "-c", str(connections), "-repeat", str(repeat), "-offset", str(offset)]
    if tokens is not None:
        argv += ["-tokens", str(tokens)]
    log(f"{label}: {shlex.join(argv)}")
    proc = subprocess.run(argv, capture_output=True, text=True, start_new_session=True, check=False)
    if proc.returncode != 0:
        raise BenchError(f"loadgen failed ({label}): {proc.stderr.strip()}")
    out = json.loads(proc.stdout)
    (LOG_DIR / f"loadgen-{label.replace(' ', '_')}.json").write_text(proc.stdout)
    lat = out["latency_from_intent"]
    log(f"{label}: {out['achieved_rate']:,.0f} req/s of {rate:,.0f} intended; from intended send p50 "
        f"{lat.get('p50_ms')} ms, p99 {lat.get('p99_ms')} ms, p99.9 {lat.get('p999_ms')} ms; errors {out['errors']}")
    return out
