"""Claim requests that every way in must answer alike (the door on the event loop, Django's view, both
servers), and a WSGI caller for Django."""
from __future__ import annotations

import io
import json
from typing import Any

from core.auth import mint_token


def call(app: Any, path: str, *, method: str = "POST", headers: dict[str, str] | None = None, body: bytes = b"",
         content_type: str = "application/json") -> tuple[str, dict[str, str], Any]:
    """Call a WSGI application: (status, headers lowercased, the JSON body)."""
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


def codes_campaign_for(template: str, make: Any) -> Any:
    """The live codes campaign a case claims ("{codes}": it can't be claimed, the same 404 as an unknown
    campaign), made by `make` (the live_campaign fixture), or None."""
    return make(kind="codes", code=None) if "{codes}" in template else None


def campaign_id_of(template: str, campaign: Any, codes: Any) -> str:
    """A case's campaign id: the test's campaign ("{id}"), its codes campaign ("{codes}"), or as given."""
    return template.format(id=campaign.pk, codes=codes.pk if codes is not None else 0)


# (case, campaign id ("{id}": the test's campaign), environ headers (made when the test runs), body)
CASES = [
    ("codes campaign", "{codes}", lambda: shopper("ann"), b"{}"),
    ("claimed", "{id}", lambda: shopper("ann"), b"{}"),
    ("with a key", "{id}", lambda: {**shopper("ann"), "HTTP_IDEMPOTENCY_KEY": "k1"}, b""),
    ("no token", "{id}", lambda: {"HTTP_X_USER_ID": "ann"}, b""),
    ("bad id", "abc", lambda: shopper("ann"), b""),
    ("unknown campaign", "999999", lambda: shopper("ann"), b""),
    ("tags signed", "{id}", lambda: {"HTTP_X_USER_ID": "ann", "HTTP_X_TOKEN": mint_token("ann", tags="vip,gold"),
                                     "HTTP_X_SHOPPER_TAGS": "vip,gold"}, b""),
    ("tags not signed", "{id}", lambda: {**shopper("ann"), "HTTP_X_SHOPPER_TAGS": "vip"}, b""),
    ("signed tags dropped", "{id}", lambda: {"HTTP_X_USER_ID": "ann",
                                             "HTTP_X_TOKEN": mint_token("ann", tags="vip")}, b""),
    ("bad key", "{id}", lambda: {**shopper("ann"), "HTTP_IDEMPOTENCY_KEY": "é"}, b""),
    ("bad json", "{id}", lambda: shopper("ann"), b"{nope"),
    ("too large", "{id}", lambda: shopper("ann"), b'{"a":"' + b"x" * 20000 + b'"}'),
]


def door_claim(meta: dict[str, str], campaign_id: Any, body: bytes = b"") -> tuple[int, Any]:
    """A claim through the event loop's door (orders.door.claim_response, run to its end): (status, the JSON body).
    `meta` holds the headers as an environ does (HTTP_X_USER_ID: X-User-Id)."""
    import orjson

    from orders.door import claim_response
    from webserver.interface import Request

    from ..conftest import run_coroutine

    headers = [(b"host", b"testserver"), (b"content-length", str(len(body)).encode())]
    headers += [(key.removeprefix("HTTP_").lower().replace("_", "-").encode(), value.encode("latin-1"))
                for key, value in meta.items()]
    request = Request("POST", f"/api/v1/campaigns/{campaign_id}/claim", b"", headers, body, "127.0.0.1",
                      ("testserver", 80))
    answer = claim_response(request, str(campaign_id))
    if not isinstance(answer, tuple):
        answer = run_coroutine(answer)
    assert isinstance(answer[2], bytes)
    return answer[0], orjson.loads(answer[2])
