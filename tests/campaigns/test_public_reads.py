"""The reads around a sale (docs/api.md): the public campaign reads are cacheable (Cache-Control, ETag, 304) and
each worker answers a storm of them from memory for PUBLIC_FRESH_SECONDS, `remaining` never older than that."""
from __future__ import annotations

import time

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from campaigns import redis_state
from campaigns.redis_state import redis_client
from campaigns.services import campaign_pause
from core import public_cache
from core.public_cache import PUBLIC_FRESH_SECONDS
from orders.claim import forget_campaign_facts
from tests.conftest import shopper_headers

pytestmark = pytest.mark.django_db


def claim(client, campaign, user: str) -> None:
    answer = client.post(f"/api/v1/campaigns/{campaign.pk}/claim", data={}, content_type="application/json",
                         **shopper_headers(user))
    assert answer.json()["status"] == "claimed"


@pytest.mark.parametrize("path", ["/api/v1/campaigns", "/api/v1/campaigns/{id}"])
def test_public_reads_carry_public_caching_headers_and_an_etag_that_answers_304(client, live_campaign, path) -> None:
    campaign = live_campaign(total_stock=5)
    first = client.get(path.format(id=campaign.pk))
    assert first.status_code == 200
    assert first["Cache-Control"] == "public, max-age=1"
    etag = first["ETag"]
    assert etag.startswith('"') and etag.endswith('"') and len(etag) > 8

    again = client.get(path.format(id=campaign.pk), HTTP_IF_NONE_MATCH=etag)
    assert again.status_code == 304 and again.content == b""
    assert again["ETag"] == etag and again["Cache-Control"] == "public, max-age=1"
    assert client.get(path.format(id=campaign.pk), HTTP_IF_NONE_MATCH=f'"other", W/{etag}').status_code == 304
    assert client.get(path.format(id=campaign.pk), HTTP_IF_NONE_MATCH="*").status_code == 304
    other = client.get(path.format(id=campaign.pk), HTTP_IF_NONE_MATCH='"not-it"')
    assert other.status_code == 200 and other.content == first.content


@pytest.mark.parametrize("path", ["/api/v1/campaigns", "/api/v1/campaigns/{id}"])
def test_a_storm_of_reads_costs_one_query_per_fresh_period_and_remaining_is_live(client, live_campaign, path,
                                                                                monkeypatch) -> None:
    monkeypatch.setattr(public_cache, "PUBLIC_FRESH_SECONDS", 60)  # one fresh period, however slow the host
    campaign = live_campaign(total_stock=5)
    path = path.format(id=campaign.pk)

    def remaining(answer) -> int:
        data = answer.json()
        return next(c for c in data.get("results", [data]) if c["id"] == campaign.pk)["remaining"]

    first = client.get(path)
    assert remaining(first) == 5
    with CaptureQueriesContext(connection) as queries:
        claim(client, campaign, "ann")
        answers = [client.get(path) for _ in range(20)]
        claim(client, campaign, "bob")
        after = client.get(path)
    assert not [q for q in queries if "campaigns_campaign" in q["sql"]]  # the rest of the answer is kept
    assert {remaining(a) for a in answers} == {4} and remaining(after) == 3  # each read asks Redis
    assert answers[0]["ETag"] != first["ETag"] and answers[0]["ETag"] == answers[-1]["ETag"] != after["ETag"]
    assert client.get(path, HTTP_IF_NONE_MATCH=after["ETag"]).status_code == 304
    assert {k: v for k, v in after.json().items() if k != "remaining" and k != "results"} == \
        {k: v for k, v in first.json().items() if k != "remaining" and k != "results"}


def test_an_operators_change_shows_within_the_fresh_period(client, live_campaign) -> None:
    campaign = live_campaign()
    path = f"/api/v1/campaigns/{campaign.pk}"
    assert client.get(path).json()["state"] == "live"
    campaign_pause(campaign=campaign)
    time.sleep(PUBLIC_FRESH_SECONDS + 0.05)
    assert client.get(path).json()["state"] == "paused"


def test_unknown_campaigns_are_a_cacheable_404_and_bad_ids_a_400_not_kept(client) -> None:
    unknown = client.get("/api/v1/campaigns/424242")
    assert unknown.status_code == 404 and unknown.json()["status"] == "not_found"
    assert unknown["Cache-Control"] == "public, max-age=1"
    bad = client.get("/api/v1/campaigns/abc")
    assert bad.status_code == 400 and bad.json()["status"] == "invalid_request"
    assert "ETag" not in bad


def test_other_methods_on_public_reads_are_the_contracts_405(client, live_campaign) -> None:
    campaign = live_campaign()
    answer = client.post(f"/api/v1/campaigns/{campaign.pk}", data={}, content_type="application/json")
    assert answer.status_code == 405 and answer.json()["status"] == "method_not_allowed"
    assert "ETag" not in answer


def test_only_the_live_campaigns_redis_holds_are_read_again_on_each_answer(client, live_campaign,
                                                                          monkeypatch) -> None:
    # Given a live campaign and one whose state Redis has lost (the process forgot what it knew of both)
    held, lost = live_campaign(total_stock=5), live_campaign(total_stock=7)
    redis_client().delete(*redis_client().scan_iter(f"cpn:{{c{lost.pk}}}:*"))
    forget_campaign_facts()
    asked: list[list[int]] = []  # the campaigns each read of Redis's stock asked for (the real read runs)
    real = redis_state.remaining_many

    def remaining_many(ids: list[int], codes: frozenset[int] | set[int] = frozenset()) -> dict[int, int | None]:
        asked.append(ids)
        return real(ids, codes)

    monkeypatch.setattr(redis_state, "remaining_many", remaining_many)
    monkeypatch.setattr(public_cache, "PUBLIC_FRESH_SECONDS", 60)  # the answer kept throughout, however slow

    # When the list is read (its answer kept), then 20 times more
    first = client.get("/api/v1/campaigns").json()["results"]
    asked.clear()
    answers = [client.get("/api/v1/campaigns").json()["results"] for _ in range(20)]

    # Then each answer read the held campaign's stock, and never asked for the lost one's
    assert asked == [[held.pk]] * 20
    assert answers[-1] == first and {c["id"]: c["remaining"] for c in first}[held.pk] == 5
