"""A claim whose request was answered 503 without knowing whether it ran is taken back once Redis answers
(void.lua + claim_cancel), unless a repeat of its Idempotency-Key was told 'claimed' first."""
from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest
from django.conf import settings
from django.db import connections
from django.test import override_settings

from campaigns.redis_state import (
    ClaimOutcomeUnknown,
    VoidNotConfirmed,
    campaign_keys,
    claim_call,
    claim_reply,
    redis_client,
    redis_now_ms,
    reset_redis_client,
    scripts,
)
from core.errors import Unavailable
from coupons.models import Coupon
from orders.claim import claim_create, claim_voider, void_claim
from orders.drain import drain_campaign
from orders.models import Claim, ClaimStatus
from orders.verify import campaign_verify


def ran_but_unanswered(campaign, user: str, key: str | None) -> ClaimOutcomeUnknown:
    """Run the claim script as a request would, and forget its reply (what a frozen Redis does to it)."""
    call = claim_call(campaign_id=campaign.pk, user_id=user, idempotency_key=key, client_ip=None,
                      now_ms=redis_now_ms())
    code, _, _ = claim_reply(scripts().claim(keys=call.keys, args=call.args))
    assert code == 0
    return ClaimOutcomeUnknown("lost", campaign_id=campaign.pk, user_id=user, answer_key=call.idem_key,
                               token=call.token)


def test_a_claim_answered_503_is_taken_back_and_a_repeat_of_its_key_is_decided_anew(live_campaign) -> None:
    campaign = live_campaign(total_stock=5, per_user_limit=1)
    unknown = ran_but_unanswered(campaign, "ann", "order-1")
    keys = campaign_keys(campaign.pk)
    assert int(redis_client().get(keys.stock)) == 4

    claim_id = void_claim(unknown)
    assert void_claim(unknown) == claim_id  # a retry (say the cancel failed) cancels the same claim, once
    drain_campaign(campaign_id=campaign.pk)

    assert int(redis_client().get(keys.stock)) == 5 and int(redis_client().hget(keys.users, "ann")) == 0
    assert Claim.objects.get(claim_id=claim_id).status == ClaimStatus.CANCELLED
    assert not Coupon.objects.filter(claim_id=claim_id).exists()
    again = claim_create(campaign_id=campaign.pk, user_id="ann", idempotency_key="order-1")
    assert again.status == "claimed" and not again.replayed and again.claim_id != claim_id
    assert campaign_verify(campaign=campaign).balanced


def test_a_claim_whose_key_was_replayed_first_stands(live_campaign) -> None:
    campaign = live_campaign(total_stock=5, per_user_limit=1)
    unknown = ran_but_unanswered(campaign, "ann", "order-1")
    told = claim_create(campaign_id=campaign.pk, user_id="ann", idempotency_key="order-1")

    assert told.status == "claimed" and told.replayed
    assert void_claim(unknown) is None
    assert claim_create(campaign_id=campaign.pk, user_id="ann", idempotency_key="order-1").claim_id == told.claim_id
    assert int(redis_client().get(campaign_keys(campaign.pk).stock)) == 4


def test_a_request_that_gave_up_never_takes_back_an_earlier_claim_made_with_the_same_key(live_campaign) -> None:
    # The first request was told 'claimed'; a repeat of its key never ran (Redis froze first) and gave up:
    # the answer under the key is the first request's, which its void must leave alone.
    campaign = live_campaign(total_stock=5, per_user_limit=1)
    first = claim_create(campaign_id=campaign.pk, user_id="ann", idempotency_key="order-1")
    keys = campaign_keys(campaign.pk)
    repeat = ClaimOutcomeUnknown("lost", campaign_id=campaign.pk, user_id="ann",
                                 answer_key=keys.idempotency("ann", "order-1"), token="another-request")

    assert void_claim(repeat) is None
    assert claim_create(campaign_id=campaign.pk, user_id="ann", idempotency_key="order-1").claim_id == first.claim_id
    assert int(redis_client().get(keys.stock)) == 4


def run_acked(campaign, user: str, key: str) -> tuple[int, bool, ClaimOutcomeUnknown]:
    """Run the claim script as a request does with replica acks (a repeat is told only once WAIT confirmed it),
    without the WAIT: (code, replayed, what the request hands the voider if its WAIT then fails)."""
    with override_settings(COUPONS_REDIS_REPLICA_ACKS=1):
        call = claim_call(campaign_id=campaign.pk, user_id=user, idempotency_key=key, client_ip=None,
                          now_ms=redis_now_ms())
    code, _, flags = claim_reply(scripts().claim.registered(keys=call.keys, args=call.args))
    return code, bool(flags & 1), ClaimOutcomeUnknown(
        "not confirmed", campaign_id=campaign.pk, user_id=user, answer_key=call.idem_key, token=call.token)


@pytest.mark.parametrize("owner_first", [True, False])
def test_with_replica_acks_a_claim_whose_every_request_gave_up_is_taken_back(live_campaign, owner_first) -> None:
    # The claim and a repeat of its key both ran, neither was confirmed by a replica in time: both answered 503,
    # so nobody was told, and whichever voids last takes the claim back (issue 22: this one used to stand).
    campaign = live_campaign(total_stock=5, per_user_limit=1)
    code, replayed, owner = run_acked(campaign, "ann", "order-1")
    assert (code, replayed) == (0, False)
    code, replayed, repeat = run_acked(campaign, "ann", "order-1")
    assert (code, replayed) == (0, True)
    first, last = (owner, repeat) if owner_first else (repeat, owner)

    assert void_claim(first) is None
    claim_id = void_claim(last)
    keys = campaign_keys(campaign.pk)
    assert claim_id is not None and int(redis_client().get(keys.stock)) == 5
    drain_campaign(campaign_id=campaign.pk)
    assert Claim.objects.get(claim_id=claim_id).status == ClaimStatus.CANCELLED
    assert claim_create(campaign_id=campaign.pk, user_id="ann", idempotency_key="order-1").claim_id != claim_id
    assert campaign_verify(campaign=campaign).balanced


def test_with_replica_acks_a_claim_stands_once_one_of_its_requests_was_told(live_campaign) -> None:
    campaign = live_campaign(total_stock=5, per_user_limit=1)
    keys = campaign_keys(campaign.pk)
    # The owner told (its WAIT confirmed it), a repeat not confirmed: the repeat takes only itself out.
    run_acked(campaign, "ann", "order-1")  # told: its WAIT confirmed it
    _, _, unconfirmed = run_acked(campaign, "ann", "order-1")
    assert void_claim(unconfirmed) is None
    # The owner gave up, a repeat was told, a later one not confirmed: the one told keeps the claim.
    _, _, owner = run_acked(campaign, "bob", "order-2")
    run_acked(campaign, "bob", "order-2")  # told: its WAIT confirmed it
    _, _, later = run_acked(campaign, "bob", "order-2")
    assert void_claim(owner) is None and void_claim(later) is None

    assert int(redis_client().get(keys.stock)) == 3
    drain_campaign(campaign_id=campaign.pk)
    assert Claim.objects.filter(campaign=campaign, status=ClaimStatus.CANCELLED).count() == 0
    assert campaign_verify(campaign=campaign).balanced


def test_with_replica_acks_a_claim_is_cancelled_only_once_its_void_was_confirmed(live_campaign) -> None:
    # No replica here: with acks=1 every WAIT confirms nothing (a replica stopped); acks=0 stands for the replica
    # back (the same script, its change confirmed). The third case is a failover that lost the void.
    campaign = live_campaign(total_stock=5, per_user_limit=2)
    keys = campaign_keys(campaign.pk)
    gave_up = {user: run_acked(campaign, user, "order-1")[2] for user in ("ann", "bob", "cat")}
    before = {user: redis_client().get(unknown.answer_key) for user, unknown in gave_up.items()}
    with override_settings(COUPONS_REDIS_REPLICA_ACKS=1, COUPONS_REDIS_REPLICA_ACK_TIMEOUT_MS=10):
        for unknown in gave_up.values():
            with pytest.raises(VoidNotConfirmed):
                void_claim(unknown)
    assert int(redis_client().get(keys.stock)) == 2  # nothing cancelled yet

    # ann: the void holds; bob: it holds, and a repeat of his key was decided anew since (a new claim).
    anew = claim_create(campaign_id=campaign.pk, user_id="bob", idempotency_key="order-1")
    assert anew.status == "claimed" and not anew.replayed
    # cat: a failover lost the void (the promoted replica has the answer as it was), and there a repeat of her key
    # was told 'claimed' (its WAIT confirmed it).
    redis_client().set(gave_up["cat"].answer_key, before["cat"], keepttl=True)
    code, replayed, _ = run_acked(campaign, "cat", "order-1")
    assert (code, replayed) == (0, True)

    assert void_claim(gave_up["ann"]) is not None
    assert void_claim(gave_up["bob"]) is not None
    assert void_claim(gave_up["cat"]) is None  # it stands: cat was told
    drain_campaign(campaign_id=campaign.pk)
    assert sorted(Claim.objects.filter(campaign=campaign).exclude(status=ClaimStatus.CANCELLED)
                  .values_list("user_id", flat=True)) == ["bob", "cat"]
    assert campaign_verify(campaign=campaign).balanced


def test_a_claim_that_never_ran_leaves_nothing_to_take_back(live_campaign) -> None:
    campaign = live_campaign(total_stock=5)
    keys = campaign_keys(campaign.pk)
    unknown = ClaimOutcomeUnknown("lost", campaign_id=campaign.pk, user_id="ann",
                                  answer_key=keys.idempotency("ann", "never-sent"), token="t")
    assert void_claim(unknown) is None
    assert int(redis_client().get(keys.stock)) == 5


class ReplyEater:
    """A TCP proxy to Redis that forwards every command and, while `eating`, throws the replies away: the
    claim runs, its reply never arrives, and neither does the answer read back after the deadline."""

    def __init__(self, target_port: int) -> None:
        self.eating = False
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.target_port = target_port
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            threading.Thread(target=self._pipe, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, True), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket, replies: bool) -> None:
        try:
            while data := source.recv(65536):
                if not (replies and self.eating):
                    sink.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                s.close()

    def close(self) -> None:
        self.server.close()


@pytest.fixture
def reply_eater() -> Iterator[ReplyEater]:
    port = int(settings.REDIS_URL.rsplit(":", 1)[1].split("/")[0])
    eater = ReplyEater(port)
    db = settings.REDIS_URL.rsplit("/", 1)[1]
    with override_settings(REDIS_URL=f"redis://127.0.0.1:{eater.port}/{db}"):
        reset_redis_client()
        yield eater
    reset_redis_client()
    eater.close()


@pytest.mark.django_db(transaction=True)
def test_a_reply_lost_until_after_the_deadline_is_a_503_and_the_claim_is_taken_back(live_campaign,
                                                                                     reply_eater) -> None:
    campaign = live_campaign(total_stock=5, per_user_limit=1)
    keys = campaign_keys(campaign.pk)
    assert claim_create(campaign_id=campaign.pk, user_id="warm", idempotency_key=None).status == "claimed"

    reply_eater.eating = True
    started = time.monotonic()
    with pytest.raises(Unavailable):
        claim_create(campaign_id=campaign.pk, user_id="ann", idempotency_key=None)
    answered_in = time.monotonic() - started
    reply_eater.eating = False

    deadline = time.monotonic() + 10
    while int(redis_client().get(keys.stock)) != 4 and time.monotonic() < deadline:
        time.sleep(0.1)
    drain_campaign(campaign_id=campaign.pk)
    connections.close_all()

    assert answered_in < 1.0
    assert int(redis_client().get(keys.stock)) == 4  # ann's claim ran, and was given back
    assert list(Claim.objects.filter(campaign=campaign, user_id="ann").values_list("status", flat=True)) == [
        ClaimStatus.CANCELLED]
    assert not Coupon.objects.filter(campaign=campaign, user_id="ann").exists()
    assert campaign_verify(campaign=campaign).balanced
    assert claim_voider._pending == []
