"""The allowed set of coupons that saves the most (`best_combination`, `validate_cart`): a branch-and-bound search
over the sets in stacking order, within a budget of single-coupon evaluations (docs/decisions/0018)."""
from __future__ import annotations

import math
from collections.abc import Sequence

from .applicator import price_coupon, price_coupons
from .benefits import _Terms
from .results import OK, BestCombination, CartValidation, CouponPricing
from .rules import Candidate, Cart, CouponRule
from .stacking import MAX_COUPONS_PER_ORDER, canonical_order, combinable, stacking_key
from .units import _NO_CAP

# How many single-coupon evaluations best_combination may make (each ~3 us) before it stops with the best
# set found so far (`exact=False`). Every subset of at most 5 of 12 candidates takes under 20,000, so the
# answer is always exact for 12 usable campaigns or fewer, and in practice for many more (the bound prunes).
BEST_SEARCH_BUDGET = 20_000
# The budget POST /carts/validate searches with: ~10-20 ms for 50 coupons on 20 lines where BEST_SEARCH_BUDGET
# takes up to 65 ms; on the 18 seeded scenarios of bench/pricing_bench.py (seeds 20-25) it found the exact
# optimum's discount every time, stopped early in 12 of them (`exact=False`). reserve follows best.codes as given.
VALIDATE_SEARCH_BUDGET = 2_000


def best_combination(cart: Cart, candidates: Sequence[Candidate], *, budget: int = BEST_SEARCH_BUDGET
                     ) -> BestCombination:
    """Return the allowed set of candidates (applied in stacking order) that saves the most; ties: fewer
    coupons, then the earlier set in stacking order. See _best for the search and what it guarantees."""
    return _best(cart, candidates, [price_coupon(cart, candidate) for candidate in candidates], budget)


def validate_cart(cart: Cart, candidates: Sequence[Candidate], *, budget: int = BEST_SEARCH_BUDGET
                  ) -> CartValidation:
    """Return each candidate alone on the cart, and the best combination of them (searched within `budget`
    single-coupon evaluations)."""
    alone = [price_coupon(cart, candidate) for candidate in candidates]
    return CartValidation(coupons=tuple(alone), best=_best(cart, candidates, alone, budget))


def _line_rates(terms: Sequence[_Terms]) -> dict[int, list[tuple[float, int]]]:
    """Return, for each line some percentage covers, the (rate, position) of those percentages, largest first:
    sorted once per search, filtered at each node (_percent_masses)."""
    rates: dict[int, list[tuple[float, int]]] = {}
    for k, term in enumerate(terms):
        if term.percent is not None:
            for index in term.lines:
                rates.setdefault(index, []).append((term.percent, k))
    for rated in rates.values():
        rated.sort(key=lambda pair: (-pair[0], pair[1]))
    return rates


def _percent_masses(children: Sequence[tuple[int, int]], line_rates: dict[int, list[tuple[float, int]]],
                    remaining: Sequence[int], most: int) -> list[int]:
    """Return, for n = 0..most, the most that n of the percentage `children` can take together from `remaining`.

    Percentages multiply: on a line, percentages p1..pn (capped or not, after anything) leave at least
    (1-p1)...(1-pn) of what it had, less the rounding (half-up, then the largest remainder: under 2 units per
    coupon and line). So n of them take at most, over the lines, what the line has times 1 - the product of
    (1 - p) over the n largest percentages covering it, plus 2 units per coupon and line.
    """
    present = {k for _, k in children}
    masses = [0.0] * (most + 1)
    covered = 0  # lines covered by at least one of the children
    for index, rated in line_rates.items():
        left = remaining[index]
        kept = 1.0
        n = 0
        for rate, k in rated:
            if k in present:
                n += 1
                kept *= 1 - rate
                masses[n] += left * (1 - kept)
                if n == most:
                    break
        if n:
            covered += 1
            for more in range(n + 1, most + 1):  # fewer percentages cover the line than n: they take no more
                masses[more] += left * (1 - kept)
    slack = 2 * covered
    return [_ceil_bound(mass) + n * slack for n, mass in enumerate(masses)]


def _ceil_bound(value: float) -> int:
    """Return a bound computed in floats as whole units, rounded up past any float rounding: amounts stay far
    under 2**53 units and a product of at most 6 rates errs by under 1e-15 of it, so 1e-9 of it plus one unit
    more keeps it a bound (only ever a little looser than the exact one: the search prunes as before)."""
    return math.ceil(value * (1 + 1e-9)) + 1


def _subtree_bound(
    children: Sequence[tuple[int, int]], child: tuple[int, int], compatible: int, slots: int,
    terms: Sequence[_Terms], masses: Sequence[int], left: int, rates: Sequence[float], slack: int,
) -> int:
    """Return the most a set of `child` and at most `slots` of its followers can take (from what the node's
    coupons left): followers are `children` later than it and compatible with it, each worth at most its value
    here (`children`, value descending: it only sees less later). A set of k fixed amounts and n percentages
    takes at most the k largest fixed values plus the lesser of the n largest percentage values and
    `masses[n]` (_percent_masses), the child among them; the k that gives the most is the bound. A percentage
    child also takes exactly its value and leaves `left` units to pay, of which n percentages take at most
    1 - the product of (1 - p) over the n largest `rates` of the node's children, plus `slack` each."""
    units, j = child
    followers = [(u, k) for u, k in children if k > j and compatible >> k & 1]
    fixed = [u for u, k in followers if terms[k].percent is None]
    percent = [u for u, k in followers if terms[k].percent is not None]
    most = 0
    for k in range(min(slots, len(fixed)) + 1):
        n = min(slots - k, len(percent))
        if terms[j].percent is None:
            part = units + min(sum(percent[:n]), masses[n])
        else:
            kept = 1.0
            for rate in rates[:n]:
                kept *= 1 - rate
            after = _ceil_bound((left - units) * (1 - kept)) + n * slack
            part = min(units + sum(percent[:n]), masses[n + 1], units + after)
        most = max(most, sum(fixed[:k]) + part)
    return most


def _best(cart: Cart, candidates: Sequence[Candidate], alone: Sequence[CouponPricing],
          budget: int = BEST_SEARCH_BUDGET) -> BestCombination:
    """Search the allowed sets for the one that saves the most.

    What it prunes, each provably without losing the optimum:
    - a candidate refused alone, or worth nothing alone, is left out: on an order with others its eligible
      lines have at most as much left to pay, so its discount is at most its discount alone (the discount is
      non-decreasing in the amount it applies to), and a coupon worth nothing only adds a coupon (and maybe a
      lower cap) to a set;
    - candidates of one campaign with the same rule are interchangeable (one per order): the first in stacking
      order stands for them;
    - sets are built in stacking order, so a set's first coupons are priced once and each node of the search
      extends a priced prefix: every candidate that could follow it is priced on what the prefix left (its
      exact value as the next coupon), and since later coupons only see less to pay and a lower cap, that value
      bounds what it can add further down (_subtree_bound, which also knows that percentages multiply). A
      subtree whose bound cannot beat the best set found is not explored. Children are explored best first,
      so the first descent is a greedy one and the best set found is good early.
    Exclusive coupons are compatible with nothing, so they are compared as single coupons. The result is the
    optimum over every allowed set of at most MAX_COUPONS_PER_ORDER coupons unless the search spends
    BEST_SEARCH_BUDGET evaluations (`exact=False`: the best found, never worse than the best single coupon,
    since every single coupon is evaluated first).
    """
    chosen: dict[tuple[int, CouponRule], Candidate] = {}
    for candidate, result in zip(candidates, alone, strict=True):
        if result.applicable and result.discount > 0:
            key = (candidate.campaign_id, candidate.rule)
            if key not in chosen or stacking_key(candidate) < stacking_key(chosen[key]):
                chosen[key] = candidate
    order = canonical_order(chosen.values())
    terms = [_Terms.of(cart, candidate) for candidate in order]
    line_rates = _line_rates(terms)
    count = len(order)
    compatible = [
        sum(1 << j for j in range(count) if j != i and combinable(order[i], order[j])) for i in range(count)
    ]
    best: tuple[int, tuple[int, ...]] = (0, ())  # (total units, positions in `order`)
    evaluations = 0
    exact = True
    lines_total = line_slack = 0

    def better(total: int, subset: tuple[int, ...]) -> bool:
        best_total, best_subset = best
        return (-total, len(subset), subset) < (-best_total, len(best_subset), best_subset)

    def explore(subset: tuple[int, ...], remaining: list[int], total: int, cap: int, allowed: int) -> None:
        nonlocal best, evaluations, exact
        start = subset[-1] + 1 if subset else 0
        children: list[tuple[int, int]] = []  # (discount units, position)
        for j in range(start, count):
            if allowed >> j & 1:
                status, units = terms[j].after(remaining, total, cap)
                evaluations += 1
                if status == OK and units > 0:
                    children.append((units, j))
        children.sort(key=lambda child: (-child[0], child[1]))
        for units, j in children:
            if better(total + units, (*subset, j)):
                best = (total + units, (*subset, j))
        slots = MAX_COUPONS_PER_ORDER - len(subset) - 1  # coupons a child's subtree may still add
        if slots == 0:
            return
        masses = _percent_masses(children, line_rates, remaining, slots + 1)
        rates = sorted((r for _, k in children if (r := terms[k].percent) is not None), reverse=True)
        for units, j in children:
            cap_j = min(cap, terms[j].order_cap)
            most = _subtree_bound(
                children, (units, j), compatible[j], slots, terms, masses, lines_total - total, rates, line_slack
            )
            bound = total + min(most, lines_total - total, cap_j - total)
            best_total, best_subset = best
            if bound < best_total or (bound == best_total and len(subset) + 2 > len(best_subset)):
                continue
            if evaluations >= budget:
                exact = False
                return
            after = list(remaining)
            for index, share in terms[j].split(units, remaining):
                after[index] -= share
            explore((*subset, j), after, total + units, cap_j, allowed & compatible[j])

    lines_total = sum(cart.priced)  # the lines' and the shipping's
    line_slack = 2 * len(cart.priced)  # the rounding of one percentage over all the lines (_percent_masses)
    explore((), list(cart.priced), 0, _NO_CAP, (1 << count) - 1)
    pricing = price_coupons(cart, [order[j] for j in best[1]])
    return BestCombination(pricing=pricing, exact=exact, evaluations=evaluations)
