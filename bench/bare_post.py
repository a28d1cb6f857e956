"""A bare ASGI app for the sold-out storm's second baseline (bench/suite.py, phase soldout).

It answers every request with a fixed JSON body after reading the request's body the way config/asgi.py reads
a claim's (until Content-Length bytes are in). Served by granian with the web server's workers and its ASGI
interface without the lifespan protocol (asginl: the same per request, nothing to start), it costs what the
HTTP server and the ASGI protocol cost for the claim's exact request (POST, the shopper's headers, a body of
"{}"), so that sold-out / bare-POST says how close the claim comes to the server's floor for such a request.
/healthz (the first baseline) is a GET that reads no body.
"""
from __future__ import annotations

from typing import Any

_HEADERS = [(b"content-type", b"application/json"), (b"x-content-type-options", b"nosniff")]
_BODY = b'{"code":2,"status":"sold_out","claim_id":null,"campaign_id":0}'


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":  # served with --interface asginl: no lifespan messages
        return
    length = next((int(v) for k, v in scope["headers"] if k == b"content-length"), -1)
    received = 0
    while length != 0:
        message = await receive()
        received += len(message.get("body", b""))
        if received >= length >= 0 or not message.get("more_body", False):
            break
    await send({"type": "http.response.start", "status": 200, "headers": _HEADERS})
    await send({"type": "http.response.body", "body": _BODY})
