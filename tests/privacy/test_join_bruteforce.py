"""Brute-force neighbours of a protected table joined with a public table (issue 18,
item 1): COUNT, SUM and MEDIAN over ``t JOIN pub`` (inner and left) with WHERE on a
public column and GROUP BY a public column.

The join is many-to-one (``pub.code`` is declared unique; a code the public table
repeats matches nothing, as the pushdown enforces), so it maps each protected row to at
most one row of the joined scope and the sensitivities of the protected table hold
unchanged (docs/privacy.md §2.3). Checked here end to end: the statistics and the local
sensitivities come from the real pushed-down SQL over DuckDB (the public GROUP BY keys
read as the engine reads them), the neighbours — every record of one unit set to any
value (NULL, NaN, ±inf, the domain bounds, ties) and any code (matched, unmatched,
repeated in the public table, NULL) — are enumerated with a Python reference of the
join; each group's largest change never exceeds its sensitivity, and the groups one
unit changes never exceed the share the noise divides ε by.
"""

from __future__ import annotations

import math
from dataclasses import replace
from fractions import Fraction

import duckdb
import pytest

from proxy.analyze import analyze, parse_statements
from proxy.backends.duckdb_backend import DuckDBBackend
from proxy.engine import public_keys_sql
from proxy.privacy.noisy_answers import Calibration, _answer_and_sensitivity, column_needs
from proxy.privacy.sensitivity import count_sensitivity
from proxy.pushdown import compute_statistics
from proxy.rules import parse_rules
from proxy.settings import Settings
from proxy.statistics import GroupStats
from proxy.vocabulary import PUBLIC
from tests.databases import refill
from tests.factories import random_datasets, rows_of
from tests.privacy.harness import assert_sound, group_changes, group_totals, neighbours
from tests.privacy.reference import normalise as normalise_value
from tests.privacy.reference import percentile

LOWER, UPPER = 0.0, 10.0
RULES = parse_rules(f"""
[defaults]
noise_scale = "local"  # raw iDP: the local sensitivities tested here
[tables.t]
privacy_unit = "unit"
[tables.t.columns]
unit = {{ type = "int" }}
v    = {{ type = "float", domain = [{LOWER}, {UPPER}] }}
code = {{ type = "text" }}

[tables.pub]
public = true
unique = ["code"]
[tables.pub.columns]
code = {{ type = "text" }}
name = {{ type = "text" }}
zone = {{ type = "int" }}
""")
# "d" occurs twice (matches nothing); "c" shares its name with "a"; "f" has no rows
PUB = [("a", "A", 1), ("b", "B", 2), ("c", "A", 2), ("d", "D", 2), ("d", "E", 2),
       ("f", "F", 2)]
ONCE = {code: (name, zone) for code, name, zone in PUB
        if sum(row[0] == code for row in PUB) == 1}
VALUES = [0.0, 2.5, 10.0, 2.5, float("nan"), float("inf"), float("-inf"), None]
CODES = ["a", "b", "c", "d", "e", None]
NEIGHBOUR_VALUES = [0.0, 2.5, 10.0, float("nan"), float("inf"), None]
NEIGHBOUR_CODES = ["a", "b", "d", "e", None]

QUERIES = {
    "inner": ("SELECT r.name, COUNT(*), SUM(t.v), MEDIAN(v) FROM t JOIN pub r "
              "ON t.code = r.code WHERE r.zone = 2 GROUP BY r.name"),
    "left": ("SELECT r.name, COUNT(*), SUM(t.v), MEDIAN(v) FROM t LEFT JOIN pub r "
             "ON t.code = r.code WHERE r.zone = 2 OR v < 3 GROUP BY r.name"),
    "left, ungrouped": ("SELECT COUNT(*), SUM(v), MEDIAN(v) FROM t LEFT JOIN pub r "
                        "ON t.code = r.code WHERE r.zone = 2 OR r.zone IS NULL"),
}
WHERE = {
    "inner": lambda row, public: public is not None and public[1] == 2,
    "left": lambda row, public: (public is not None and public[1] == 2)
    or (row[1] is not None and not math.isnan(row[1]) and row[1] < 3),
    "left, ungrouped": lambda row, public: public is None or public[1] == 2,
}


def _scopes(rows, query: str) -> dict:
    """Group key -> (rows, sorted normalised values) of the joined scope, as the SQL
    computes it: the public row of each protected row's code (if it occurs once), the
    WHERE, the group of the public name (NULL: no group)."""
    left = query.startswith("left")
    grouped = query != "left, ungrouped"
    scopes: dict = {}
    for row in rows:
        public = ONCE.get(row[2])
        if public is None and not left:
            continue
        if not WHERE[query](row, public):
            continue
        key = (public[0],) if grouped and public is not None else () if not grouped else None
        if key is None:
            continue
        count, values = scopes.setdefault(key, [0, []])
        scopes[key][0] = count + 1
        value = normalise_value(row[1], LOWER, UPPER) if row[1] is not None else None
        if value is not None:
            values.append(value)
    return {key: (count, sorted(values)) for key, (count, values) in scopes.items()}


def _answers(rows, query: str, keys) -> dict:
    """Each group's (COUNT(*), SUM, MEDIAN) as released before noise (the true values
    the sensitivities bound the change of): the clamped sum, the median of the
    normalised values (the domain midpoint when there are none)."""
    scopes = _scopes(rows, query)
    out = {}
    for key in keys:
        count, values = scopes.get(key, (0, []))
        out[key] = (count, sum(values), percentile(values, Fraction(1, 2), LOWER, UPPER))
    return out


def _datasets(seed: int, count: int, units: int, rows_per_unit: int):
    """Random tables of rows (unit, value, code): 1..units units of 1..rows_per_unit rows."""
    row = lambda rng, unit: (unit, rng.choice(VALUES), rng.choice(CODES))
    return random_datasets(seed, count, rows_of(row, (1, rows_per_unit)), units=(1, units))


def _neighbours(rows):
    """All rows of one unit set to any (value, code) each."""
    return neighbours(rows, [(v, c) for v in NEIGHBOUR_VALUES for c in NEIGHBOUR_CODES])


@pytest.fixture(scope="module")
def con():
    connection = duckdb.connect()
    connection.execute("CREATE TABLE pub (code TEXT, name TEXT, zone INTEGER)")
    connection.executemany("INSERT INTO pub VALUES (?, ?, ?)", PUB)
    connection.execute("CREATE TABLE t (unit BIGINT, v DOUBLE, code TEXT)")
    yield connection
    connection.close()


def _pushed_down(con, rows, query: str):
    """The shift, the public keys and every group's statistics from the pushdown."""
    refill(con, "t", rows)
    plan = analyze(parse_statements(query)[0], RULES, Settings())

    def execute(sql):
        return con.execute(sql).fetchall()

    plan = replace(plan, group_by=tuple(
        replace(term, keys=tuple(r[0] for r in execute(
            public_keys_sql(plan, term, 100, "duckdb"))))
        if term.kind == PUBLIC else term for term in plan.group_by))
    counts: dict[int, int] = {}
    for row in rows:
        counts[row[0]] = counts.get(row[0], 0) + 1
    shift = max(counts.values())
    groups = compute_statistics(plan, column_needs(plan, shift), DuckDBBackend.capabilities,
                                None, execute)
    return plan, shift, groups


@pytest.mark.parametrize("query", list(QUERIES))
@pytest.mark.parametrize("units,rows_per_unit,count", [(5, 1, 14), (3, 2, 4)])
def test_join_sensitivities_bound_every_neighbour(con, query, units, rows_per_unit, count):
    for rows in _datasets(sum(map(ord, query)) + units, count, units, rows_per_unit):
        plan, shift, groups = _pushed_down(con, rows, QUERIES[query])
        keys = plan.group_keys() if plan.group_by else [()]
        if plan.group_by:
            assert keys == [("A",), ("B",), ("D",), ("E",), ("F",)]
        calibration = Calibration("idp", shift, local=True)
        base = _answers(rows, query, keys)
        checked = (0, 2) + ((1,) if shift > 1 else ())  # s = 1: SUM is winsorized (below)
        bounds = {}
        for key in keys:
            stats = groups.get(key, GroupStats())
            count_, total, median = base[key]
            assert stats.rows == count_, (rows, key)
            released = [_answer_and_sensitivity(plan.aggregates[i], stats.column("v"),
                                                plan.table.columns["v"], calibration)
                        for i in (1, 2)]
            if shift > 1:  # the clamped sum, released as is
                assert released[0][0] == pytest.approx(total)
            assert released[1][0] == median, (rows, key)
            sensitivities = (count_sensitivity(shift), released[0][1], released[1][1])
            bounds.update(((key, j), sensitivities[i]) for j, i in enumerate(checked))
        bounds.update(group_totals(bool(plan.group_by), len(keys), shift))

        def released_answers(data, keys=keys, checked=checked):
            answers = _answers(data, query, keys)
            return {key: [answers[key][i] for i in checked] for key in keys}

        assert_sound(released_answers, lambda _, bounds=bounds: bounds, [rows], _neighbours,
                     change=group_changes)


@pytest.mark.parametrize("query", list(QUERIES))
def test_winsorized_join_sum_bounds_every_neighbour(con, query):
    """Row level (s = 1): SUM is released winsorized over the joined scope; its
    data-only bound holds as for one table, records entering and leaving the join."""
    from proxy.privacy.sensitivity import winsorized_sum

    for rows in _datasets(7, 12, 5, 1):
        plan, shift, groups = _pushed_down(con, rows, QUERIES[query])
        keys = plan.group_keys() if plan.group_by else [()]

        def released(data, keys=keys):
            scopes = _scopes(data, query)
            out = {}
            for key in keys:
                _, vs = scopes.get(key, (0, []))
                out[key] = winsorized_sum(sum(vs), vs[:2], vs[-2:], len(vs))
            return out

        bounds = {}
        for key in keys:
            answer, ls, _ = _answer_and_sensitivity(
                plan.aggregates[1], groups.get(key, GroupStats()).column("v"),
                plan.table.columns["v"], Calibration("idp", shift, local=True))
            assert answer == pytest.approx(released(rows)[key])
            bounds[key] = ls
        assert_sound(released, lambda _, bounds=bounds: bounds, [rows], _neighbours)
