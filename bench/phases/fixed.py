"""Phase `fixed`: bench/loadgen at shares of each side's `selling` maximum and at equal absolute rates, latency
from the intended send time; rounds interleaved with seed-go's, each side's round with the median p99 reported.
"""
from __future__ import annotations

from typing import Any

from common import BenchError, log

from phases.context import Suite, Ticker, ratio
from phases.loadgen import from_intent, run_loadgen, run_summary


def run(suite: Suite) -> None:
    """Fixed-rate latency at 80% and 50% of each one's measured maximum (coordinated-omission free)."""
    a = suite.args
    sell = suite.report["scenarios"].get("selling") or {}
    if "couponrush" not in sell:
        raise BenchError("the fixed-rate phase needs the selling phase's maxima")
    log(f"== fixed rate: {a.fixed_share:.0%} and {a.fixed_low_share:.0%} of the measured maximum, "
        f"{a.connections} connections, latency from the intended send time")
    suite.pause_worker(True)
    # seed-go campaigns 10, 11, ... and 20, 21, ...: fresh shoppers in every round
    for key, share, seed_base in (("fixed_rate", a.fixed_share, 10), ("fixed_rate_low", a.fixed_low_share, 20)):
        if share > 0:
            suite.report["scenarios"][key] = _fixed(suite, sell, share, seed_base)
    # The same absolute rate for both sides: what shoppers feel while a big campaign sells (issue 24)
    for i, rate in enumerate(a.fixed_rates):
        suite.report["scenarios"][f"fixed_at_{rate}"] = _fixed_at(suite, sell, rate, 30 + 10 * i)


def _fixed_at(suite: Suite, sell: dict[str, Any], rate: int, seed_base: int) -> dict[str, Any]:
    """`--fixed-rounds` interleaved rounds with both sides at `rate` claims/s."""
    runs = _fixed_rounds(suite, rate, rate, f"fixed {rate} per s", seed_base)  # a label, and a file name
    cr, seed = _median_runs(suite, runs)
    return {
        "what": f"fixed-rate load at {rate:,} claims/s for both, latency from intended send; {len(runs)} "
                "interleaved round(s), each side's figures from its round with the median p99",
        "share": None, "rate": rate, "rounds": [{side: run_summary(run[side]) for side in run} for run in runs],
        "couponrush": cr, "seed_go": seed,
        "ratios": {"p99_couponrush_over_seed_go": ratio(cr["latency_from_intent"].get("p99_ms"),
                                                        from_intent(seed, "p99_ms"))},
    }


def _fixed(suite: Suite, sell: dict[str, Any], share: float, seed_base: int) -> dict[str, Any]:
    """`--fixed-rounds` rounds at this share, couponrush then seed-go in each (interleaved, so that a slow
    minute of the host falls on both); each side's figures are its round with the median p99."""
    cr_rate = share * sell["couponrush"]["requests_per_s"]
    seed_rate = share * (sell["seed_go"].get("requests_per_s") or 0)
    label = f"fixed {share:.0%}"
    runs = _fixed_rounds(suite, cr_rate, seed_rate, label, seed_base)
    cr, seed = _median_runs(suite, runs)
    return {
        "what": f"fixed-rate load at {share:.0%} of each one's wrk maximum, latency from intended send; "
                f"{len(runs)} interleaved round(s), each side's figures from its round with the median p99",
        "share": share, "rounds": [{side: run_summary(run[side]) for side in run} for run in runs],
        "couponrush": cr, "seed_go": seed,
        "wrk_saturating": {"couponrush": {k: sell["couponrush"].get(k) for k in ("requests_per_s", "p50_ms",
                                                                                 "p99_ms")},
                           "seed_go": {k: sell["seed_go"].get(k) for k in ("requests_per_s", "p50_ms", "p99_ms")}
                           if suite.seed is not None else suite.no_seed},
        "ratios": {"p99_couponrush_over_seed_go": ratio(cr["latency_from_intent"].get("p99_ms"),
                                                        from_intent(seed, "p99_ms"))},
    }


def _median_runs(suite: Suite, runs: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Each side's round with the median p99 (seed-go's: the reason it was skipped, when it was)."""
    cr = median_run([run["couponrush"] for run in runs])
    return cr, (median_run([run["seed_go"] for run in runs]) if suite.seed is not None else suite.no_seed)


def _fixed_rounds(suite: Suite, cr_rate: float, seed_rate: float, label: str, seed_base: int) -> list[dict[str, Any]]:
    """`--fixed-rounds` rounds, couponrush then seed-go in each (interleaved, so that a slow minute of the
    host falls on both): every round's loadgen output of both sides."""
    a = suite.args
    runs: list[dict[str, Any]] = []
    for r in range(a.fixed_rounds):
        tag = f"{label} round {r + 1} of {a.fixed_rounds}" if a.fixed_rounds > 1 else label
        before = suite.stock(suite.sell_id) or 0
        with Ticker(f"couponrush {tag}", lambda b=before: f"sold {b - (suite.stock(suite.sell_id) or 0):,}"):
            cr = run_loadgen(suite.loadgen, f"couponrush {tag}", port=suite.port,
                             path=f"/api/v1/campaigns/{suite.sell_id}/claim", rate=cr_rate, duration=a.duration,
                             connections=a.connections, tokens=suite.tokens, offset=suite.offsets[suite.sell_id],
                             repeat=a.repeat)
        suite.offsets[suite.sell_id] += cr["sent"] + a.connections
        if suite.seed is None:
            runs.append({"couponrush": cr})
            continue
        seed_id = suite.seed_campaign(seed_base + r, a.sell_stock)
        with Ticker(f"seed-go {tag}", lambda s=seed_id: f"sold {a.sell_stock - suite.seed_stock(s):,}"):
            seed = run_loadgen(suite.loadgen, f"seed-go {tag}", port=suite.seed_port,
                               path=f"/api/v1/campaigns/{seed_id}/claim", rate=seed_rate, duration=a.duration,
                               connections=a.connections, tokens=suite.tokens, offset=0, repeat=a.repeat)
        runs.append({"couponrush": cr, "seed_go": seed})
    if len(runs) > 1:
        log(f"{label}: p99 from intent by round, " + "; ".join(
            f"{side.replace('_', '-')} {', '.join(str(from_intent(run[side], 'p99_ms')) for run in runs)} ms"
            for side in runs[0]))
    return runs


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median p99 from the intended send time (the upper one of an even number)."""
    ordered = sorted(runs, key=lambda run: run["latency_from_intent"].get("p99_ms") or float("inf"))
    return ordered[len(ordered) // 2]
