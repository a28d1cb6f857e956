"""Turn var/fault-report.jsonl (one line per fault test run) into a markdown table, the latest run of each fault.

    python tests/faults/report.py [path/to/fault-report.jsonl]
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

DEFAULT = Path(__file__).resolve().parents[2] / "var" / "fault-report.jsonl"
COLUMNS = ["fault", "requests", "answers by status", "claimed", "coupons", "lost", "phantom", "503 in window",
           "window s", "max latency in / out s", "persisted after s", "balanced", "violations"]


def row(run: dict) -> list[str]:
    statuses = ", ".join(f"{status}: {n}" for status, n in run["by_status"].items())
    return [run["fault"], str(run["requests"]), statuses, str(run["claimed"]), str(run["coupons"]), str(run["lost"]),
            str(run["phantom"]), str(run["503_in_window"]), str(run["window_s"]),
            f"{run['max_latency_in_s']} / {run['max_latency_out_s']}", str(run["persisted_after_s"]),
            "yes" if run["balanced"] else "NO", str(run["violations"])]


def table(lines: list[str]) -> str:
    latest: dict[str, dict] = {}
    for line in lines:
        if line.strip():
            run = json.loads(line)
            latest[run["fault"]] = run
    out = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    out += ["| " + " | ".join(row(run)) + " |" for run in latest.values()]
    problems = [(run["fault"], p) for run in latest.values() for p in run.get("problems", [])]
    if problems:
        out += ["", "Violations:", *[f"- {fault}: {problem}" for fault, problem in problems]]
    return "\n".join(out)


if __name__ == "__main__":
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT
    print(table(path.read_text().splitlines()))
