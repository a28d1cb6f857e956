"""Claims per storefront (issue 39 goal 3): the claim records the storefront whose key signed the shopper's token
(the ledger entry's field s, claim.lua's ARGV[18]); the drain persists it on the claim; campaign_report counts
claims by storefront (JSON, CSV, the admin's page); /metrics labels the claims counter with it. A default key's
claim is unchanged: no s in its ledger entry, no ARGV past those it had."""
from __future__ import annotations

import csv
import io
import json
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client

from campaigns.redis_state import ClaimFlow, campaign_keys, redis_client
from core.auth import mint_token
from orders.cancel import claim_cancel
from orders.drain import drain_campaign
from orders.metrics import CLAIM_TALLY
from orders.models import Claim
from orders.report import campaign_report
from storefronts.services import storefront_add

from .conftest import headers, signed

pytestmark = pytest.mark.django_db(transaction=True)  # the keyring's thread reads what the test committed


def claim(client: Client, campaign_id: int, user: str, token: str, **extra: Any) -> dict[str, Any]:
    response: Any = client.post(f"/api/v1/campaigns/{campaign_id}/claim", "{}", "application/json",
                                **headers(user, token, **extra))
    assert response.status_code == 200, response.content
    return response.json()


def ledger_fields(campaign_id: int) -> dict[str, dict[str, str]]:
    """Every ledger entry's fields, by claim id."""
    raw = redis_client().xrange(campaign_keys(campaign_id, 0).ledger)
    return {f"{campaign_id}-{entry_id.decode()}": {k.decode(): v.decode() for k, v in fields.items()}
            for entry_id, fields in raw}


def test_claims_record_their_storefront_from_ledger_to_report(client: Client, live_campaign) -> None:
    web, web_key = storefront_add(name="Web shop")
    app, app_key = storefront_add(name="App", channels="app")
    campaign = live_campaign(total_stock=20, per_user_limit=1)
    answers = {}
    for n in range(3):
        user = f"w{n}"
        extra = {"HTTP_IDEMPOTENCY_KEY": "key-0"} if n == 0 else {}
        answers[user] = claim(client, campaign.pk, user, signed(web_key.secret, user, key_id=web_key.key_id),
                              **extra)
    for n in range(2):
        user = f"a{n}"
        answers[user] = claim(client, campaign.pk, user, signed(app_key.secret, user, key_id=app_key.key_id,
                                                                tags="vip"), HTTP_X_SHOPPER_TAGS="vip")
    for n in range(4):
        user = f"d{n}"
        answers[user] = claim(client, campaign.pk, user, mint_token(user))
    refused = claim(client, campaign.pk, "w1", signed(web_key.secret, "w1", key_id=web_key.key_id))
    assert refused["status"] == "limit_reached"
    assert all(a["status"] == "claimed" for a in answers.values())

    entries = ledger_fields(campaign.pk)
    assert len(entries) == 9
    for user, answer in answers.items():
        fields = entries[answer["claim_id"]]
        expected = {"d": None, "w": str(web.pk), "a": str(app.pk)}[user[0]]
        assert fields.get("s") == expected
        assert fields["u"] == user
    default_entry = entries[answers["d0"]["claim_id"]]
    assert default_entry == {"u": "d0"}  # the default key's claim: its entry as before, no s
    assert set(entries[answers["w0"]["claim_id"]]) == {"u", "k", "s"}  # with an Idempotency-Key too

    report = drain_campaign(campaign_id=campaign.pk)
    assert report.persisted == 9
    stored = dict(Claim.objects.filter(campaign=campaign).values_list("user_id", "storefront_id"))
    assert stored == {"w0": web.pk, "w1": web.pk, "w2": web.pk, "a0": app.pk, "a1": app.pk,
                      "d0": None, "d1": None, "d2": None, "d3": None}

    data = campaign_report(campaign=campaign).as_json()
    assert data["totals"]["claims"] == 9
    assert data["storefronts"] == [  # by name, the default key's last
        {"storefront_id": app.pk, "name": "App", "claims": 2},
        {"storefront_id": web.pk, "name": "Web shop", "claims": 3},
        {"storefront_id": None, "name": "default key", "claims": 4},
    ]

    out = io.StringIO()
    call_command("campaign_report", str(campaign.pk), "--format", "csv", stdout=out)
    rows = list(csv.reader(io.StringIO(out.getvalue())))
    header = rows[0]
    total = dict(zip(header, rows[-1], strict=True))
    assert total["day"] == "total" and total["claims"] == "9"
    assert (total["claims: Web shop"], total["claims: App"], total["claims: default key"]) == ("3", "2", "4")
    day = dict(zip(header, rows[1], strict=True))
    assert (day["claims: Web shop"], day["claims: App"], day["claims: default key"]) == ("3", "2", "4")
    out = io.StringIO()
    call_command("campaign_report", str(campaign.pk), stdout=out)
    assert json.loads(out.getvalue())["storefronts"] == data["storefronts"]


def test_a_default_keys_claim_passes_no_more_arguments_and_a_storefronts_passes_its_id() -> None:
    plain = ClaimFlow(7, "alice", None, None).call(1_000)
    assert len(plain.args) == 9  # as before storefronts: no ARGV past the ninth
    keyed = ClaimFlow(7, "alice", "k1", None).call(1_000)
    assert len(keyed.args) == 12
    store = ClaimFlow(7, "alice", None, None, "", "42").call(1_000)
    assert store.args[9:] == ["", 0, 0, 1, "0", "0", "", "|", "42"]
    tagged = ClaimFlow(7, "alice", "k1", None, ",vip,|,,", "42").call(1_000)
    assert tagged.args[12:] == [1, "0", "0", "", ",vip,|,,", "42"]


def test_a_pending_storefront_claim_cancelled_keeps_its_storefront(client: Client, live_campaign) -> None:
    web, key = storefront_add(name="Web shop")
    campaign = live_campaign(total_stock=5)
    answer = claim(client, campaign.pk, "alice", signed(key.secret, "alice", key_id=key.key_id))
    assert claim_cancel(user_id="alice", claim_id=answer["claim_id"]).code == 0
    assert Claim.objects.get(claim_id=answer["claim_id"]).storefront_id == web.pk
    drain_campaign(campaign_id=campaign.pk)
    assert campaign_report(campaign=campaign).as_json()["storefronts"] == [
        {"storefront_id": web.pk, "name": "Web shop", "claims": 1}]


def test_an_entry_naming_no_storefront_that_exists_is_a_claim_of_none(live_campaign) -> None:
    campaign = live_campaign(total_stock=5)
    keys = campaign_keys(campaign.pk, 0)
    redis_client().xadd(keys.ledger, {"u": "ghost", "s": "987654321"})  # a storefront never made (or gone)
    redis_client().xadd(keys.ledger, {"u": "junk", "s": "01x"})  # never claim.lua's: parked
    report = drain_campaign(campaign_id=campaign.pk)
    assert (report.persisted, report.parked) == (1, 1)
    assert Claim.objects.get(campaign=campaign, user_id="ghost").storefront_id is None


def test_metrics_label_claims_with_their_storefront(client: Client, live_campaign) -> None:
    web, key = storefront_add(name="Web shop")
    campaign = live_campaign(total_stock=1)
    claim(client, campaign.pk, "alice", signed(key.secret, "alice", key_id=key.key_id))
    claim(client, campaign.pk, "bob", mint_token("bob"))
    unauthenticated: Any = client.post(f"/api/v1/campaigns/{campaign.pk}/claim", "{}", "application/json",
                                       **headers("carol", f"{key.key_id}.1.{'0' * 64}"))
    assert unauthenticated.status_code == 401
    CLAIM_TALLY.flush()
    text = client.get("/metrics").content.decode()
    assert f'couponrush_claims_total{{campaign="{campaign.pk}",outcome="claimed",storefront="{web.pk}"}} 1.0' in text
    assert f'couponrush_claims_total{{campaign="{campaign.pk}",outcome="sold_out",storefront="default"}} 1.0' in text
    assert 'couponrush_claims_total{campaign="-",outcome="unauthenticated",storefront="-"}' in text


def test_the_admins_report_page_shows_claims_by_storefront(client: Client, admin_client: Client,
                                                           live_campaign) -> None:
    web, key = storefront_add(name="Web shop")
    campaign = live_campaign(total_stock=5)
    claim(client, campaign.pk, "alice", signed(key.secret, "alice", key_id=key.key_id))
    claim(client, campaign.pk, "bob", mint_token("bob"))
    drain_campaign(campaign_id=campaign.pk)
    page = admin_client.get(f"/admin/campaigns/campaign/{campaign.pk}/report/").content.decode()
    table = page[page.index('id="report-storefronts"'):]
    assert "<td>Web shop</td><td>1</td>" in table and "<td>default key</td><td>1</td>" in table
    csv_text = b"".join(admin_client.get(f"/admin/campaigns/campaign/{campaign.pk}/report.csv").streaming_content)
    header = csv_text.decode().splitlines()[0].split(",")
    assert header[header.index("rule") + 1:header.index("rule") + 3] == ["claims: Web shop", "claims: default key"]
