"""Random sequences of everything a shopper, the drain and time can do, against the real services.

After every step: each coupon row equals the fold of its events, and the campaign's balance holds.
"""
from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from campaigns.services import campaign_preheat
from core.errors import NotFound
from coupons.models import Coupon, CouponStatus
from coupons.replay import disagreements
from coupons.services import (
    Order,
    OrderCartChanged,
    coupon_confirm,
    coupon_redeem,
    coupon_release,
    coupon_reserve,
    coupons_settle_due,
)
from orders.cancel import claim_cancel
from orders.claim import claim_create
from orders.drain import drain_campaign
from orders.models import Claim
from orders.verify import campaign_verify
from tests.factories import CampaignFactory

USERS = ["ann", "bob", "cid"]
ORDERS = ["o1", "o2", "o3"]  # per machine: prefixed with its campaign (the database outlives an example)
AMOUNTS = [Decimal("99.99"), Decimal("100.00"), Decimal("350.00")]
USE_CODES = {0, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19}  # 19: one coupon of a campaign per order (carts)


class CouponLife(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.campaign = CampaignFactory(total_stock=5, per_user_limit=2, min_spend=Decimal("100.00"),
                                        discount_value=Decimal("20.00"))
        campaign_preheat(campaign=self.campaign)
        self.claims: list[tuple[str, str]] = []  # (user, claim id) answered 'claimed'

    def order(self, name: str) -> str:
        """This machine's own order: another example's coupons (another campaign) on it would change its payable."""
        return f"{self.campaign.pk}-{name}"

    def coupons(self) -> list[Coupon]:
        return list(Coupon.objects.filter(campaign=self.campaign).order_by("pk"))

    def pick_coupon(self, index: int) -> Coupon | None:
        coupons = self.coupons()
        return coupons[index % len(coupons)] if coupons else None

    @rule(user=st.sampled_from(USERS))
    def claim(self, user: str) -> None:
        outcome = claim_create(campaign_id=self.campaign.pk, user_id=user, idempotency_key=None)
        assert outcome.status in ("claimed", "limit_reached", "sold_out")
        if outcome.claim_id:
            self.claims.append((user, outcome.claim_id))

    @rule()
    def drain(self) -> None:
        drain_campaign(campaign_id=self.campaign.pk)

    @rule(index=st.integers(0, 20), order=st.sampled_from(ORDERS), amount=st.sampled_from(AMOUNTS),
          hold=st.integers(1, 3600))
    def reserve(self, index: int, order: str, amount: Decimal, hold: int) -> None:
        coupon = self.pick_coupon(index)
        if coupon is not None:
            try:
                outcome = coupon_reserve(user_id=coupon.user_id, code=coupon.code, hold_seconds=hold,
                                         order=Order(self.order(order), amount, "CNY"))
            except OrderCartChanged:  # the order's other coupon was priced at another amount: a 400
                return
            assert outcome.code in USE_CODES

    @rule(index=st.integers(0, 20), order=st.sampled_from(ORDERS), amount=st.sampled_from(AMOUNTS))
    def redeem(self, index: int, order: str, amount: Decimal) -> None:
        coupon = self.pick_coupon(index)
        if coupon is not None:
            try:
                outcome = coupon_redeem(user_id=coupon.user_id, code=coupon.code,
                                        order=Order(self.order(order), amount, "CNY"))
            except OrderCartChanged:  # the order's other coupon was priced at another amount: a 400
                return
            assert outcome.code in USE_CODES
            if outcome.code == 0:  # the order's payable after its coupons (one per campaign: this one)
                assert Decimal(outcome.extra["payable"]) == amount - Decimal("20.00")

    @rule(index=st.integers(0, 20), order=st.sampled_from(ORDERS))
    def confirm(self, index: int, order: str) -> None:
        coupon = self.pick_coupon(index)
        if coupon is not None:
            outcome = coupon_confirm(user_id=coupon.user_id, code=coupon.code, order_id=self.order(order))
            assert outcome.code in USE_CODES

    @rule(index=st.integers(0, 20), order=st.sampled_from(ORDERS))
    def release(self, index: int, order: str) -> None:
        coupon = self.pick_coupon(index)
        if coupon is not None:
            outcome = coupon_release(user_id=coupon.user_id, code=coupon.code, order_id=self.order(order))
            assert outcome.code == 0
            coupon.refresh_from_db()
            assert coupon.order_id != self.order(order)

    @rule(index=st.integers(0, 20), someone_else=st.booleans())
    def cancel(self, index: int, someone_else: bool) -> None:
        if not self.claims:
            return
        user, claim_id = self.claims[index % len(self.claims)]
        if someone_else:
            with pytest.raises(NotFound):
                claim_cancel(user_id="intruder", claim_id=claim_id)
            return
        outcome = claim_cancel(user_id=user, claim_id=claim_id)
        assert outcome.code in (0, 10, 11, 14, 16)

    @rule(index=st.integers(0, 20))
    def validity_runs_out(self, index: int) -> None:
        coupon = self.pick_coupon(index)
        if coupon is not None:
            now = timezone.now()
            Coupon.objects.filter(pk=coupon.pk).update(valid_from=min(coupon.valid_from, now - timedelta(seconds=9)),
                                                       expires_at=now - timedelta(seconds=5))

    @rule(index=st.integers(0, 20))
    def hold_runs_out(self, index: int) -> None:
        coupon = self.pick_coupon(index)
        if coupon is not None and coupon.status == CouponStatus.HELD:
            Coupon.objects.filter(pk=coupon.pk).update(hold_until=timezone.now() - timedelta(seconds=1))

    @rule(user=st.sampled_from(USERS))
    def shopper_looks_at_their_coupons(self, user: str) -> None:
        coupons_settle_due(user_id=user)

    @invariant()
    def every_row_is_the_fold_of_its_events(self) -> None:
        assert list(disagreements(Coupon.objects.filter(campaign=self.campaign))) == []

    @invariant()
    def the_campaign_balances(self) -> None:
        balance = campaign_verify(campaign=self.campaign)
        assert balance.balanced, (balance, balance.problems)

    @invariant()
    def no_claim_is_issued_without_its_coupon_nor_cancelled_with_a_live_one(self) -> None:
        for claim in Claim.objects.filter(campaign=self.campaign):
            coupon = Coupon.objects.filter(claim_id=claim.claim_id).first()
            if claim.status == "issued":
                assert coupon is not None and coupon.status != CouponStatus.REVOKED
            elif claim.status == "cancelled":
                assert coupon is None or coupon.status == CouponStatus.REVOKED


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_random_lives_of_coupons_keep_rows_equal_to_their_events_and_the_campaign_balanced() -> None:
    run_state_machine_as_test(
        CouponLife,
        settings=settings(max_examples=30, stateful_step_count=25, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]),
    )
