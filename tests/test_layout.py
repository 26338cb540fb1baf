"""The module layout (issue 15 item 7, issue 31 item 1): data flows one way through SPEC
§4's stages, so no module imports, however late or only for type checking, a module that
imports it; and each stage imports only the stages below it:

    command line (cli, demo)
      -> wire (wire/, users, admin)
        -> session (session, postprocess, postbounds)
          -> engine (engine, answer_cache, publish/)
            -> analyze/ | pushdown/ | privacy/ | ledger   (siblings: none imports another)
              -> backends/
                -> vocabulary (vocabulary, rules, settings, statistics, errors, ...)
"""

from __future__ import annotations

import ast
from graphlib import CycleError, TopologicalSorter

from tests.conftest import ROOT

# stage -> (its rank, the modules and packages in it); a module imports its own stage's
# modules and those of lower ranks only
STAGES = {
    "command line": (6, ("proxy.cli", "proxy.demo", "proxy.owner", "proxy.console")),
    "wire": (5, ("proxy.wire", "proxy.users", "proxy.admin")),
    "session": (4, ("proxy.session", "proxy.postprocess", "proxy.postbounds")),
    "engine": (3, ("proxy.engine", "proxy.answer_cache", "proxy.unit_bounds", "proxy.publish")),
    "analyze": (2, ("proxy.analyze",)),
    "pushdown": (2, ("proxy.pushdown",)),
    "privacy": (2, ("proxy.privacy",)),
    "ledger": (2, ("proxy.ledger",)),
    "backends": (1, ("proxy.backends",)),
    "vocabulary": (0, ("proxy", "proxy.vocabulary", "proxy.rules", "proxy.settings",
                       "proxy.setting_scopes", "proxy.statistics", "proxy.errors", "proxy.loss",
                       "proxy.accounting",
                       "proxy.interrupts",
                       "proxy.guards", "proxy.pgtypes", "proxy.result_types", "proxy.jsontags",
                       "proxy.timing",
                       "proxy.progress", "proxy.passwords", "proxy.trees", "proxy.zones")),
}
# the lazy imports allowed between proxy modules: the command line's (a fast --help);
# the optional backends import their third-party drivers (pyspark) late, which this
# graph does not hold
LAZY = ("proxy.cli",)


def stage_of(module: str) -> str:
    found = [(len(prefix), stage) for stage, (_, members) in STAGES.items()
             for prefix in members if module == prefix or module.startswith(prefix + ".")
             and prefix != "proxy"]
    assert found, f"{module} belongs to no stage: add it to STAGES"
    return max(found)[1]


def _imports(lazy_only: bool = False) -> dict[str, set[str]]:
    """proxy.* module -> the proxy.* modules it imports anywhere in its text (only those
    imported inside a function or an ``if`` when ``lazy_only``)."""
    modules = {}
    for path in (ROOT / "proxy").rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if lazy_only and node in tree.body:
                continue
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


def test_each_stage_imports_only_the_stages_below_it():
    graph = _imports()
    upward = sorted(f"{name} ({stage_of(name)}) imports {target} ({stage_of(target)})"
                    for name, targets in graph.items() for target in targets
                    if stage_of(target) != stage_of(name)
                    and STAGES[stage_of(target)][0] >= STAGES[stage_of(name)][0])
    assert not upward, "\n".join(upward)


def test_no_late_or_type_checking_imports_between_modules():
    """An import inside a function or under ``if TYPE_CHECKING`` hides a dependency the
    stage order would refuse; only the command line and the optional backends wait."""
    late = sorted(f"{name} imports {target} late" for name, targets in
                  _imports(lazy_only=True).items() for target in targets
                  if not name.startswith(LAZY))
    assert not late, "\n".join(late)


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


def test_every_aggregate_kind_has_one_row_in_each_table():
    """A new aggregate is one row of ``vocabulary.KINDS`` (what analysis and the session
    need) and one of ``noisy_answers.RELEASES`` (how it is released) plus its pushdown
    and its brute-force test; VALUE, one unit's value, is released only by knowledge
    refinement."""
    from proxy.privacy.noisy_answers import RELEASES
    from proxy.vocabulary import KINDS, Kind

    assert set(KINDS) == set(Kind)
    assert set(RELEASES) == set(Kind) - {Kind.VALUE}
