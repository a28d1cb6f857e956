"""DRF's content negotiation with its choice remembered: every DRF view's (REST_FRAMEWORK's
DEFAULT_CONTENT_NEGOTIATION_CLASS). A module of its own: DRF imports it while rest_framework.views loads."""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.renderers import BaseRenderer
from rest_framework.request import Request


class ApiContentNegotiation(DefaultContentNegotiation):
    """DRF's content negotiation, its choice remembered per Accept header and renderers. DRF parses the header
    (building request.headers, a dict of every header, to read it) and ranks its media types against each
    renderer's on every request: 50-70 us of a DRF route's fixed cost in process, for the same choice each time
    (JSON, for no Accept, */* and application/json alike). The choice depends on nothing else but a format (the
    ?format= parameter, a .json suffix): a request with one, and one DRF refuses (406), goes DRF's way every time.
    A bounded number of Accept values are remembered (a client may send any; a longer one is not)."""

    def select_renderer(self, request: Request, renderers: Iterable[BaseRenderer], format_suffix: str | None = None
                        ) -> tuple[BaseRenderer, str]:
        renderers = list(renderers)  # APIView's own list: the choice is one of these
        meta = getattr(request, "_request", request).META
        if format_suffix or (meta.get("QUERY_STRING") and request.query_params.get(self.settings.URL_FORMAT_OVERRIDE)):
            return super().select_renderer(request, renderers, format_suffix)  # type: ignore[no-any-return]
        accept = meta.get("HTTP_ACCEPT")  # request.headers' "Accept"
        key = (accept, *[(type(renderer), renderer.media_type) for renderer in renderers])
        chosen = _CHOSEN.get(key)
        if chosen is not None:
            return renderers[chosen[0]], chosen[1]
        renderer, media_type = super().select_renderer(request, renderers, format_suffix)
        if accept is None or len(accept) <= _LONGEST_ACCEPT:
            if len(_CHOSEN) >= 256:
                _CHOSEN.clear()
            _CHOSEN[key] = next(i for i, offered in enumerate(renderers) if offered is renderer), media_type
        return renderer, media_type


_CHOSEN: dict[tuple[Any, ...], tuple[int, str]] = {}  # (Accept, (renderer class, media type)...) -> index, media type
_LONGEST_ACCEPT = 200
