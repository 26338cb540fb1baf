"""Aggregates over expressions (proxy/analyze/expressions.py), by brute force.

1. Bounds through each operator: for every combination of raw values — inside the
   declared domains, at their ends, outside them, NULL, NaN, ±inf, overflow-sized — the
   expression of the normalised columns (what the backend computes) lies inside the
   derived domain, and for expressions that read each column once the domain is tight.
2. The backend computes exactly that: DuckDB evaluates the pushed-down value of every
   expression over all the combinations and agrees with the Python reference
   (tests/analyze/test_expressions.py does the same on PostgreSQL).
3. The sensitivities of SPEC §5.2 hold for the expression's value: neighbours modify a
   record's columns (or move it in or out of scope) and the released statistic never
   moves by more than the sensitivity computed with the derived domain.
"""

from __future__ import annotations

import datetime as dt
import math
from fractions import Fraction

import duckdb
import pytest

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
from proxy.statistics import clamp_to_domain
from tests.factories import random_datasets, rows_of
from tests.privacy.expressions import (
    COLUMNS,
    EXPRESSIONS,
    INF,
    NAN,
    W,
    X,
    Y,
    agrees,
    backend_values,
    combinations,
    derived_column,
    reference,
)
from tests.privacy.harness import assert_sound, neighbours
from tests.privacy.reference import order_values


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
    """0..max_rows rows (x, y, in scope), one row a unit."""
    row = lambda rng, _: (rng.choice(X), rng.choice(Y), rng.random() < 0.75)
    return random_datasets(seed, count, rows_of(row), units=(0, max_rows))


def _neighbours(records):
    """Row level: one row set to any (x, y, in scope) of the small lists."""
    options = [(x, y, s) for x in SMALL_X for y in SMALL_Y for s in (True, False)]
    return neighbours(records, options, unit=None, make=lambda _, option: option)


def _scope(records, function, column) -> list[float]:
    values = (clamp_to_domain(reference(function, rx, ry, 0.0), column.lower, column.upper)
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
    outcomes = assert_sound(
        lambda records: _answer(kind, _scope(records, function, column), lower, upper),
        lambda records: _statistic(kind, _scope(records, function, column), lower, upper)[1],
        _datasets(41, 30, 5), _neighbours)
    assert any(o.worst > 0 for o in outcomes)


# --- fields of a time column inside aggregates (issue 33) ----------------------------------

_T = dt.datetime
# moments inside the domain, at its ends, beyond them (clamped to the nearer end), NULL
MOMENTS = [_T(2023, 1, 1), _T(2024, 12, 31, 23, 59, 59), _T(2023, 6, 4, 13, 30),
           _T(2024, 2, 29, 6, 0), _T(2022, 12, 31, 23, 0), _T(2031, 5, 5, 5, 5), None]
SMALL_MOMENTS = [_T(2023, 1, 1), _T(2024, 12, 31, 23, 59, 59), _T(2099, 1, 1), None]
FIELDED = {
    "EXTRACT(HOUR FROM at)": lambda x, m: float(m.hour),
    "x * EXTRACT(ISODOW FROM at)": lambda x, m: None if x is None else x * m.isoweekday(),
    "CASE WHEN EXTRACT(DOW FROM at) IN (0, 6) THEN x END": lambda x, m: x if (
        m.weekday() + 1) % 7 in (0, 6) else None,
}


def _moment_value(function, rx, moment):
    """The expression on the normalised x and the moment clamped to the domain (NULL:
    no value), as the backend computes it."""
    if moment is None:
        return None
    first, last = COLUMNS["at"].time_domain
    return function(clamp_to_domain(rx, COLUMNS["x"].lower, COLUMNS["x"].upper),
                    min(max(moment, first), last))


def _field_scope(records, function, column) -> list[float]:
    values = (clamp_to_domain(_moment_value(function, rx, moment), column.lower, column.upper)
              for rx, moment, in_scope in records if in_scope)
    return sorted(v for v in values if v is not None)


@pytest.mark.parametrize("sql", FIELDED)
def test_a_field_s_domain_is_its_range_over_the_declared_domain(sql):
    """The derived domain of an expression over an extracted field holds every value
    the backend can compute, whatever the moment (beyond the domain: clamped)."""
    column = derived_column(sql)
    seen = [v for x in X for m in MOMENTS
            if (v := _moment_value(FIELDED[sql], x, m)) is not None]
    assert all(column.lower <= v <= column.upper for v in seen), (sql, column)
    assert (derived_column("EXTRACT(HOUR FROM at)").lower,
            derived_column("EXTRACT(HOUR FROM at)").upper) == (0, 23)
    assert (derived_column("EXTRACT(YEAR FROM at)").lower,
            derived_column("EXTRACT(YEAR FROM at)").upper) == (2023, 2024)


@pytest.mark.parametrize("sql,kind", [(sql, kind) for sql in FIELDED
                                      for kind in ("sum", "max", "min", "median", "count")])
def test_sensitivity_of_aggregates_over_an_extracted_field(sql, kind):
    """Row-level: no neighbour (a record's x and moment set to any of the small lists,
    beyond the domain and NULL included, or moved in or out of scope) moves SUM
    (winsorized), MAX, MIN, MEDIAN or COUNT of the expression by more than its LS
    computed with the field's derived domain."""
    function, column = FIELDED[sql], derived_column(sql)
    lower, upper = column.lower, column.upper
    datasets = random_datasets(43, 30, rows_of(lambda rng, _: (
        rng.choice(X), rng.choice(MOMENTS), rng.random() < 0.75)), units=(0, 5))
    options = [(x, m, s) for x in SMALL_X for m in SMALL_MOMENTS for s in (True, False)]
    outcomes = assert_sound(
        lambda records: _answer(kind, _field_scope(records, function, column), lower, upper),
        lambda records: _statistic(kind, _field_scope(records, function, column), lower,
                                   upper)[1],
        datasets, lambda records: neighbours(records, options, unit=None,
                                             make=lambda _, option: option))
    assert any(o.worst > 0 for o in outcomes)
