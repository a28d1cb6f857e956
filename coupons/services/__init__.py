"""Write use cases of coupons: reserve, confirm, redeem, release, revoke, and what time does to them.

Every change of a coupon is a conditional UPDATE (status and version in the WHERE clause) plus one
CouponEvent, in one transaction; a change that loses a race re-reads the coupon and decides again.

One job a module:
- uses: the use cases (reserve, redeem, confirm, release; revoke, extend; a shopper's due coupons settled);
- transitions: a coupon's change of state (one prepared statement), what time does to it, the retries on a race;
- order: the order a use is for and the pricing adapter (campaigns.pricing on it), the checks a use passes;
- resolve: which coupon a typed code stands for (the shopper's own, a shared code's use, a unique code);
- typed: a typed code's forms, the claim ids of its uses and their locks;
- takes: a use taken from the campaign's stock in Redis and given back;
- shared: a shared code's use, one request of (shopper, order) at a time;
- first_uses: an order's first use of a shared code, written together with others (one statement a batch);
- unique: a unique code bound to its first user.

Every public name of the module this package was is here, so `from coupons.services import X` is unchanged.
"""
from __future__ import annotations

from .first_uses import FirstUse, Plan
from .order import CurrencyMismatch, Order, OrderCartChanged, cart_digest, shares_of
from .resolve import code_is_own, known_shared_code
from .takes import code_uses_give_back_orphans
from .transitions import MAX_ATTEMPTS, Change, Contention, Decide, coupon_settle
from .typed import (
    SHARED_USE,
    TYPED_CODE_RE,
    UNIQUE_USE,
    USE_ID_RE,
    coupon_owned_by,
    held_uses,
    is_code_use_id,
    is_shared_use,
    take_member,
    typed_code_form,
)
from .uses import (
    HOLD_SECONDS_DEFAULT,
    HOLD_SECONDS_MAX,
    coupon_confirm,
    coupon_extend_validity,
    coupon_redeem,
    coupon_release,
    coupon_reserve,
    coupon_revoke,
    coupons_settle_due,
)

__all__ = [
    "HOLD_SECONDS_DEFAULT", "HOLD_SECONDS_MAX", "MAX_ATTEMPTS", "SHARED_USE", "TYPED_CODE_RE", "UNIQUE_USE",
    "USE_ID_RE", "Change", "Contention", "CurrencyMismatch", "Decide", "FirstUse", "Order", "OrderCartChanged", "Plan",
    "cart_digest", "code_is_own", "code_uses_give_back_orphans", "coupon_confirm", "coupon_extend_validity",
    "coupon_owned_by", "coupon_redeem", "coupon_release", "coupon_reserve", "coupon_revoke", "coupon_settle",
    "coupons_settle_due", "held_uses", "is_code_use_id", "is_shared_use", "known_shared_code", "shares_of",
    "take_member", "typed_code_form",
]
