"""The demo storefront at "/" in a real browser: grab a coupon, see it issued, redeem it at the pretend checkout.

Also its dev-only token endpoint, POST /dev/demo-shopper: there with DEBUG on or COUPONS_DEMO_TOKENS on,
a 404 with DEBUG off, and never under config.settings.production, whatever DEBUG and the flag say.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from datetime import timedelta
from decimal import Decimal

import pytest
from django.conf import settings
from django.utils import timezone
from playwright.sync_api import Page, expect

from campaigns.models import Campaign
from campaigns.services import campaign_preheat
from core.auth import authenticate
from coupons.models import Coupon, CouponStatus
from tests.factories import CampaignFactory

from ..conftest import ROOT
from .conftest import save_screenshot

TIMEOUT = 15_000  # ms: a claim becomes a coupon within a second here; the margin is for a loaded CI machine


def live_sale(**fields) -> Campaign:
    """A published campaign, live now, loaded into Redis: spend 300.00, get 50.00 off."""
    fields = {"name": "Double 11 flash sale", "total_stock": 10, "min_spend": Decimal("300.00"),
              "discount_value": Decimal("50.00"), **fields}
    campaign = CampaignFactory(**fields)
    campaign_preheat(campaign=campaign)
    campaign.refresh_from_db()
    return campaign


def grab_one(page: Page, campaign: Campaign) -> tuple[str, str]:
    """Open the storefront, grab a coupon of `campaign`, wait until it is listed; return (shopper, code)."""
    card = page.locator(f"#campaign-{campaign.pk}")
    expect(card.get_by_test_id("campaign-name")).to_have_text(campaign.name)
    expect(card.get_by_test_id("campaign-state")).to_have_text("Live now")
    expect(card.get_by_test_id("remaining")).to_have_text(str(campaign.total_stock))
    expect(card.get_by_test_id("total-stock")).to_have_text(str(campaign.total_stock))
    expect(card.get_by_test_id("countdown")).to_have_text(re.compile(r"^Ends in 1h 5\dm \d\ds$"))
    shopper = page.get_by_test_id("shopper-id")
    expect(shopper).to_have_text(re.compile(r"^demo-[0-9a-f]{12}$"))
    grab = card.get_by_test_id("grab")
    expect(grab).to_be_enabled()
    user_id = shopper.inner_text()
    status_reads: list[str] = []  # the page's GET /claims/{id}: long polls, not polling every 400 ms
    page.on("request", lambda request: status_reads.append(request.url) if "/api/v1/claims/" in request.url else None)

    grab.click()

    result = card.get_by_test_id("claim-result")
    expect(result).to_have_attribute("data-claim-id", re.compile(rf"^{campaign.pk}-\d+-\d+$"), timeout=TIMEOUT)
    expect(card.get_by_test_id("remaining")).to_have_text(str(campaign.total_stock - 1), timeout=TIMEOUT)
    expect(result).to_contain_text("is yours", timeout=TIMEOUT)  # the drain issued it
    assert status_reads and all(url.endswith("?wait=20") for url in status_reads), status_reads
    assert len(status_reads) <= 2, status_reads  # woken by the drain: one long poll (two if it began just before)
    rows = page.get_by_test_id("coupon")
    expect(rows).to_have_count(1, timeout=TIMEOUT)
    coupon = Coupon.objects.get(user_id=user_id, campaign=campaign)
    assert coupon.claim_id == result.get_attribute("data-claim-id")
    assert result.get_attribute("data-coupon-code") == coupon.code
    expect(rows.first).to_have_attribute("data-code", coupon.code)
    expect(rows.first.get_by_test_id("coupon-status")).to_have_text("Ready to use")
    expect(page.get_by_test_id("checkout-coupon")).to_have_value(coupon.code)
    expect(page.get_by_test_id("checkout-currency")).to_have_text("CNY")
    return user_id, coupon.code


def test_grab_a_coupon_see_it_issued_and_redeem_it_at_the_pretend_checkout(
    page: Page, storefront_server: str, drain_loop: None
) -> None:
    # Given a live flash sale of 10 coupons (spend 300.00, get 50.00 off) and one opening in 10 minutes
    campaign = live_sale()
    upcoming = CampaignFactory(name="Midnight sale", total_stock=500,
                               starts_at=timezone.now() + timedelta(minutes=10, seconds=30))
    campaign_preheat(campaign=CampaignFactory(name="Type SAVE9", kind="codes", code="SAVE9X", total_stock=5))
    page.goto(f"{storefront_server}/")
    expect(page.locator(f"#campaign-{campaign.pk}")).to_be_visible()
    later = page.locator(f"#campaign-{upcoming.pk}")
    expect(later.get_by_test_id("campaign-state")).to_have_text("Starting soon")
    expect(later.get_by_test_id("countdown")).to_have_text(re.compile(r"^Opens in 10m \d\ds$"))
    expect(later.get_by_test_id("remaining")).to_have_text("500")
    expect(later.get_by_test_id("grab")).to_be_disabled()
    expect(page.get_by_test_id("campaign")).to_have_count(2)  # not the codes campaign: its code is typed
    expect(page.get_by_test_id("shopper-id")).to_have_text(re.compile(r"^demo-[0-9a-f]{12}$"))
    expect(page.locator(f"#campaign-{campaign.pk}").get_by_test_id("grab")).to_be_enabled()
    save_screenshot(page, "storefront-before-grab")

    # When the demo shopper grabs one, it is claimed, stock goes down and the coupon is listed once drained
    user_id, code = grab_one(page, campaign)
    save_screenshot(page, "storefront-coupon-issued")

    # And pays an order of 350.00 with it at the pretend checkout
    page.get_by_test_id("checkout-amount").fill("350.00")
    page.get_by_test_id("checkout-submit").click()

    # Then the discount and the amount to pay are shown, and the coupon is used, in the page and in PostgreSQL
    expect(page.get_by_test_id("checkout-status")).to_have_text("redeemed (code 0)", timeout=TIMEOUT)
    expect(page.get_by_test_id("checkout-order")).to_have_text("CN¥350.00")
    expect(page.get_by_test_id("checkout-discount")).to_have_text("CN¥50.00")
    expect(page.get_by_test_id("checkout-payable")).to_have_text("CN¥300.00")
    expect(page.get_by_test_id("coupon-status")).to_have_text("Used", timeout=TIMEOUT)
    coupon = Coupon.objects.get(code=code)
    assert (coupon.user_id, coupon.status, coupon.discount) == (user_id, CouponStatus.REDEEMED, Decimal("50.00"))
    expect(page.locator(f"#campaign-{campaign.pk}").get_by_test_id("remaining")).to_have_text("9")
    save_screenshot(page, "storefront")

    # And the shopper survives a reload (kept in localStorage), its token renewed before it expires
    page.evaluate("""() => {
        const s = JSON.parse(localStorage.getItem("couponrush.demoShopper"));
        s.expires = Math.floor(Date.now() / 1000) + 5;  // about to expire, and no longer a valid signature
        s.token = s.expires + "." + "0".repeat(64);
        localStorage.setItem("couponrush.demoShopper", JSON.stringify(s));
    }""")
    page.reload()
    expect(page.get_by_test_id("shopper-id")).to_have_text(user_id)
    expect(page.get_by_test_id("coupon-status")).to_have_text("Used", timeout=TIMEOUT)  # needed a valid token
    stored = json.loads(page.evaluate('() => localStorage.getItem("couponrush.demoShopper")'))
    assert stored["user_id"] == user_id and authenticate(user_id, stored["token"]) == user_id

    # And "New shopper" starts over with nobody's coupons
    page.get_by_test_id("new-shopper").click()
    expect(page.get_by_test_id("shopper-id")).not_to_have_text(user_id)
    expect(page.get_by_test_id("shopper-id")).to_have_text(re.compile(r"^demo-[0-9a-f]{12}$"))
    expect(page.get_by_test_id("coupons-empty")).to_be_visible()
    expect(page.get_by_test_id("coupon")).to_have_count(0)


def test_an_order_under_the_minimum_spend_is_refused_in_plain_words(
    page: Page, storefront_server: str, drain_loop: None
) -> None:
    campaign = live_sale()
    page.goto(f"{storefront_server}/")
    _, code = grab_one(page, campaign)

    page.get_by_test_id("checkout-amount").fill("100.00")
    page.get_by_test_id("checkout-submit").click()

    expect(page.get_by_test_id("checkout-status")).to_have_text("min_spend_not_met (code 12)", timeout=TIMEOUT)
    expect(page.get_by_test_id("checkout-message")).to_contain_text("minimum spend of CN¥300.00")
    expect(page.get_by_test_id("checkout-figures")).to_be_hidden()
    expect(page.get_by_test_id("coupon-status")).to_have_text("Ready to use")
    assert Coupon.objects.get(code=code).status == CouponStatus.ACTIVE
    save_screenshot(page, "storefront-min-spend")


def test_without_demo_tokens_the_endpoint_is_a_404_and_the_page_says_so(page: Page, plain_server: str) -> None:
    # Given the server as deployed (test settings: DEBUG off) and a live campaign
    campaign = live_sale()

    # The dev-only endpoint does not exist
    with pytest.raises(urllib.error.HTTPError) as refused:
        post_json(f"{plain_server}/dev/demo-shopper", {})
    assert refused.value.code == 404

    # And the page still lists the campaign, says why there is no shopper, and offers no Grab
    page.goto(f"{plain_server}/")
    expect(page.get_by_test_id("notice")).to_contain_text("only available in development", timeout=TIMEOUT)
    expect(page.get_by_test_id("shopper-id")).to_have_text("no demo shopper")
    card = page.locator(f"#campaign-{campaign.pk}")
    expect(card.get_by_test_id("remaining")).to_have_text("10")
    expect(card.get_by_test_id("grab")).to_be_disabled()
    save_screenshot(page, "storefront-no-demo-shopper")


# --- the endpoint itself, over HTTP ---------------------------------------------------------------------


def post_json(url: str, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.status, json.loads(response.read())


def test_demo_shopper_endpoint_mints_a_short_lived_token_and_renews_only_demo_shoppers(storefront_server: str) -> None:
    url = f"{storefront_server}/dev/demo-shopper"
    status, body = post_json(url, {})
    assert status == 200 and (body["code"], body["status"]) == (0, "ok")
    assert re.fullmatch(r"demo-[0-9a-f]{12}", body["user_id"])
    assert authenticate(body["user_id"], body["token"]) == body["user_id"]
    assert 0 < body["expires"] - time.time() <= settings.COUPONS_TOKEN_MAX_TTL
    assert body["token"].startswith(f"{body['expires']}.") and body["ttl"] <= settings.COUPONS_TOKEN_MAX_TTL

    # Renewal keeps the shopper
    _, renewed = post_json(url, {"user_id": body["user_id"]})
    assert renewed["user_id"] == body["user_id"]
    assert authenticate(renewed["user_id"], renewed["token"]) == body["user_id"]

    # A real shopper's id is refused: the endpoint only ever speaks for demo shoppers
    for user_id in ("alice", "demo-", "demo-ü", "x" * 70, 42):
        with pytest.raises(urllib.error.HTTPError) as refused:
            post_json(url, {"user_id": user_id})
        assert refused.value.code == 400, user_id

    # GET is not minted
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(url, timeout=10)
    assert refused.value.code == 405


# --- whether the route exists, decided at URL-conf import time ------------------------------------------

PRODUCTION_ENV = {
    "DJANGO_SECRET_KEY": "q8Zr-5vT_w2Lm9Yx0Pb7Kc4Nf6Hd1Js3Ga8Ue5Oi2Wy7Re4Tu9Ip", "COUPONS_TOKEN_SECRET": "t" * 40,
    "DATABASE_URL": "postgres://u:p@db.internal:5432/couponrush", "REDIS_URL": "redis://redis.internal:6379/0",
    "COUPONS_STOREFRONT_ENCRYPTION_KEYS": "q0Tb1S4wKjq3G7bU1h2u8c3d9Yq5m2Zp4Xr6Vw7Ns0E=",  # production refuses none
}
RESOLVE = (
    "import django; django.setup()\n"
    "from django.urls import Resolver404, resolve\n"
    "def has(p):\n"
    "    try:\n"
    "        resolve(p); return True\n"
    "    except Resolver404:\n"
    "        return False\n"
    "print('ROUTES', has('/'), has('/dev/demo-shopper'))\n"
)


@pytest.mark.parametrize(
    "settings_module, changes, expected",
    [
        ("config.settings.dev", {}, True),  # development: DEBUG on by default
        ("config.settings.dev", {"DJANGO_DEBUG": "false"}, False),
        ("config.settings.dev", {"COUPONS_DEMO_TOKENS": "false"}, False),  # explicitly off, even with DEBUG
        ("config.settings.test", {}, False),  # DEBUG off
        ("config.settings.test", {"COUPONS_DEMO_TOKENS": "true"}, True),  # what the browser tests use
        ("config.settings.production", {}, False),
        ("config.settings.production", {"DJANGO_DEBUG": "true", "COUPONS_DEMO_TOKENS": "true"}, False),  # never
    ],
)
def test_the_demo_shopper_route_exists_only_where_allowed(settings_module, changes, expected) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "COUPONS_"))}
    if settings_module == "config.settings.production":
        env.update(PRODUCTION_ENV)
    env.update(DJANGO_SETTINGS_MODULE=settings_module, **changes)
    result = subprocess.run([sys.executable, "-c", RESOLVE], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"ROUTES True {expected}" in result.stdout, result.stdout + result.stderr[-2000:]


def test_a_shared_code_typed_at_the_pretend_checkout_is_used_once_per_shopper(
    page: Page, storefront_server: str
) -> None:
    # Given a codes campaign whose shared code SAVE50 may be used twice in all, once per shopper
    campaign = CampaignFactory(name="Type SAVE50", kind="codes", code="SAVE50", total_stock=2)
    campaign_preheat(campaign=campaign)
    page.goto(f"{storefront_server}/")
    expect(page.get_by_test_id("shopper-id")).to_have_text(re.compile(r"^demo-[0-9a-f]{12}$"))
    user_id = page.get_by_test_id("shopper-id").inner_text()

    # When the demo shopper types it (any case) at the checkout and pays 350.00
    page.get_by_test_id("checkout-code").fill("save50")
    page.get_by_test_id("checkout-amount").fill("350.00")
    page.get_by_test_id("checkout-submit").click()

    # Then the discount is applied, and the use is the shopper's own coupon in PostgreSQL
    expect(page.get_by_test_id("checkout-status")).to_have_text("redeemed (code 0)", timeout=TIMEOUT)
    expect(page.get_by_test_id("checkout-discount")).to_have_text("CN¥50.00")
    expect(page.get_by_test_id("checkout-payable")).to_have_text("CN¥300.00")
    coupon = Coupon.objects.get(campaign=campaign)
    assert (coupon.user_id, coupon.status, coupon.discount) == (user_id, CouponStatus.REDEEMED, Decimal("50.00"))

    # And typing it again for another order is refused: one use per shopper
    page.get_by_test_id("checkout-submit").click()
    expect(page.get_by_test_id("checkout-status")).to_have_text("limit_reached (code 1)", timeout=TIMEOUT)
    assert Coupon.objects.filter(campaign=campaign).count() == 1


def test_the_cart_asks_for_the_best_coupons_and_pays_with_them(
    page: Page, storefront_server: str, drain_loop: None
) -> None:
    # Given a grabbed coupon of 10% off tea, and a shared code CART20 (20.00 off) typed at the checkout
    tea = live_sale(name="Tea week", discount_type="percent", discount_value=Decimal("10"), min_spend=Decimal("0"),
                    include_categories=["tea"])
    shared = CampaignFactory(name="Type CART20", kind="codes", code="CART20", total_stock=5,
                             discount_value=Decimal("20.00"), min_spend=Decimal("0"))
    campaign_preheat(campaign=shared)
    page.goto(f"{storefront_server}/")
    user_id, code = grab_one(page, tea)
    page.get_by_test_id("checkout-code").fill("cart20")

    # When the shopper asks for the best coupons for the demo cart (240.00 of tea, 60.00 and 80.00 of others)
    page.get_by_test_id("cart-validate").click()

    # Then both apply, the fixed amount first, and the best total is shown
    expect(page.get_by_test_id("cart-best-codes")).to_have_text(f"CART20 + {code}", timeout=TIMEOUT)
    expect(page.locator(f'[data-testid="cart-coupon"][data-code="{code}"]')).to_have_attribute("data-status", "ok")
    payable = page.get_by_test_id("cart-best-payable").inner_text()
    save_screenshot(page, "storefront-cart")

    # When the shopper pays with them
    page.get_by_test_id("cart-pay").click()

    # Then each coupon is redeemed by one order and the order pays what validate said
    expect(page.get_by_test_id("cart-message")).to_contain_text("Paid", timeout=TIMEOUT)
    assert f"CN¥{page.get_by_test_id('cart-message').get_attribute('data-payable')}" == payable  # money per locale
    used = Coupon.objects.filter(user_id=user_id, status=CouponStatus.REDEEMED)
    assert {c.campaign_id for c in used} == {tea.pk, shared.pk} and len({c.order_id for c in used}) == 1
    assert Decimal("380.00") - sum(c.discount for c in used) == Decimal(payable.removeprefix("CN¥"))
