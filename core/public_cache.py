"""Public answers for the reads around a sale (GET /campaigns, GET /campaigns/{id}), cacheable as docs/api.md
says ("The reads around a sale"): `Cache-Control: public, max-age=1`, an `ETag`, and a 304 for a matching
`If-None-Match`; and kept by each worker for half a second, so that a page's storm of reads costs the database
and Redis a few queries a second per worker, not one per shopper.

A view may make part of its kept answer current on every request (`live`): the campaign reads' `remaining` is
read from Redis each time (campaigns/public.py), so a claim shows in the next read at the origin.

Bounds: what a worker answers from memory was read at most PUBLIC_FRESH_SECONDS ago; nginx's microcache (deploy/)
keeps it until the whole second it was answered in ends (X-Accel-Expires: @<that second>, at most 1 s), so
`remaining` is never more than 1.5 s old where the proxy answers (a browser may keep it its own max-age).
An operator's change shows within the same bound: the claim itself
always asks Redis, so a cached `live` never sells anything.

One mechanism for every public read: the view is the route's one implementation (the schema documents it); this
decorator only keeps its rendered answer.
"""
from __future__ import annotations

import functools
import hashlib
import time
from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponse, HttpResponseBase

PUBLIC_FRESH_SECONDS = 0.5
PUBLIC_CACHE_CONTROL = "public, max-age=1"
_CACHED_STATUSES = (200, 404)  # an answer, or "no such campaign": both the same for every caller
_MAX_ENTRIES = 2_000  # paths; past it the memory starts again (unknown ids are many, live campaigns few)

# What makes a kept 200 answer's body current on each request (given the body when it is kept; None: nothing).
Live = Callable[[bytes], Callable[[], bytes] | None]
# path with query -> (fresh until, status, body, ETag, the view's headers, what makes the body current)
_answers: dict[str, tuple[float, int, bytes, str, tuple[tuple[str, str], ...], Callable[[], bytes] | None]] = {}
_OWN_HEADERS = {"content-length", "etag", "cache-control"}


def forget_public_answers() -> None:
    """Forget every kept answer (tests, and a process that must see a change at once)."""
    _answers.clear()


def etag_of(body: bytes) -> str:
    return '"' + hashlib.blake2b(body, digest_size=12).hexdigest() + '"'


def public_answer(view: Callable[..., HttpResponseBase], live: Live | None = None) -> Callable[..., HttpResponseBase]:
    """Keep a public GET view's rendered answer for PUBLIC_FRESH_SECONDS (what `live` makes current, on each
    request) and give it its caching headers."""

    @functools.wraps(view)  # keeps `cls` and `initkwargs`: drf-spectacular documents the view itself
    def answer(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        if request.method not in ("GET", "HEAD"):
            return view(request, *args, **kwargs)  # the view's own 405
        key = request.get_full_path()
        now = time.monotonic()
        kept = _answers.get(key)
        if kept is None or kept[0] <= now:
            response = view(request, *args, **kwargs)
            if response.status_code not in _CACHED_STATUSES or response.streaming:
                return response
            render = getattr(response, "render", None)
            if callable(render):
                render()  # a DRF Response: its JSON, once
            body = response.content  # type: ignore[attr-defined]
            headers = tuple((name, value) for name, value in response.items() if name.lower() not in _OWN_HEADERS)
            current = live(body) if live is not None and response.status_code == 200 else None
            kept = (now + PUBLIC_FRESH_SECONDS, response.status_code, body, etag_of(body), headers, current)
            if len(_answers) >= _MAX_ENTRIES:
                _answers.clear()
            _answers[key] = kept
        _, status, body, etag, headers, current = kept
        if current is not None:
            body = current()
            etag = etag_of(body)
        if status == 200 and _matches(request, etag):
            response = HttpResponse(status=304)  # RFC 9110 15.4.5: the validator and caching headers, no body
            del response["Content-Type"]
        else:
            response = HttpResponse(body, status=status)
            for name, value in headers:
                response[name] = value
        response["ETag"] = etag
        response["Cache-Control"] = PUBLIC_CACHE_CONTROL
        # For the proxy's microcache (nginx, deploy/): keep it until this whole second ends. nginx counts a copy's
        # life in whole seconds, so max-age=1 kept one up to 2 s, 2.5 s with the worker's half second: beyond the
        # 2 s the contract allows. nginx hides the header from the client.
        response["X-Accel-Expires"] = f"@{int(time.time())}"
        return response

    return answer


def _matches(request: HttpRequest, etag: str) -> bool:
    """Whether If-None-Match names `etag` (RFC 9110 13.1.2: compared weakly, "*" matches any)."""
    header = request.META.get("HTTP_IF_NONE_MATCH")
    if not header:
        return False
    tags = {tag.strip().removeprefix("W/") for tag in header.split(",")}
    return etag in tags or "*" in tags
