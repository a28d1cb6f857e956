"""Helpers shared by the coupon tests: a real issued coupon (claimed in Redis, drained into PostgreSQL)."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from campaigns.models import Campaign
from campaigns.redis_state import ClaimCode, run_claim
from coupons.models import Coupon, CouponEvent
from coupons.replay import disagreements
from orders import ledger
from orders.drain import drain_campaign


def claimed_coupon(campaign: Campaign, user: str) -> Coupon:
    """Claim one coupon of a live campaign for `user` through the claim script and drain it into a row."""
    result = run_claim(campaign_id=campaign.pk, user_id=user, idempotency_key=None)
    assert result.code == ClaimCode.CLAIMED, result
    drain_campaign(campaign_id=campaign.pk)
    return Coupon.objects.select_related("campaign").get(claim_id=ledger.claim_id_of(campaign.pk, result.ledger_id))


def issued_coupon(live_campaign: Callable[..., Campaign], user: str = "alice", **campaign_fields: Any) -> Coupon:
    """Return an active coupon of `user` in a new live campaign made with `campaign_fields`."""
    return claimed_coupon(live_campaign(**campaign_fields), user)


def events_of(coupon: Coupon) -> list[tuple[str, str]]:
    """(type, source) of the coupon's events, oldest first."""
    events = CouponEvent.objects.filter(coupon_id=coupon.pk).order_by("id")
    return list(events.values_list("type", "source"))


def row_of(coupon: Coupon) -> tuple[str, int, str | None]:
    """(status, version, order_id) of the coupon as PostgreSQL holds it now."""
    return Coupon.objects.values_list("status", "version", "order_id").get(pk=coupon.pk)


def assert_rows_agree_with_events() -> None:
    """Every coupon row equals the fold of its events (replay_events --check finds nothing)."""
    assert list(disagreements(Coupon.objects.all())) == []
