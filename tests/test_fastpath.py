"""The claim's fast path answers exactly as the Django view does (one implementation, two doors)."""
from __future__ import annotations

import io
import json
from typing import Any

import pytest

from config.auth import mint_token
from config.wsgi import application, django_application

pytestmark = pytest.mark.django_db


def call(app: Any, path: str, *, method: str = "POST", headers: dict[str, str] | None = None, body: bytes = b"",
         content_type: str = "application/json") -> tuple[str, dict[str, str], Any]:
    environ = {"REQUEST_METHOD": method, "PATH_INFO": path, "SERVER_NAME": "testserver", "SERVER_PORT": "80",
               "HTTP_HOST": "testserver", "wsgi.url_scheme": "http", "wsgi.input": io.BytesIO(body),
               "CONTENT_LENGTH": str(len(body)), "CONTENT_TYPE": content_type, "wsgi.errors": io.StringIO(),
               **(headers or {})}
    answer: dict[str, Any] = {}

    def start_response(status: str, response_headers: list[tuple[str, str]]) -> None:
        answer["status"], answer["headers"] = status, {k.lower(): v for k, v in response_headers}

    payload = b"".join(application_result := app(environ, start_response))
    if hasattr(application_result, "close"):
        application_result.close()
    return answer["status"].split()[0], answer["headers"], json.loads(payload)


def shopper(user: str) -> dict[str, str]:
    return {"HTTP_X_USER_ID": user, "HTTP_X_TOKEN": mint_token(user, ttl=600)}


CASES = [
    ("claimed", "{id}", lambda: shopper("ann"), b"{}"),
    ("with a key", "{id}", lambda: {**shopper("ann"), "HTTP_IDEMPOTENCY_KEY": "k1"}, b""),
    ("no token", "{id}", lambda: {"HTTP_X_USER_ID": "ann"}, b""),
    ("bad id", "abc", lambda: shopper("ann"), b""),
    ("unknown campaign", "999999", lambda: shopper("ann"), b""),
    ("bad key", "{id}", lambda: {**shopper("ann"), "HTTP_IDEMPOTENCY_KEY": "é"}, b""),
    ("bad json", "{id}", lambda: shopper("ann"), b"{nope"),
    ("too large", "{id}", lambda: shopper("ann"), b'{"a":"' + b"x" * 20000 + b'"}'),
]


@pytest.mark.parametrize(("case", "campaign_id", "headers", "body"), CASES, ids=[c[0] for c in CASES])
def test_the_fast_path_and_the_django_view_give_the_same_answer(live_campaign, case, campaign_id, headers,
                                                                 body) -> None:
    fast_campaign, view_campaign = live_campaign(total_stock=5), live_campaign(total_stock=5)
    h = headers()

    fast = call(application, f"/api/v1/campaigns/{campaign_id.format(id=fast_campaign.pk)}/claim", headers=h,
                body=body)
    view = call(django_application, f"/api/v1/campaigns/{campaign_id.format(id=view_campaign.pk)}/claim",
                headers=h, body=body)

    assert fast[0] == view[0]
    strip = {"claim_id", "campaign_id"}  # different campaigns, different ids
    assert {k: v for k, v in fast[2].items() if k not in strip} == {k: v for k, v in view[2].items() if k not in strip}
    for header in ("content-type", "idempotent-replayed", "retry-after"):
        assert fast[1].get(header) == view[1].get(header), header


def test_everything_else_and_other_methods_are_djangos(live_campaign) -> None:
    campaign = live_campaign()
    assert call(application, "/healthz", method="GET")[2] == {"code": 0, "status": "ok"}
    status, headers, body = call(application, f"/api/v1/campaigns/{campaign.pk}/claim", method="GET")
    assert (status, body["status"], headers.get("allow")) == ("405", "method_not_allowed", "POST")
