"""Prometheus counters of coupons: the uses of a coupon by outcome and the expiry compensation sweep.

Counted in the process that does the work (web workers for uses, Celery workers for the sweep); see
orders/metrics.py for how several processes add up.
"""
from __future__ import annotations

from prometheus_client import Counter

USES = Counter("couponrush_coupon_uses",
               "Answers of redeem / reserve / confirm / release by operation and outcome (the body's status)",
               ["operation", "outcome"])
EXPIRY_RUNS = Counter("couponrush_expiry_runs", "Runs of the expiry compensation (holds lapsed, coupons expired)")
COUPONS_EXPIRED = Counter("couponrush_coupons_expired", "Coupons the expiry compensation expired (one event each)")
HOLDS_LAPSED = Counter("couponrush_holds_lapsed", "Holds past hold_until the expiry compensation lapsed")
COUPONS_REPAIRED = Counter("couponrush_coupons_repaired",
                           "Coupon rows that disagreed with their events, set to the fold by the compensation")
