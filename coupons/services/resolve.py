"""Which coupon a typed code stands for, for a shopper and an order: the shopper's own, a shared code's use,
or a unique code to bind; and whether a code is the shopper's own (no guess for the unknown-code guard)."""
from __future__ import annotations

from django.utils import timezone

from campaigns.models import Campaign, CampaignKind, shared_code_form
from campaigns.services import live_campaign_of_code, remembered_live_campaign
from core.errors import NotFound

from ..codes import CODE_RE
from ..hot_reads import coupon_by_id, own_coupon, own_coupon_or_use
from ..models import Coupon
from ..outcomes import UseOutcome
from ..unique_codes import unique_code_lookup
from .first_uses import FirstUse, _first_shared_use
from .order import Order
from .shared import _shared_use
from .transitions import Decide, _retrying
from .typed import SHARED_USE, _use_digest, typed_code_form
from .unique import _unique_use


def _code_used(code: str, user_id: str, order_id: str, decide: Decide, *, new_use: Order | None = None,
               first_use: FirstUse | None = None, absent: UseOutcome | None = None, source: str,
               own: Coupon | None = None) -> UseOutcome:
    """Decide on the coupon `code` (canonical, typed_code_form) stands for, for this shopper and order:
    (a) the shopper's own coupon with that code (claimed, or a unique code the shopper holds);
    (b) a shared code of a live codes campaign: the shopper's coupon for this order's use of it, created
        (its use taken) by a reserve or redeem (`new_use`); `absent` answers a confirm or release without one;
        a confirm or release also finds the order's use in a campaign paused or ended since (_campaign_of_use);
    (c) a unique code nobody holds yet, of a live codes campaign: bound to this shopper by a reserve or redeem.
    Anything else, another shopper's unique code and a code of a campaign not live, is NotFound.
    A reserve or redeem of a live shared code tries _first_shared_use first (the order's first use of it); a code
    in a claimed coupon's form (coupons.codes.CODE_RE) is looked up as the shopper's own first (a shared code
    of that form, 12 random symbols, is no code an operator types). `own`: the shopper's coupon of that code, if
    the caller read it (code_is_own's answer): not looked up again, its row the first attempt's (_retrying)."""
    canonical = typed_code_form(code)
    if canonical is None:
        raise NotFound("No such coupon.")
    code = canonical
    shared = shared_code_form(code)
    coupon_form = CODE_RE.fullmatch(code) is not None  # a claimed coupon's code: (a) first, no shared lookup
    if own is None and coupon_form:
        own = own_coupon(code=code, user_id=user_id)
    if own is None and shared is not None and new_use is not None and first_use is not None:
        campaign = live_campaign_of_code(shared, at=timezone.now())
        if campaign is not None:
            outcome = _first_shared_use(campaign, code, user_id, new_use, first_use, source=source)
            if outcome is not None:
                return outcome
    if own is None and not coupon_form:
        own = own_coupon(code=code, user_id=user_id)
    if own is not None:
        return _retrying(lambda: coupon_by_id(own.pk), decide, read=own)
    now = timezone.now()
    if shared is not None:
        campaign = live_campaign_of_code(shared, at=now)
        if campaign is None and new_use is None:
            campaign = _campaign_of_use(shared, user_id, order_id)
        if campaign is not None:
            return _shared_use(campaign, user_id, order_id, decide, new_use=new_use, absent=absent, source=source)
    unique = unique_code_lookup(code)
    if unique is not None and new_use is not None:
        return _unique_use(unique, user_id, decide, new_use=new_use, source=source)
    raise NotFound("No such coupon.")


def _campaign_of_use(shared: str, user_id: str, order_id: str) -> Campaign | None:
    """The codes campaign, no longer live (paused or ended since), in which this shopper used the shared code
    for this order: a confirm or release still finds that use (a checkout begun is finished; a new use of the
    code is the 404 of a code not live). Of the campaigns that had the code, the newest with such a use."""
    use = (Coupon.objects.select_related("campaign")
           .filter(user_id=user_id, campaign__kind=CampaignKind.CODES, campaign__code=shared,
                   claim_id__startswith=SHARED_USE, claim_id__contains=f":{_use_digest(user_id, order_id)}:")
           .order_by("-campaign_id").first())
    return use.campaign if use is not None else None


def code_is_own(*, code: str, user_id: str, order_id: str) -> tuple[bool, Coupon | None]:
    """Whether `code` (canonical) is the shopper's own for this order, as _code_used finds it without looking
    anyone else's up: the shopper's coupon of that code (path a: the coupon too, for _code_used's `own`), or the
    shopper's use of that shared code for this order, in any campaign that had it (path b's, as
    _campaign_of_use finds it). Such a code is no guess: the unknown-code guard leaves it alone (coupons.guard).
    One prepared statement (coupons.hot_reads), as it runs before every use of a code."""
    use = f"{SHARED_USE}%:{_use_digest(user_id, order_id)}:%"  # code:<campaign>:<digest>:<n>
    return own_coupon_or_use(code=code, user_id=user_id, use=use, kind=CampaignKind.CODES.value,
                             shared=shared_code_form(code))


def known_shared_code(code: str) -> bool:
    """Whether `code` (canonical) is a live shared code this process remembers (no query): a code that stands for
    something, which the unknown-code guard checks but does not count (coupons.guard.guarded)."""
    shared = shared_code_form(code)
    return shared is not None and remembered_live_campaign(shared, at=timezone.now()) is not None
