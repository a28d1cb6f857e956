"""Request parsers (kept apart from core.api: DRF imports them while it builds APIView)."""
from __future__ import annotations

from typing import Any

from rest_framework import exceptions
from rest_framework.parsers import JSONParser


class StrictJSONParser(JSONParser):
    """DRF's JSON parser, with absurdly deep nesting a 400 like any other malformed body."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError as exc:
            raise exceptions.ParseError("JSON parse error - nested too deeply") from exc
