"""The console in Simplified Chinese in a real browser (issue 25): the admin's campaign flow and the storefront,
each switched to 简体中文 with the language switch of its header; no English text of the project's catalogs is
left on those pages; screenshots admin-campaign-list-zh-hans.png, admin-campaign-change-zh-hans.png and
storefront-zh-hans.png (copies in docs/screenshots/)."""
from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal
from typing import Any

from django.contrib.auth.models import User
from django.utils import timezone
from playwright.sync_api import Page, expect

from campaigns.models import Campaign
from campaigns.services import campaign_preheat
from coupons.models import Coupon
from tests.factories import CampaignFactory

from ..conftest import wait_for
from ..test_i18n import catalog
from .conftest import save_screenshot
from .test_admin_console import choose_action, claim

TIMEOUT = 15_000


def english_fragments() -> list[str]:
    """The English pieces of the catalogs' msgids (split at placeholders and tags) that would give away an
    untranslated string: at least 3 letters, and not kept as is by the translations (Redis, SKU, CSV ...)."""
    translations: list[str] = []
    msgids: list[str] = []
    for domain in ("django", "djangojs"):
        for (_context, msgid, plural), entry in catalog("zh_Hans", domain).items():
            msgids += [msgid, *([plural] if plural else [])]
            translations += entry["msgstr"]  # type: ignore[arg-type]
    kept = " ".join(translations)
    fragments = set()
    for msgid in msgids:
        for piece in re.split(r"%\(\w+\)s|%%|<[^>]*>|&[a-z]+;", msgid):
            piece = piece.strip(" .,:;()[]#…·-/'\"")
            if len(re.findall(r"[A-Za-z]", piece)) >= 3 and piece not in kept:
                fragments.add(piece)
    return sorted(fragments, key=len, reverse=True)


def english_left(page: Page) -> list[str]:
    """The English fragments on the page, each with the line it is on."""
    lines = page.inner_text("body").splitlines()
    return [f"{f!r} in {line.strip()!r}" for f in english_fragments() for line in lines
            if re.search(rf"(?<![A-Za-z]){re.escape(f)}(?![A-Za-z])", line)]


def switch_to_chinese(page: Page) -> None:
    with page.expect_navigation():
        page.select_option("#language-select", "zh-hans")
    expect(page.locator("html")).to_have_attribute("lang", "zh-hans")


def test_an_operator_runs_a_campaign_in_simplified_chinese(plain_server: str, drain_loop: None, page: Page) -> None:
    User.objects.create_superuser("ops", "ops@example.com", "a-long-operator-password")
    admin = f"{plain_server}/admin/"
    name = "双十一浏览器测试"

    # the login page's switch, then log in
    page.goto(admin)
    switch_to_chinese(page)
    expect(page.locator("#site-name")).to_have_text("couponrush 运营后台")
    page.fill("#id_username", "ops")
    page.fill("#id_password", "a-long-operator-password")
    page.click("input[type=submit]")
    page.wait_for_selector("#user-tools")

    # create a campaign: labels and help in Chinese, times in the operator's zone
    page.goto(f"{admin}campaigns/campaign/add/")
    expect(page.locator("label[for=id_total_stock]")).to_have_text("总库存:")
    assert english_left(page) == []
    start = timezone.localtime() - timedelta(minutes=1)
    end = start + timedelta(hours=1)
    page.fill("#id_name", name)
    page.fill("#id_starts_at_0", start.strftime("%Y-%m-%d"))
    page.fill("#id_starts_at_1", start.strftime("%H:%M:%S"))
    page.fill("#id_ends_at_0", end.strftime("%Y-%m-%d"))
    page.fill("#id_ends_at_1", end.strftime("%H:%M:%S"))
    page.fill("#id_total_stock", "20")
    page.fill("#id_per_user_limit", "1")
    page.fill("#id_discount_value", "50.00")
    page.fill("#id_min_spend", "300.00")
    page.fill("#id_valid_days", "30")
    page.click("input[name=_save]")
    page.wait_for_selector(".messagelist .success")
    campaign = Campaign.objects.get(name=name)

    # publish it: the confirmation page, then the action, in Chinese
    choose_action(page, "publish", name)
    assert english_left(page) == []
    page.click("input[type=submit][value=发布]")
    page.wait_for_selector("text=已发布 1 个活动。")

    # claims through the API (English, whatever the page says), then the list and the change page
    for user in ("ann", "bob", "cid"):
        assert claim(plain_server, campaign.pk, user)["status"] == "claimed"
    wait_for(lambda: Coupon.objects.filter(campaign=campaign).count() == 3)
    page.goto(f"{admin}campaigns/campaign/")
    if page.is_visible("#toggle-nav-sidebar"):
        page.click("#toggle-nav-sidebar")
    row = page.locator("tr", has_text=name)
    assert "17" in row.inner_text() and "进行中" in row.inner_text()
    assert english_left(page) == []
    save_screenshot(page, "admin-campaign-list-zh-hans")

    page.goto(f"{admin}campaigns/campaign/{campaign.pk}/change/")
    assert page.inner_text("#live-remaining") == "17"
    expect(page.locator("#live-panel h2")).to_have_text("实时")
    expect(page.locator("#live-state")).to_have_text("进行中")
    assert english_left(page) == []
    save_screenshot(page, "admin-campaign-change-zh-hans")


def test_a_shopper_grabs_a_coupon_in_simplified_chinese(page: Page, storefront_server: str, drain_loop: Any) -> None:
    campaign = CampaignFactory(name="双十一秒杀", total_stock=10, min_spend=Decimal("300.00"),
                               discount_value=Decimal("50.00"))
    campaign_preheat(campaign=campaign)
    page.goto(storefront_server + "/")
    switch_to_chinese(page)

    card = page.locator(f"#campaign-{campaign.pk}")
    expect(card.get_by_test_id("campaign-state")).to_have_text("进行中")
    expect(card.get_by_test_id("campaign-deal")).to_contain_text("¥50.00")  # money as zh-hans writes it (Intl)
    expect(card.get_by_test_id("campaign-deal")).not_to_contain_text("CN¥")
    expect(card.get_by_test_id("countdown")).to_have_text(re.compile(r"^距结束 1时 5\d分 \d\d秒$"))
    expect(page.get_by_test_id("shopper-id")).to_have_text(re.compile(r"^demo-[0-9a-f]{12}$"))
    card.get_by_test_id("grab").click()
    expect(card.get_by_test_id("claim-result")).to_contain_text("已到账", timeout=TIMEOUT)
    rows = page.get_by_test_id("coupon")
    expect(rows).to_have_count(1, timeout=TIMEOUT)
    expect(rows.first.get_by_test_id("coupon-status")).to_have_text("可使用")
    expect(page.get_by_test_id("checkout-submit")).to_have_text("用券支付")
    assert english_left(page) == []
    save_screenshot(page, "storefront-zh-hans")


def test_the_english_check_finds_an_english_string() -> None:
    fragments = english_fragments()
    assert "Live and upcoming campaigns" in fragments and "Publish" in fragments
    assert "Redis" not in fragments and "SKU" not in fragments  # kept as is by the translations
