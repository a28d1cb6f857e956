"""What a campaign's budget costs a use (issue 37): reserve + release of claimed coupons, in process, in three
modes interleaved round by round:

    none      a campaign without a budget, the service as it is
    baseline  the same campaign with coupons.budget's hooks replaced by no-ops (the service as if budgets did not
              exist): the figure `none` is compared with
    budget    a campaign with a budget (take on reserve, give back on release: two Redis round trips a pair)

For each: wall and process CPU microseconds a pair (median of rounds), and Redis commands a pair counted on the
client (a pipeline counts one). An unbudgeted use should cost what the baseline does: no Redis command, no query.

    DATABASE_URL=... REDIS_URL=... .venv/bin/python bench/budget_cost.py [--pairs 1000] [--rounds 5]

The stores are DATABASE_URL's database (migrated here; its coupons and campaigns of earlier runs stay) and
REDIS_URL's database, which it empties first only with --flush. Prints a line a round and a summary JSON line.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=1000, help="reserve + release pairs a mode a round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--flush", action="store_true", help="empty REDIS_URL's database first")
    return parser.parse_args()


def main() -> None:
    args = parse()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.dev")
    import django

    django.setup()
    from django.core.management import call_command
    from django.utils import timezone

    from campaigns.models import Campaign
    from campaigns.redis_state import ClaimCode, redis_client, run_claim
    from campaigns.services import campaign_create
    from coupons import budget
    from coupons.models import Coupon
    from coupons.services import Order, coupon_release, coupon_reserve
    from orders import ledger
    from orders.drain import drain_campaign

    call_command("migrate", verbosity=0)
    client = redis_client()
    if args.flush:
        client.flushdb()
    shoppers = 50

    def campaign_with(amount: Decimal | None) -> tuple[Campaign, list[Coupon]]:
        now = timezone.now()
        campaign = campaign_create(name=f"budget bench {amount}", total_stock=shoppers, starts_at=now,
                                   ends_at=now + timedelta_hours(2), discount_value=Decimal("5.00"),
                                   budget=amount, publish=True)
        coupons = []
        for i in range(shoppers):
            result = run_claim(campaign_id=campaign.pk, user_id=f"b{campaign.pk}-{i}", idempotency_key=None)
            assert result.code == ClaimCode.CLAIMED, result
            drain_campaign(campaign_id=campaign.pk)
            coupons.append(Coupon.objects.get(claim_id=ledger.claim_id_of(campaign.pk, result.ledger_id)))
        return campaign, coupons

    unbudgeted, plain = campaign_with(None)
    budgeted, capped = campaign_with(Decimal("1000000000.00"))

    calls = [0]
    sent = client.execute_command

    def counted(*a: Any, **k: Any) -> Any:
        calls[0] += 1
        return sent(*a, **k)

    client.execute_command = counted  # type: ignore[method-assign]
    real = {name: getattr(budget, name) for name in ("take", "untake", "given_back", "kept")}

    @contextmanager
    def nothing() -> Any:
        yield

    no_hooks = {"take": lambda *a, **k: None, "untake": lambda *a, **k: None, "given_back": lambda *a, **k: None,
                "kept": nothing}

    def run(coupons: list[Coupon], hooks: dict[str, Any], tag: str) -> tuple[float, float, float]:
        for name, value in hooks.items():
            setattr(budget, name, value)
        calls[0] = 0
        wall, cpu = time.perf_counter(), time.process_time()
        for n in range(args.pairs):
            coupon = coupons[n % len(coupons)]
            order = Order(f"{tag}-{n}", Decimal("100.00"), "CNY")
            assert coupon_reserve(user_id=coupon.user_id, code=coupon.code, order=order).code == 0
            assert coupon_release(user_id=coupon.user_id, code=coupon.code, order_id=order.order_id).code == 0
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        for name, value in real.items():
            setattr(budget, name, value)
        return wall / args.pairs * 1e6, cpu / args.pairs * 1e6, calls[0] / args.pairs

    modes = {"none": (plain, real), "baseline": (plain, no_hooks), "budget": (capped, real)}
    figures: dict[str, list[tuple[float, float, float]]] = {mode: [] for mode in modes}
    run(plain, real, "warm")
    for r in range(args.rounds):
        order_of_modes = list(modes) if r % 2 == 0 else list(reversed(modes))
        for mode in order_of_modes:
            coupons, hooks = modes[mode]
            figures[mode].append(run(coupons, hooks, f"r{r}-{mode}"))
        print(json.dumps({"round": r + 1, **{m: [round(x, 1) for x in figures[m][-1]] for m in modes}}),
              flush=True)
    summary: dict[str, Any] = {}
    for mode, rows in figures.items():
        summary[mode] = {"wall_us_a_pair": round(statistics.median(r[0] for r in rows), 1),
                         "cpu_us_a_pair": round(statistics.median(r[1] for r in rows), 1),
                         "redis_commands_a_pair": round(statistics.median(r[2] for r in rows), 2)}
    summary["none_over_baseline_cpu"] = round(summary["none"]["cpu_us_a_pair"] / summary["baseline"]["cpu_us_a_pair"],
                                              3)
    summary["budget_over_baseline_cpu"] = round(
        summary["budget"]["cpu_us_a_pair"] / summary["baseline"]["cpu_us_a_pair"], 3)
    summary["hooks_us_a_pair_unbudgeted"] = hooks_cost(budget, plain[0])
    summary["pairs"], summary["rounds"] = args.pairs, args.rounds
    budgeted.refresh_from_db()
    print(json.dumps(summary), flush=True)


def hooks_cost(budget: Any, coupon: Any, n: int = 200_000) -> float:
    """CPU microseconds of coupons.budget's calls in one reserve + release pair of an unbudgeted campaign's coupon
    (the whole of what budgets add to its path, none of which reaches Redis or PostgreSQL), timed alone: the
    pairs' own figures above vary more from round to round than this."""
    from coupons.models import CouponStatus

    discount = Decimal("5.00")
    start = time.process_time()
    for _ in range(n):
        with budget.kept():  # the reserve's transaction
            budget.take(coupon, discount)
            was = budget.holds(coupon.status, coupon.discount)
            budget.given_back(coupon, was, budget.holds(CouponStatus.HELD, discount))
        with budget.kept():  # the release's
            was = budget.holds(CouponStatus.HELD, discount)
            budget.given_back(coupon, was, budget.holds(CouponStatus.ACTIVE, None))
    return round((time.process_time() - start) / n * 1e6, 2)


def timedelta_hours(hours: int) -> Any:
    from datetime import timedelta

    return timedelta(hours=hours)


if __name__ == "__main__":
    main()
