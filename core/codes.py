"""The one registry of business codes and their slugs (docs/api.md, "Business codes"), with nothing to import: the
pure pricing module reads it as the errors, the scripts' enums and the docs' tests do (core.errors re-exports it)."""
from __future__ import annotations

import enum

# The one registry of business outcomes (docs/api.md, "Business codes"): each status slug a decided request (HTTP
# 200) may answer with, and its code, never renumbered (clients switch on them). Every enum of these codes takes
# its values from here (Code below; the Lua scripts' replies, campaigns.redis_state's ClaimCode and TakeCode) and
# every refusal's slug is looked up here (SLUGS): tests/core/test_errors.py checks the enums and the scripts'
# numbers against it, tests/test_docs.py this table against the contract's.
BUSINESS_CODES: dict[str, int] = {
    "claimed": 0, "reserved": 0, "redeemed": 0, "released": 0, "cancelled": 0,  # done: one slug an operation
    "limit_reached": 1,
    "sold_out": 2,
    "not_started": 3,
    "ended": 4,
    "paused": 5,
    "expired": 10,
    "already_redeemed": 11,
    "min_spend_not_met": 12,
    "not_yet_valid": 13,
    "revoked": 14,
    "not_eligible": 15,
    "on_hold": 16,
    "hold_lapsed": 17,  # 17 and 18, couponrush's: confirm of an order whose hold is no longer there
    "not_held": 18,
    "not_combinable": 19,  # 19-21: carts (issue 20), campaigns.pricing's refusals
    "not_applicable": 20,
    "min_quantity_not_met": 21,
    "budget_exhausted": 22,  # 22: a reserve or redeem whose discount does not fit in the campaign's budget
    "group_limit_reached": 23,  # 23: a claim, grant or code use over its campaign's group's limit
}

# The slug of each refusal's code (every code but 0, which has one slug an operation).
SLUGS: dict[int, str] = {code: slug for slug, code in BUSINESS_CODES.items() if code}


class Code(enum.IntEnum):
    """The business codes the service answers with, each the registry's (BUSINESS_CODES): a member's name is its
    slug in capitals, DONE (0) stands for each operation's own."""

    DONE = BUSINESS_CODES["claimed"]
    LIMIT_REACHED = BUSINESS_CODES["limit_reached"]
    SOLD_OUT = BUSINESS_CODES["sold_out"]
    NOT_STARTED = BUSINESS_CODES["not_started"]
    ENDED = BUSINESS_CODES["ended"]
    PAUSED = BUSINESS_CODES["paused"]
    EXPIRED = BUSINESS_CODES["expired"]
    ALREADY_REDEEMED = BUSINESS_CODES["already_redeemed"]
    MIN_SPEND_NOT_MET = BUSINESS_CODES["min_spend_not_met"]
    NOT_YET_VALID = BUSINESS_CODES["not_yet_valid"]
    REVOKED = BUSINESS_CODES["revoked"]
    NOT_ELIGIBLE = BUSINESS_CODES["not_eligible"]
    ON_HOLD = BUSINESS_CODES["on_hold"]
    HOLD_LAPSED = BUSINESS_CODES["hold_lapsed"]
    NOT_HELD = BUSINESS_CODES["not_held"]
    NOT_COMBINABLE = BUSINESS_CODES["not_combinable"]
    NOT_APPLICABLE = BUSINESS_CODES["not_applicable"]
    MIN_QUANTITY_NOT_MET = BUSINESS_CODES["min_quantity_not_met"]
    BUDGET_EXHAUSTED = BUSINESS_CODES["budget_exhausted"]
    GROUP_LIMIT_REACHED = BUSINESS_CODES["group_limit_reached"]
