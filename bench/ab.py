"""Interleaved A/B of two checkouts' web servers on the claim: the selling claim and the sold-out storm.

    .venv/bin/python bench/ab.py --old ../base [--new .] [--rounds 4] [--duration 8]
    .venv/bin/python bench/ab.py --old . --old-workers 2 --new-workers 1 --only fixed --fixed-rates 4000,8000,12000

`--old-workers` / `--new-workers` give each side's web server workers (2, the run command's), so that one checkout
can be measured against itself with another worker count (issue 24: the default is chosen by this). `--fixed-rates`
adds, in every round, bench/loadgen at each of those rates on both sides (latency from the intended send time,
100 connections; `--only fixed` runs these alone).

Both servers run at once from the same stores (DATABASE_URL / REDIS_URL, or embedded servers under
var/bench/), the same token secret and the same command line (`python -m config.server --workers 2`, each from
its own checkout, with this .venv's Python); each round loads one, then the other (the order alternates:
ABBA), with wrk -t2 -c100 and the shared claim.lua. The selling campaign never sells out (stock 10,000,000,
limit 1) and each side's round has shoppers of its own (a fresh token file), so every claim runs the script;
the sold-out campaign was sold out before the first round. No Celery worker runs: the claim path alone.
Both checkouts must share the database schema (this script migrates with --new's code).

Prints each round's pair and the median ratio new/old, and writes bench/results/ab-<timestamp>.json.
"""
from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402
from common import BENCH_VAR, CLAIM_LUA, LOG_DIR, RESULTS_DIR, log  # noqa: E402
from phases.loadgen import build_loadgen, run_loadgen, run_summary  # noqa: E402


def start_server(name: str, checkout: Path, port: int, env: dict[str, str], workers: int) -> subprocess.Popen[bytes]:
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "config.server", "--host", "127.0.0.1", "--port", str(port), "--workers",
            str(workers)]
    with open(LOG_DIR / f"ab-{name}.log", "wb") as out:
        proc = subprocess.Popen(argv, cwd=checkout, env={**env, "PYTHONPATH": str(checkout)},
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    t0 = time.monotonic()
    while not common.http_ok(f"http://127.0.0.1:{port}/healthz"):
        if proc.poll() is not None or time.monotonic() - t0 > 60:
            raise common.BenchError(f"{name} server did not start (log {LOG_DIR / f'ab-{name}.log'})")
        time.sleep(0.2)
    log(f"{name}: {checkout} serving on {port}")
    return proc


def wrk_with_cpu(label: str, server: subprocess.Popen[bytes], url: str, *, connections: int, duration: float,
                 script_args: list[str]) -> dict[str, Any]:
    """wrk -t2 with the shared claim.lua, and the CPU the server's processes spent per request (from /proc: on a
    shared host a steadier figure than requests/s, which moves with whatever else runs)."""
    cpu_before = common.session_cpu(server.pid)
    figures = common.run_wrk(label, url, threads=2, connections=connections, duration=duration, script=CLAIM_LUA,
                             script_args=script_args)
    if figures.get("requests"):
        figures["server_cpu_us_per_request"] = round(
            (common.session_cpu(server.pid) - cpu_before) / figures["requests"] * 1e6, 1)
        log(f"{label}: {figures['server_cpu_us_per_request']} us of the server's CPU per request")
    return figures


def claim_once(port: int, campaign: int, user: str, token: str) -> str:
    import urllib.request

    request = urllib.request.Request(f"http://127.0.0.1:{port}/api/v1/campaigns/{campaign}/claim", data=b"{}",
                                     headers={"X-User-Id": user, "X-Token": token,
                                              "Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(request, timeout=5) as answer:  # noqa: S310 - our own localhost server
        return str(json.loads(answer.read())["status"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old", type=Path, required=True, help="the checkout before the change")
    parser.add_argument("--new", type=Path, default=common.BASE_DIR, help="the checkout after it (this one)")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--duration", type=float, default=8.0, help="seconds of each wrk run (8)")
    parser.add_argument("--connections", type=int, default=100)
    parser.add_argument("--shoppers", type=int, default=400_000, help="shoppers per side and round (400000)")
    parser.add_argument("--only", choices=["selling", "sold_out", "fixed"], help="measure one of the loads only")
    parser.add_argument("--old-workers", type=int, default=2, help="web server workers of --old (2)")
    parser.add_argument("--new-workers", type=int, default=2, help="web server workers of --new (2)")
    parser.add_argument("--fixed-rates", default="", help="fixed rates (claims/s, comma-separated) for bench/loadgen")
    args = parser.parse_args(argv)
    fixed_rates = [int(r) for r in args.fixed_rates.split(",") if r.strip()]
    if args.only == "fixed" and not fixed_rates:
        parser.error("--only fixed needs --fixed-rates")
    loadgen = build_loadgen() if fixed_rates else None
    common.set_name("ab")
    sides = {"old": args.old.resolve(), "new": args.new.resolve()}
    stores = common.start_stores()
    secret = secrets.token_hex(16)
    env = common.child_env(stores, secret)
    servers: dict[str, subprocess.Popen[bytes]] = {}
    try:
        common.run_step("migrate", [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], env,
                        cwd=sides["new"])
        env_new = {**env, "PYTHONPATH": str(sides["new"])}
        selling = common.create_campaign(env_new, 10_000_000)
        sold_out = common.create_campaign(env_new, 1)
        ports = {name: common.free_port() for name in sides}
        workers = {"old": args.old_workers, "new": args.new_workers}
        for name, checkout in sides.items():
            servers[name] = start_server(name, checkout, ports[name], env, workers[name])
        first = common.write_tokens(BENCH_VAR / "ab-first.txt", 1, secret, prefix="first")
        user, token = first.read_text().split()
        assert claim_once(ports["new"], sold_out, user, token) == "claimed"
        for name in sides:  # each process raises its own sold-out flag from a script's answer
            assert claim_once(ports[name], sold_out, user, token) in ("limit_reached", "sold_out")
        rounds: list[dict[str, Any]] = []
        for i in range(args.rounds):
            order = ["old", "new"] if i % 2 == 0 else ["new", "old"]
            row: dict[str, Any] = {"round": i + 1, "order": order}
            for name in order:
                tokens = common.write_tokens(BENCH_VAR / "ab-tokens.txt", args.shoppers, secret,
                                             prefix=f"{name[0]}{i:02d}x")
                url = f"http://127.0.0.1:{ports[name]}"
                skipped = {"requests_per_s": float("nan"), "p99_ms": None}
                sell = skipped if args.only in ("sold_out", "fixed") else wrk_with_cpu(
                    f"ab {name} selling r{i + 1}", servers[name], url, connections=args.connections,
                    duration=args.duration, script_args=[str(selling), str(tokens)])
                storm = skipped if args.only in ("selling", "fixed") else wrk_with_cpu(
                    f"ab {name} sold-out r{i + 1}", servers[name], url, connections=args.connections,
                    duration=args.duration, script_args=[str(sold_out), str(tokens)])
                row[name] = {"selling": sell["requests_per_s"], "selling_p99_ms": sell.get("p99_ms"),
                             "selling_cpu_us": sell.get("server_cpu_us_per_request"),
                             "sold_out": storm["requests_per_s"], "sold_out_p99_ms": storm.get("p99_ms"),
                             "sold_out_cpu_us": storm.get("server_cpu_us_per_request")}
                offset = 0
                for rate in fixed_rates:  # the same token file, later shoppers: every claim a fresh shopper
                    assert loadgen is not None
                    run = run_loadgen(loadgen, f"ab {name} fixed {rate} r{i + 1}", port=ports[name],
                                      path=f"/api/v1/campaigns/{selling}/claim", rate=rate,
                                      duration=args.duration, connections=args.connections, tokens=tokens,
                                      offset=offset, repeat=0.15)
                    offset += run["sent"] + args.connections
                    row[name][f"fixed_{rate}"] = run_summary(run)
            row["ratio_selling"] = round(row["new"]["selling"] / row["old"]["selling"], 3)
            row["ratio_sold_out"] = round(row["new"]["sold_out"] / row["old"]["sold_out"], 3)
            for load in ("selling", "sold_out"):
                if row["old"][f"{load}_cpu_us"] and row["new"][f"{load}_cpu_us"]:
                    row[f"cpu_ratio_{load}"] = round(row["new"][f"{load}_cpu_us"] / row["old"][f"{load}_cpu_us"], 3)
            rounds.append(row)
            for rate in fixed_rates:
                old, new = row["old"][f"fixed_{rate}"], row["new"][f"fixed_{rate}"]
                log(f"round {i + 1}: fixed {rate:,}/s p99 from intent old {old['p99_ms_from_intent']} ms, new "
                    f"{new['p99_ms_from_intent']} ms (achieved {old['achieved_rate']:,.0f} / "
                    f"{new['achieved_rate']:,.0f})")
            log(f"round {i + 1}: selling old {row['old']['selling']:,.0f} new {row['new']['selling']:,.0f} "
                f"({row['ratio_selling']}), sold-out old {row['old']['sold_out']:,.0f} "
                f"new {row['new']['sold_out']:,.0f} ({row['ratio_sold_out']})")
        report = {
            "when": datetime.now(UTC).isoformat(timespec="seconds"), "old": str(sides["old"]),
            "new": str(sides["new"]), "duration_s": args.duration, "connections": args.connections,
            "loadavg_before": os.getloadavg(), "rounds": rounds,
            "workers": workers, "fixed_rates": fixed_rates,
            "median_fixed_p99_ms": {f"{side} {rate}": statistics.median(
                r[side][f"fixed_{rate}"]["p99_ms_from_intent"] or float("inf") for r in rounds)
                for rate in fixed_rates for side in sides},
            "median_ratio_selling": statistics.median(r["ratio_selling"] for r in rounds),
            "median_ratio_sold_out": statistics.median(r["ratio_sold_out"] for r in rounds),
            **{f"median_cpu_ratio_{load}": statistics.median(r[f"cpu_ratio_{load}"] for r in rounds)
               for load in ("selling", "sold_out") if all(f"cpu_ratio_{load}" in r for r in rounds)},
        }
        RESULTS_DIR.mkdir(parents=True, exist_ok=True)
        out = RESULTS_DIR / f"ab-{datetime.now(UTC):%Y%m%d-%H%M%S}.json"
        out.write_text(json.dumps(report, indent=2))
        print("| round | order | selling old | selling new | new/old | sold-out old | sold-out new | new/old |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- |")
        for r in rounds:
            print(f"| {r['round']} | {'-'.join(r['order'])} | {r['old']['selling']:,.0f} | {r['new']['selling']:,.0f}"
                  f" | {r['ratio_selling']} | {r['old']['sold_out']:,.0f} | {r['new']['sold_out']:,.0f}"
                  f" | {r['ratio_sold_out']} |")
        for rate in fixed_rates:
            print(f"fixed {rate:,}/s p99 ms by round: old " + ", ".join(
                str(r["old"][f"fixed_{rate}"]["p99_ms_from_intent"]) for r in rounds) + "; new " + ", ".join(
                str(r["new"][f"fixed_{rate}"]["p99_ms_from_intent"]) for r in rounds))
        for load in ("selling", "sold_out"):
            if f"median_cpu_ratio_{load}" in report:
                print(f"server CPU us per request, {load}: old " + ", ".join(
                    str(r["old"][f"{load}_cpu_us"]) for r in rounds) + "; new " + ", ".join(
                    str(r["new"][f"{load}_cpu_us"]) for r in rounds) + f"; median new/old "
                    f"{report[f'median_cpu_ratio_{load}']}")
        print(f"median new/old: selling {report['median_ratio_selling']}, sold-out {report['median_ratio_sold_out']}"
              f" ({out})")
        return 0
    finally:
        for proc in servers.values():
            if proc.poll() is None:
                os.killpg(proc.pid, 15)
                proc.wait(timeout=15)
        stores.stop()


if __name__ == "__main__":
    sys.exit(main())
