"""The OpenAPI schema's app-specific part: the claim (a plain Django view) and the exact input patterns."""
from __future__ import annotations

from typing import Any

from campaigns.money import AMOUNT_RE, MINOR_UNITS
from core.http import IDEMPOTENCY_KEY_RE
from coupons.apis import ORDER_ID_RE
from coupons.codes import CODE_RE

from .apis import CLAIM_OPERATION
from .ledger import CLAIM_ID_RE

# What the API accepts, said exactly in the schema (clients and fuzzers can rely on it): the patterns are the
# validators' own regular expressions, anchored.
_POSITIVE = "(?!0+(\\.0+)?$)"  # an amount is never zero


def _parameter_schemas() -> dict[tuple[str, str], dict[str, Any]]:
        return {
        ("header", "Idempotency-Key"): {"type": "string", "minLength": 1, "maxLength": 255,
                                        "pattern": f"^{IDEMPOTENCY_KEY_RE.pattern}$"},
        ("path", "campaign_id"): {"type": "integer", "minimum": 1, "maximum": 999_999_999_999_999_999},
        ("path", "claim_id"): {"type": "string", "pattern": f"^{CLAIM_ID_RE.pattern}$",
                               "example": "42-1764470000000-0"},
        ("path", "code"): {"type": "string", "pattern": f"^{CODE_RE.pattern}$", "example": "K7QM-3XRD-9PVA"},
        ("query", "page_size"): {"type": "integer", "minimum": 1, "maximum": 100},
        ("query", "page"): {"type": "integer", "minimum": 1},
    }


def _amount_patterns() -> dict[int, str]:
    """Amount patterns by the currency's decimals: the parser's own for two, whole units for none."""
    return {0: "^[1-9][0-9]{0,11}$", 2: f"^{_POSITIVE}{AMOUNT_RE.pattern}$"}


def _body_properties() -> dict[str, dict[str, Any]]:
    return {
        "order_id": {"type": "string", "pattern": f"^{ORDER_ID_RE.pattern}$", "example": "A-1001"},
        "order_amount": {"type": "string", "pattern": _amount_patterns()[2], "example": "350.00"},
    }


def _tighten(operation: dict[str, Any], components: dict[str, Any]) -> None:
    for parameter in operation.get("parameters", []):
        exact = _parameter_schemas().get((parameter.get("in"), parameter.get("name")))
        if exact is not None:
            parameter["schema"] = dict(exact)
    body = operation.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema", {})
    ref = body.get("$ref", "")
    target = components.get(ref.rsplit("/", 1)[-1], body) if ref else body
    body_properties = _body_properties()
    for name, prop in target.get("properties", {}).items():
        if name in body_properties:
            prop.update(body_properties[name])
        elif name == "currency":
            prop.update({"type": "string", "enum": sorted(MINOR_UNITS)})
    if target.get("properties") and "order_id" in target["properties"]:
        target["required"] = sorted(set(target.get("required", [])) | {"order_id"})
    if {"currency", "order_amount"} <= set(target.get("properties", {})):
        # How many decimals an amount may have depends on its currency (JPY none, CNY two).
        by_places: dict[int, list[str]] = {}
        for currency, places in MINOR_UNITS.items():
            by_places.setdefault(places, []).append(currency)
        target["oneOf"] = [
            {"properties": {"currency": {"enum": sorted(currencies)},
                            "order_amount": {"pattern": _amount_patterns()[places]}}}
            for places, currencies in sorted(by_places.items())
        ]



def schema_postprocess(result: dict[str, Any], generator: Any, request: Any, public: bool) -> dict[str, Any]:
    """Add the claim's operation, and give every operation's inputs their exact patterns."""
    components = result.setdefault("components", {}).setdefault("schemas", {})
    result.setdefault("paths", {})["/api/v1/campaigns/{campaign_id}/claim"] = {"post": CLAIM_OPERATION}
    for path_item in result["paths"].values():
        for operation in path_item.values():
            if isinstance(operation, dict) and "responses" in operation:
                _tighten(operation, components)
    return result
