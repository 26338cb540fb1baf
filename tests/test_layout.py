"""The module layout (issue 15 item 7): data flows one way through SPEC §4's stages, so
no module imports, however late or only for type checking, a module that imports it."""

from __future__ import annotations

import ast
from graphlib import CycleError, TopologicalSorter

from tests.conftest import ROOT


def _imports() -> dict[str, set[str]]:
    """proxy.* module -> the proxy.* modules it imports anywhere in its text."""
    modules = {}
    for path in (ROOT / "proxy").rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                targets = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules
                           else node.module for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            graph[name] |= {t for t in targets if t in modules and t != name}
    return graph


def test_no_module_imports_one_that_imports_it():
    graph = _imports()
    assert "proxy.wire.connection" in graph["proxy.wire.server"]
    try:
        tuple(TopologicalSorter(graph).static_order())
    except CycleError as cycle:
        raise AssertionError(f"import cycle: {' -> '.join(cycle.args[1])}") from None


def test_privacy_asks_for_data_and_reads_none_itself():
    """SPEC §4: mechanisms are pure; one that needs more of the data asks for it
    (proxy/privacy/requests.py) and the engine reads it. No module of privacy/ imports
    the pushdown or a backend, directly or through the modules it imports, and none
    takes a function that reads ranks (``proxy.statistics.Fetch``, the type the
    pushdown's windows have)."""
    graph = _imports()
    for name in (name for name in graph if name.startswith("proxy.privacy")):
        reached, frontier = set(), {name}
        while frontier:
            frontier = set().union(*(graph[module] for module in frontier)) - reached
            reached |= frontier
        below = sorted(m for m in reached if m.startswith(("proxy.pushdown", "proxy.backends")))
        assert not below, f"{name} imports {below}"
    for path in (ROOT / "proxy" / "privacy").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "proxy.statistics":
                assert "Fetch" not in {a.name for a in node.names}, path.name
