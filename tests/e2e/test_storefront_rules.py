"""The demo storefront shows a campaign's richer rule (issue 38 goal 3; docs/api.md, Richer rules) in a real
browser: a tiers campaign's ladder, the tier the cart reaches and what is left to reach the next (following the
cart's quantities), free shipping and buy N get M; the grabbed tiers coupon's row shows its ladder too; a percentage
reads "15% off", not "15%% off"."""
from __future__ import annotations

from decimal import Decimal

from playwright.sync_api import Page, expect

from .conftest import save_screenshot
from .test_storefront import TIMEOUT, grab_one, live_sale

LADDER = ("Spend CN¥100.00, save CN¥10.00 · Spend CN¥200.00, save CN¥25.00 · Spend CN¥500.00, save 10%"
          " (at most CN¥80.00)")


def test_the_storefront_shows_tiers_free_shipping_and_buy_n_get_m(page: Page, storefront_server: str,
                                                                   drain_loop: None) -> None:
    tiers = live_sale(name="满减 ladder", discount_type="tiers", discount_value=Decimal(0),
                      min_spend=Decimal("100.00"), max_discount=Decimal("80.00"),
                      tiers=[["100.00", "10.00", False], ["200.00", "25.00", False], ["500.00", "10", True]])
    free = live_sale(name="Free shipping", discount_type="free_shipping", discount_value=Decimal(0),
                     min_spend=Decimal(0), max_discount=Decimal("15.00"))
    b2g1 = live_sale(name="Buy 2 get 1", discount_type="buy_get", discount_value=Decimal(0),
                     min_spend=Decimal(0), buy_quantity=2, get_quantity=1)
    percent = live_sale(name="15% off", discount_type="percent", discount_value=Decimal(15),
                        max_discount=Decimal("30.00"))

    page.goto(f"{storefront_server}/")

    card = page.locator(f"#campaign-{tiers.pk}")
    expect(card.get_by_test_id("campaign-deal")).to_have_text(LADDER + " · 1 per shopper")
    progress = card.get_by_test_id("tier-progress")
    # the demo cart: 2 x 120.00 + 60.00 + 80.00 = 380.00: the 200 tier, 120.00 left to the 500 tier
    expect(progress).to_have_text("Your cart (CN¥380.00) reaches: Spend CN¥200.00, save CN¥25.00. "
                                  "Spend CN¥120.00 more to save 10%.")
    expect(progress).to_have_attribute("data-left", "120.00")
    for tier_less in (free, b2g1):
        expect(page.locator(f"#campaign-{tier_less.pk}").get_by_test_id("tier-progress")).to_be_hidden()
    expect(page.locator(f"#campaign-{free.pk}").get_by_test_id("campaign-deal")).to_have_text(
        "Free shipping (at most CN¥15.00) · 1 per shopper")
    expect(page.locator(f"#campaign-{b2g1.pk}").get_by_test_id("campaign-deal")).to_have_text(
        "Buy 2, get 1 free · 1 per shopper")
    # a percentage reads with one sign (Django's interpolate leaves "%%": app.js's fmt makes it "%")
    expect(page.locator(f"#campaign-{percent.pk}").get_by_test_id("campaign-deal")).to_have_text(
        "15% off (at most CN¥30.00) on orders of CN¥300.00 or more · 1 per shopper")

    quantities = page.get_by_test_id("cart-quantity")
    quantities.nth(0).fill("4")  # 4 x 120.00 + 140.00 = 620.00: the top tier
    quantities.nth(0).dispatch_event("change")
    expect(progress).to_have_text("Your cart (CN¥620.00) reaches: Spend CN¥500.00, save 10%. "
                                  "The top tier is reached.")
    quantities.nth(0).fill("1")
    quantities.nth(0).dispatch_event("change")
    quantities.nth(1).fill("1")
    quantities.nth(2).fill("1")
    # 120.00 + 60.00 + 80.00 = 260.00
    expect(progress).to_have_text("Your cart (CN¥260.00) reaches: Spend CN¥200.00, save CN¥25.00. "
                                  "Spend CN¥240.00 more to save 10%.")

    grab_one(page, tiers)
    row = page.get_by_test_id("coupon").first
    expect(row).to_contain_text(LADDER, timeout=TIMEOUT)
    save_screenshot(page, "storefront-rules")
