"""The documentation can't drift from the code: every environment variable the settings, the dev entry point,
tracing and the worker's metrics read is in the README's configuration table; every endpoint has a curl line;
every operation of the OpenAPI schema has a description, and every business code of the contract has an example
in it."""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from django.urls import URLPattern, URLResolver, get_resolver

from .conftest import ROOT

README = (ROOT / "README.md").read_text()
CONTRACT = ROOT.parent / "shared" / "CONTRACT.md"

# Files whose environment variables are the operator's to set. A variable read in them is in the README.
CONFIGURED_BY = [*sorted((ROOT / "config" / "settings").glob("*.py")), ROOT / "devstack" / "__init__.py",
                 ROOT / "core" / "tracing.py", ROOT / "orders" / "metrics.py"]
READS = re.compile(r"""(?:\benv|env_bool|env_int|env_float|environ\.get|getenv|environ\.setdefault)\(\s*"""
                   r"""["']([A-Z][A-Z0-9_]+)["']""")
NOT_OURS = {"TERM", "PATH"}  # the terminal's and the shell's


def read_variables() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path in CONFIGURED_BY:
        for name in READS.findall(path.read_text()):
            found.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    return {name: files for name, files in found.items() if name not in NOT_OURS}


def configuration_table() -> dict[str, str]:
    """`variable` cells of the README's "## Configuration" tables, with the default cell of each row."""
    section = README.split("\n## Configuration", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, str] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and cells[0].startswith("`"):
            for name in re.findall(r"`([A-Z][A-Z0-9_]+)`", cells[0]):
                rows[name] = cells[1]
    return rows


def test_the_scan_finds_the_variables_it_should() -> None:
    found = read_variables()
    assert {"DATABASE_URL", "DJANGO_HTTPS", "COUPONRUSH_WEB_PORT", "COUPONS_TRACING",
            "COUPONRUSH_WORKER_METRICS_PORT", "DATABASE_STATEMENT_TIMEOUT_MS"} <= set(found)


def test_every_environment_variable_read_is_in_the_readme_configuration_table_with_a_default() -> None:
    table = configuration_table()

    missing = {name: sorted(files) for name, files in read_variables().items() if name not in table}

    assert missing == {}
    assert {name for name, default in table.items() if not default} == set()


def test_the_readme_has_a_curl_line_for_every_endpoint() -> None:
    def routes(patterns: list[Any], prefix: str = "") -> list[str]:
        out = []
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                continue  # the admin: the operator's guide shows it
            assert isinstance(pattern, URLPattern)
            out.append(prefix + str(pattern.pattern))
        return out

    curl_lines = [line for line in README.replace("\\\n", " ").splitlines() if "curl " in line]
    missing = []
    for route in routes(get_resolver().url_patterns):
        # campaigns/<str:campaign_id>/claim -> campaigns/[^ ]+/claim
        shape = re.sub(r"<[^>]+>", "[^/ ?\"']+", route.rstrip("/"))
        if not any(re.search(rf"\$B/{shape}/?(?:[\s\"'?;]|$)", line) for line in curl_lines):
            missing.append(route or "/")
    assert missing == []


# --- the OpenAPI schema ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def schema(django_db_blocker: Any) -> dict[str, Any]:
    from drf_spectacular.generators import SchemaGenerator

    with django_db_blocker.unblock():
        generated = SchemaGenerator().get_schema(request=None, public=True)
    return json.loads(json.dumps(generated, default=str))


def operations(schema: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(method, path, op) for path, item in schema["paths"].items() for method, op in item.items()
            if isinstance(op, dict) and "responses" in op]


def examples(schema: dict[str, Any]) -> list[dict[str, Any]]:
    """Every example body of every answer in the schema."""
    found = []
    for _, _, op in operations(schema):
        for response in op["responses"].values():
            for media in response.get("content", {}).values():
                if isinstance(media.get("example"), dict):
                    found.append(media["example"])
                for example in media.get("examples", {}).values():
                    if isinstance(example.get("value"), dict):
                        found.append(example["value"])
    return found


def contract_codes() -> list[tuple[int, str]]:
    """(code, status) of the contract's business code table, one row per status slug."""
    if not CONTRACT.exists():
        pytest.skip(f"{CONTRACT} is not beside the project")
    section = CONTRACT.read_text().split("Business codes", 1)[1].split("\n## ", 1)[0]
    codes = []
    for line in section.splitlines():
        match = re.match(r"\|\s*(\d+)\s*\|(.*?)\|", line)
        if match:
            codes += [(int(match.group(1)), slug) for slug in re.findall(r"`([a-z_]+)`", match.group(2))]
    return codes


def test_every_operation_has_a_description_and_a_summary(schema) -> None:
    bare = [f"{method.upper()} {path}" for method, path, op in operations(schema)
            if len(op.get("description", "")) < 40 or not op.get("summary")]
    assert len(operations(schema)) >= 10 and bare == []


def answered_codes() -> list[tuple[int, str]]:
    """The contract's business codes that the service answers with (core.errors.Code): the contract also names
    19-21 for carts, which are not built yet."""
    from core.errors import Code

    answered = {code.name.lower() for code in Code}
    return [(code, slug) for code, slug in contract_codes() if code == Code.DONE or slug in answered]


def test_every_business_code_the_service_answers_with_is_the_contracts() -> None:
    from core.errors import Code

    section = CONTRACT.read_text().split("Business codes", 1)[1].split("\n## ", 1)[0]
    slugs = {slug for line in section.splitlines() if re.match(r"\|\s*[0-9][0-9 /]*\|", line)
             for slug in re.findall(r"`([a-z_]+)`", line)}
    assert "not_held" in slugs and "claimed" in slugs
    assert [code for code in Code if code != Code.DONE and code.name.lower() not in slugs] == []


def test_every_business_code_the_service_answers_with_has_an_example_in_the_schema(schema) -> None:
    shown = {(body.get("code"), body.get("status")) for body in examples(schema)}
    codes = answered_codes()

    assert len(codes) >= 16
    assert [pair for pair in codes if pair not in shown] == []


def test_every_error_status_of_the_contract_has_an_example_in_the_schema(schema) -> None:
    shown = {(body.get("code"), body.get("status")) for body in examples(schema)}
    errors = {(400, "invalid_request"), (401, "unauthenticated"), (404, "not_found"), (409, "idempotency_in_flight"),
              (413, "payload_too_large"), (415, "unsupported_media_type"), (422, "idempotency_mismatch"),
              (429, "rate_limited"), (503, "unavailable")}
    assert errors - shown == set()


def test_the_readme_documents_every_business_code(schema) -> None:
    table = README.split("| code | status |", 1)[1].split("\n\n", 1)[0]
    assert [pair for pair in answered_codes() if f"`{pair[1]}`" not in table] == []


def test_docs_images_the_readme_links_exist() -> None:
    for target in re.findall(r"\]\((docs/[^)]+)\)", README):
        assert Path(ROOT / target).exists(), target
