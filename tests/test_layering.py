"""The house's shape, computed from the source (imports inside functions count too): no import cycle between
the project's modules, and imports that run one way only (docs/design.md, The shape):

    config -> orders -> coupons -> campaigns -> webhooks -> core -> webserver

config/ is wiring: nothing imports it. core/ imports no app; webserver/ imports neither Django nor anything
of the project. An app's admin, API, console and command modules sit on top of the house and may read any
app; its models, services, selectors, Lua wrappers and tasks import nothing of the apps above it, and no
service imports a task (it sends the task by name).
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("config", "core", "webserver", "storefronts", "webhooks", "campaigns", "coupons", "orders", "grants",
            "storefront", "devstack")
APPS = ("storefronts", "webhooks", "campaigns", "coupons", "orders", "grants", "storefront")
# An app may import apps of a lower rank. webhooks (the outbox and its delivery) sits under every app that writes
# events: campaigns, coupons and orders write its rows in their own transactions.
RANK = {"core": 0, "webhooks": 0.5, "campaigns": 1, "storefronts": 1.5, "coupons": 2, "orders": 3, "grants": 4}
ON_TOP = ("admin", "apis", "console", "management", "door", "schema", "charts")  # may read any app


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_modules() -> dict[str, Path]:
    return {module_name(path): path for package in PACKAGES for path in (ROOT / package).rglob("*.py")
            if "migrations" not in path.parts}


def imports() -> dict[str, set[str]]:
    """Each project module -> the project modules it imports (anywhere in it), and the outside packages."""
    modules = project_modules()

    def resolve(name: str) -> str:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name

    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        found: set[str] = set()
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found.update(resolve(alias.name) or f"!{alias.name}" for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    found.add(resolve(full) if full in modules else resolve(base) or f"!{base}")
        found.discard(name)
        graph[name] = found
    return graph


GRAPH = imports()


def top(name: str) -> str:
    return name.split(".")[0]


def test_the_scan_sees_the_imports_it_should() -> None:
    assert "orders.apis" in GRAPH["orders.door"] and "core.http" in GRAPH["orders.door"]
    assert "!django" in GRAPH["core.web"] or "!django.conf" in GRAPH["core.http"]
    assert "orders.drain" in GRAPH["orders.tasks"]


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in graph.get(node, ()):
            if other not in graph:
                continue
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycle_between_project_modules() -> None:
    assert cycles(GRAPH) == []


def test_a_cycle_would_be_found() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_nothing_but_config_imports_config() -> None:
    wrong = {name: sorted(i for i in found if top(i) == "config")
             for name, found in GRAPH.items() if top(name) != "config"}
    assert {name: found for name, found in wrong.items() if found} == {}


def test_core_imports_no_app() -> None:
    wrong = {name: sorted(i for i in found if top(i) in APPS) for name, found in GRAPH.items() if top(name) == "core"}
    assert {name: found for name, found in wrong.items() if found} == {}


def test_the_web_server_imports_neither_django_nor_the_project() -> None:
    wrong = {name: sorted(i for i in found if top(i) != "webserver" and (
        not i.startswith("!") or i.startswith(("!django", "!rest_framework"))))
        for name, found in GRAPH.items() if top(name) == "webserver"}
    assert {name: found for name, found in wrong.items() if found} == {}


@pytest.mark.parametrize("app", ["storefronts", "webhooks", "campaigns", "coupons", "orders"])
def test_the_lower_apps_import_nothing_of_the_apps_above_them(app) -> None:
    wrong = {}
    for name, found in GRAPH.items():
        if top(name) != app or any(part in ON_TOP for part in name.split(".")[1:]):
            continue
        above = sorted(i for i in found if RANK.get(top(i), -1) > RANK[app])
        if above:
            wrong[name] = above
    assert wrong == {}


def test_no_service_imports_a_task() -> None:
    wrong = {name: sorted(i for i in found if i.endswith(".tasks"))
             for name, found in GRAPH.items() if top(name) in APPS and not name.endswith(".tasks")
             and not any(part in ON_TOP for part in name.split(".")[1:])}
    assert {name: found for name, found in wrong.items() if found} == {}
