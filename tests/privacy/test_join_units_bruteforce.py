"""Brute-force neighbours of two protected tables joined on their privacy unit (issue
18, item 2): COUNT, SUM and MEDIAN over ``a JOIN b ON a.unit = b.unit`` (inner and
LEFT), with WHERE on columns of both tables and GROUP BY a column of either.

A unit's joined rows are its rows of a times its rows of b (LEFT: times at least one),
so one unit's change moves at most the largest such product, c, of joined rows in or
out of any scope (docs/privacy.md §3.10). Checked end to end: c and the statistics and
local sensitivities come from the real pushed-down SQL over DuckDB; the neighbours of
every unit (the NULL unit too) — its rows in both tables set to any values (NULL, NaN,
±inf, the domain bounds, ties; in and out of the WHERE and between groups), its rows
removed from a, from b or both, rows added to a unit of one table only, a new unit in
both — are enumerated with a Python reference of the join. For each neighbour the joined
rows that differ never exceed c; each group's largest change never exceeds its
sensitivity, and the groups one unit changes never exceed the share the noise divides ε
by. Under DP the clipped joined scope (pushed down) changes by at most the product of
the declared bounds whatever the neighbour's row counts.
"""

from __future__ import annotations

import itertools
import math
import random
from collections import Counter
from fractions import Fraction
from operator import itemgetter

import duckdb
import pytest

from proxy.analyze import analyze, parse_statements
from proxy.backends.duckdb_backend import DuckDBBackend
from proxy.privacy.noisy_answers import Calibration, _answer_and_sensitivity, column_needs
from proxy.privacy.sensitivity import count_sensitivity, groups_touched, winsorized_sum
from proxy.pushdown import compute_statistics
from proxy.pushdown.scope import plan_unit_bound_sql
from proxy.rules import parse_rules
from proxy.settings import Settings
from proxy.statistics import GroupStats
from tests.databases import refill
from tests.factories import random_datasets, rows_of
from tests.privacy.harness import (
    assert_sound,
    group_changes,
    neighbours,
    pushed_down_changes,
)
from tests.privacy.reference import normalise as normalise_value
from tests.privacy.reference import percentile

LOWER, UPPER = 0.0, 10.0
RULES = parse_rules(f"""
[defaults]
noise_scale = "local"  # raw iDP: the local sensitivities tested here
[tables.a]
privacy_unit = "unit"
max_rows_per_unit = 2
[tables.a.columns]
unit = {{ type = "int" }}
x    = {{ type = "float", domain = [{LOWER}, {UPPER}] }}
k    = {{ type = "text", keys = ["p", "q"] }}

[tables.b]
privacy_unit = "unit"
max_rows_per_unit = 1
[tables.b.columns]
unit = {{ type = "int" }}
y    = {{ type = "float", domain = [{LOWER}, {UPPER}] }}
g    = {{ type = "text", keys = ["p", "q"] }}
""")
NAN, INF = float("nan"), float("inf")  # one NaN object: equal to itself in row multisets
VALUES = [0.0, 2.5, 10.0, 2.5, NAN, INF, -INF, None, 1e308]
A_OPTIONS = [(0.0, "p"), (4.0, "q"), (10.0, "p"), (NAN, "q"), (None, "p"), (INF, "q")]
B_OPTIONS = [(0.0, "q"), (3.0, "p"), (10.0, None), (-INF, "p"), (None, "q"), (NAN, "p")]
TOLERANCE = 1e-9


def _lt(value, bound) -> bool:
    """``value < bound`` in SQL: NULL is unknown, NaN above every number."""
    return value is not None and not math.isnan(value) and value < bound


def _gt(value, bound) -> bool:
    return value is not None and (math.isnan(value) or value > bound)


# name -> (SQL, LEFT, WHERE(a row, b row or None), group key (None: no group), the
# SUM's and the MEDIAN's column (of the joined row) and their names in the plan)
QUERIES = {
    "inner": (("SELECT b.g, COUNT(*), SUM(a.x), MEDIAN(b.y) FROM a JOIN b ON a.unit = b.unit "
               "WHERE a.x < 5 OR b.y > 2 GROUP BY b.g"), False,
              lambda ra, rb: _lt(ra[1], 5) or _gt(rb[1], 2),
              lambda ra, rb: (rb[2],) if rb[2] in ("p", "q") else None,
              lambda ra, rb: ra[1], lambda ra, rb: rb[1], "x", "b.y"),
    "inner, ungrouped": (("SELECT COUNT(*), SUM(b.y), MEDIAN(x) FROM a JOIN b "
                          "ON b.unit = a.unit WHERE b.g = 'p'"), False,
                         lambda ra, rb: rb[2] == "p", lambda ra, rb: (),
                         lambda ra, rb: rb[1], lambda ra, rb: ra[1], "b.y", "x"),
    "left": (("SELECT COUNT(*), SUM(b.y), MEDIAN(a.x) FROM a LEFT JOIN b ON a.unit = b.unit "
              "WHERE b.y IS NULL OR b.y < 5"), True,
             lambda ra, rb: rb is None or rb[1] is None or _lt(rb[1], 5), lambda ra, rb: (),
             lambda ra, rb: rb[1] if rb else None, lambda ra, rb: ra[1], "b.y", "x"),
    "left, grouped": (("SELECT a.k, COUNT(*), SUM(a.x), MEDIAN(b.y) FROM a LEFT JOIN b "
                       "ON a.unit = b.unit GROUP BY a.k"), True, lambda ra, rb: True,
                      lambda ra, rb: (ra[2],) if ra[2] in ("p", "q") else None,
                      lambda ra, rb: ra[1], lambda ra, rb: rb[1] if rb else None, "x", "b.y"),
}


def _joined(a_rows, b_rows, left: bool) -> list:
    """The join's rows: each row of a with every row of b of its (non-NULL) unit; LEFT:
    alone (None) when there is none."""
    by_unit: dict = {}
    for row in b_rows:
        if row[0] is not None:
            by_unit.setdefault(row[0], []).append(row)
    out = []
    for row in a_rows:
        matches = by_unit.get(row[0], []) if row[0] is not None else []
        out += [(row, other) for other in matches] or ([(row, None)] if left else [])
    return out


def _largest(a_rows, b_rows, left: bool) -> int:
    """c: the most joined rows one unit owns (the NULL unit: its rows of a, LEFT)."""
    owned = Counter(row[0] for row, _ in _joined(a_rows, b_rows, left))
    return max(owned.values(), default=0)


def _answers(a_rows, b_rows, query: str, keys, shift: int) -> dict:
    """Each group's (COUNT(*), SUM as released, MEDIAN) before noise: the sum clamped
    (winsorized when s = 1), the median of the normalised values (the domain midpoint
    when there are none)."""
    _, left, where, group, summed, ranked, _, _ = QUERIES[query]
    scopes: dict = {}
    for ra, rb in _joined(a_rows, b_rows, left):
        if not where(ra, rb):
            continue
        key = group(ra, rb)
        if key is None:
            continue
        scope = scopes.setdefault(key, [0, [], []])
        scope[0] += 1
        for values, value in ((scope[1], summed(ra, rb)), (scope[2], ranked(ra, rb))):
            value = normalise_value(value, LOWER, UPPER) if value is not None else None
            if value is not None:
                values.append(value)
    out = {}
    for key in keys:
        count, sums, ranks = scopes.get(key, (0, [], []))
        sums, ranks = sorted(sums), sorted(ranks)
        total = (winsorized_sum(sum(sums), sums[:2], sums[-2:], len(sums)) if shift == 1
                 else sum(sums))
        out[key] = (count, total, percentile(ranks, Fraction(1, 2), LOWER, UPPER))
    return out


def _table_rows(most: int):
    """A unit's 0..``most`` rows (unit, value, key) of one table."""
    row = lambda rng, unit: (unit, rng.choice(VALUES), rng.choice(["p", "q", None]))
    return rows_of(row, (0, most))


def _datasets(seed: int, count: int, units: int, rows_per_unit: int):
    """Pairs of tables: each unit owns 0..rows_per_unit rows in each (so some own rows
    in one table only); sometimes rows of the NULL unit."""
    table_rows = _table_rows(rows_per_unit)

    def unit_rows(rng, unit):  # its rows of a, then of b
        return [("a", *row) for row in table_rows(rng, unit)] + \
            [("b", *row) for row in table_rows(rng, unit)]

    for rows in random_datasets(seed, count, unit_rows, units=(1, units), null_unit=0.3):
        yield _split(rows)


def _split(tagged) -> tuple[list, list]:
    """Rows tagged with their table -> (rows of a, rows of b)."""
    return ([row[1:] for row in tagged if row[0] == "a"],
            [row[1:] for row in tagged if row[0] == "b"])


def _with(rows, unit, replaced) -> list:
    return [row for row in rows if row[0] != unit] + list(replaced)


def _neighbours(a_rows, b_rows, shift: int):
    """Every neighbour of one unit: its rows in both tables set to any options (their
    numbers kept); removed from a, b or both; rows added to a unit of one table only
    while its joined rows stay within c (a unit of that size); a new unit in both."""
    tagged = [("a", *row) for row in a_rows] + [("b", *row) for row in b_rows]
    for changed in neighbours(tagged, lambda row: A_OPTIONS if row[0] == "a" else B_OPTIONS,
                              unit=itemgetter(1), make=lambda row, option: (*row[:2], *option)):
        yield _split(changed)
    units = sorted({row[0] for row in a_rows + b_rows}, key=lambda u: (u is None, u or 0))
    for unit in units:
        mine_a = [row for row in a_rows if row[0] == unit]
        mine_b = [row for row in b_rows if row[0] == unit]
        yield _with(a_rows, unit, []), b_rows
        yield a_rows, _with(b_rows, unit, [])
        yield _with(a_rows, unit, []), _with(b_rows, unit, [])
        if unit is None:
            continue
        if mine_a and not mine_b and len(mine_a) <= shift:
            for option in B_OPTIONS:
                yield a_rows, b_rows + [(unit, *option)]
        if mine_b and not mine_a and len(mine_b) <= shift:
            for option in A_OPTIONS:
                yield a_rows + [(unit, *option)], b_rows
    for option, option_b in itertools.product(A_OPTIONS, B_OPTIONS):
        yield a_rows + [(99, *option)], b_rows + [(99, *option_b)]


@pytest.fixture(scope="module")
def con():
    connection = duckdb.connect()
    connection.execute("CREATE TABLE a (unit BIGINT, x DOUBLE, k TEXT)")
    connection.execute("CREATE TABLE b (unit BIGINT, y DOUBLE, g TEXT)")
    yield connection
    connection.close()


def _load(con, a_rows, b_rows) -> None:
    for name, rows in (("a", a_rows), ("b", b_rows)):
        refill(con, name, rows)


def _pushed_down(con, a_rows, b_rows, query: str, model: str = "idp"):
    """The plan, the shift (c read by the engine's SQL; DP: the product of the declared
    bounds) and every group's statistics from the pushdown."""
    _load(con, a_rows, b_rows)
    plan = analyze(parse_statements(QUERIES[query][0])[0], RULES, Settings(model=model))

    def execute(sql):
        return con.execute(sql).fetchall()

    clip = plan.table.max_rows_per_unit if model == "dp" else None
    if model == "dp":
        shift = clip
    else:
        bound = execute(plan_unit_bound_sql(plan, "duckdb"))[0][0]
        assert bound == _largest(a_rows, b_rows, QUERIES[query][1]), (a_rows, b_rows)
        shift = max(1, bound)
    groups = compute_statistics(plan, column_needs(plan, shift), DuckDBBackend.capabilities,
                                clip, execute)
    return plan, shift, groups


def _changed_rows(before, after) -> int:
    """How many joined rows one data set has that the other lacks (the larger side)."""
    old, new = Counter(before), Counter(after)
    return max(sum((old - new).values()), sum((new - old).values()))


@pytest.mark.parametrize("query", list(QUERIES))
@pytest.mark.parametrize("units,rows_per_unit,count", [(4, 1, 8), (3, 2, 4)])
def test_unit_join_sensitivities_bound_every_neighbour(con, query, units, rows_per_unit,
                                                       count):
    _, left, *_, summed_name, ranked_name = QUERIES[query]
    seed = sum(map(ord, query)) + units
    for a_rows, b_rows in _datasets(seed, count, units, rows_per_unit):
        plan, shift, groups = _pushed_down(con, a_rows, b_rows, query)
        keys = plan.group_keys() if plan.group_by else [()]
        base = _answers(a_rows, b_rows, query, keys, shift)
        calibration = Calibration("idp", shift, local=True)
        bounds = {}
        for key in keys:
            stats = groups.get(key, GroupStats())
            assert stats.rows == base[key][0], (a_rows, b_rows, key)
            released = [_answer_and_sensitivity(plan.aggregates[i], stats.column(name),
                                                plan.table.columns[name], calibration)
                        for i, name in ((1, summed_name), (2, ranked_name))]
            assert released[0][0] == pytest.approx(base[key][1]), (a_rows, b_rows, key)
            assert released[1][0] == base[key][2], (a_rows, b_rows, key)
            bounds[key] = (count_sensitivity(shift), released[0][1], released[1][1])
        bounds = {(key, index): bound for key in keys
                  for index, bound in enumerate(bounds[key])}
        bounds["counts"] = min(2, len(keys)) * shift
        bounds["groups"] = groups_touched(shift, len(keys)) if plan.group_by else 1
        bounds["joined rows"] = shift  # that differ: never more than c

        def answers_and_join(tables, keys=keys, shift=shift):
            return _answers(*tables, query, keys, shift), _joined(*tables, left)

        def change(before, after):
            return {**group_changes(before[0], after[0]),
                    "joined rows": _changed_rows(before[1], after[1])}

        (outcome,) = assert_sound(answers_and_join, lambda _, bounds=bounds: bounds,
                                  [(a_rows, b_rows)],
                                  lambda tables, shift=shift: _neighbours(*tables, shift),
                                  change=change)
        assert outcome.worst["joined rows"] == max(1, _largest(a_rows, b_rows, left))  # c is tight


@pytest.mark.parametrize("query", ["inner", "left, grouped"])
def test_dp_clips_a_units_joined_rows_to_the_product_of_the_bounds(con, query):
    """DP: the declared bounds are 2 (a) and 1 (b), so a unit contributes at most 2
    joined rows in scope, whatever it owns; a neighbour may give it any number of rows
    in either table. Every group's count (pushed down, clipped) moves by at most 2, the
    histogram by at most 4, the clamped sum by at most 2 (U − L)."""
    rng, given = random.Random(18), _table_rows(3)
    for a_rows, b_rows in _datasets(5, 2, 3, 3):
        plan, shift, _ = _pushed_down(con, a_rows, b_rows, query, model="dp")
        assert shift == 2
        keys = plan.group_keys() if plan.group_by else [()]
        summed = QUERIES[query][6]
        units = sorted({row[0] for row in a_rows + b_rows if row[0] is not None}) + [99]

        def given_rows(tables, units=units):
            """Ten neighbours: a unit (or a new one) given 0..3 rows in each table."""
            for _ in range(10):
                unit = rng.choice(units)
                yield (_with(tables[0], unit, given(rng, unit)),
                       _with(tables[1], unit, given(rng, unit)))

        def statistics(tables, keys=keys):
            groups = _pushed_down(con, *tables, query, model="dp")[2]
            return {key: groups.get(key, GroupStats()) for key in keys}

        bounds = {"rows": 2 * shift, **{(key, "rows"): shift for key in keys},
                  **{(key, summed): shift * (UPPER - LOWER) for key in keys}}
        assert_sound(statistics, lambda _, bounds=bounds: bounds, [(a_rows, b_rows)],
                     given_rows, change=pushed_down_changes(summed))
