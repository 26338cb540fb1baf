"""Expressions over columns, in Python: the reference for the brute-force tests of
aggregates over expressions (proxy/analyze/expressions.py), checked against the
backend's SQL of the same expressions on DuckDB (tests/privacy/
test_expressions_bruteforce.py) and PostgreSQL (tests/analyze/test_expressions.py).

Each expression's reference reads the normalised columns (``proxy.statistics.
normalise``: NULL and NaN are no value, ±inf and values beyond the declared domain are
clamped to it) and, where SQL compares them, the raw ones."""

from __future__ import annotations

import itertools
import math

import pytest

from proxy.analyze import analyze, parse_statements
from proxy.pushdown.scope import needed_value
from proxy.rules import parse_rules
from proxy.settings import Settings
from proxy.statistics import ColumnNeeds, clamp_to_domain
from proxy.vocabulary import DerivedColumn

RULES = parse_rules("""
[tables.t]
[tables.t.columns]
x = { type = "float", domain = [0, 10] }
y = { type = "int", domain = [-5, 5] }
w = { type = "float" }
at = { type = "timestamp", domain = [2023-01-01T00:00:00, 2024-12-31T23:59:59] }
""")
COLUMNS = RULES.tables["t"].columns
NAN, INF = float("nan"), float("inf")
X = [0.0, 2.5, 5.0, 7.5, 10.0, 12.0, -1.0, NAN, INF, -INF, 1e308, None]
Y = [-5, -1, 0, 2, 5, 9, -7, None]
W = [-1e20, -3.0, 0.0, 4.5, 1e20, NAN, INF, None]


def _value(raw, name):
    column = COLUMNS[name]
    return clamp_to_domain(raw, column.lower, column.upper)


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
    ("log(x + 1)", lambda x, y, w, rx, ry: _arith(lambda a: math.log(a + 1) / math.log(10), x),
     True),
    ("log(0.5, x + 1)", lambda x, y, w, rx, ry: _arith(
        lambda a: math.log(a + 1) / math.log(0.5), x), True),
    ("power(y, '2')", lambda x, y, w, rx, ry: _arith(lambda a: a * a, y), True),
    ("(x - 5) ^ 2", lambda x, y, w, rx, ry: _arith(lambda a: (a - 5) * (a - 5), x), True),
    ("exp(y)", lambda x, y, w, rx, ry: _arith(math.exp, y), True),
    ("y * y", lambda x, y, w, rx, ry: _arith(lambda a: a * a, y), False),
    ("(x + y) * (x - y)", lambda x, y, w, rx, ry: _arith(lambda a, b: (a + b) * (a - b), x, y),
     False),
    ("x * w", lambda x, y, w, rx, ry: _arith(lambda a, b: a * b, x, w), False),
    ("w / 1000 + 1", lambda x, y, w, rx, ry: _arith(lambda a: a / 1000 + 1, w), False),
    # a divisor whose declared domain excludes 0 (issue 33)
    ("x / (y + 6)", lambda x, y, w, rx, ry: _arith(lambda a, b: a / (b + 6), x, y), True),
    ("y / (y - 6)", lambda x, y, w, rx, ry: _arith(lambda a: _trunc(a / (a - 6)), y), False),
    ("x / (0.5 + x)", lambda x, y, w, rx, ry: _arith(lambda a: a / (0.5 + a), x), False),
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
        expected = clamp_to_domain(expected, column.lower, column.upper)
        if expected is None or got is None:
            assert expected is None and got is None, (sql, rx, ry, rw, expected, got)
        elif sql in ROUNDING:
            assert abs(float(got) - expected) <= 1, (sql, rx, ry, rw, expected, got)
        else:
            assert float(got) == pytest.approx(expected, rel=1e-12, abs=1e-12), (
                sql, rx, ry, rw, expected, got)
