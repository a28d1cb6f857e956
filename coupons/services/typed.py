"""Codes typed at checkout: the forms a typed code may take, the shopper's coupon by its code, and the claim
ids of a typed code's uses (a shared code's use, a unique code's coupon) with the locks they are written under."""
from __future__ import annotations

import hashlib
import re

from django.db.models import Q, QuerySet

from campaigns.models import Campaign
from core.errors import NotFound
from core.locks import AdvisoryLock, xact_lock

from ..codes import normalize_code
from ..models import Coupon, CouponStatus
from ..unique_codes import canonical_unique_code

# What may be a typed code (the schema's pattern of {code}): a claimed coupon's code, a unique code, a shared or
# an imported code. Spaces inside a claimed or generated code are forgiven too (not documented).
TYPED_CODE_RE = re.compile(r"[A-Za-z0-9-]{4,40}")


def typed_code_form(text: str) -> str | None:
    """Return the canonical form of a code a shopper typed, or None when it can't be a code: a claimed coupon's
    code or a generated unique code (case, spaces and dashes forgiven), else a shared or imported code as
    typed, upper case."""
    canonical = normalize_code(text) or canonical_unique_code(text)
    if canonical is not None:
        return canonical
    return text.upper() if TYPED_CODE_RE.fullmatch(text) else None


def coupon_owned_by(*, code: str, user_id: str) -> Coupon:
    """Return the shopper's coupon; an unknown code and someone else's code are the same NotFound."""
    canonical = typed_code_form(code)
    coupon = (
        Coupon.objects.select_related("campaign").filter(code=canonical, user_id=user_id).first()
        if canonical
        else None
    )
    if coupon is None:
        raise NotFound("No such coupon.")
    return coupon


SHARED_USE = "code:"  # the claim id of a shared code's use: code:<campaign>:<digest of shopper and order>:<n>


UNIQUE_USE = "unique:"  # the claim id of a unique code's coupon: unique:<the UniqueCode's id>


USE_ID_RE = re.compile(r"code:[1-9][0-9]{0,18}:[0-9a-f]{24}:[0-9]{1,9}|unique:[1-9][0-9]{0,18}")


def _use_digest(user_id: str, order_id: str) -> str:
    return hashlib.sha256(f"{user_id}\n{order_id}".encode()).hexdigest()[:24]


def _use_prefix(campaign_id: int, user_id: str, order_id: str) -> str:
    """The claim ids of one shopper's uses of a campaign's shared code for one order (48 characters at most),
    and the lock of that use (_shared_use)."""
    return f"{SHARED_USE}{campaign_id}:{_use_digest(user_id, order_id)}:"


def _unique_uses_lock(campaign_id: int, user_id: str) -> str:
    """The lock of one shopper's unique codes of a campaign (_unique_use: the per-user limit, the take)."""
    return f"u:{campaign_id}:{user_id}"


def held_uses(campaign: Campaign) -> QuerySet[Coupon]:
    """A codes campaign's uses that hold a unit of its stock (code_take.lua's takes): the coupons of its shared
    code's uses and of its unique codes, not revoked."""
    return (Coupon.objects.filter(campaign=campaign)
            .filter(Q(claim_id__startswith=SHARED_USE) | Q(claim_id__startswith=UNIQUE_USE))
            .exclude(status=CouponStatus.REVOKED))


def is_code_use_id(text: str) -> bool:
    """Whether `text` is of the form of a typed code's use (a shared code's or a unique code's): the claim_id of
    its coupon, which is no claim (GET /claims/{id} of it is the 404 of an unknown claim, not a 400)."""
    return USE_ID_RE.fullmatch(text) is not None


def is_shared_use(coupon: Coupon) -> bool:
    return coupon.claim_id.startswith(SHARED_USE)


def take_member(coupon: Coupon) -> str:
    """The member of the shared code's takes (Redis) that stands for this coupon's use."""
    return f"{coupon.claim_id}/{coupon.user_id}"


def _lock(key: str) -> None:
    xact_lock(AdvisoryLock.CODE_USE, key)

