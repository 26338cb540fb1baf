"""The test tree's own layout (issue 31 item 6): no module under tests/ imports a test
module, however late. What tests share lives in modules that are not tests
(tests/factories.py, tests/privacy/harness.py, tests/probes.py, …) or in conftest.py's
fixtures, so a test module can move or be renamed alone."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def _module_name(path: Path) -> str:
    return ".".join(path.relative_to(TESTS.parent).with_suffix("").parts)


def _imported(path: Path) -> set[str]:
    """Every module ``path`` imports anywhere in its text (``from a import b``: a.b too,
    b may be a module)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            names |= {f"{node.module}.{alias.name}" for alias in node.names}
    return names


def _is_test_module(name: str) -> bool:
    return name.startswith("tests.") and name.rsplit(".", 1)[-1].startswith("test_")


def test_no_module_of_the_tests_imports_a_test_module():
    modules = {_module_name(path): path for path in TESTS.rglob("*.py")}
    assert "tests.privacy.test_sensitivity_bruteforce" in modules
    found = {name: sorted(target for target in _imported(path)
                          if _is_test_module(target) and target in modules)
             for name, path in modules.items()}
    assert {name: targets for name, targets in found.items() if targets} == {}


def test_the_check_sees_every_form_of_import(tmp_path):
    """``import tests.test_a``, ``from tests.test_a import x``, ``from tests import
    test_a`` and the same inside a function all count."""
    sample = tmp_path / "sample.py"
    sample.write_text("import tests.test_a\nfrom tests.privacy.test_b import x\n"
                      "def f():\n    from tests import test_c\n")
    assert {name for name in _imported(sample) if _is_test_module(name)} == {
        "tests.test_a", "tests.privacy.test_b", "tests.test_c"}
