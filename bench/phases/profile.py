"""Phase `profile`: py-spy of every web server worker under the selling load (or a fixed rate): the claim path's
top frames by own and total time, own time by area, and a small icicle graph.
"""
from __future__ import annotations

import collections
import contextlib
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from common import LOG_DIR, RESULTS_DIR, log, rel

from phases.context import Suite, esc
from phases.loadgen import run_loadgen


def run(suite: Suite) -> None:
    """py-spy of every web server worker under the selling load: where the claim path's time goes."""
    a = suite.args
    pyspy = Path(sys.executable).parent / "py-spy"
    if not pyspy.exists():
        suite.report["scenarios"]["profile"] = {"skipped": "py-spy not installed (pip install -e '.[bench]')"}
        log("== profile: skipped, py-spy is not installed (make bench installs the bench extra)")
        return
    suite.pause_worker(True)
    seconds = max(3, int(a.duration) - 2)
    out = LOG_DIR / "profile.txt"
    out.unlink(missing_ok=True)  # py-spy that fails writes nothing: never summarize an earlier run's profile
    svg = RESULTS_DIR / "profile-latest.svg"
    log(f"== profile: py-spy record --subprocesses of the web server (pid {suite.web.proc.pid}) for {seconds}s "
        "under the selling load")
    argv = [str(pyspy), "record", "--pid", str(suite.web.proc.pid), "--subprocesses", "--nonblocking",
            "--rate", "200", "--duration", str(seconds), "--format", "raw", "--output", str(out)]
    spy = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    time.sleep(0.5)
    try:
        if a.profile_rate:  # a moderate fixed rate: where the time goes when a loop turn carries few claims
            run = run_loadgen(suite.loadgen, "couponrush under py-spy", port=suite.port,
                              path=f"/api/v1/campaigns/{suite.sell_id}/claim", rate=a.profile_rate,
                              duration=seconds + 1, connections=a.connections, tokens=suite.tokens,
                              offset=suite.offsets[suite.sell_id], repeat=a.repeat)
            suite.offsets[suite.sell_id] += run["sent"] + a.connections
            load = {"requests_per_s": run["achieved_rate"], "p50_ms": run["latency_from_intent"].get("p50_ms"),
                    "p99_ms": run["latency_from_intent"].get("p99_ms"), "fixed_rate": a.profile_rate}
        else:
            load = suite.wrk_with_ticker("couponrush under py-spy", suite.sell_id, lambda: "sampling")
    finally:
        try:
            spy_out = spy.communicate(timeout=30)[0].decode(errors="replace")
        except subprocess.TimeoutExpired:
            spy.kill()
            spy_out = spy.communicate()[0].decode(errors="replace")
    if not out.exists():
        suite.report["scenarios"]["profile"] = {"error": spy_out.strip()[-500:]}
        log(f"py-spy wrote nothing: {spy_out.strip()[-300:]}")
        return
    profile = summarize_profile(out.read_text(errors="replace"))
    profile["load_under_profiler"] = {k: load.get(k) for k in ("requests_per_s", "p50_ms", "p99_ms")}
    profile["raw"] = rel(out)
    with contextlib.suppress(Exception):
        svg.write_text(flame_svg(out.read_text(errors="replace")))
        profile["flame_svg"] = rel(svg)
    suite.report["scenarios"]["profile"] = profile
    log(f"profile: {profile['samples']:,} samples; top frames by own time:")
    for row in profile["top_self"][:10]:
        log(f"    {row['share']:6.1%}  {row['frame']}")


def summarize_profile(raw: str, top: int = 25) -> dict[str, Any]:
    """Collapsed stacks (py-spy --format raw: 'frame;frame;... count') -> top frames by own and total time."""
    own: collections.Counter[str] = collections.Counter()
    total: collections.Counter[str] = collections.Counter()
    by_file: collections.Counter[str] = collections.Counter()
    samples = 0
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = [f for f in stack.split(";") if f and not f.startswith("process ") and not f.startswith("thread ")]
        if not frames:
            continue
        samples += n
        own[frames[-1]] += n
        for f in set(frames):
            total[f] += n
        m = re.search(r"\(([^)]*?)(?::\d+)?\)$", frames[-1])
        path = m.group(1) if m else "?"
        area = _area(path)
        by_file[area] += n

    def rows(counter: collections.Counter[str]) -> list[dict[str, Any]]:
        return [{"frame": f, "samples": n, "share": round(n / samples, 4)} for f, n in counter.most_common(top)]

    return {"samples": samples, "top_self": rows(own), "top_total": rows(total),
            "own_time_by_area": [{"area": k, "share": round(v / samples, 4)} for k, v in by_file.most_common()]
            if samples else []}


def _area(path: str) -> str:
    """Group a frame's file into a readable area of the claim path."""
    for needle, name in (("webserver/", "web server: webserver/"), ("httptools", "httptools"),
                         ("uvloop", "uvloop"), ("/redis/", "redis-py"),
                         ("hiredis", "redis-py"), ("/django/", "django"),
                         ("/rest_framework/", "djangorestframework"), ("/granian/", "granian"),
                         ("/celery/", "celery"), ("/kombu/", "kombu"), ("/prometheus_client/", "prometheus"),
                         ("/logging/", "logging"), ("/json/", "json"), ("/asyncio/", "asyncio"),
                         ("/uuid", "uuid"), ("/hmac", "hmac"), ("/threading", "threading"), ("/socket", "socket")):
        if needle in path:
            return name
    for app in ("config/", "orders/", "campaigns/", "coupons/"):
        if app in path:
            return "couponrush " + app.rstrip("/")
    return "other: " + path.rsplit("/", 1)[-1]


def flame_svg(raw: str, width: int = 1200, row: int = 16, min_share: float = 0.003) -> str:
    """A small icicle graph of collapsed stacks, hand-written SVG (frames under min_share are left out)."""
    tree: dict[str, Any] = {"n": 0, "kids": {}}
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        node = tree
        node["n"] += n
        for f in stack.split(";"):
            node = node["kids"].setdefault(f, {"n": 0, "kids": {}})
            node["n"] += n
    total = tree["n"] or 1
    rects: list[str] = []
    depth_max = [0]

    def walk(node: dict[str, Any], x: float, depth: int) -> None:
        for name, kid in sorted(node["kids"].items(), key=lambda kv: -kv[1]["n"]):
            w = kid["n"] / total * width
            if kid["n"] / total >= min_share:
                depth_max[0] = max(depth_max[0], depth)
                label = esc(name)
                hue = 20 + (hash(name.split(" (")[0]) % 40)
                rects.append(f'<g><title>{label} ({kid["n"] / total:.1%})</title><rect x="{x:.1f}" y="{depth * row}" '
                             f'width="{max(w - 0.5, 0.5):.1f}" height="{row - 1}" fill="hsl({hue},80%,60%)"/>'
                             + (f'<text x="{x + 2:.1f}" y="{depth * row + 12}" font-size="10">'
                                f'{esc(name.split(" (")[0][: int(w / 6)])}</text>' if w > 40 else "") + "</g>")
                walk(kid, x, depth + 1)
            x += w

    walk(tree, 0.0, 0)
    height = (depth_max[0] + 2) * row
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="monospace">'
            + "".join(rects) + "</svg>\n")
