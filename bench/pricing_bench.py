"""Pricing: what campaigns.pricing costs for a shopper holding 50 coupons and a cart of 20 lines.

    .venv/bin/python bench/pricing_bench.py [--coupons 50] [--lines 20] [--repeat 200] [--seed 20] [--scenarios ...]

A micro-benchmark, not a test: no database, no Redis, one process. For each scenario it builds one cart and
--coupons candidates (one campaign each, seeded random rules), then times, best of --repeat runs:

  - `alone`: every candidate priced alone on the cart (price_coupon), what POST /carts/validate answers per
    coupon; reported as microseconds for all of them and per coupon;
  - `best`: best_combination over the same candidates (its own alone pricing included), with the number of
    single-coupon evaluations its search made and whether the answer is exact (the search finished inside
    BEST_SEARCH_BUDGET) or the best set found;
  - `validate`: validate_cart, both together (what the endpoint will call).

Scenarios:
  mixed       fixed and percentage coupons over 5 categories, a fifth exclusive, some thresholds, minimum
              quantities, combination lists and order caps: a shopper's wallet
  stackable   every coupon combines with every other, scoped to random categories (no thresholds): deep sets
  percent     every coupon a percentage of the whole cart, combinable with all: the search's worst case (every
              set of five is as good as any other, the bound prunes least)
  kinds       mixed's wallet where half the coupons are tiers (满减), free shipping or buy N get M, on a cart with
              shipping (issue 38)

Prints one line per scenario and figure; --json prints them as one JSON object instead.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from campaigns.pricing import (  # noqa: E402
    BEST_SEARCH_BUDGET,
    BUY_GET,
    FREE_SHIPPING,
    TIERS,
    Candidate,
    Cart,
    CartLine,
    CouponRule,
    Tier,
    best_combination,
    price_coupon,
    validate_cart,
)

CATEGORIES = ("shoes", "hats", "food", "toys", "books")


def make_cart(rnd: random.Random, lines: int, shipping: Decimal = Decimal(0)) -> Cart:
    return Cart("CNY", tuple(
        CartLine(f"SKU-{i}", rnd.randint(1, 3), Decimal(rnd.randint(100, 50_000)).scaleb(-2), rnd.choice(CATEGORIES))
        for i in range(lines)
    ), shipping=shipping)


def make_kind(rnd: random.Random, campaigns: int) -> CouponRule:
    """Tiers, free shipping or buy N get M, scoped and combined as mixed's coupons are."""
    kind = rnd.choice([TIERS, TIERS, FREE_SHIPPING, BUY_GET])
    scope = frozenset(rnd.sample(CATEGORIES, rnd.randint(1, 3))) if rnd.random() < 0.6 else frozenset()
    common = {"include_categories": scope, "exclusive": rnd.random() < 0.2,
              "order_cap": Decimal(rnd.choice([150, 300])) if rnd.random() < 0.2 else None}
    if kind == TIERS:
        base = rnd.choice([50, 100, 200])
        tiers = (Tier(Decimal(base), Decimal(base // 10)), Tier(Decimal(2 * base), Decimal(base // 4)),
                 Tier(Decimal(5 * base), Decimal(4 * base // 5)))
        return CouponRule(TIERS, Decimal(0), "CNY", tiers=tiers, **common)  # type: ignore[arg-type]
    if kind == FREE_SHIPPING:
        return CouponRule(FREE_SHIPPING, Decimal(0), "CNY", min_spend=Decimal(rnd.choice([0, 99])),
                          max_discount=Decimal(10) if rnd.random() < 0.3 else None, **common)  # type: ignore[arg-type]
    return CouponRule(BUY_GET, Decimal(0), "CNY", buy=rnd.randint(1, 3), get=1,
                      max_discount=Decimal(rnd.randint(50, 200)) if rnd.random() < 0.5 else None,
                      **common)  # type: ignore[arg-type]


def make_rule(rnd: random.Random, scenario: str, campaigns: int) -> CouponRule:
    if scenario == "kinds" and rnd.random() < 0.5:
        return make_kind(rnd, campaigns)
    if scenario == "percent":
        return CouponRule("percent", Decimal(rnd.choice([5, 10, 15, 20])), "CNY")
    percent = rnd.random() < 0.4
    value = Decimal(rnd.choice([5, 10, 15, 20, 30])) if percent else Decimal(rnd.randint(5, 100))
    scope = frozenset(rnd.sample(CATEGORIES, rnd.randint(1, 3))) if rnd.random() < 0.6 else frozenset()
    if scenario == "stackable":
        return CouponRule("percent" if percent else "fixed", value, "CNY", include_categories=scope)
    return CouponRule(
        "percent" if percent else "fixed", value, "CNY",
        max_discount=Decimal(rnd.randint(20, 80)) if percent and rnd.random() < 0.5 else None,
        min_spend=Decimal(rnd.choice([0, 0, 100, 300, 800])), include_categories=scope,
        exclude_skus=frozenset({f"SKU-{rnd.randrange(20)}"}) if rnd.random() < 0.2 else frozenset(),
        min_quantity=rnd.choice([0, 0, 0, 2, 5]), exclusive=rnd.random() < 0.2,
        combinable_with=(frozenset(rnd.sample(range(campaigns), min(10, campaigns))) if rnd.random() < 0.2
                         else frozenset()),
        order_cap=Decimal(rnd.choice([150, 300])) if rnd.random() < 0.2 else None,
    )


def best_time(repeat: int, call: Callable[[], object]) -> float:
    """Return the fastest of `repeat` runs of `call`, in microseconds."""
    fastest = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        call()
        fastest = min(fastest, time.perf_counter() - started)
    return fastest * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--coupons", type=int, default=50)
    parser.add_argument("--lines", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=200, help="runs of each figure; the fastest is kept")
    parser.add_argument("--seed", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--scenarios", default="mixed,stackable,percent,kinds", help="comma-separated")
    args = parser.parse_args()
    report: dict[str, dict[str, object]] = {}
    for scenario in args.scenarios.split(","):
        rnd = random.Random(f"{args.seed}-{scenario}")
        cart = make_cart(rnd, args.lines, Decimal("12.00") if scenario == "kinds" else Decimal(0))
        candidates = [
            Candidate(f"CODE{i}", i, make_rule(rnd, scenario, args.coupons)) for i in range(args.coupons)
        ]
        if not args.json:
            print(f"[{scenario}] timing {args.coupons} coupons on {args.lines} lines, {args.repeat} runs ...",
                  file=sys.stderr, flush=True)
        alone = best_time(args.repeat, lambda: [price_coupon(cart, c) for c in candidates])  # noqa: B023
        best = best_combination(cart, candidates)
        best_us = best_time(args.repeat, lambda: best_combination(cart, candidates))  # noqa: B023
        validate = best_time(args.repeat, lambda: validate_cart(cart, candidates))  # noqa: B023
        report[scenario] = {
            "alone_us": round(alone, 1), "alone_per_coupon_us": round(alone / args.coupons, 2),
            "best_us": round(best_us, 1), "validate_us": round(validate, 1),
            "evaluations": best.evaluations, "budget": BEST_SEARCH_BUDGET, "exact": best.exact,
            "best_codes": list(best.codes), "best_discount": str(best.discount),
            "applicable": sum(price_coupon(cart, c).applicable for c in candidates),
        }
    if args.json:
        print(json.dumps(report))
        return 0
    for scenario, figures in report.items():
        print(f"{scenario:10} alone {figures['alone_us']:>9} us ({figures['alone_per_coupon_us']} us/coupon, "
              f"{figures['applicable']} applicable)  best {figures['best_us']:>9} us ({figures['evaluations']} "
              f"evaluations, exact={figures['exact']})  validate {figures['validate_us']:>9} us  "
              f"best={','.join(figures['best_codes'])} -{figures['best_discount']}")  # type: ignore[arg-type]
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
