"""The SQL the analysis tests run over: statements written for the literals that decide
a plan, those other test modules hold in their constants (read from their text, not
imported: module_constants), and the BI corpus (tests/bi); each with its rules. And a
session that checks statements without a backend."""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace

from proxy.analyze.shapes import ShapeCache
from proxy.backends.duckdb_backend import DuckDBBackend
from proxy.rules import load_rules, parse_rules
from proxy.session import Session
from proxy.settings import Settings
from tests.bicorpus import CORPUS, read_entry

TESTS = Path(__file__).resolve().parent
_UNKNOWN = object()


def _evaluated(node: ast.expr, names: dict):
    """``node``'s value from literals and ``names`` alone (no builtins), or _UNKNOWN."""
    try:
        return eval(compile(ast.Expression(node), "<constant>", "eval"),
                    {"__builtins__": {}}, names)
    except Exception:  # noqa: BLE001 -- it needs what a module's text does not hold
        return _UNKNOWN


def _known_parts(node: ast.expr, names: dict) -> list:
    """``node``'s value, or of a list or tuple the elements that can be evaluated."""
    value = _evaluated(node, names)
    if value is not _UNKNOWN:
        return [value]
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return [[part for element in node.elts for part in _known_parts(element, names)]]
    return []


def module_constants(path: Path) -> dict:
    """A module's top-level assignments, read from its text without importing it: each
    value evaluated from literals and the assignments before it; one that needs more
    (the module's imports or data, a call) kept as the parts of it that do not."""
    names: dict = {}
    constants: dict = {}
    for node in ast.parse(path.read_text()).body:
        if not isinstance(node, (ast.Assign, ast.AnnAssign)) or node.value is None:
            continue
        value = _evaluated(node.value, names)
        for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
            if isinstance(target, ast.Name):
                if value is not _UNKNOWN:
                    names[target.id] = value
                constants[target.id] = value if value is not _UNKNOWN else \
                    _known_parts(node.value, names)
    return constants


DEMO = load_rules(TESTS.parent / "rules" / "demo.toml")
SQL_SHAPES = module_constants(TESTS / "analyze" / "test_sql_shapes.py")
EXPRESSIONS = module_constants(TESTS / "analyze" / "test_expressions.py")
SHAPES_RULES = parse_rules(SQL_SHAPES["RULES_TEXT"])
EXPRESSIONS_RULES = parse_rules(EXPRESSIONS["RULES_TEXT"])

# Literals that decide a plan, or whose value decides a refusal (SHAPES_RULES).
WRITTEN = [
    "SELECT COUNT(*) FROM people WHERE age >= 30 AND age < 40",
    "SELECT COUNT(*) FROM people WHERE age BETWEEN -5 AND 7 OR income > 1.5e3",
    "SELECT MEDIAN(income) FROM people WHERE region IN ('north', 'south')",
    ("SELECT region, COUNT(*) FROM people WHERE income > 1000 GROUP BY region ORDER BY 2 "
    "DESC LIMIT 2"),
    "SELECT SUM(income) FROM people WHERE region = 'north' AND age > 30",
    "/*+ epsilon=0.5 */ SELECT AVG(income) FROM people WHERE age > 30",
    "SELECT PERCENTILE_DISC(0.9) WITHIN GROUP (ORDER BY income) FROM people WHERE age < 50",
    "SELECT QUANTILE_DISC(income, 0.25) FROM people WHERE age < 50",
    "SELECT COUNT(*) FROM people WHERE age > '30'",
    "SELECT COUNT(*) FROM people WHERE region > 3",
    "SELECT COUNT(*) FROM events WHERE at >= '2024-02-01' AND at < '2024-03-01 12:00:00'",
    "SELECT COUNT(*) FROM events WHERE at >= '2024-02-01T00:00:00Z'",
    "SELECT COUNT(*) FROM events WHERE at >= 'yesterday'",
    "SELECT COUNT(*) FROM events WHERE day BETWEEN '2024-02-01' AND '2024-02-29'",
    "SELECT COUNT(*) FROM events WHERE at > CAST('2024-02-01' AS DATE)",
    ("SELECT date_trunc('month', at), COUNT(*) FROM events WHERE at >= '2024-02-01' "
    "AND at < '2024-04-01' GROUP BY 1"),
    ("SELECT date_trunc('week', day) AS w, COUNT(*) FROM events WHERE day >= '2024-03-01' "
    "AND kind = 'a' GROUP BY w"),
    ("SELECT kind, COUNT(*) FROM events WHERE at BETWEEN '2024-02-01' AND '2024-03-01' "
    "GROUP BY kind"),
    "SELECT width_bucket(age, 0, 100, 5), COUNT(*) FROM people WHERE age > 10 GROUP BY 1",
    ("SELECT CASE WHEN age < 30 THEN 'young' ELSE 'old' END AS band, COUNT(*) FROM people "
    "WHERE age < 60 GROUP BY band"),
    "SELECT COUNT(*) FILTER (WHERE age > 30), SUM(income * 2) FROM people WHERE age < 80",
    "SELECT region, COUNT(*) FROM people WHERE age > 20 GROUP BY region HAVING COUNT(*) > 5",
    "SELECT COUNT(*) FROM people WHERE age > 30 LIMIT 1",
    "SELECT COUNT(*) FROM (SELECT * FROM people WHERE age > 30) AS p WHERE age < 50",
    "WITH p AS (SELECT * FROM people WHERE age > 30) SELECT COUNT(*) FROM p WHERE age > 40",
    "SELECT income FROM people WHERE person_id = 17",
    "SELECT COUNT(*) FROM people WHERE age > 30; SELECT MAX(age) FROM people WHERE age < 9",
    "SELECT COUNT(*) FROM people WHERE region = 'it''s'",
    # forms whose literal decides the plan since 2026-11-29: a bound on an aggregated
    # column narrows its domain, COALESCE's fallback against the value, a plain int key
    "SELECT SUM(income), AVG(income) FROM people WHERE income > 50000 AND age < 40",
    "SELECT COUNT(*) FROM people WHERE COALESCE(age, 5) > 3",  # > 12: another form
    ("SELECT COUNT(*) FROM people WHERE region IS DISTINCT FROM 'north' AND age IS NOT "
     "DISTINCT FROM 30"),
    "SELECT age, COUNT(*) FROM people WHERE age BETWEEN 20 AND 25 GROUP BY age",
    "SELECT COUNT(*) FROM events WHERE day > DATE '2024-03-01' - 5",
]


def _corpus(value) -> list[str]:
    """Every SQL statement a test module's tables hold (parametrize lists)."""
    if isinstance(value, str):
        head = value.lstrip().split(None, 1)[0].upper() if value.strip() else ""
        return [value] if head in ("SELECT", "WITH") else []
    if isinstance(value, (list, tuple)):
        return [sql for item in value for sql in _corpus(item)]
    return []


def _module_corpus(constants: dict) -> list[str]:
    return list(dict.fromkeys(sql for name, value in constants.items() if name.isupper()
                              for sql in _corpus(value)))


CORPORA = [  # (name, rules, statements, how many other literals each literal takes)
    ("written", SHAPES_RULES, WRITTEN, 3),
    ("test_sql_shapes", SHAPES_RULES, _module_corpus(SQL_SHAPES), 1),
    ("test_expressions", EXPRESSIONS_RULES, _module_corpus(EXPRESSIONS), 3),
    ("bi", DEMO, [read_entry(path).sql for path in sorted(CORPUS.glob("*.sql"))], 1),
]


def checking_session(rules, cache: ShapeCache | None = None,
                     settings: Settings | None = None, analyst: str = "zoe") -> Session:
    """A session that checks statements against ``rules`` (its shape cache ``cache``),
    without a backend: checking never reads data (it reads DuckDB's capabilities, a
    class attribute: what the backend can plan)."""
    engine = SimpleNamespace(rules=rules, shapes=cache or ShapeCache(),
                             backend=SimpleNamespace(capabilities=DuckDBBackend.capabilities))
    session = Session(engine, analyst)  # type: ignore[arg-type]
    session.settings = settings or Settings()
    return session
