"""The unique codes' format (coupons.unique_codes): a serial and a MAC, read back in memory; the use path's one
look-up check (unique_code_lookup), which refuses a code not of ours before any read unless codes were imported."""
from __future__ import annotations

import hashlib
import hmac
import re

import pytest

from coupons.codes import ALPHABET
from coupons.unique_codes import (
    SERIALS,
    canonical_unique_code,
    forget_imported_codes,
    in_code_order,
    unique_code,
    unique_code_lookup,
    unique_codes,
)

from .code_helpers import codes_campaign, import_codes


@pytest.fixture(autouse=True)
def _fresh_imported_flag():
    forget_imported_codes()
    yield
    forget_imported_codes()


def test_a_generated_code_is_the_prefix_and_three_groups_of_four_readable_symbols() -> None:
    codes = unique_codes("SPRING", range(1000)) + unique_codes("", range(1000))

    assert all(re.fullmatch(rf"SPRING-[{ALPHABET}]{{4}}(-[{ALPHABET}]{{4}}){{2}}", c) for c in codes[:1000])
    assert all(re.fullmatch(rf"[{ALPHABET}]{{4}}(-[{ALPHABET}]{{4}}){{2}}", c) for c in codes[1000:])
    assert not set("".join(codes).replace("SPRING", "")) & set("01OIL")  # no look-alikes
    assert len(set(codes)) == 2000


def test_every_generated_code_reads_back_as_itself_and_unique_code_is_unique_codes_of_one() -> None:
    serials = [0, 1, 2, SERIALS // 2, SERIALS - 1]
    codes = unique_codes("P7", serials)

    assert codes == [unique_code("P7", s) for s in serials]
    assert [canonical_unique_code(c) for c in codes] == codes
    assert canonical_unique_code(f"  {codes[0].lower().replace('-', ' ')} ") == codes[0]


def test_the_mac_is_hmac_sha256_as_codes_already_handed_out_were_made(settings) -> None:
    # Codes generated before the MAC was computed from precomputed hash states (hmac.digest each): still ours
    settings.SECRET_KEY = "a-fixed-secret-" + "x" * 40
    key = hashlib.sha256(b"couponrush.unique-codes\x00" + settings.SECRET_KEY.encode()).digest()
    serials = [0, 7, 12345, SERIALS - 1]

    def by_hmac_digest(prefix: str, serial: int) -> str:
        mac = int.from_bytes(hmac.digest(key, f"{prefix}:{serial}".encode(), "sha256")[:8], "big") % 30**6
        return unique_code(prefix, serial)[:-7] + _mac_symbols(mac)

    assert [unique_code("SPRING", s) for s in serials] == [by_hmac_digest("SPRING", s) for s in serials]
    assert [unique_code("", s) for s in serials] == [by_hmac_digest("", s) for s in serials]
    assert unique_code("SPRING", 12345) == "SPRING-NGFJ-BTBA-YPWQ"  # made with hmac.digest, before the change


def _mac_symbols(value: int) -> str:
    """The six MAC symbols of a value, grouped as a code's last seven characters (X-XXXX)."""
    symbols = ""
    for _ in range(6):
        value, rest = divmod(value, len(ALPHABET))
        symbols = ALPHABET[rest] + symbols
    return f"{symbols[:2]}-{symbols[2:]}"


def test_serials_in_code_order_give_their_codes_sorted() -> None:
    serials = list(range(5000, 9000))

    ordered = in_code_order(serials)

    assert sorted(ordered) == serials
    assert unique_codes("ZZ", ordered) == sorted(unique_codes("ZZ", serials))


def test_a_changed_symbol_or_another_prefix_fails_the_mac() -> None:
    code = unique_code("P7", 12345)
    body = code[3:]
    changed = body[:-1] + ("2" if body[-1] != "2" else "3")

    assert canonical_unique_code(f"P7-{changed}") is None
    assert canonical_unique_code(f"Q7-{body}") is None
    with pytest.raises(ValueError):
        unique_code("", SERIALS)


@pytest.mark.django_db
def test_lookup_takes_a_generated_code_and_refuses_anything_else_without_a_query(
        django_assert_num_queries) -> None:
    code = unique_code("", 77)

    with django_assert_num_queries(1):  # the one check whether imported codes exist, then cached
        assert unique_code_lookup(code.lower()) == code
        assert unique_code_lookup("SAVE-THE-DATE") is None
        assert unique_code_lookup("not a code at all!") is None
    with django_assert_num_queries(0):
        assert unique_code_lookup("LEGACY-0001") is None


@pytest.mark.django_db
def test_lookup_lets_other_texts_through_once_codes_were_imported() -> None:
    campaign = codes_campaign()
    assert unique_code_lookup("legacy-0001") is None

    import_codes(campaign, ["LEGACY-0001"])

    assert unique_code_lookup(" legacy-0001 ") == "LEGACY-0001"
    assert unique_code_lookup("no spaces inside") is None
    assert unique_code_lookup(unique_code("", 5)) == unique_code("", 5)
