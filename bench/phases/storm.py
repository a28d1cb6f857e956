"""Phase `storm`: the flash sale (stock 10,000) with the worker draining: sell-out time, and last claim -> last
coupon in PostgreSQL (StormMonitor polls both), beside seed-go.
"""
from __future__ import annotations

import threading
import time
from typing import Any

from common import log

from phases.context import Suite, r3, ratio


def run(suite: Suite) -> None:
    """The flash sale with everything running: sell-out time, and last claim -> last coupon in PostgreSQL."""
    from campaigns.redis_state import campaign_keys
    from coupons.models import Coupon

    a = suite.args
    suite.pause_worker(False)
    log(f"== storm: campaign {suite.storm_id}, stock {a.stock:,}, wrk -c{a.connections} -d{a.duration}s, "
        f"{a.repeat:.0%} repeated shoppers, worker draining")
    keys = campaign_keys(suite.storm_id)
    mon = StormMonitor(suite.redis, keys.stock, a.stock, lambda: Coupon.objects.filter(
        campaign_id=suite.storm_id).count())
    mon.start()
    try:
        storm = suite.wrk_with_ticker("couponrush storm", suite.storm_id,
                                     lambda: f"sold {a.stock - (suite.stock(suite.storm_id) or 0):,}, "
                                             f"coupons in PostgreSQL {mon.coupons:,}")
    finally:
        mon.load_done.set()
    deadline = time.monotonic() + a.drain_timeout
    while mon.is_alive() and time.monotonic() < deadline:
        mon.join(timeout=1)
        if mon.is_alive():
            log(f"  waiting for the drain: {mon.coupons:,} coupons of {mon.sold:,} sold")
    mon.stop_event.set()
    info = suite.redis.xinfo_stream(keys.ledger)
    last_id = info["last-generated-id"]
    last_id = last_id.decode() if isinstance(last_id, bytes) else last_id
    last_claim_wall = int(last_id.split("-")[0]) / 1000
    lag = (mon.all_coupons_wall - last_claim_wall) if mon.all_coupons_wall else None
    sell = {"sold": mon.sold, "coupons": mon.coupons,
            "sell_out_s": r3(mon.sold_out_at - mon.first_claim_at) if mon.sold_out_at and mon.first_claim_at
            else None,
            "last_claim_to_last_coupon_s": r3(lag), "poll_interval_s": mon.interval, "error": mon.error}
    log(f"storm: sold {mon.sold:,}; sold out {sell['sell_out_s']}s after the first claim; last coupon in "
        f"PostgreSQL {sell['last_claim_to_last_coupon_s']}s after the last claim")
    seed = suite.seed_wrk("seed-go storm", 3, a.stock, offset_key=-3)
    suite.report["scenarios"]["storm"] = {
        "what": f"flash sale of {a.stock:,}, worker draining; wrk keeps claiming after the sell-out",
        "couponrush": storm, "seed_go": seed, "sell_out": sell,
        "ratios": {"couponrush_over_seed_go": ratio(storm["requests_per_s"], seed.get("requests_per_s"))},
        "goal": {"last_claim_to_last_coupon_s": 2.0, "met": lag is not None and lag <= 2.0},
    }


class StormMonitor(threading.Thread):
    """Poll the stock every 50 ms, and the coupons in PostgreSQL once the stock is gone or the load is over,
    until every sold claim is a coupon. Wall-clock times (the ledger's ids are Redis's clock, same host)."""

    def __init__(self, client: Any, stock_key: str, initial: int, count_coupons: Any, interval: float = 0.05) -> None:
        super().__init__(daemon=True)
        self.client, self.stock_key, self.initial, self.count_coupons = client, stock_key, initial, count_coupons
        self.interval = interval
        self.load_done = threading.Event()
        self.stop_event = threading.Event()
        self.first_claim_at: float | None = None
        self.sold_out_at: float | None = None
        self.all_coupons_wall: float | None = None
        self.sold = 0
        self.coupons = 0
        self.error: str | None = None

    def run(self) -> None:
        from django.db import connection

        try:
            while not self.stop_event.is_set():
                now = time.time()
                raw = self.client.get(self.stock_key)
                remaining = int(raw) if raw is not None else self.initial
                self.sold = self.initial - remaining
                if self.first_claim_at is None and self.sold > 0:
                    self.first_claim_at = now
                if self.sold_out_at is None and remaining <= 0:
                    self.sold_out_at = now
                if remaining <= 0 or self.load_done.is_set():
                    self.coupons = self.count_coupons()
                    if self.sold and self.coupons >= self.sold:
                        self.all_coupons_wall = time.time()
                        return
                self.stop_event.wait(self.interval)
        except Exception as exc:  # noqa: BLE001 - reported
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            connection.close()
