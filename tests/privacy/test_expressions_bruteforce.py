"""Aggregates over expressions (proxy/analyze/expressions.py), by brute force.

1. Bounds through each operator: for every combination of raw values — inside the
   declared domains, at their ends, outside them, NULL, NaN, ±inf, overflow-sized — the
   expression of the normalised columns (what the backend computes) lies inside the
   derived domain, and for expressions that read each column once the domain is tight.
2. The backend computes exactly that: DuckDB evaluates the pushed-down value of every
   expression over all the combinations and agrees with the Python reference
   (tests/test_expressions.py does the same on PostgreSQL).
3. The sensitivities of SPEC §5.2 hold for the expression's value: neighbours modify a
   record's columns (or move it in or out of scope) and the released statistic never
   moves by more than the sensitivity computed with the derived domain.
"""

from __future__ import annotations

import itertools
import math
import random
from fractions import Fraction

import duckdb
import pytest

from proxy.analyze import analyze, parse_statements
from proxy.privacy.sensitivity import (
    SUM_REFS,
    count_sensitivity,
    local_sensitivity_of_max,
    local_sensitivity_of_min,
    local_sensitivity_of_percentile,
    local_sensitivity_of_winsorized_sum,
    max_refs,
    min_refs,
    percentile_refs,
    winsorized_sum,
)
from proxy.pushdown.scope import needed_value
from proxy.rules import parse_rules
from proxy.settings import Settings
from proxy.statistics import ColumnNeeds, normalise
from proxy.vocabulary import DerivedColumn
from tests.privacy.reference import order_values

RULES = parse_rules("""
[tables.t]
[tables.t.columns]
x = { type = "float", domain = [0, 10] }
y = { type = "int", domain = [-5, 5] }
w = { type = "float" }
""")
COLUMNS = RULES.tables["t"].columns
NAN, INF = float("nan"), float("inf")
X = [0.0, 2.5, 5.0, 7.5, 10.0, 12.0, -1.0, NAN, INF, -INF, 1e308, None]
Y = [-5, -1, 0, 2, 5, 9, -7, None]
W = [-1e20, -3.0, 0.0, 4.5, 1e20, NAN, INF, None]


def _value(raw, name):
    column = COLUMNS[name]
    return normalise(raw, column.lower, column.upper)


def _gt(raw, limit) -> bool:
    """``col > limit`` as both engines evaluate it on a raw value: NaN above every number."""
    if raw is None:
        return False
    return True if isinstance(raw, float) and math.isnan(raw) else raw > limit


def _arith(function, *values):
    return None if any(v is None for v in values) else function(*values)


def _least(*values):
    present = [v for v in values if v is not None]
    return min(present) if present else None


def _greatest(*values):
    present = [v for v in values if v is not None]
    return max(present) if present else None


def _coalesce(*values):
    return next((v for v in values if v is not None), None)


def _trunc(v):
    return float(math.trunc(v))


# SQL, reference on (normalised x, y, w, raw x, raw y), reads each column once (tight)
EXPRESSIONS = [
    ("x + y", lambda x, y, w, rx, ry: _arith(lambda a, b: a + b, x, y), True),
    ("x - 2 * y", lambda x, y, w, rx, ry: _arith(lambda a, b: a - 2 * b, x, y), True),
    ("x * y", lambda x, y, w, rx, ry: _arith(lambda a, b: a * b, x, y), True),
    ("-x", lambda x, y, w, rx, ry: _arith(lambda a: -a, x), True),
    ("x / 4", lambda x, y, w, rx, ry: _arith(lambda a: a / 4, x), True),
    ("y / 2", lambda x, y, w, rx, ry: _arith(lambda a: _trunc(a / 2), y), True),
    ("x / -0.5", lambda x, y, w, rx, ry: _arith(lambda a: a / -0.5, x), True),
    ("abs(y)", lambda x, y, w, rx, ry: _arith(abs, y), True),
    ("abs(x - 5)", lambda x, y, w, rx, ry: _arith(lambda a: abs(a - 5), x), True),
    ("least(x, y)", lambda x, y, w, rx, ry: _least(x, y), True),
    ("greatest(x, 3)", lambda x, y, w, rx, ry: _greatest(x, 3.0), True),
    ("coalesce(x, y, 0)", lambda x, y, w, rx, ry: _coalesce(x, y, 0.0), True),
    ("CASE WHEN y > 0 THEN x ELSE y END",
     lambda x, y, w, rx, ry: x if _gt(ry, 0) else y, True),
    ("CASE WHEN x > 5 THEN 1 END", lambda x, y, w, rx, ry: 1.0 if _gt(rx, 5) else None, True),
    ("CAST(x AS int)", lambda x, y, w, rx, ry: _arith(lambda a: float(round(a)), x), True),
    ("x::double precision / 3", lambda x, y, w, rx, ry: _arith(lambda a: a / 3, x), True),
    ("floor(x / 3)", lambda x, y, w, rx, ry: _arith(lambda a: float(math.floor(a / 3)), x), True),
    ("ceil(x)", lambda x, y, w, rx, ry: _arith(lambda a: float(math.ceil(a)), x), True),
    ("round(x / 4)", lambda x, y, w, rx, ry: _arith(lambda a: float(round(a / 4)), x), False),
    ("sqrt(x)", lambda x, y, w, rx, ry: _arith(math.sqrt, x), True),
    ("ln(x + 1)", lambda x, y, w, rx, ry: _arith(lambda a: math.log(a + 1), x), True),
    ("y * y", lambda x, y, w, rx, ry: _arith(lambda a: a * a, y), False),
    ("(x + y) * (x - y)", lambda x, y, w, rx, ry: _arith(lambda a, b: (a + b) * (a - b), x, y),
     False),
    ("x * w", lambda x, y, w, rx, ry: _arith(lambda a, b: a * b, x, w), False),
    ("w / 1000 + 1", lambda x, y, w, rx, ry: _arith(lambda a: a / 1000 + 1, w), False),
]
# The engines round halves differently (PostgreSQL's rint: to even; DuckDB: away from
# zero); both stay within floor..ceil, which is what the derived domain assumes.
ROUNDING = {"CAST(x AS int)", "round(x / 4)"}


def derived_column(sql: str) -> DerivedColumn:
    plan = analyze(parse_statements(f"SELECT COUNT({sql}) FROM t")[0], RULES, Settings())
    column = plan.table.columns[plan.aggregates[0].column]
    assert isinstance(column, DerivedColumn)
    return column


def combinations():
    return itertools.product(X, Y, W)


def reference(function, rx, ry, rw):
    return function(_value(rx, "x"), _value(ry, "y"), _value(rw, "w"), rx, ry)


@pytest.mark.parametrize("sql,function,tight", EXPRESSIONS, ids=[e[0] for e in EXPRESSIONS])
def test_bounds_hold_through_each_operator(sql, function, tight):
    column = derived_column(sql)
    seen = [v for v in (reference(function, *raw) for raw in combinations()) if v is not None]
    assert seen
    lower = -math.inf if column.lower is None else column.lower
    upper = math.inf if column.upper is None else column.upper
    assert all(lower <= v <= upper for v in seen), (sql, column.lower, column.upper,
                                                    min(seen), max(seen))
    if tight:
        assert (min(seen), max(seen)) == (column.lower, column.upper), (sql, column)


def test_derived_types_and_domains():
    """Integer by integer stays integral (PostgreSQL's division truncates); a column
    without a declared side leaves that side undeclared."""
    assert derived_column("y / 2").type == "int"
    assert derived_column("x / 4").type == "float"
    assert derived_column("CAST(x AS int)").type == "int"
    assert (derived_column("x * y").lower, derived_column("x * y").upper) == (-50, 50)
    assert (derived_column("x * w").lower, derived_column("x * w").upper) == (None, None)
    assert (derived_column("abs(w)").lower, derived_column("abs(w)").upper) == (0, None)
    # a quoted number, as an untyped parameter's value arrives, is a number
    assert (derived_column("x / '4'").lower, derived_column("x / '4'").upper) == (0, 2.5)


@pytest.fixture(scope="module")
def combos_in_duckdb():
    con = duckdb.connect()
    con.execute("CREATE TABLE t (x DOUBLE, y INTEGER, w DOUBLE)")
    con.executemany("INSERT INTO t VALUES (?, ?, ?)", list(combinations()))
    yield con
    con.close()


def backend_values(execute, sql: str, dialect: str) -> tuple[DerivedColumn, list]:
    """The pushed-down value of ``sql`` (as every statistic reads it) for each row of
    ``t``, in insertion order, with the raw columns."""
    column = derived_column(sql)
    need = ColumnNeeds(column.name, lower=column.lower, upper=column.upper)
    table = RULES.tables["t"]
    table = type(table)(**{**table.__dict__, "columns": {**table.columns, column.name: column}})
    value = needed_value(table, need).sql(dialect=dialect)
    return column, execute(f"SELECT x, y, w, {value} FROM t")


def agrees(sql, function, rows, column):
    for rx, ry, rw, got in rows:
        expected = reference(function, rx, ry, rw)
        expected = normalise(expected, column.lower, column.upper)
        if expected is None or got is None:
            assert expected is None and got is None, (sql, rx, ry, rw, expected, got)
        elif sql in ROUNDING:
            assert abs(float(got) - expected) <= 1, (sql, rx, ry, rw, expected, got)
        else:
            assert float(got) == pytest.approx(expected, rel=1e-12, abs=1e-12), (
                sql, rx, ry, rw, expected, got)


@pytest.mark.parametrize("sql,function,tight", EXPRESSIONS, ids=[e[0] for e in EXPRESSIONS])
def test_duckdb_computes_the_reference(combos_in_duckdb, sql, function, tight):
    column, rows = backend_values(lambda q: combos_in_duckdb.execute(q).fetchall(), sql,
                                  "duckdb")
    assert len(rows) == len(X) * len(Y) * len(W)
    agrees(sql, function, rows, column)


# --- 3. sensitivities of aggregates over expressions -------------------------------------

SMALL_X = [0.0, 2.5, 10.0, NAN, INF]
SMALL_Y = [-5, 0, 3, None]


def _datasets(seed: int, count: int, max_rows: int):
    rng = random.Random(seed)
    for _ in range(count):
        yield [(rng.choice(X), rng.choice(Y), rng.random() < 0.75)
               for _ in range(rng.randint(0, max_rows))]


def _neighbours(records):
    options = [(x, y, s) for x in SMALL_X for y in SMALL_Y for s in (True, False)]
    for index in range(len(records)):
        for option in options:
            yield records[:index] + [option] + records[index + 1:]


def _scope(records, function, column) -> list[float]:
    values = (normalise(reference(function, rx, ry, 0.0), column.lower, column.upper)
              for rx, ry, in_scope in records if in_scope)
    return sorted(v for v in values if v is not None)


def _statistic(kind: str, values: list[float], lower: float, upper: float):
    """(answer, LS) as the release computes them from the scope's statistics."""
    n = len(values)
    if kind == "sum":
        return local_sensitivity_of_winsorized_sum(n, sum(values), order_values(values, SUM_REFS),
                                                   lower, upper)
    if kind == "max":
        return local_sensitivity_of_max(order_values(values, max_refs(1, True)), 1, lower, upper)
    if kind == "min":
        return local_sensitivity_of_min(order_values(values, min_refs(1, True)), 1, lower, upper)
    if kind == "median":
        half = Fraction(1, 2)
        return local_sensitivity_of_percentile(n, order_values(values, percentile_refs(half, 1)),
                                               half, 1, lower, upper)
    return n, count_sensitivity(1)


def _answer(kind, values, lower, upper):
    if kind == "sum":
        return winsorized_sum(sum(values), values[:2], values[-2:], len(values))
    return _statistic(kind, values, lower, upper)[0]


AGGREGATED = [(sql, kind) for sql in ("x * y", "abs(x - 5)", "CASE WHEN y > 0 THEN x ELSE y END",
                                     "least(x, y)", "y / 2", "coalesce(x, y, 0)")
              for kind in ("sum", "max", "min", "median", "count")]
# COUNT(*) FILTER (WHERE x > 5) counts this expression's non-NULL values
AGGREGATED.append(("CASE WHEN x > 5 THEN 1 END", "count"))


@pytest.mark.parametrize("sql,kind", AGGREGATED)
def test_sensitivity_of_aggregates_over_expressions(sql, kind):
    """Row-level: no neighbour moves SUM (winsorized), MAX, MIN, MEDIAN or COUNT of the
    expression by more than its LS computed with the derived domain."""
    function = next(e[1] for e in EXPRESSIONS if e[0] == sql)
    column = derived_column(sql)
    lower, upper = column.lower, column.upper
    changed = 0
    for records in _datasets(41, 30, 5):
        values = _scope(records, function, column)
        answer, ls = _statistic(kind, values, lower, upper)
        for other in _neighbours(records):
            moved = abs(_answer(kind, _scope(other, function, column), lower, upper) - answer)
            assert moved <= ls + 1e-9, (sql, kind, records, other, moved, ls)
            changed += moved > 0
    assert changed
