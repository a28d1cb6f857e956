"""The suite's report (bench/suite.py writes it after the phases): one row per figure beside its baseline and
goal, printed and written as bench/results/suite-<timestamp>.json, .md (docs/benchmarks.md's table) and .svg
(a hand-written chart: throughput per scenario beside its baseline, latency percentiles).
"""
from __future__ import annotations

import json
import math
from datetime import datetime
from typing import Any

from common import RESULTS_DIR, rel

from phases.context import esc, ratio
from phases.loadgen import from_intent


def ran(side: dict[str, Any]) -> bool:
    """Whether a baseline's figures are there (seed-go's holds only the reason it was skipped otherwise)."""
    return "skipped" not in side


def fixed_at_keys(scenarios: dict[str, Any]) -> list[str]:
    """The scenarios of equal absolute fixed rates, by rate."""
    return sorted((k for k in scenarios if k.startswith("fixed_at_")), key=lambda k: int(k.rsplit("_", 1)[1]))


def figures_table(rep: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per scenario: what, couponrush figure, baseline, ratio, goal."""
    s = rep["scenarios"]
    rows: list[dict[str, Any]] = []

    def add(scenario: str, figure: str, value: Any, baseline_name: str, baseline: Any, ratio_: Any, goal: str,
            met: Any) -> None:
        rows.append({"scenario": scenario, "figure": figure, "value": value, "baseline": baseline_name,
                     "baseline_value": baseline, "ratio": ratio_, "goal": goal, "met": met})

    stock = (rep.get("config") or {}).get("sell_stock")
    selling = f"selling (stock {stock / 1e6:g}M)" if stock else "selling"
    if (x := s.get("selling")) and "couponrush" in x:
        c, g, b = x["couponrush"], x["seed_go"], x["bare"]
        seed = "seed-go" if ran(g) else ""  # skipped: the couponrush figure and its goal alone
        if seed:
            add(selling, "claims/s (wrk)", c["requests_per_s"], seed, g["requests_per_s"],
                x["ratios"]["couponrush_over_seed_go"], ">= 0.5 of seed-go",
                (x["ratios"]["couponrush_over_seed_go"] or 0) >= 0.5)
        add(selling, "claims/s (wrk)", c["requests_per_s"], "", None, None, ">= 17,000/s",
            c["requests_per_s"] >= 17_000)
        add(selling, "p99 ms (wrk)", c.get("p99_ms"), seed, g.get("p99_ms"),
            ratio(c.get("p99_ms"), g.get("p99_ms")), "<= 20 ms", (c.get("p99_ms") or 1e9) <= 20)
        add(selling, "claims/s (wrk)", c["requests_per_s"], "bare endpoint", b["requests_per_s"],
            x["ratios"]["claim_over_bare"], "", None)
        if (cost := c.get("redis_evalsha")) and cost.get("usec_per_call") is not None:
            add(selling, "Redis us per claim (EVALSHA usec_per_call)", cost["usec_per_call"], "", None, None,
                "<= 12 us", cost["usec_per_call"] <= 12)
        if x.get("granian_asgi"):
            add(selling, "claims/s (wrk)", c["requests_per_s"], "same app on granian ASGI",
                x["granian_asgi"]["requests_per_s"], x["ratios"]["couponrush_over_granian_asgi"], "", None)
    for key in ("fixed_rate", "fixed_rate_low", *fixed_at_keys(s)):
        if not ((x := s.get(key)) and "couponrush" in x):
            continue
        c, g = x["couponrush"], x["seed_go"]
        seed = "seed-go" if ran(g) else ""
        rounds = len(x.get("rounds") or [None])
        if x.get("share") is None:  # both at the same absolute rate: the goal is seed-go's p99, and 20 ms
            what = f"fixed {x['rate']:,}/s {'both' if seed else 'couponrush'}" + (
                f", median of {rounds}" if rounds > 1 else "")
            by_round = [(r["couponrush"]["p99_ms_from_intent"], (r.get("seed_go") or {}).get("p99_ms_from_intent"))
                        for r in x.get("rounds") or []]
            for i, (mine, theirs) in enumerate(by_round):
                add(what, f"p99 ms from intent, round {i + 1}", mine, seed, theirs, ratio(mine, theirs), "", None)
            p99, seed_p99 = from_intent(c, "p99_ms"), from_intent(g, "p99_ms")
            if seed:
                add(what, "p99 ms from intent (median round)", p99, seed, seed_p99, ratio(p99, seed_p99),
                    "<= seed-go, <= 20 ms", p99 is not None and seed_p99 is not None and p99 <= seed_p99 and p99 <= 20)
            else:
                add(what, "p99 ms from intent (median round)", p99, "", None, None, "<= 20 ms",
                    p99 is not None and p99 <= 20)
            add(what, "p999 ms from intent", from_intent(c, "p999_ms"), seed, from_intent(g, "p999_ms"),
                ratio(from_intent(c, "p999_ms"), from_intent(g, "p999_ms")), "", None)
            continue
        what = f"fixed {x['share']:.0%}: {c['target_rate']:,.0f}/s" + (
            f" vs {g['target_rate']:,.0f}/s" if seed else "") + (f", median of {rounds}" if rounds > 1 else "")
        add(what, "achieved req/s", c["achieved_rate"], seed, g.get("achieved_rate"),
            ratio(c["achieved_rate"], g.get("achieved_rate")), "", None)
        for p in ("p50_ms", "p99_ms", "p999_ms"):
            add(what, f"{p[:-3]} ms from intent",
                from_intent(c, p), seed, from_intent(g, p), ratio(from_intent(c, p), from_intent(g, p)),
                "<= 20 ms" if p == "p99_ms" else "", (from_intent(c, p) or 1e9) <= 20 if p == "p99_ms" else None)
    if (x := s.get("drain")) and "bulk" in x:
        add("drain (ledger -> PostgreSQL)", "claims/s", x["bulk"]["claims_per_s"], "batch size 1",
            x["row_by_row"]["claims_per_s"], x["ratios"]["bulk_over_row_by_row"], ">= 10,000/s", x["goal"]["met"])
    if (x := s.get("storm")) and "couponrush" in x:
        add("storm (stock 10k)", "requests/s (wrk)", x["couponrush"]["requests_per_s"],
            "seed-go" if ran(x["seed_go"]) else "", x["seed_go"].get("requests_per_s"),
            x["ratios"]["couponrush_over_seed_go"], "", None)
        add("storm (stock 10k)", "last claim -> last coupon s", x["sell_out"]["last_claim_to_last_coupon_s"], "", None,
            None, "<= 2 s", x["goal"]["met"])
    if (x := s.get("soldout")) and "couponrush" in x:
        add("sold-out storm", "requests/s (wrk)", x["couponrush"]["requests_per_s"], "bare endpoint",
            x["bare"]["requests_per_s"], x["ratios"]["soldout_over_bare"], ">= bare", x["goal"]["met"])
        if "bare_post" in x:
            add("sold-out storm", "requests/s (wrk)", x["couponrush"]["requests_per_s"], "bare POST app",
                x["bare_post"]["requests_per_s"], x["ratios"]["soldout_over_bare_post"], "", None)
    if (x := s.get("naive")) and "naive" in x:
        sell = s.get("selling", {}).get("couponrush", {})
        add("naive PostgreSQL claim", "claims/s (wrk)", sell.get("requests_per_s"), "naive",
            x["naive"]["requests_per_s"], x["ratios"]["couponrush_selling_over_naive"], "", None)
    if (x := s.get("expiry")) and "sweep" in x:
        add(f"expiry sweep ({x['sweep'].get('coupons') or 0:,})", "coupons/s", x["sweep"].get("coupons_per_s"),
            "row by row", x["row_by_row"].get("coupons_per_s"),
            ratio(x["sweep"].get("coupons_per_s"), x["row_by_row"].get("coupons_per_s")), ">= 50,000/s",
            x["goal"]["met"])
    if (x := s.get("memory")) and "claims" in x:
        add(f"Redis memory ({x['claims']:,} claims)", "MiB", x["campaign_of_n_total_mib"], "", None, None,
            "< 200 MiB", x["goal"]["met"])
    return rows


def markdown(rep: dict[str, Any], svg_name: str) -> str:
    def fmt(v: Any) -> str:
        if v is None:
            return "-"
        if isinstance(v, bool):
            return "yes" if v else "**no**"
        if isinstance(v, float):
            return f"{v:,.0f}" if abs(v) >= 100 else f"{v:,.2f}"
        return f"{v:,}" if isinstance(v, int) else str(v)

    lines = ["| scenario | figure | couponrush | baseline | baseline's | ratio | goal | met |",
             "| --- | --- | ---: | --- | ---: | ---: | --- | --- |"]
    for r in rep["table"]:
        lines.append(f"| {r['scenario']} | {r['figure']} | {fmt(r['value'])} | {r['baseline'] or '-'} | "
                     f"{fmt(r['baseline_value'])} | {fmt(r['ratio'])} | {r['goal'] or '-'} | {fmt(r['met'])} |")
    return "\n".join(lines) + f"\n\nChart: `{svg_name}`\n"


def chart_svg(rep: dict[str, Any]) -> str:
    """Throughput (log scale) and latency percentiles per scenario, each beside its baseline: hand-written SVG."""
    s = rep["scenarios"]
    thr: list[tuple[str, float | None, str, float | None]] = []
    if (x := s.get("selling")) and "couponrush" in x:
        if ran(x["seed_go"]):
            thr.append(("claims while selling", x["couponrush"]["requests_per_s"], "seed-go",
                        x["seed_go"]["requests_per_s"]))
        thr.append(("claims while selling", x["couponrush"]["requests_per_s"], "bare endpoint",
                    x["bare"]["requests_per_s"]))
        if x.get("granian_asgi"):
            thr.append(("claims while selling", x["couponrush"]["requests_per_s"], "same app on granian ASGI",
                        x["granian_asgi"]["requests_per_s"]))
    if (x := s.get("soldout")) and "couponrush" in x:
        thr.append(("sold-out storm", x["couponrush"]["requests_per_s"], "bare endpoint", x["bare"]["requests_per_s"]))
        if "bare_post" in x:
            thr.append(("sold-out storm", x["couponrush"]["requests_per_s"], "bare POST app",
                        x["bare_post"]["requests_per_s"]))
    if (x := s.get("storm")) and "couponrush" in x and ran(x["seed_go"]):
        thr.append(("storm 10k (wrk)", x["couponrush"]["requests_per_s"], "seed-go", x["seed_go"]["requests_per_s"]))
    if (x := s.get("naive")) and "naive" in x and s.get("selling"):
        thr.append(("claims while selling", s["selling"]["couponrush"]["requests_per_s"], "naive PostgreSQL",
                    x["naive"]["requests_per_s"]))
    if (x := s.get("drain")) and "bulk" in x:
        thr.append(("drain", x["bulk"]["claims_per_s"], "batch size 1", x["row_by_row"]["claims_per_s"]))
    if (x := s.get("expiry")) and "sweep" in x:
        thr.append(("expiry sweep", x["sweep"].get("coupons_per_s"), "row by row",
                    x["row_by_row"].get("coupons_per_s")))
    lat: list[tuple[str, dict[str, Any]]] = []
    if (x := s.get("selling")) and "couponrush" in x:
        lat.append(("couponrush, wrk saturating", {k: x["couponrush"].get(k) for k in ("p50_ms", "p90_ms", "p99_ms")}))
        if ran(x["seed_go"]):
            lat.append(("seed-go, wrk saturating", {k: x["seed_go"].get(k) for k in ("p50_ms", "p90_ms", "p99_ms")}))
    for key in ("fixed_rate_low", "fixed_rate"):
        if (x := s.get(key)) and "couponrush" in x:
            lat.append((f"couponrush, fixed {x['couponrush']['target_rate']:,.0f}/s ({x['share']:.0%})",
                        {k: x["couponrush"]["latency_from_intent"].get(k) for k in ("p50_ms", "p99_ms", "p999_ms")}))
            if ran(x["seed_go"]):
                lat.append((f"seed-go, fixed {x['seed_go']['target_rate']:,.0f}/s ({x['share']:.0%})",
                            {k: from_intent(x["seed_go"], k) for k in ("p50_ms", "p99_ms", "p999_ms")}))
    for key in fixed_at_keys(s):  # every round, both sides at the same rate
        for i, r in enumerate((s[key].get("rounds") or []) if "couponrush" in s[key] else []):
            for side in r:
                lat.append((f"{side.replace('_', '-')}, {s[key]['rate']:,}/s, round {i + 1}",
                            {k: r[side].get(f"{k}_from_intent") for k in ("p50_ms", "p99_ms", "p999_ms")}))
    if (x := s.get("soldout")) and "couponrush" in x:
        lat.append(("sold-out, wrk", {k: x["couponrush"].get(k) for k in ("p50_ms", "p90_ms", "p99_ms")}))
        lat.append(("bare endpoint, wrk", {k: x["bare"].get(k) for k in ("p50_ms", "p90_ms", "p99_ms")}))

    W, left, bar, gap = 960, 250, 14, 10
    out: list[str] = []
    y = 40
    title = (f'couponrush make bench — {rep["timestamp"]} ({rep.get("git")}), load average before '
             f'{rep["host"]["loadavg_before"]}')
    out.append(f'<text x="10" y="22" font-size="15" font-weight="bold">{esc(title)}</text>')
    out.append(f'<text x="10" y="{y}" font-size="13" font-weight="bold">Throughput per second (log scale): couponrush '
               '(orange) beside its baseline (grey)</text>')
    y += 12
    vals = [v for _, a, _, b in thr for v in (a, b) if v]
    hi = max(vals) if vals else 1
    lo = max(min(vals) / 2, 1) if vals else 1
    span = math.log10(hi * 1.3) - math.log10(lo)

    def bx(v: float) -> float:
        return max(2.0, (math.log10(max(v, lo)) - math.log10(lo)) / span * (W - left - 90))

    for label, a, bname, b in thr:
        out.append(f'<text x="{left - 8}" y="{y + bar - 2}" font-size="12" text-anchor="end">{esc(label)}</text>')
        if a:
            out.append(f'<rect x="{left}" y="{y}" width="{bx(a):.1f}" height="{bar}" fill="#e8702a"/>'
                       f'<text x="{left + bx(a) + 4:.1f}" y="{y + bar - 3}" font-size="11">{a:,.0f}</text>')
        y += bar + 2
        out.append(f'<text x="{left - 8}" y="{y + bar - 2}" font-size="11" fill="#555" text-anchor="end">'
                   f'{esc(bname)}</text>')
        if b:
            out.append(f'<rect x="{left}" y="{y}" width="{bx(b):.1f}" height="{bar}" fill="#9a9a9a"/>'
                       f'<text x="{left + bx(b) + 4:.1f}" y="{y + bar - 3}" font-size="11">{b:,.0f}</text>')
        y += bar + gap
    y += 20
    out.append(f'<text x="10" y="{y}" font-size="13" font-weight="bold">Latency percentiles, ms (log scale); '
               'fixed rate = from the intended send time</text>')
    y += 12
    lvals = [v for _, d in lat for v in d.values() if v]
    lhi = max(lvals) if lvals else 1
    llo = max(min(lvals) / 2, 0.05) if lvals else 0.05
    lspan = math.log10(lhi * 1.3) - math.log10(llo)
    colours = {"p50_ms": "#4c9be8", "p90_ms": "#8e6bd8", "p99_ms": "#e8702a", "p999_ms": "#c0392b"}
    for label, d in lat:
        out.append(f'<text x="{left - 8}" y="{y + 3 * 11}" font-size="12" text-anchor="end">{esc(label)}</text>')
        for k, v in d.items():
            if v:
                w = max(2.0, (math.log10(max(v, llo)) - math.log10(llo)) / lspan * (W - left - 120))
                out.append(f'<rect x="{left}" y="{y}" width="{w:.1f}" height="10" fill="{colours.get(k, "#888")}"/>'
                           f'<text x="{left + w + 4:.1f}" y="{y + 9}" font-size="10">{k[:-3]} {v:,.2f}</text>')
            y += 12
        y += gap
    height = y + 20
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{height}" font-family="sans-serif">'
            f'<rect width="100%" height="100%" fill="white"/>' + "".join(out) + "</svg>\n")


def print_summary(rep: dict[str, Any]) -> None:
    print()
    print(f"make bench  {rep['timestamp']}  {rep['git']}  {rep['host']['cpus']} CPUs, load average before "
          f"{rep['host']['loadavg_before']}, after {rep['host'].get('loadavg_after')}")
    print(f"  {'scenario':<34} {'figure':<30} {'couponrush':>11} {'baseline':>22} {'ratio':>7}  goal")
    print("  " + "-" * 120)
    for r in rep["table"]:
        v = r["value"]
        b = r["baseline_value"]
        vs = "-" if v is None else (f"{v:,.0f}" if abs(v) >= 100 else f"{v:,.2f}")
        bs = "-" if b is None else (f"{b:,.0f}" if abs(b) >= 100 else f"{b:,.2f}")
        met = "" if r["met"] is None else ("  met" if r["met"] else "  NOT MET")
        print(f"  {r['scenario']:<34} {r['figure']:<30} {vs:>11} {(r['baseline'] or '')[:16]:>16} {bs:>5} "
              f"{'-' if r['ratio'] is None else format(r['ratio'], '.2f'):>7}  {r['goal']}{met}")
    shop = rep["scenarios"].get("selling", {}).get("couponrush", {}).get("shoppers")
    if shop:
        print(f"  repeated shoppers (selling, measured): {shop['repeated_share']:.1%} of requests")
    storm = rep["scenarios"].get("storm", {}).get("couponrush", {}).get("shoppers")
    if storm:
        print(f"  repeated shoppers (storm, measured):   {storm['repeated_share']:.1%} of requests")
    for note in rep.get("notes") or []:
        print(f"  NOTE: {note}")
    for cid, v in rep["checks"].get("verify_campaign", {}).items():
        print(f"  verify_campaign {cid}: {'BALANCED' if v['balanced'] else 'NOT BALANCED'} (exit {v['exit_code']})")
    prof = rep["scenarios"].get("profile", {})
    if prof.get("top_self"):
        print("  profile, own time by area: " + ", ".join(f"{a['area']} {a['share']:.0%}"
                                                          for a in prof["own_time_by_area"][:8]))
    for key in ("json", "svg", "md"):
        if rep.get("files", {}).get(key):
            print(f"  {key:<5} {rep['files'][key]}")
    print(flush=True)


def write_outputs(rep: dict[str, Any]) -> None:
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    paths = {k: RESULTS_DIR / f"suite-{stamp}.{k}" for k in ("json", "svg", "md")}
    rep["files"] = {k: rel(p) for k, p in paths.items()}
    paths["svg"].write_text(chart_svg(rep))
    paths["md"].write_text(markdown(rep, paths["svg"].name))
    paths["json"].write_text(json.dumps(rep, indent=2, default=str) + "\n")
