"""Coupon codes: the one generator (a batch at once, for the drain) and the reading of a typed code."""
from __future__ import annotations

from collections import Counter

from coupons.codes import ALPHABET, CODE_RE, new_codes, normalize_code


def test_new_codes_returns_as_many_distinct_codes_of_the_readable_format_as_asked() -> None:
    codes = new_codes(2000)

    assert len(codes) == 2000
    assert len(set(codes)) == 2000
    assert all(CODE_RE.fullmatch(code) for code in codes)


def test_new_codes_of_none_is_an_empty_list() -> None:
    assert new_codes(0) == []


def test_every_symbol_of_the_alphabet_turns_up_with_about_equal_odds() -> None:
    counts = Counter("".join(new_codes(10_000)).replace("-", ""))  # 120,000 symbols: 4,000 expected each

    assert set(counts) == set(ALPHABET)
    assert all(3_600 < n < 4_400 for n in counts.values())  # > 6 standard deviations either side


def test_a_code_typed_in_lower_case_with_spaces_reads_as_the_code() -> None:
    code = new_codes(1)[0]

    assert normalize_code(f" {code.lower().replace('-', ' ')} ") == code
