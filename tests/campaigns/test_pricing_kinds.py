"""campaigns.pricing's benefits beyond an amount or a percentage (issue 38): tiers (满减), free shipping, buy N get
M. Pure: no database, no Redis.

Property tests (hypothesis) of the arithmetic: every kind mixed with plain coupons keeps the order's invariants
(shares, lines' and shipping's, sum to each discount exactly; nothing below zero; payable >= 0 and includes the
shipping; caps); tiers are monotonic and are the highest tier reached; buy N get M is the brute-force definition;
free shipping is at most the shipping and its cap; best is brute force's best over sets mixing every kind.
"""
from __future__ import annotations

import itertools
from decimal import ROUND_HALF_UP, Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from campaigns.pricing import (
    BUY_GET,
    FREE_SHIPPING,
    MAX_COUPONS_PER_ORDER,
    MIN_SPEND_NOT_MET,
    NOT_APPLICABLE,
    OK,
    TIERS,
    Candidate,
    Cart,
    CartLine,
    CouponPricing,
    CouponRule,
    InvalidCart,
    OrderPricing,
    Tier,
    as_json,
    best_combination,
    combinable,
    eligible_lines,
    price_coupon,
    price_coupons,
    price_stack,
    stacking_key,
    tiers_problem,
    validate_cart,
)

from .test_pricing import CATEGORIES, PROPERTY, brute_force_best, carts, currencies, money, optional_amount, rules

D = Decimal


# --- strategies ---


@st.composite
def tier_lists(draw: st.DrawFn, currency: str) -> tuple[Tier, ...]:
    """Tiers that go up: thresholds increasing, each taking off at its threshold at least what the one before would."""
    count = draw(st.integers(1, 4))
    tiers: list[Tier] = []
    threshold = 0
    for _ in range(count):
        threshold += draw(st.integers(1, 15_000))
        at = money(threshold, currency)
        least = tiers[-1].value(at) if tiers else D(0)
        if draw(st.booleans()):
            percent = draw(st.sampled_from([D(5), D("12.5"), D(20), D(50), D(100)]))
            if at * percent / 100 < least:
                percent = min(D(100), (least * 100 / at).quantize(D("0.01"), rounding="ROUND_CEILING"))
            if at * percent / 100 < least:
                break
            tiers.append(Tier(at, percent, True))
        else:
            least_units = int(least.scaleb(2 if currency == "CNY" else 0).to_integral_value(rounding="ROUND_CEILING"))
            off = money(max(least_units, 1) + draw(st.integers(0, 5_000)), currency)
            tiers.append(Tier(at, off))
    return tuple(tiers)


@st.composite
def rich_rules(draw: st.DrawFn, currency: str, stackable: bool = False) -> CouponRule:
    """A rule of any kind: tiers, free shipping, buy N get M, or a plain one (test_pricing's)."""
    kind = draw(st.sampled_from([TIERS, FREE_SHIPPING, BUY_GET, "plain"]))
    if kind == "plain":
        return draw(rules(currency, stackable))
    subset = st.frozensets
    fields: dict[str, object] = {
        "max_discount": draw(optional_amount(currency)),
        "include_categories": draw(subset(st.sampled_from(CATEGORIES), max_size=2)),
        "order_cap": draw(st.none() | st.none() | optional_amount(currency)),
    }
    if not stackable:
        fields |= {"exclusive": draw(st.booleans().map(lambda b: b and draw(st.booleans()))),
                   "min_quantity": draw(st.integers(0, 3))}
    if kind == TIERS:
        fields["tiers"] = draw(tier_lists(currency))
    elif kind == BUY_GET:
        fields["buy"], fields["get"] = draw(st.integers(1, 3)), draw(st.integers(1, 2))
    elif not stackable:
        fields["min_spend"] = draw(st.just(D(0)) | st.integers(1, 20_000).map(lambda u: money(u, currency)))
    return CouponRule(kind, D(0), currency, **fields)  # type: ignore[arg-type]


@st.composite
def shipped_carts(draw: st.DrawFn, currency: str) -> Cart:
    cart = draw(carts(currency))
    shipping = draw(st.just(0) | st.integers(0, 3_000))
    return Cart(currency, cart.lines, shipping=money(shipping, currency))


@st.composite
def rich_scenarios(draw: st.DrawFn, max_size: int = 6, stackable: bool = False) -> tuple[Cart, list[Candidate]]:
    currency = draw(currencies)
    count = draw(st.integers(1, max_size))
    candidates = [Candidate(code=f"C{i}", campaign_id=i + 1 if stackable else draw(st.integers(1, 6)),
                            rule=draw(rich_rules(currency, stackable))) for i in range(count)]
    return draw(shipped_carts(currency)), candidates


def assert_sound(cart: Cart, pricing: OrderPricing) -> None:
    """The invariants of an order's pricing with every kind: test_pricing's, with the shipping beside the lines."""
    per_line = [D(0)] * len(cart.lines)
    shipping = D(0)
    for result in pricing.coupons:
        if not result.applicable:
            assert result.discount == 0 and result.lines == () and result.shipping == 0
            continue
        rule = result.candidate.rule
        assert result.discount >= 0
        assert sum((s.discount for s in result.lines), D(0)) + result.shipping == result.discount  # exactly
        if rule.discount_type == FREE_SHIPPING:
            assert result.lines == () and result.shipping == result.discount
            assert rule.max_discount is None or result.discount <= rule.max_discount
        else:
            assert result.shipping == 0
            assert [s.index for s in result.lines] == list(eligible_lines(cart, rule))
        for share in result.lines:
            assert share.discount >= 0
            per_line[share.index] += share.discount
        shipping += result.shipping
    for index, line in enumerate(cart.lines):
        assert 0 <= per_line[index] <= line.amount
        assert pricing.lines[index].payable == line.amount - per_line[index]
    assert 0 <= shipping <= cart.shipping
    assert pricing.shipping_discount == shipping
    assert pricing.discount == sum(per_line, D(0)) + shipping
    assert pricing.payable == cart.amount + cart.shipping - pricing.discount >= 0
    applied = pricing.applied
    assert len(applied) <= MAX_COUPONS_PER_ORDER
    for first, second in itertools.combinations(applied, 2):
        assert combinable(first.candidate, second.candidate)
    for result in applied:
        cap = result.candidate.rule.order_cap
        assert cap is None or pricing.discount <= cap


# --- properties ---


@PROPERTY
@given(rich_scenarios(), st.randoms(use_true_random=False))
def test_every_kind_mixed_with_plain_coupons_keeps_every_invariant(scenario, rnd) -> None:  # type: ignore[no-untyped-def]
    cart, candidates = scenario
    rnd.shuffle(candidates)
    assert_sound(cart, price_coupons(cart, candidates))
    assert_sound(cart, price_stack(cart, candidates))


@PROPERTY
@given(rich_scenarios(), st.randoms(use_true_random=False))
def test_a_coupon_of_any_kind_on_an_order_is_worth_at_most_what_it_is_worth_alone(scenario, rnd) -> None:  # type: ignore[no-untyped-def]
    # The monotonicity the best-combination search prunes with, for every kind.
    cart, candidates = scenario
    rnd.shuffle(candidates)
    for result in price_coupons(cart, candidates).applied:
        alone = price_coupon(cart, result.candidate)
        assert alone.applicable and result.discount <= alone.discount


@PROPERTY
@given(rich_scenarios())
def test_an_order_of_any_kinds_built_coupon_by_coupon_is_the_order_priced_at_once(scenario) -> None:  # type: ignore[no-untyped-def]
    # What reserve and redeem do: stored shares (the lines' and the shipping's) rebuilt as the coupons before.
    cart, candidates = scenario
    stored: list[CouponPricing] = []
    for candidate in candidates:
        rebuilt = [CouponPricing(r.candidate, r.status, r.discount, r.lines, r.shipping) for r in stored]
        stored.append(price_coupon(cart, candidate, before=rebuilt))
    assert tuple(stored) == price_coupons(cart, candidates).coupons


@settings(PROPERTY, max_examples=300)
@given(rich_scenarios(max_size=6) | rich_scenarios(max_size=6, stackable=True))
def test_best_over_every_kind_is_the_best_allowed_set_found_by_brute_force(scenario) -> None:  # type: ignore[no-untyped-def]
    cart, candidates = scenario
    best = best_combination(cart, candidates)
    discount, keys = brute_force_best(cart, candidates)
    assert best.exact
    assert best.discount == discount
    assert tuple(stacking_key(r.candidate) for r in best.pricing.applied) == keys
    assert len(best.pricing.applied) == len(best.pricing.coupons)
    assert_sound(cart, best.pricing)
    assert best.payable == cart.amount + cart.shipping - best.discount >= 0


@PROPERTY
@given(st.data())
def test_tiers_are_the_highest_tier_reached_and_never_fall_as_the_amount_grows(data: st.DataObject) -> None:
    currency = data.draw(currencies)
    tiers = data.draw(tier_lists(currency))
    cap = data.draw(optional_amount(currency))
    rule = CouponRule(TIERS, D(0), currency, tiers=tiers, max_discount=cap)
    amounts = sorted(data.draw(st.lists(st.integers(1, 70_000), min_size=2, max_size=8)))
    before = D(0)
    unit = Decimal(1).scaleb(-2 if currency == "CNY" else 0)
    for units in amounts:
        amount = money(units, currency)
        result = price_coupon(Cart(currency, (CartLine("A", 1, amount),)), Candidate("T", 1, rule))
        reached = [tier for tier in tiers if amount >= tier.threshold]
        if not reached:
            assert result.status == MIN_SPEND_NOT_MET and result.discount == 0
            continue
        expected = reached[-1].value(amount).quantize(unit, rounding=ROUND_HALF_UP)
        if cap is not None:
            expected = min(expected, cap)
        assert result.status == OK and result.discount == min(expected, amount)
        assert result.discount >= before  # monotonic
        before = result.discount


def _brute_force_buy_get(cart: Cart, rule: CouponRule) -> Decimal:
    """The definition itself: every eligible item one by one; of every way to pick floor(items / (N + M)) x M of
    them, the one worth least (the cheapest are free); capped."""
    items = [cart.lines[i].unit_price for i in eligible_lines(cart, rule) for _ in range(cart.lines[i].quantity)]
    free = len(items) // (rule.buy + rule.get) * rule.get
    worth = min(sum(chosen, D(0)) for chosen in itertools.combinations(items, free)) if free else D(0)
    return worth if rule.max_discount is None else min(worth, rule.max_discount)


@PROPERTY
@given(st.data())
def test_buy_n_get_m_is_the_brute_force_definition(data: st.DataObject) -> None:
    currency = data.draw(currencies)
    lines = data.draw(st.lists(st.builds(
        lambda sku, category, quantity, units: CartLine(sku, quantity, money(units, currency), category),
        st.sampled_from("ABCD"), st.none() | st.sampled_from(CATEGORIES), st.integers(1, 3), st.integers(1, 9_000)),
        min_size=1, max_size=4))
    cart = Cart(currency, tuple(lines))
    rule = CouponRule(BUY_GET, D(0), currency, buy=data.draw(st.integers(1, 3)), get=data.draw(st.integers(1, 3)),
                      max_discount=data.draw(optional_amount(currency)),
                      include_categories=data.draw(st.frozensets(st.sampled_from(CATEGORIES), max_size=2)))
    result = price_coupon(cart, Candidate("B", 1, rule))
    if not eligible_lines(cart, rule):
        assert result.status == NOT_APPLICABLE
        return
    assert result.status == OK and result.discount == _brute_force_buy_get(cart, rule)
    assert sum(s.discount for s in result.lines) == result.discount
    for share in result.lines:  # a share is on a free item's line, never more than that line
        assert share.discount <= cart.lines[share.index].amount


@PROPERTY
@given(st.data())
def test_free_shipping_is_at_most_the_shipping_and_its_cap(data: st.DataObject) -> None:
    currency = data.draw(currencies)
    cart = data.draw(shipped_carts(currency))
    cap = data.draw(optional_amount(currency))
    rule = CouponRule(FREE_SHIPPING, D(0), currency, max_discount=cap)
    result = price_coupon(cart, Candidate("S", 1, rule))
    if cart.shipping == 0:
        assert result.status == NOT_APPLICABLE
        return
    assert result.status == OK
    assert result.discount == (cart.shipping if cap is None else min(cart.shipping, cap))
    assert result.shipping == result.discount and result.lines == ()
    assert as_json(result)["shipping"] == as_json(result)["discount"]


# --- examples ---

CNY = "CNY"
LADDER = (Tier(D(100), D(10)), Tier(D(200), D(25)), Tier(D(500), D(80)))  # 满100减10, 满200减25, 满500减80


def tiers_coupon(code: str = "T", campaign_id: int = 1, tiers: tuple[Tier, ...] = LADDER, **fields: object
                 ) -> Candidate:
    return Candidate(code, campaign_id, CouponRule(TIERS, D(0), CNY, tiers=tiers, **fields))  # type: ignore[arg-type]


def one_line(amount: str, shipping: str = "0") -> Cart:
    return Cart(CNY, (CartLine("A", 1, D(amount)),), shipping=D(shipping))


@pytest.mark.parametrize(("amount", "status", "discount"), [
    ("99.99", MIN_SPEND_NOT_MET, "0.00"), ("100.00", OK, "10.00"), ("199.99", OK, "10.00"), ("200.00", OK, "25.00"),
    ("499.00", OK, "25.00"), ("500.00", OK, "80.00"), ("9000.00", OK, "80.00"),
])
def test_the_highest_tier_reached_applies(amount: str, status: str, discount: str) -> None:
    result = price_coupon(one_line(amount), tiers_coupon())
    assert (result.status, result.discount) == (status, D(discount))


def test_a_percentage_tier_is_of_the_eligible_amount_and_capped() -> None:
    ladder = (Tier(D(100), D(10)), Tier(D(200), D(10), True))
    assert price_coupon(one_line("300.00"), tiers_coupon(tiers=ladder)).discount == D("30.00")
    assert price_coupon(one_line("300.00"), tiers_coupon(tiers=ladder, max_discount=D(25))).discount == D("25.00")


def test_tiers_are_judged_on_the_eligible_lines_after_the_coupons_before() -> None:
    cart = Cart(CNY, (CartLine("TEA", 1, D("210.00"), "tea"), CartLine("CUP", 1, D("90.00"), "kitchen")))
    tea = tiers_coupon(include_categories=frozenset({"tea"}))
    assert price_coupon(cart, tea).discount == D("25.00")  # 210.00 of tea: the 200 tier, not the 300 cart's
    fifteen = Candidate("F", 2, CouponRule("fixed", D(15), CNY, include_categories=frozenset({"tea"})))
    # 195.00 of tea left after 15.00 off: the 100 tier.
    assert [r.discount for r in price_coupons(cart, [fifteen, tea]).coupons] == [D("15.00"), D("10.00")]


def test_free_shipping_takes_off_the_shipping_and_payable_includes_it() -> None:
    cart = one_line("100.00", shipping="12.00")
    capped = Candidate("S", 1, CouponRule(FREE_SHIPPING, D(0), CNY, max_discount=D(8)))
    ten = Candidate("F", 2, CouponRule("fixed", D(10), CNY))
    pricing = price_stack(cart, [capped, ten])
    assert [(r.code, r.discount, r.shipping) for r in pricing.coupons] == [("F", D(10), 0), ("S", D(8), D(8))]
    assert (pricing.discount, pricing.payable, pricing.shipping_discount) == (D(18), D(94), D(8))
    assert as_json(pricing.coupons[1]) == {"code": "S", "applicable": True, "status": "ok", "discount": "8.00",
                                           "lines": [], "shipping": "8.00"}
    assert "shipping" not in as_json(pricing.coupons[0])
    best = validate_cart(cart, [capped, ten]).best
    assert as_json(best) == {"codes": ["F", "S"], "discount": "18.00", "payable": "94.00"}


def test_free_shipping_without_shipping_is_not_applicable() -> None:
    free = Candidate("S", 1, CouponRule(FREE_SHIPPING, D(0), CNY))
    result = price_coupon(one_line("100.00"), free)
    assert (result.status, as_json(result)["shipping"]) == (NOT_APPLICABLE, "0.00")


def test_free_shipping_keeps_its_minimum_spend_and_two_of_them_take_the_shipping_once() -> None:
    over = Candidate("S", 1, CouponRule(FREE_SHIPPING, D(0), CNY, min_spend=D(99)))
    assert price_coupon(one_line("98.00", "10.00"), over).status == MIN_SPEND_NOT_MET
    other = Candidate("S2", 2, CouponRule(FREE_SHIPPING, D(0), CNY))
    pricing = price_coupons(one_line("100.00", "10.00"), [over, other])
    assert [r.discount for r in pricing.coupons] == [D(10), D(0)] and pricing.payable == D(100)


def test_buy_two_get_one_gives_the_cheapest_items_and_their_lines_the_shares() -> None:
    cart = Cart(CNY, (CartLine("SHIRT", 2, D("80.00")), CartLine("SOCKS", 3, D("10.00")), CartLine("HAT", 1, D(50))))
    b2g1 = Candidate("B", 1, CouponRule(BUY_GET, D(0), CNY, buy=2, get=1))
    result = price_coupon(cart, b2g1)  # 6 items: 2 free, the two cheapest (socks)
    assert result.discount == D("20.00")
    assert [(s.sku, s.discount) for s in result.lines] == [("SHIRT", 0), ("SOCKS", D(20)), ("HAT", 0)]
    capped = Candidate("B", 1, CouponRule(BUY_GET, D(0), CNY, buy=1, get=1, max_discount=D(55)))
    result = price_coupon(cart, capped)  # 3 free: 10 + 10 + 10 = 30.00, under the cap
    assert result.discount == D("30.00")
    cheap_first = Cart(CNY, (CartLine("A", 1, D("5.00")), CartLine("B", 1, D("7.00")), CartLine("C", 2, D(60))))
    result = price_coupon(cheap_first, capped)  # 2 free: A and B, 12.00
    assert [s.discount for s in result.lines] == [D(5), D(7), D(0)]


def test_buy_n_get_m_with_too_few_items_gives_nothing() -> None:
    b2g1 = Candidate("B", 1, CouponRule(BUY_GET, D(0), CNY, buy=2, get=1))
    result = price_coupon(Cart(CNY, (CartLine("A", 2, D(10)),)), b2g1)
    assert (result.status, result.discount) == (OK, D(0))


def test_best_chooses_among_the_kinds_with_the_stacking_rules() -> None:
    cart = Cart(CNY, (CartLine("A", 3, D("100.00")), CartLine("B", 1, D("40.00"))), shipping=D("15.00"))
    candidates = [tiers_coupon("T", 1), Candidate("S", 2, CouponRule(FREE_SHIPPING, D(0), CNY)),
                  Candidate("B", 3, CouponRule(BUY_GET, D(0), CNY, buy=3, get=1, exclusive=True))]
    best = best_combination(cart, candidates)
    # B alone: 40.00 (exclusive); T + S: 25.00 (340.00 reaches 200) + 15.00 = 40.00: a tie, fewer coupons win.
    assert (best.codes, best.discount, best.payable) == (("B",), D(40), D(315))
    candidates[0] = tiers_coupon("T", 1, tiers=(*LADDER[:2], Tier(D(300), D(30))))
    best = best_combination(cart, candidates)
    assert (best.codes, best.discount, best.payable) == (("T", "S"), D(45), D(310))


@pytest.mark.parametrize(("tiers", "problem"), [
    ((), "count"), (tuple(Tier(D(i + 1), D(1)) for i in range(11)), "count"),
    ((Tier(D(100), D(10)), Tier(D(100), D(20))), "increasing"),
    ((Tier(D(200), D(10)), Tier(D(100), D(20))), "increasing"),
    ((Tier(D(100), D(30)), Tier(D(200), D(25))), "increasing"),
    ((Tier(D(100), D(10), True), Tier(D(200), D(5), True)), "increasing"),  # 20.00 at 200 by 10%, 10.00 by 5%
    ((Tier(D(100), D(25)), Tier(D(200), D(10), True)), "increasing"),  # 20.00 at 200 < 25.00
    ((Tier(D(0), D(10)),), "amount"), ((Tier(D(100), D("0.001")),), "amount"),
    ((Tier(D(100), D(101), True),), "percent"), ((Tier(D(100), D("10.125"), True),), "percent"),
])
def test_tiers_that_do_not_go_up_are_refused(tiers: tuple[Tier, ...], problem: str) -> None:
    assert tiers_problem(tiers, CNY) == problem
    with pytest.raises(InvalidCart):
        CouponRule(TIERS, D(0), CNY, tiers=tiers)


def test_a_rule_of_a_kind_with_a_discount_value_or_without_its_fields_is_refused() -> None:
    for kind, fields in [(TIERS, {}), (BUY_GET, {"buy": 1}), (FREE_SHIPPING, {"tiers": LADDER}),
                         ("fixed", {"buy": 1, "get": 1})]:
        with pytest.raises(InvalidCart):
            CouponRule(kind, D(0) if kind != "fixed" else D(5), CNY, **fields)  # type: ignore[arg-type]
    with pytest.raises(InvalidCart):
        CouponRule(FREE_SHIPPING, D(5), CNY)
    with pytest.raises(InvalidCart):
        Cart(CNY, (CartLine("A", 1, D(1)),), shipping=D("-1.00"))
    with pytest.raises(InvalidCart):
        Cart("JPY", (CartLine("A", 1, D(1)),), shipping=D("1.5"))
