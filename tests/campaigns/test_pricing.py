"""campaigns.pricing: what coupons are worth on a cart (issue 20, item 2). Pure: no database, no Redis.

Property tests over random carts and rules (hypothesis), the best combination checked against brute force,
and the anchors' known stacking bugs as examples.
"""
from __future__ import annotations

import itertools
import random
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from campaigns.money import MINOR_UNITS, compute_discount
from campaigns.pricing import (
    MAX_COUPONS_PER_ORDER,
    MIN_QUANTITY_NOT_MET,
    MIN_SPEND_NOT_MET,
    NOT_APPLICABLE,
    NOT_COMBINABLE,
    OK,
    Candidate,
    Cart,
    CartLine,
    CouponPricing,
    CouponRule,
    InvalidCart,
    OrderPricing,
    as_json,
    best_combination,
    canonical_order,
    combinable,
    eligible_lines,
    price_coupon,
    price_coupons,
    price_stack,
    stacking_key,
    validate_cart,
)

D = Decimal
SKUS = ("A", "B", "C", "D", "E")
CATEGORIES = ("shoes", "hats", "food")
CAMPAIGNS = (1, 2, 3, 4, 5, 6)
PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def money(units: int, currency: str) -> Decimal:
    return Decimal(units).scaleb(-MINOR_UNITS[currency])


# --- strategies ---

currencies = st.sampled_from(["CNY", "JPY"])


@st.composite
def carts(draw: st.DrawFn, currency: str) -> Cart:
    lines = draw(st.lists(
        st.builds(
            lambda sku, category, quantity, units: CartLine(sku, quantity, money(units, currency), category),
            st.sampled_from(SKUS), st.none() | st.sampled_from(CATEGORIES), st.integers(1, 5),
            st.integers(1, 20_000),
        ),
        min_size=1, max_size=6,
    ))
    return Cart(currency, tuple(lines))


def optional_amount(currency: str) -> st.SearchStrategy[Decimal | None]:
    return st.none() | st.integers(1, 30_000).map(lambda units: money(units, currency))


@st.composite
def rules(draw: st.DrawFn, currency: str, stackable: bool = False) -> CouponRule:
    """Any rule; `stackable`: one that stacks with any other (no exclusivity, lists, thresholds), for deep sets."""
    discount_type = draw(st.sampled_from(["fixed", "percent"]))
    if discount_type == "percent":
        value = draw(st.sampled_from([D(5), D("12.5"), D(15), D(40), D(70), D(99), D(100)]))
    else:
        value = money(draw(st.integers(1, 30_000)), currency)
    subset = st.frozensets
    if stackable:
        return CouponRule(
            discount_type=discount_type, discount_value=value, currency=currency,
            max_discount=draw(optional_amount(currency)), include_categories=draw(subset(st.sampled_from(CATEGORIES))),
            order_cap=draw(st.none() | st.none() | optional_amount(currency)),
        )
    return CouponRule(
        discount_type=discount_type, discount_value=value, currency=currency,
        max_discount=draw(optional_amount(currency)),
        min_spend=draw(st.just(D(0)) | st.integers(1, 40_000).map(lambda units: money(units, currency))),
        include_categories=draw(subset(st.sampled_from(CATEGORIES), max_size=2)),
        exclude_categories=draw(subset(st.sampled_from(CATEGORIES), max_size=1)),
        include_skus=draw(subset(st.sampled_from(SKUS), max_size=2)),
        exclude_skus=draw(subset(st.sampled_from(SKUS), max_size=1)),
        min_quantity=draw(st.integers(0, 4)),
        exclusive=draw(st.booleans().map(lambda b: b and draw(st.booleans()))),  # a quarter of them
        combinable_with=draw(st.just(frozenset()) | subset(st.sampled_from(CAMPAIGNS), max_size=4)),
        order_cap=draw(optional_amount(currency)),
    )


@st.composite
def candidate_lists(draw: st.DrawFn, currency: str, max_size: int, stackable: bool) -> list[Candidate]:
    count = draw(st.integers(1, max_size))
    return [
        Candidate(
            code=f"C{i}", campaign_id=i + 1 if stackable else draw(st.sampled_from(CAMPAIGNS)),
            rule=draw(rules(currency, stackable)),
        )
        for i in range(count)
    ]


@st.composite
def scenarios(draw: st.DrawFn, max_size: int = 6, stackable: bool = False) -> tuple[Cart, list[Candidate]]:
    currency = draw(currencies)
    return draw(carts(currency)), draw(candidate_lists(currency, max_size, stackable))


def units_of(amount: Decimal, currency: str) -> int:
    return int(amount.scaleb(MINOR_UNITS[currency]))


def assert_order_is_sound(cart: Cart, pricing: OrderPricing) -> None:
    """Every invariant an order's pricing keeps, whatever its coupons and their order."""
    unit = Decimal(1).scaleb(-MINOR_UNITS[cart.currency])
    applied = pricing.applied
    per_line = [D(0)] * len(cart.lines)
    for result in pricing.coupons:
        assert result.discount >= 0 and result.discount == result.discount.quantize(unit)
        if not result.applicable:
            assert result.discount == 0 and result.lines == ()
            continue
        assert sum((share.discount for share in result.lines), D(0)) == result.discount  # to the minor unit
        assert [share.index for share in result.lines] == list(eligible_lines(cart, result.candidate.rule))
        for share in result.lines:
            assert share.discount >= 0
            per_line[share.index] += share.discount
    for index, line in enumerate(cart.lines):
        assert 0 <= per_line[index] <= line.amount  # no line discounted below zero
        assert pricing.lines[index].discount == per_line[index]
        assert pricing.lines[index].payable == line.amount - per_line[index] >= 0
    eligible = {i for result in applied for i in eligible_lines(cart, result.candidate.rule)}
    assert pricing.discount == sum(per_line, D(0)) <= sum((cart.lines[i].amount for i in eligible), D(0))
    assert pricing.payable == cart.amount - pricing.discount >= 0
    # Combination rules: exclusive alone, one per campaign, pairwise combinable, at most the maximum, caps.
    assert len(applied) <= MAX_COUPONS_PER_ORDER
    if any(result.candidate.rule.exclusive for result in applied):
        assert len(applied) == 1
    for first, second in itertools.combinations(applied, 2):
        assert combinable(first.candidate, second.candidate)
    for result in applied:
        cap = result.candidate.rule.order_cap
        assert cap is None or pricing.discount <= cap


def brute_force_best(cart: Cart, candidates: list[Candidate]) -> tuple[Decimal, tuple[tuple[int, int, str], ...]]:
    """The best allowed set by trying every subset: (discount, its coupons' stacking keys)."""
    best: tuple[Decimal, int, tuple[tuple[int, int, str], ...]] = (D(0), 0, ())
    for size in range(1, min(len(candidates), MAX_COUPONS_PER_ORDER) + 1):
        for subset in itertools.combinations(candidates, size):
            pricing = price_stack(cart, subset)
            if len(pricing.applied) != size:
                continue  # not allowed: one of them is refused
            keys = tuple(stacking_key(c) for c in canonical_order(subset))
            if (-pricing.discount, size, keys) < (-best[0], best[1], best[2]):
                best = (pricing.discount, size, keys)
    return best[0], best[2]


# --- properties ---


@PROPERTY
@given(scenarios(), st.randoms(use_true_random=False))
def test_coupons_in_any_order_keep_every_invariant(scenario: tuple[Cart, list[Candidate]], rnd: random.Random) -> None:
    cart, candidates = scenario
    rnd.shuffle(candidates)
    assert_order_is_sound(cart, price_coupons(cart, candidates))
    assert_order_is_sound(cart, price_stack(cart, candidates))


@PROPERTY
@given(scenarios())
def test_a_coupon_alone_gives_the_money_rule_on_its_eligible_lines(scenario: tuple[Cart, list[Candidate]]) -> None:
    cart, candidates = scenario
    for candidate in candidates:
        result = price_coupon(cart, candidate)
        rule = candidate.rule
        eligible = eligible_lines(cart, rule)
        amount = sum((cart.lines[i].amount for i in eligible), D(0))
        if not eligible:
            assert result.status == NOT_APPLICABLE
        elif sum(cart.lines[i].quantity for i in eligible) < rule.min_quantity:
            assert result.status == MIN_QUANTITY_NOT_MET
        elif amount < rule.min_spend:
            assert result.status == MIN_SPEND_NOT_MET
        else:
            expected = compute_discount(
                discount_type=rule.discount_type, value=rule.discount_value, cap=rule.max_discount,
                order_amount=amount, currency=cart.currency,
            ).amount
            if rule.order_cap is not None:
                expected = min(expected, rule.order_cap)
            assert result.status == OK and result.discount == expected <= amount


@PROPERTY
@given(scenarios(), st.randoms(use_true_random=False))
def test_a_coupon_on_an_order_is_worth_at_most_what_it_is_worth_alone(
    scenario: tuple[Cart, list[Candidate]], rnd: random.Random
) -> None:
    # The monotonicity the best-combination search prunes with.
    cart, candidates = scenario
    rnd.shuffle(candidates)
    for result in price_coupons(cart, candidates).applied:
        alone = price_coupon(cart, result.candidate)
        assert alone.applicable and result.discount <= alone.discount


@PROPERTY
@given(scenarios())
def test_an_order_built_coupon_by_coupon_is_the_order_priced_at_once(scenario: tuple[Cart, list[Candidate]]) -> None:
    # What reserve and redeem do: each new coupon after the stored results of those the order holds.
    cart, candidates = scenario
    stored: list[CouponPricing] = []
    for candidate in candidates:
        rebuilt = [CouponPricing(r.candidate, r.status, r.discount, r.lines) for r in stored]
        stored.append(price_coupon(cart, candidate, before=rebuilt))
    assert tuple(stored) == price_coupons(cart, candidates).coupons


@settings(PROPERTY, max_examples=300)
@given(scenarios(max_size=6) | scenarios(max_size=6, stackable=True))
def test_best_is_the_best_allowed_set_found_by_brute_force(scenario: tuple[Cart, list[Candidate]]) -> None:
    cart, candidates = scenario
    best = best_combination(cart, candidates)
    discount, keys = brute_force_best(cart, candidates)
    assert best.exact
    assert best.discount == discount
    assert tuple(stacking_key(r.candidate) for r in best.pricing.applied) == keys
    # It is an allowed set (nothing in it refused), applied in stacking order, and a sound order.
    assert len(best.pricing.applied) == len(best.pricing.coupons)
    assert list(best.pricing.coupons) == sorted(best.pricing.coupons, key=lambda r: stacking_key(r.candidate))
    assert_order_is_sound(cart, best.pricing)
    for candidate in candidates:
        assert best.discount >= price_coupon(cart, candidate).discount
    for pair in itertools.combinations(candidates, 2):
        pricing = price_stack(cart, pair)
        if len(pricing.applied) == 2:
            assert best.discount >= pricing.discount


@PROPERTY
@given(scenarios(max_size=8), st.randoms(use_true_random=False))
def test_validate_is_deterministic_and_does_not_depend_on_the_candidates_order(
    scenario: tuple[Cart, list[Candidate]], rnd: random.Random
) -> None:
    cart, candidates = scenario
    first = validate_cart(cart, candidates)
    assert validate_cart(cart, candidates) == first
    assert as_json(validate_cart(cart, candidates)) == as_json(first)
    shuffled = list(candidates)
    rnd.shuffle(shuffled)
    assert best_combination(cart, shuffled) == first.best
    assert [as_json(r) for r in first.coupons] == [as_json(price_coupon(cart, c)) for c in candidates]


@settings(max_examples=30, deadline=None)
@given(st.data())
def test_best_of_fifty_candidates_is_allowed_and_beats_every_single_coupon(data: st.DataObject) -> None:
    currency = data.draw(currencies)
    cart = data.draw(carts(currency))
    candidates = [
        Candidate(code=f"C{i}", campaign_id=i, rule=data.draw(rules(currency))) for i in range(50)
    ]
    best = best_combination(cart, candidates)
    assert_order_is_sound(cart, best.pricing)
    assert len(best.pricing.applied) == len(best.pricing.coupons)
    assert best.discount >= max(price_coupon(cart, c).discount for c in candidates)


# --- examples: statuses ---

CNY = "CNY"


def rule(discount: str, **fields: object) -> CouponRule:
    """'15%' or '50.00' in CNY unless currency= says otherwise."""
    currency = str(fields.pop("currency", CNY))
    if discount.endswith("%"):
        return CouponRule("percent", D(discount[:-1]), currency, **fields)  # type: ignore[arg-type]
    return CouponRule("fixed", D(discount), currency, **fields)  # type: ignore[arg-type]


def coupon(code: str, campaign_id: int, discount: str, **fields: object) -> Candidate:
    return Candidate(code=code, campaign_id=campaign_id, rule=rule(discount, **fields))


def cart(*lines: tuple[str, str | None, int, str], currency: str = CNY) -> Cart:
    return Cart(currency, tuple(CartLine(sku, count, D(price), category) for sku, category, count, price in lines))


SHOES_AND_FOOD = cart(("RUN-1", "shoes", 1, "300.00"), ("APPLE", "food", 4, "5.00"), ("GIFT", None, 1, "50.00"))


def test_a_cart_of_only_excluded_lines_is_not_applicable() -> None:
    result = price_coupon(SHOES_AND_FOOD, coupon("X", 1, "10%", exclude_categories=frozenset({"shoes", "food"}),
                                               exclude_skus=frozenset({"GIFT"})))
    assert (result.status, result.discount, result.lines) == (NOT_APPLICABLE, D("0.00"), ())


def test_an_exclude_wins_over_an_include() -> None:
    rule_ = rule("10%", include_categories=frozenset({"shoes"}), include_skus=frozenset({"APPLE"}),
                 exclude_skus=frozenset({"RUN-1"}))
    assert eligible_lines(SHOES_AND_FOOD, rule_) == (1,)
    result = price_coupon(SHOES_AND_FOOD, Candidate("X", 1, rule_))
    assert (result.status, result.discount) == (OK, D("2.00"))
    assert as_json(result)["lines"] == [{"sku": "APPLE", "discount": "2.00"}]


def test_a_coupon_in_another_currency_is_not_applicable() -> None:
    assert price_coupon(SHOES_AND_FOOD, coupon("X", 1, "5.00", currency="USD")).status == NOT_APPLICABLE


def test_fewer_eligible_items_than_the_minimum_quantity_is_refused() -> None:
    food = {"include_categories": frozenset({"food"})}
    assert price_coupon(SHOES_AND_FOOD, coupon("X", 1, "1.00", min_quantity=5, **food)).status == MIN_QUANTITY_NOT_MET
    assert price_coupon(SHOES_AND_FOOD, coupon("X", 1, "1.00", min_quantity=4, **food)).status == OK


def test_minimum_spend_is_judged_on_the_eligible_lines_not_the_cart() -> None:
    # The cart is 370.00 but its food is 20.00: a food coupon with a 100.00 threshold does not apply.
    result = price_coupon(SHOES_AND_FOOD, coupon("X", 1, "5.00", min_spend=D("100.00"),
                                               include_categories=frozenset({"food"})))
    assert result.status == MIN_SPEND_NOT_MET


def test_minimum_spend_is_judged_on_what_is_left_after_the_coupons_before() -> None:
    # django-oscar / Saleor's bug: 120.00 of shoes, 50.00 off, then "10% over 100.00": 70.00 is left, not met.
    shoes = cart(("RUN-1", "shoes", 1, "120.00"))
    fifty, over_100 = coupon("F", 1, "50.00"), coupon("P", 2, "10%", min_spend=D("100.00"))
    pricing = price_coupons(shoes, [fifty, over_100])
    assert [(r.status, r.discount) for r in pricing.coupons] == [(OK, D("50.00")), (MIN_SPEND_NOT_MET, D("0.00"))]
    assert price_stack(shoes, [over_100, fifty]).coupons == pricing.coupons  # fixed amounts first
    # Best is then the 50.00 alone (the pair is not allowed in stacking order).
    assert best_combination(shoes, [over_100, fifty]).codes == ("F",)


@pytest.mark.parametrize(
    ("first", "second", "why"),
    [
        pytest.param(coupon("A", 1, "10%", exclusive=True), coupon("B", 2, "5.00"), "first exclusive", id="exclusive"),
        pytest.param(coupon("A", 1, "10%"), coupon("B", 2, "5.00", exclusive=True), "second exclusive", id="joins"),
        pytest.param(coupon("A", 1, "10%"), coupon("B", 1, "10%"), "same campaign", id="same-campaign"),
        pytest.param(coupon("A", 1, "10%", combinable_with=frozenset({3})), coupon("B", 2, "5.00"), "A lists 3 only",
                     id="not-in-first-list"),
        pytest.param(coupon("A", 1, "10%"), coupon("B", 2, "5.00", combinable_with=frozenset({3})), "B lists 3 only",
                     id="not-in-second-list"),
        pytest.param(coupon("A", 1, "60.00", order_cap=D("60.00")), coupon("B", 2, "5%"), "A's cap reached",
                     id="cap-reached"),
    ],
)
def test_a_coupon_the_order_cannot_combine_is_not_combinable(first: Candidate, second: Candidate, why: str) -> None:
    pricing = price_coupons(SHOES_AND_FOOD, [first, second])
    assert [r.status for r in pricing.coupons] == [OK, NOT_COMBINABLE], why
    assert pricing.discount == pricing.coupons[0].discount


def test_combinable_lists_that_name_each_other_combine() -> None:
    first = coupon("A", 1, "10%", combinable_with=frozenset({2}))
    second = coupon("B", 2, "5.00", combinable_with=frozenset({1, 7}))
    assert combinable(first, second) and combinable(second, first)
    assert [r.status for r in price_coupons(SHOES_AND_FOOD, [first, second]).coupons] == [OK, OK]


def test_an_order_holds_at_most_the_maximum_number_of_coupons() -> None:
    many = [coupon(f"F{i}", i, "1.00") for i in range(MAX_COUPONS_PER_ORDER + 1)]
    statuses = [r.status for r in price_coupons(SHOES_AND_FOOD, many).coupons]
    assert statuses == [OK] * MAX_COUPONS_PER_ORDER + [NOT_COMBINABLE]


def test_the_smallest_order_cap_of_the_coupons_bounds_the_total() -> None:
    # 100.00 off with a 120.00 order cap, then 20% of the remaining 270.00 (54.00): cut to 20.00.
    pricing = price_coupons(SHOES_AND_FOOD, [coupon("F", 1, "100.00", order_cap=D("120.00")), coupon("P", 2, "20%")])
    assert [r.discount for r in pricing.coupons] == [D("100.00"), D("20.00")]
    assert (pricing.discount, pricing.payable) == (D("120.00"), D("250.00"))


# --- examples: the anchors' stacking bugs ---


def test_forty_percent_then_seventy_percent_leaves_eighteen_percent_to_pay() -> None:
    # The trackers' "free order": 40% + 70% added as 110% of the price. Each applies on what is left.
    pricing = price_stack(cart(("SKU", "shoes", 1, "100.00")), [coupon("P40", 1, "40%"), coupon("V70", 2, "70%")])
    assert [r.discount for r in pricing.coupons] == [D("40.00"), D("42.00")]
    assert (pricing.discount, pricing.payable) == (D("82.00"), D("18.00"))


def test_only_a_hundred_percent_coupon_makes_an_order_free_and_never_negative() -> None:
    one = cart(("SKU", "shoes", 1, "100.00"))
    pricing = price_stack(one, [coupon("ALL", 1, "100%"), coupon("V70", 2, "70%"), coupon("F", 3, "30.00")])
    # Fixed amounts first: 30.00, then 100% of the 70.00 left; the 70% finds nothing left to take.
    assert [(r.code, r.discount) for r in pricing.coupons] == [("F", D("30.00")), ("ALL", D("70.00")), ("V70", 0)]
    assert (pricing.discount, pricing.payable) == (D("100.00"), D("0.00"))
    # Fixed amounts above the order: the order, never below zero.
    pricing = price_stack(one, [coupon("F1", 1, "80.00"), coupon("F2", 2, "80.00")])
    assert [r.discount for r in pricing.coupons] == [D("80.00"), D("20.00")]
    assert pricing.payable == D("0.00")


def test_percentages_stack_on_scoped_lines_only() -> None:
    pricing = price_stack(SHOES_AND_FOOD, [coupon("S", 1, "50%", include_categories=frozenset({"shoes"})),
                                           coupon("S2", 2, "50%", include_categories=frozenset({"shoes"}))])
    assert pricing.discount == D("225.00")
    assert [line.payable for line in pricing.lines] == [D("75.00"), D("20.00"), D("50.00")]


def test_shares_in_a_zero_decimal_currency_sum_to_the_discount_in_whole_yen() -> None:
    yen = cart(("A", None, 1, "1"), ("B", None, 1, "1"), ("C", None, 1, "1"), currency="JPY")
    result = price_coupon(yen, coupon("Y", 1, "2", currency="JPY"))
    assert [share.discount for share in result.lines] == [D(1), D(1), D(0)]  # ties: earlier line first
    result = price_coupon(yen, coupon("P", 1, "50%", currency="JPY"))  # 1.5 yen, half up: 2
    assert result.discount == D(2) and sum(share.discount for share in result.lines) == D(2)
    assert as_json(result)["discount"] == "2"


def test_largest_remainder_gives_the_leftover_cents_to_the_largest_remainders() -> None:
    three = cart(("A", None, 1, "10.00"), ("B", None, 1, "10.00"), ("C", None, 1, "10.00"))
    assert [s.discount for s in price_coupon(three, coupon("F", 1, "1.00")).lines] == [D("0.34"), D("0.33"), D("0.33")]
    uneven = cart(("A", None, 1, "1.00"), ("B", None, 1, "2.00"))
    # 1.00 over 1.00 and 2.00: exact shares 0.333.. and 0.666..: floors 0.33 and 0.66, the cent to B (0.67 left).
    assert [s.discount for s in price_coupon(uneven, coupon("F", 1, "1.00")).lines] == [D("0.33"), D("0.67")]


def test_shares_follow_what_is_still_payable_after_the_coupons_before() -> None:
    two = cart(("A", "shoes", 1, "100.00"), ("B", "hats", 1, "100.00"))
    pricing = price_coupons(two, [coupon("S", 1, "100.00", include_categories=frozenset({"shoes"})),
                                  coupon("ALL", 2, "50.00")])
    # The shoes are paid in full by the first coupon: all of the second one falls on the hat.
    assert [(s.sku, s.discount) for s in pricing.coupons[1].lines] == [("A", D("0.00")), ("B", D("50.00"))]


# --- examples: best ---


def test_best_prefers_an_exclusive_coupon_when_it_saves_more() -> None:
    candidates = [coupon("E", 1, "200.00", exclusive=True), coupon("A", 2, "10%"), coupon("B", 3, "50.00")]
    best = best_combination(SHOES_AND_FOOD, candidates)
    assert (best.codes, best.discount, best.payable) == (("E",), D("200.00"), D("170.00"))
    candidates[0] = coupon("E", 1, "60.00", exclusive=True)
    assert best_combination(SHOES_AND_FOOD, candidates).codes == ("B", "A")  # 50.00 + 10% of 320.00 = 82.00


def test_best_ties_go_to_fewer_coupons_then_the_earlier_set() -> None:
    one = cart(("SKU", None, 1, "10.00"))
    candidates = [coupon("B", 2, "10.00"), coupon("A", 1, "10.00"), coupon("C", 3, "5.00")]
    assert best_combination(one, candidates).codes == ("A",)
    same_campaign = [coupon("Z", 1, "10.00"), coupon("Y", 1, "10.00")]
    assert best_combination(one, same_campaign).codes == ("Y",)


def test_best_of_nothing_usable_is_the_cart_as_it_is() -> None:
    best = best_combination(SHOES_AND_FOOD, [coupon("X", 1, "10.00", min_spend=D("1000.00"))])
    assert (best.codes, best.discount, best.payable, best.exact) == ((), D("0.00"), D("370.00"), True)
    assert as_json(best) == {"codes": [], "discount": "0.00", "payable": "370.00"}


def test_validate_answers_each_coupon_alone_and_the_best_in_the_contracts_form() -> None:
    candidates = [coupon("SHOES10", 1, "10%", include_categories=frozenset({"shoes"})), coupon("FIVE", 2, "5.00"),
                  coupon("BIG", 3, "50.00", min_spend=D("500.00"))]
    assert as_json(validate_cart(SHOES_AND_FOOD, candidates)) == {
        "coupons": [
            {"code": "SHOES10", "applicable": True, "status": "ok", "discount": "30.00",
             "lines": [{"sku": "RUN-1", "discount": "30.00"}]},
            {"code": "FIVE", "applicable": True, "status": "ok", "discount": "5.00",
             "lines": [{"sku": "RUN-1", "discount": "4.05"}, {"sku": "APPLE", "discount": "0.27"},
                       {"sku": "GIFT", "discount": "0.68"}]},
            {"code": "BIG", "applicable": False, "status": "min_spend_not_met", "discount": "0.00", "lines": []},
        ],
        "best": {"codes": ["FIVE", "SHOES10"], "discount": "34.60", "payable": "335.40"},
    }


@pytest.mark.parametrize(
    "line",
    [
        CartLine("A", 0, D("1.00")), CartLine("A", 1, D("0.00")), CartLine("A", 1, D("1.001")),
        CartLine("A", True, D("1.00")), CartLine("A", 1, D("NaN")), CartLine("A", 10**7, D("1.00")),
    ],
)
def test_a_line_outside_the_preconditions_is_refused(line: CartLine) -> None:
    with pytest.raises(InvalidCart):
        Cart(CNY, (line,))


def test_a_yen_price_with_decimals_and_a_rule_outside_the_preconditions_are_refused() -> None:
    with pytest.raises(InvalidCart):
        Cart("JPY", (CartLine("A", 1, D("1.5")),))
    for bad in ({"discount_value": D(101)}, {"order_cap": D(0)}, {"min_quantity": -1}):
        with pytest.raises(InvalidCart):
            CouponRule(**{"discount_type": "percent", "discount_value": D(10), "currency": CNY, **bad})
