"""GET /api/v1/claims/{claim_id}: a claim's outcome, one implementation whichever door answers it.

The web server's door (orders/door.py) answers on the event loop what Redis knows exactly (campaigns/
claim_settled.py): pending while the claim's ledger entry waits unsettled, and the answer the drain stored when it
issued the coupon; what PostgreSQL alone knows (a cancel, a coupon changed since, an older claim) it hands on to
Django, whose view (orders.apis.ClaimDetailApi) runs the same decisions with the synchronous clients, then
PostgreSQL. `?wait=S` (docs/api.md, "The reads around a sale") waits up to S seconds while the claim is pending,
woken by the drain's PUBLISH when it settles it (orders/claim_waiters.py), never by polling.

Every body comes from claim_body(): the coupon as CouponOutputSerializer shows it, from its row (Django's path) or
from the drain's record and the campaign's coupon template, the serializer's own output for what every issued
coupon of the campaign shows alike (coupon_template, written by the drain): both paths answer the same bytes.
"""
from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, NamedTuple
from urllib.parse import parse_qs

import orjson
from django.db.models import Model

from campaigns.claim_settled import (
    ASK_POSTGRES,
    STATUS_SCRIPT,
    Issued,
    Read,
    keep_ms,
    parse_claim_id,
    parse_record,
    read_of,
    read_record,
    record_keys,
)
from campaigns.models import Campaign
from campaigns.redis_state import run_async
from core.errors import BadRequest, NotFound, StoreUnavailable, Unavailable, unavailable_of
from core.http import authenticated_user
from coupons.apis import CouponOutputSerializer
from coupons.models import Coupon, CouponStatus
from coupons.selectors import coupon_for_claim
from coupons.services import is_code_use_id

from .claim_waiters import WAITERS
from .models import Claim, ClaimStatus

WAIT_MAX_SECONDS = 25
WAIT_RE = re.compile(r"[0-9]{1,16}(?:\.[0-9]{1,16})?(?:[eE][+-]?[0-9]{1,3})?")  # a JSON number's form, not negative


class StatusRequest(NamedTuple):
    user_id: str
    claim_id: str
    campaign_id: int
    ref: str  # the claim's ledger_ref
    wait: float  # seconds a pending answer may wait for the claim to settle

    @property
    def claimed_ms(self) -> int:
        return int(self.ref.partition("-")[0])


def status_request_of(meta: Mapping[str, Any], claim_id_text: str, waits: list[str]) -> StatusRequest:
    """Check the token, the claim id and `wait` (its values in the query string). Raise ApplicationError."""
    user_id = authenticated_user(meta)
    parsed = parse_claim_id(claim_id_text)
    if parsed is None:
        if is_code_use_id(claim_id_text):  # a typed code's use (its coupon's claim_id in /me/coupons): no claim
            raise NotFound()
        raise BadRequest("Not a claim id.")
    return StatusRequest(user_id, claim_id_text, parsed[0], parsed[1], wait_of(waits))


def wait_of(values: list[str]) -> float:
    """`wait`'s seconds: absent 0; one number from 0 to 25 (decimals and an exponent as JSON writes numbers: what
    the schema's `number` admits); anything else a 400."""
    if not values:
        return 0.0
    if len(values) > 1 or WAIT_RE.fullmatch(values[0]) is None or float(values[0]) > WAIT_MAX_SECONDS:
        raise BadRequest(f"wait is a number of seconds from 0 to {WAIT_MAX_SECONDS}.")
    return float(values[0])


def waits_in_query(query: bytes | str) -> list[str]:
    """The values of `wait` in a raw query string."""
    text = query.decode("latin-1") if isinstance(query, bytes) else query
    return parse_qs(text, keep_blank_values=True).get("wait", []) if "wait" in text else []


# --- the answers' bodies: one function ------------------------------------------------------------------------

_COUPON = CouponOutputSerializer()  # its fields, built once; to_representation() is the serializer's own
_TIME = _COUPON.fields["valid_from"]


def claim_body(*, claim_id: str, campaign_id: int, status: str, claimed_at: datetime,
               coupon: Model | dict[str, Any] | None) -> bytes:
    """The JSON body of GET /claims/{id}: ClaimOutputSerializer's fields (the schema), the coupon's as
    CouponOutputSerializer shows it (a coupon with its campaign loaded, or that representation already)."""
    return orjson.dumps({
        "code": 0, "status": str(status), "claim_id": claim_id, "campaign_id": campaign_id,
        "claimed_at": _TIME.to_representation(claimed_at),
        "coupon": coupon if coupon is None or isinstance(coupon, dict) else _COUPON.to_representation(coupon),
    })


# The fields of an issued coupon's representation that differ from one claim to the next: a record's (claim_id
# is the request's); the others are the template's.
_PER_CLAIM = ("code", "claim_id", "valid_from", "expires_at")


def coupon_template(campaign: Campaign) -> bytes:
    """What every coupon the drain issues for `campaign` shows alike (active, no order, the campaign's rule): the
    serializer's representation of such a coupon, the per-claim fields null."""
    moment = datetime(2000, 1, 1, tzinfo=UTC)
    shown = _COUPON.to_representation(Coupon(campaign=campaign, status=CouponStatus.ACTIVE, code="", claim_id="",
                                             valid_from=moment, expires_at=moment))
    return orjson.dumps({**shown, **dict.fromkeys(_PER_CLAIM)})


_templates: dict[bytes, dict[str, Any]] = {}
_times_shown: dict[str, tuple[str, str]] = {}  # a record's times as the serializer shows them


def issued_body(request: StatusRequest, issued: Issued, template: bytes) -> bytes:
    """The answer of a claim issued with its coupon unchanged, from its record and the campaign's template."""
    common = _templates.get(template)
    if common is None:
        if len(_templates) >= 256:
            _templates.clear()
        common = _templates[template] = orjson.loads(template)
    shown = _times_shown.get(issued.times)
    if shown is None:  # claims of one millisecond, or of a campaign's fixed validity, share them
        if len(_times_shown) >= 4096:
            _times_shown.clear()
        shown = _times_shown[issued.times] = (_TIME.to_representation(issued.valid_from),
                                              _TIME.to_representation(issued.expires_at))
    coupon = {**common, "code": issued.code, "claim_id": request.claim_id, "valid_from": shown[0],
              "expires_at": shown[1]}
    return claim_body(claim_id=request.claim_id, campaign_id=request.campaign_id, status=ClaimStatus.ISSUED,
                      claimed_at=_claimed_at(request), coupon=coupon)


def _claimed_at(request: StatusRequest) -> datetime:
    return datetime.fromtimestamp(request.claimed_ms / 1000, tz=UTC)


def pending_body(request: StatusRequest) -> bytes:
    return claim_body(claim_id=request.claim_id, campaign_id=request.campaign_id, status=ClaimStatus.PENDING,
                      claimed_at=_claimed_at(request), coupon=None)


# --- what Redis decides ----------------------------------------------------------------------------------------

class Undecided(NamedTuple):
    kind: str  # "pending" (an answer, which a long poll may wait out), "postgres" (PostgreSQL decides)


PENDING = Undecided("pending")
POSTGRES = Undecided("postgres")


def decided(request: StatusRequest, read: Read, now_ms: int) -> bytes | Undecided:
    """What Redis knows of the claim: its answer's body (raise NotFound: someone else's), PENDING, or POSTGRES.

    Exact because the drain writes the record in the MULTI that acknowledges the entry, right after its commit
    (orders/settle.py), and a coupon's first change marks it "?" before it commits (claims_changed)."""
    record, entry_user = read.record, read.entry_user
    if record is not None:
        if record == ASK_POSTGRES.encode():
            return POSTGRES
        issued = parse_record(record)
        if issued.user_id != request.user_id:
            raise NotFound()
        if now_ms >= issued.stale_after_ms or read.template is None:
            return POSTGRES  # the coupon may have expired since (the sweep's change says nothing here); no template
        return issued_body(request, issued, read.template)
    if entry_user is not None:
        if entry_user != request.user_id:
            raise NotFound()
        if now_ms - request.claimed_ms >= keep_ms():
            return POSTGRES  # older than a record lives: its record may have come and gone
        return PENDING
    return POSTGRES


def postgres_answer(request: StatusRequest, entry_user: str | None) -> bytes | Undecided:
    """The answer from PostgreSQL's rows; a claim it does not hold is PENDING if its entry waits (entry_user:
    the shopper of the unsettled entry, None when Redis had none or was down). Raise NotFound."""
    claim = Claim.objects.filter(claim_id=request.claim_id, user_id=request.user_id).first()
    if claim is None:
        if entry_user == request.user_id:
            return PENDING
        raise NotFound()
    return claim_body(claim_id=claim.claim_id, campaign_id=claim.campaign_id, status=claim.status,
                      claimed_at=claim.claimed_at, coupon=coupon_for_claim(claim_id=claim.claim_id))


# --- Django's view (WSGI, and whatever the door hands on) -----------------------------------------------------

def claim_status(request: StatusRequest) -> bytes:
    """The answer of a checked request, through Redis then PostgreSQL, waiting up to request.wait seconds while
    it is pending (on this thread). Raise ApplicationError (404, 503)."""
    deadline = time.monotonic() + request.wait
    waiter = WAITERS.thread_waiter(request.claim_id) if request.wait > 0 else None
    try:
        while True:
            try:
                read = read_record(request.campaign_id, request.ref)
            except StoreUnavailable:
                try:
                    answer = postgres_answer(request, None)
                except NotFound:
                    raise Unavailable() from None  # Redis may hold it pending: we can't tell
            else:
                answer = decided(request, read, _now_ms())
                if answer is POSTGRES:
                    answer = postgres_answer(request, read.entry_user)
            if isinstance(answer, bytes):
                return answer
            left = deadline - time.monotonic()
            if waiter is None or left <= 0:
                return pending_body(request)
            waiter.wait(left)
    finally:
        if waiter is not None:
            WAITERS.forget(waiter)


def _now_ms() -> int:
    return int(time.time() * 1000)


# --- the event loop's door -------------------------------------------------------------------------------------

class HandOn(Exception):
    """PostgreSQL decides, or Redis failed: the door hands the request on to Django (the view above)."""


async def claim_status_async(request: StatusRequest) -> bytes:
    """claim_status() on the event loop, for what Redis decides; raise HandOn for the rest. Raise NotFound."""
    deadline = time.monotonic() + request.wait
    waiter = WAITERS.loop_waiter(request.claim_id) if request.wait > 0 else None
    try:
        while True:
            answer = decided(request, await _read_async(request), _now_ms())
            if answer is POSTGRES:
                raise HandOn()
            if isinstance(answer, bytes):
                return answer
            left = deadline - time.monotonic()
            if waiter is None or left <= 0:
                return pending_body(request)
            await waiter.wait(left)
    finally:
        if waiter is not None:
            WAITERS.forget(waiter)


_STATUS_SHA = hashlib.sha1(STATUS_SCRIPT.encode()).hexdigest()


async def _read_async(request: StatusRequest) -> Read:
    """read_record() through the loop's pipelined client (one EVALSHA). Raise HandOn when Redis fails."""
    settled, ledger, template, entry_id = record_keys(request.campaign_id, request.ref, learn=False)  # no lookup
    try:
        reply = await run_async(_STATUS_SHA, STATUS_SCRIPT, [settled, ledger, template], [entry_id])
    except Exception as exc:
        if unavailable_of(exc) is None:
            raise
        raise HandOn() from exc  # Django's view reads again and asks PostgreSQL: its answer, or the 503
    return read_of(reply)

