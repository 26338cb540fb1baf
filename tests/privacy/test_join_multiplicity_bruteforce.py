"""Brute-force neighbours of a protected table joined with a public table on a key the
rules bound to m = 3 rows per value (``max_rows_per_key``, issue 18 item 1): every
aggregate answered over such a join — COUNT(*), COUNT(col), COUNT(DISTINCT unit), SUM,
AVG (its SUM and COUNT), MEDIAN, a percentile, MAX and MIN (with both bounds, and MAX
without an upper bound), VAR_SAMP, STDDEV_POP — inner and LEFT, with WHERE on public
and protected columns, GROUP BY a public column (one record in up to m groups) and a
protected one (one record m times in its group).

A record meets at most m public rows (the pushdown reads the public table as its rows
whose key occurs at most m times; "d" occurs 4 times and matches nothing), so a unit's
change moves at most s = c·m·g joined rows, and every formula holds with that shift
(docs/privacy.md §3.9). Checked end to end: the statistics and sensitivities come from
the real pushed-down SQL over DuckDB with the shift the engine uses (c read by its SQL,
times ``QueryPlan.multiplicity``); every neighbour — all records of one unit set to any
value (NULL, NaN, ±inf, the domain bounds, ties) and any key (matching 3, 1, 2 rows, the
key beyond the bound, a key without rows, NULL) — is enumerated with a Python reference
of the join; no aggregate of any group changes by more than its sensitivity, the
counts' histogram by more than min(2, G)·s, nor do more groups change than the share ε
is divided by. Under DP the clipped joined scope (at most max_rows_per_unit·m rows per
unit, pushed down) changes by at most that bound whatever rows the unit is given.
"""

from __future__ import annotations

import functools
import math
import random
from dataclasses import replace
from fractions import Fraction

import duckdb
import pytest

from proxy.analyze import analyze, parse_statements
from proxy.backends.duckdb_backend import DuckDBBackend
from proxy.engine import public_keys_sql
from proxy.privacy.noisy_answers import Calibration, _answer_and_sensitivity, column_needs
from proxy.privacy.sensitivity import count_sensitivity
from proxy.privacy.variance import spread_and_sensitivity
from proxy.pushdown import compute_statistics, unit_bound_sql
from proxy.rules import parse_rules
from proxy.settings import Settings
from proxy.statistics import MAGNITUDE_CAP, GroupStats
from proxy.vocabulary import COUNT, MAX, MIN, PERCENTILE, PUBLIC, SPREADS, SUM, UNITS
from tests.databases import refill
from tests.factories import random_datasets, rows_of
from tests.privacy.harness import (
    assert_sound,
    group_changes,
    group_totals,
    neighbours,
    pushed_down_changes,
)
from tests.privacy.reference import normalise as normalise_value
from tests.privacy.reference import percentile

LOWER, UPPER = 0.0, 10.0
RULES = parse_rules(f"""
[defaults]
noise_scale = "local"  # raw iDP: the local sensitivities tested here
[tables.t]
privacy_unit = "unit"
max_rows_per_unit = 2
[tables.t.columns]
unit = {{ type = "int" }}
v    = {{ type = "float", domain = [{LOWER}, {UPPER}] }}
w    = {{ type = "float", lower = {LOWER} }}
kind = {{ type = "text", keys = ["a", "b", "c"] }}

[tables.pub]
public = true
max_rows_per_key = {{ kind = 3 }}
[tables.pub.columns]
kind = {{ type = "text" }}
tag  = {{ type = "text" }}
zone = {{ type = "int" }}
""")
# kind "a": 3 rows, "b": 1, "c": 2, "d": 4 (beyond the bound: matches nothing), "e": none
PUB = [("a", "x", 1), ("a", "y", 2), ("a", "z", 2), ("b", "x", 2), ("c", "y", 2),
       ("c", "z", 1), ("d", "x", 2), ("d", "x", 2), ("d", "y", 2), ("d", "q", 2)]
MATCHES = {kind: [row for row in PUB if row[0] == kind] for kind in "abcd"}
MATCHES = {kind: rows for kind, rows in MATCHES.items() if len(rows) <= 3}
NAN, INF = float("nan"), float("inf")
VALUES = [0.0, 2.5, 10.0, 2.5, NAN, INF, -INF, None, 1e308]
KINDS = ["a", "b", "c", "d", "e", None]
NEIGHBOUR_VALUES = [-INF, 0.0, 2.5, 10.0, NAN, INF, None]
NEIGHBOUR_KINDS = ["a", "b", "c", "d", None]
TOLERANCE = 1e-9

AGGREGATES = ("COUNT(*), COUNT(v), COUNT(DISTINCT unit), SUM(v), AVG(v), MEDIAN(v), "
              "PERCENTILE_DISC(0.75) WITHIN GROUP (ORDER BY v), MAX(v), MIN(v), MAX(w), "
              "VAR_SAMP(v), STDDEV_POP(v)")


def _lt(value, bound) -> bool:
    """``value < bound`` in SQL: NULL is unknown, NaN above every number."""
    return value is not None and not math.isnan(value) and value < bound


# name -> (SQL, LEFT, WHERE(row, public row or None), group key (None: no group))
QUERIES = {
    "inner, by tag": ((f"SELECT r.tag, {AGGREGATES} FROM t JOIN pub r ON t.kind = r.kind "
                       "WHERE r.zone = 2 OR v < 3 GROUP BY r.tag"), False,
                      lambda row, pub: pub[2] == 2 or _lt(row[1], 3),
                      lambda row, pub: (pub[1],)),
    "inner, by kind": ((f"SELECT t.kind, {AGGREGATES} FROM t JOIN pub r ON t.kind = r.kind "
                        "GROUP BY t.kind"), False, lambda row, pub: True,
                       lambda row, pub: (row[2],) if row[2] in ("a", "b", "c") else None),
    "left": ((f"SELECT {AGGREGATES} FROM t LEFT JOIN pub r ON t.kind = r.kind "
              "WHERE r.zone = 2 OR r.zone IS NULL"), True,
             lambda row, pub: pub is None or pub[2] == 2, lambda row, pub: ()),
}


def _cells(rows, query: str) -> dict:
    """Group key -> (rows, units, sorted v, sorted w) of the joined scope, normalised."""
    left, where, group = QUERIES[query][1:]
    cells: dict = {}
    for row in rows:
        matches = MATCHES.get(row[2], []) if row[2] is not None else []
        for pub in matches or ([None] if left else []):
            if not where(row, pub):
                continue
            key = group(row, pub)
            if key is None:
                continue
            cell = cells.setdefault(key, [0, set(), [], []])
            cell[0] += 1
            cell[1].add(row[0])
            for values, lower, upper in ((cell[2], LOWER, UPPER), (cell[3], LOWER, None)):
                value = normalise_value(row[1], lower, upper) if row[1] is not None else None
                if value is not None:
                    values.append(value)
    return {key: (count, units, sorted(vs), sorted(ws))
            for key, (count, units, vs, ws) in cells.items()}


def _variance(values, population: bool) -> float:
    n = len(values)
    if n < (1 if population else 2):
        return 0.0
    mean = math.fsum(values) / n
    m2 = math.fsum((x - mean) ** 2 for x in values)
    return m2 / (n if population else n - 1)


def _answers(rows, query: str, keys, shift: int) -> dict:
    """Each group's true answers, in the order of AGGREGATES (AVG as its SUM and COUNT:
    the two releases it is computed from)."""
    cells = _cells(rows, query)
    out = {}
    for key in keys:
        count, units, vs, ws = cells.get(key, (0, set(), [], []))
        n, above = len(vs), len(ws) - shift  # MAX without U: the (s+1)-th largest
        out[key] = (count, n, len(units), math.fsum(vs), (math.fsum(vs), n),
                    percentile(vs, Fraction(1, 2), LOWER, UPPER),
                    percentile(vs, Fraction(3, 4), LOWER, UPPER),
                    vs[-1] if vs else LOWER, vs[0] if vs else UPPER,
                    ws[above - 1] if above >= 1 else LOWER,
                    _variance(vs, False), math.sqrt(_variance(vs, True)))
    return out


def _datasets(seed: int, count: int, units: int, rows_per_unit: int):
    """Random tables of rows (unit, value, kind): 1..units units of 1..rows_per_unit rows."""
    row = lambda rng, unit: (unit, rng.choice(VALUES), rng.choice(KINDS))
    return random_datasets(seed, count, rows_of(row, (1, rows_per_unit)), units=(1, units))


def _neighbours(rows):
    """All rows of one unit set to any (value, kind) each: moving between keys of 3, 1
    and 2 public rows, the key beyond the bound and NULL."""
    return neighbours(rows, [(v, k) for v in NEIGHBOUR_VALUES for k in NEIGHBOUR_KINDS])


@pytest.fixture(scope="module")
def con():
    connection = duckdb.connect()
    connection.execute("CREATE TABLE pub (kind TEXT, tag TEXT, zone INTEGER)")
    connection.executemany("INSERT INTO pub VALUES (?, ?, ?)", PUB)
    connection.execute("CREATE TABLE t (unit BIGINT, v DOUBLE, w DOUBLE, kind TEXT)")
    yield connection
    connection.close()


@functools.cache
def _plan(con, query: str, model: str):
    """The query's plan, its public GROUP BY keys read as the engine reads them (the
    public table never changes here). DP needs an upper bound for MAX: MAX(w) left out."""
    sql = QUERIES[query][0] if model == "idp" else QUERIES[query][0].replace(" MAX(w),", "")
    plan = analyze(parse_statements(sql)[0], RULES, Settings(model=model))
    assert plan.multiplicity == 3
    return replace(plan, group_by=tuple(
        replace(term, keys=tuple(r[0] for r in con.execute(
            public_keys_sql(plan, term, 100, "duckdb")).fetchall()))
        if term.kind == PUBLIC else term for term in plan.group_by))


def _pushed_down(con, rows, query: str, model: str = "idp"):
    """The plan, the shift as the engine computes it (iDP: c read by its SQL times the
    plan's multiplicity and g; DP: the plan's contribution bound times g) and every
    group's statistics from the pushdown (DP: clipped to the contribution bound)."""
    refill(con, "t", [(unit, value, value, kind) for unit, value, kind in rows])
    plan = _plan(con, query, model)

    def execute(sql):
        return con.execute(sql).fetchall()

    clip = plan.contribution_bound if model == "dp" else None
    if model == "dp":
        shift = clip * plan.table.group_size
    else:
        c = max(1, execute(unit_bound_sql("t", "unit", "duckdb"))[0][0])
        shift = c * plan.multiplicity * plan.table.group_size
    groups = compute_statistics(plan, column_needs(plan, shift), DuckDBBackend.capabilities,
                                clip, execute)
    return plan, shift, groups


def _released(plan, stats: GroupStats, calibration: Calibration) -> tuple[list, list]:
    """(answers, sensitivities) of one group, in the order of ``_answers``: from the
    backend's statistics through the code that releases them."""
    answers, bounds = [], []
    for aggregate in plan.aggregates:
        if aggregate.kind == COUNT:
            answers.append(stats.rows if aggregate.column is None
                           else stats.column(aggregate.column).n)
            bounds.append(count_sensitivity(calibration.shift))
            continue
        if aggregate.kind == UNITS:
            answers.append(stats.units)
            bounds.append(plan.table.group_size)
            continue
        column, spec = stats.column(aggregate.column), plan.table.columns[aggregate.column]
        if aggregate.kind in SPREADS:
            answer, sensitivity, _ = spread_and_sensitivity(aggregate.kind, column, spec,
                                                            calibration.shift)
        elif aggregate.kind in (SUM, PERCENTILE, MAX, MIN):
            answer, sensitivity, _ = _answer_and_sensitivity(aggregate, column, spec,
                                                             calibration)
        else:  # AVG: the noisy SUM over the noisy COUNT, each released on its own
            total, sum_bound, _ = _answer_and_sensitivity(replace(aggregate, kind=SUM),
                                                          column, spec, calibration)
            answer, sensitivity = (total, column.n), (sum_bound,
                                                       count_sensitivity(calibration.shift))
        answers.append(answer)
        bounds.append(sensitivity)
    return answers, bounds


def _flat(values) -> list:
    """Per aggregate its answer or sensitivity, AVG's two parts (SUM, COUNT) in its place."""
    return [part for value in values
            for part in (value if isinstance(value, tuple) else (value,))]


@pytest.mark.parametrize("query", list(QUERIES))
@pytest.mark.parametrize("units,rows_per_unit,count", [(4, 1, 4), (3, 2, 2)])
def test_bounded_join_sensitivities_bound_every_neighbour(con, query, units, rows_per_unit,
                                                          count):
    for rows in _datasets(sum(map(ord, query)) + units, count, units, rows_per_unit):
        plan, shift, groups = _pushed_down(con, rows, query)
        keys = plan.group_keys() if plan.group_by else [()]
        calibration = Calibration("idp", shift, local=True)
        base = _answers(rows, query, keys, shift)
        bounds = {}
        for key in keys:
            answers, sensitivities = _released(plan, groups.get(key, GroupStats()),
                                               calibration)
            for index, (answer, truth) in enumerate(zip(answers, base[key])):
                assert answer == pytest.approx(truth, rel=1e-9, abs=1e-9), (
                    query, key, index, rows)
            # float rounding relative to the bound, besides the absolute TOLERANCE
            bounds.update(((key, index), bound * (1 + 1e-12))
                          for index, bound in enumerate(_flat(sensitivities)))
        bounds.update(group_totals(bool(plan.group_by), len(keys), shift))
        assert_sound(lambda data, keys=keys, shift=shift: {
                         key: _flat(answers)
                         for key, answers in _answers(data, query, keys, shift).items()},
                     lambda _, bounds=bounds: bounds, [rows], _neighbours,
                     change=group_changes, tolerance=TOLERANCE)


@pytest.mark.parametrize("query", ["inner, by tag"])
def test_dp_clips_a_units_joined_rows_to_its_bound_times_the_multiplicity(con, query):
    """DP: max_rows_per_unit = 2 times m = 3: a unit keeps at most 6 joined rows in
    scope, whatever rows it is given (0 to 4, any keys). Every group's count (pushed
    down, clipped) moves by at most 6, the histogram by at most 12, the clamped sum by
    at most 6·(U − L), the count of units by at most 1."""
    rng = random.Random(18)
    for rows in _datasets(9, 2, 3, 3):
        plan, shift, _ = _pushed_down(con, rows, query, model="dp")
        assert shift == 6
        keys = plan.group_keys() if plan.group_by else [()]

        def given_rows(rows):
            """Four neighbours: a unit (or a new one) given 0..4 rows of any keys."""
            for _ in range(4):
                unit = rng.choice([*sorted({row[0] for row in rows}), 99])
                given = [(unit, rng.choice(VALUES), rng.choice(["a", "a", "c", "b", None]))
                         for _ in range(rng.randint(0, 4))]
                yield [row for row in rows if row[0] != unit] + given

        def statistics(rows, keys=keys):
            groups = _pushed_down(con, rows, query, model="dp")[2]
            return {key: groups.get(key, GroupStats()) for key in keys}

        bounds = {"rows": 2 * shift, **{(key, "rows"): shift for key in keys},
                  **{(key, "units"): 1 for key in keys},
                  **{(key, "v"): shift * (UPPER - LOWER) for key in keys}}
        assert_sound(statistics, lambda _, bounds=bounds: bounds, [rows], given_rows,
                     change=pushed_down_changes("v"))


def test_the_reference_normalises_as_the_backend():
    """MAX without an upper bound reads values clamped to MAGNITUDE_CAP, as the SQL."""
    assert normalise_value(INF, LOWER, None) == MAGNITUDE_CAP
