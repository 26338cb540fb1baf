"""Brute-force neighbours of aggregates over per-unit aggregates (issue 18, item 3):
``SELECT COUNT(*) | SUM(n) | AVG(n) | COUNT(DISTINCT unit) FROM (SELECT unit, COUNT(*) AS
n FROM a [WHERE …] GROUP BY unit) t [WHERE n …]``, and ``SUM(x) AS n`` (or of an
expression of x) per unit.

The subquery's rows are the units, each a function of that unit's rows alone, so a
neighbour changes at most g of them (docs/privacy.md §3.11): the outer query is an
ordinary aggregate of a row-level relation with shift g, per-unit counts clamped to
[0, B] (B = max_rows_per_unit), per-unit sums to [0, B·U]. Checked end to end: the relation, its scope and the
statistics come from the real pushed-down SQL over DuckDB (equal to a Python reference
of the nested query, on the data and on a sample of its neighbours), the sensitivities
from the code; every neighbour of one unit (or of two, for group_size 2) is enumerated:
its rows set to any values (NULL, NaN, ±inf, 1e308, the WHERE's edges, ties), any
number of them (0: the unit removed; beyond B), a new unit with 1 to B + 1 rows, the
NULL unit's rows likewise; for a join of two tables on the unit (§3.10), each with
every choice of the unit's rows in the second table. No answer moves by more than its sensitivity; the count of
units moves by exactly g on some neighbour (tight). Under DP the same holds with the
global sensitivities (count g, sum g·B).
"""

from __future__ import annotations

import functools
import itertools
import math
import random

import duckdb
import pytest

from proxy.analyze import analyze, parse_statements
from proxy.backends.duckdb_backend import DuckDBBackend
from proxy.privacy.noisy_answers import Calibration, _sum_and_sensitivity, column_needs
from proxy.privacy.sensitivity import count_sensitivity, winsorized_sum
from proxy.pushdown import compute_statistics
from proxy.rules import parse_rules
from proxy.settings import Settings
from proxy.vocabulary import QueryPlan
from tests.databases import refill
from tests.factories import random_datasets, rows_of
from tests.privacy.harness import assert_sound
from tests.privacy.reference import normalise as normalise_value

BOUND = 2  # max_rows_per_unit: per-unit counts are clamped to [0, 2]


@functools.cache
def _rules(group_size: int):
    return parse_rules(f"""
[defaults]
noise_scale = "local"  # raw iDP: the local sensitivities tested here
[tables.a]
privacy_unit = "unit"
max_rows_per_unit = {BOUND}
group_size = {group_size}
[tables.a.columns]
unit = {{ type = "int" }}
x    = {{ type = "float", domain = [0, 10] }}
k    = {{ type = "text", keys = ["p", "q"] }}

[tables.b]
privacy_unit = "unit"
max_rows_per_unit = 1
group_size = {group_size}
[tables.b.columns]
unit = {{ type = "int" }}
y    = {{ type = "float", domain = [0, 10] }}
""")


NAN, INF = float("nan"), float("inf")
OPTIONS = [(0.0, "p"), (5.0, "q"), (4.9, "p"), (10.0, None), (NAN, "q"), (INF, "p"),
           (-INF, "q"), (None, "p"), (1e308, "q")]


def _lt(value, bound) -> bool:
    """``value < bound`` in SQL: NULL is unknown, NaN above every number."""
    return value is not None and not math.isnan(value) and value < bound


def _gt(value, bound) -> bool:
    return value is not None and (math.isnan(value) or value > bound)


def _counted_x(row) -> bool:
    """COUNT(x) counts the normalised value: NULL and NaN are not counted."""
    return normalise_value(row[1], 0.0, 10.0) is not None


def _summed_x(row) -> float:
    """SUM(x) adds the normalised value (the subquery's WHERE x < 5 leaves no NULL or
    NaN: -inf is clamped to 0)."""
    return normalise_value(row[1], 0.0, 10.0)


def _summed_half(row) -> float:
    """SUM(x / 2 + 1) adds the expression of the normalised value, in [1, 6]."""
    return normalise_value(row[1], 0.0, 10.0) / 2 + 1


def _reach(query: str) -> float:
    """What a per-unit value is clamped to where the outer SUM and AVG read it: a count
    to [0, B], a sum of x to [0, B·10], of x / 2 + 1 to [0, B·6]."""
    return {_summed_x: BOUND * 10.0, _summed_half: BOUND * 6.0}.get(QUERIES[query][2],
                                                                     float(BOUND))


# name -> (SQL, the subquery's WHERE on a row of a (and its row of b, joined), what a
# unit counts (None: every row), the outer WHERE on a unit's true count, whether the
# outer count excludes the NULL unit (COUNT(DISTINCT unit)), whether SUM(n) and AVG(n)
# are asked, whether a joins b on the unit)
QUERIES = {
    "count with both WHEREs": (
        ("SELECT COUNT(*) FROM (SELECT unit, COUNT(*) AS n FROM a WHERE x < 5 GROUP BY unit) t "
        "WHERE n > 1"), lambda r, _: _lt(r[1], 5), None, lambda n: n > 1, False, False, False),
    "HAVING": (
        ("SELECT COUNT(*) FROM (SELECT unit FROM a WHERE x < 5 GROUP BY unit "
         "HAVING COUNT(*) > 1) t"), lambda r, _: _lt(r[1], 5), None, lambda n: n > 1, False,
        False, False),
    "avg of COUNT(col), distinct units": (
        ("WITH t AS (SELECT unit, COUNT(x) AS n FROM a WHERE k = 'p' OR x > 8 GROUP BY unit) "
        "SELECT AVG(n), SUM(n), COUNT(DISTINCT unit) FROM t WHERE n <> 1"),
        lambda r, _: r[2] == "p" or _gt(r[1], 8), _counted_x, lambda n: n != 1, True, True,
        False),
    "every unit": (
        ("SELECT COUNT(*), SUM(n), AVG(n) FROM (SELECT unit, COUNT(*) AS n FROM a GROUP BY "
        "unit) t"), lambda r, _: True, None, lambda n: True, False, True, False),
    "more than B": (
        ("SELECT COUNT(*), AVG(n) FROM (SELECT unit, COUNT(*) AS n FROM a GROUP BY unit) t "
        "WHERE n >= 3"), lambda r, _: True, None, lambda n: n >= 3, False, True, False),
    "sum per unit": (
        ("SELECT COUNT(*), SUM(n), AVG(n) FROM (SELECT unit, SUM(x) AS n FROM a WHERE x < 5 "
         "GROUP BY unit) t WHERE n > 1"), lambda r, _: _lt(r[1], 5), _summed_x,
        lambda n: n > 1, False, True, False),
    "sum of an expression per unit": (
        ("SELECT COUNT(*), SUM(n), AVG(n) FROM (SELECT unit, SUM(x / 2 + 1) AS n FROM a "
         "WHERE x < 5 GROUP BY unit) t WHERE n > 2"), lambda r, _: _lt(r[1], 5), _summed_half,
        lambda n: n > 2, False, True, False),
    "joined on the unit": (
        ("SELECT COUNT(*), AVG(n) FROM (SELECT a.unit, COUNT(*) AS n FROM a JOIN b "
         "ON a.unit = b.unit WHERE b.y > 1 OR a.x = 0 GROUP BY a.unit) t WHERE n > 1"),
        lambda r, o: _gt(o[1], 1) or r[1] == 0, None, lambda n: n > 1, False, True, True),
}
B_OPTIONS = [[], [2.0], [0.0], [2.0, NAN]]  # a unit's rows of b (y), for the join
JOINED_OPTIONS = [(0.0, "p"), (NAN, "q"), (None, "p"), (5.0, "q")]


def _units(rows, query: str) -> dict:
    """The subquery's relation: each unit with rows in scope (NULL is one) -> n. Rows
    of a are (unit, x, k), of b (unit, y); joined, each row of a meets every row of b
    of its (non-NULL) unit."""
    _, where, counted, *_, joined = QUERIES[query]
    of_b = [row for row in rows if len(row) == 2]
    units: dict = {}
    for row in rows:
        if len(row) == 2:
            continue
        for other in ([o for o in of_b if row[0] is not None and o[0] == row[0]] if joined
                      else [None]):
            if where(row, other):
                units[row[0]] = units.get(row[0], 0) + (1 if counted is None else counted(row))
    return units


def _answers(rows, query: str, shift: int, model: str) -> tuple:
    """(the outer count, SUM of the clamped counts as released) before noise: the sum
    winsorized when s = 1 under iDP."""
    _, _, _, outer, distinct, summed, _ = QUERIES[query]
    scope = [(unit, n) for unit, n in _units(rows, query).items() if outer(n)]
    count = sum(1 for unit, _ in scope if unit is not None or not distinct)
    if not summed:
        return count, 0.0
    values = sorted(float(min(max(n, 0), _reach(query))) for _, n in scope)
    total = sum(values)
    if model == "idp" and shift == 1:
        total = winsorized_sum(total, values[:2], values[-2:], len(values))
    return count, total


@functools.cache
def _plan(query: str, group_size: int, model: str) -> QueryPlan:
    """The query's plan (decided by its text and the rules alone)."""
    plan = analyze(parse_statements(QUERIES[query][0])[0], _rules(group_size),
                   Settings(model=model))
    assert isinstance(plan, QueryPlan) and plan.per_unit is not None
    return plan


def _pushed_down(con, rows, query: str, group_size: int, model: str):
    """The plan, the shift the engine uses for it and the released answers with their
    sensitivities, from the pushdown."""
    for table, width in (("a", 3), ("b", 2)):
        refill(con, table, [row for row in rows if len(row) == width])
    plan = _plan(query, group_size, model)
    assert plan.table.privacy_unit is None  # a row-level relation: the engine's s = 1·g
    shift = plan.table.group_size

    def execute(sql):
        return con.execute(sql).fetchall()

    stats = compute_statistics(plan, column_needs(plan, shift), DuckDBBackend.capabilities,
                               None, execute)[()]
    counts = [a for a in plan.aggregates if a.kind == "count"]
    count = stats.rows if counts[0].column is None else stats.column(counts[0].column).n
    cal = Calibration(model, shift, local=model == "idp")
    total, sum_sensitivity = (_sum_and_sensitivity(stats.column("n"), plan.table.columns["n"],
                                                   cal)
                              if QUERIES[query][5] else (0.0, 0.0))
    return plan, shift, (count, total), (count_sensitivity(shift), sum_sensitivity)


def _datasets(seed: int, count: int, units: int, rows_per_unit: int, joined: bool):
    """Tables whose units own 0..rows_per_unit rows (0: absent), sometimes rows of the
    NULL unit; values from OPTIONS (NULL, NaN, ±inf, ties at the WHERE's edges); joined,
    each unit with some rows of b (none, one, two)."""
    of_a = rows_of(lambda rng, unit: (unit, *rng.choice(OPTIONS)), (0, rows_per_unit))

    def unit_rows(rng, unit):
        return of_a(rng, unit) + ([(unit, y) for y in rng.choice(B_OPTIONS)] if joined else [])
    return random_datasets(seed, count, unit_rows, units=units, null_unit=0.4)


def _replacements(unit, rng: random.Random, most: int, joined: bool):
    """What one unit's rows may become: none (removed), one to ``most`` rows with every
    combination of OPTIONS for one or two rows, random ones beyond; joined, each with
    every choice of its rows of b (none among them)."""
    theirs = [[(unit, y) for y in ys] for ys in B_OPTIONS] if joined else [[]]
    mine = JOINED_OPTIONS if joined else OPTIONS  # its WHERE reads x = 0 only
    yield from theirs
    for size in range(1, most + 1):
        if size <= 2:
            chosen = list(itertools.product(mine, repeat=size))
        else:
            chosen = [[rng.choice(mine) for _ in range(size)] for _ in range(12)]
        for options in chosen:
            for other in theirs:
                yield [(unit, *option) for option in options] + other


def _neighbours(rows, group_size: int, rng: random.Random, joined: bool):
    """All records of ``group_size`` units (the NULL unit and a new one among them)
    replaced: modified, removed, added, given more or fewer rows than B."""
    units = sorted({row[0] for row in rows}, key=lambda u: (u is None, u or 0))
    candidates = [*units, 99] + ([None] if None not in units else [])
    for chosen in itertools.combinations(candidates, group_size):
        kept = [row for row in rows if row[0] not in chosen]
        options = [list(_replacements(unit, rng, BOUND + 1, joined)) for unit in chosen]
        if group_size == 1:
            for replaced in options[0]:
                yield kept + replaced
        else:  # pairs: every replacement of one with a sample of the other's
            for first in options[0]:
                for second in rng.sample(options[1], 4):
                    yield kept + first + second


@pytest.fixture(scope="module")
def con():
    connection = duckdb.connect()
    connection.execute("CREATE TABLE a (unit BIGINT, x DOUBLE, k TEXT)")
    connection.execute("CREATE TABLE b (unit BIGINT, y DOUBLE)")
    yield connection
    connection.close()


@pytest.mark.parametrize("query", list(QUERIES))
@pytest.mark.parametrize("model", ["idp", "dp"])
@pytest.mark.parametrize("group_size,count", [(1, 3), (2, 1)])
def test_aggregates_over_units_never_move_by_more_than_their_sensitivity(
        con, query, model, group_size, count):
    rng = random.Random(f"{query}{model}{group_size}")
    widest = 0
    joined = QUERIES[query][-1]
    for rows in _datasets(sum(map(ord, query)) + group_size, count, 4, 3, joined):
        _, shift, released, bounds = _pushed_down(con, rows, query, group_size, model)
        assert shift == group_size
        base = _answers(rows, query, shift, model)
        assert released[0] == base[0] and released[1] == pytest.approx(base[1]), rows

        def spot_checked(rows, shift=shift):
            """The neighbours, every 151st also answered by the SQL: the reference is the
            SQL's answer on neighbours too."""
            for index, neighbour in enumerate(_neighbours(rows, group_size, rng, joined)):
                if index % 151 == 0:
                    _, _, again, _ = _pushed_down(con, neighbour, query, group_size, model)
                    changed = _answers(neighbour, query, shift, model)
                    assert again[0] == changed[0] and again[1] == pytest.approx(changed[1])
                yield neighbour

        (outcome,) = assert_sound(
            lambda data, shift=shift: dict(enumerate(_answers(data, query, shift, model))),
            lambda _, bounds=bounds: dict(enumerate(bounds)), [rows], spot_checked)
        widest = max(widest, outcome.worst[0])
    assert widest == group_size  # the count of units: sensitivity g, reached


def test_a_units_count_is_clamped_to_the_bound_and_the_where_sees_the_true_count(con):
    """Per-unit counts beyond B count as B in SUM and AVG; the outer WHERE compares the
    true count (a unit with 3 rows passes n >= 3 and adds B = 2 to the sum)."""
    rows = [(1, 1.0, "p")] * 3 + [(2, 1.0, "p")] + [(None, 1.0, "q")] * 4
    plan, _, released, _ = _pushed_down(con, rows, "more than B", 1, "idp")
    assert released[0] == 2  # unit 1 and the NULL unit, one each
    assert plan.table.columns["n"].upper == BOUND


KEYED = ("SELECT k, COUNT(*), SUM(n) FROM (SELECT unit, k, SUM(x) AS n FROM a WHERE x < 5 "
         "GROUP BY unit, k) t WHERE n > 1 GROUP BY k")


def _keyed_relation(rows) -> dict:
    """The keyed subquery's relation in Python: (unit, k) -> SUM of the normalised x over
    the unit's rows with x < 5 and that k (NULL: a group of its own, as GROUP BY makes)."""
    found: dict = {}
    for unit, x, k in (row for row in rows if len(row) == 3):
        if _lt(x, 5):
            found[unit, k] = found.get((unit, k), 0.0) + _summed_x((unit, x, k))
    return found


@pytest.mark.parametrize("model", ["idp", "dp"])
def test_units_grouped_by_keys_change_only_the_changed_units_rows(con, model):
    """Issue 33 (docs/privacy.md §3.11, "Grouped by the unit and keys"): the relation of
    one row per (unit, k), from the real pushdown, is the nested query's (Python
    reference), and a neighbour that replaces all rows of one unit (any values, 0 to
    B + 1 rows, a new unit, the NULL unit) changes only that unit's rows of it: at most
    its rows of a (c, on D and D′) of them under iDP, and its rows of the relation
    clipped to m = min(B, 2 keys) = 2 under DP, so each key's COUNT moves by at most
    that many and all of them together by twice that: a user-level table of shift c·g
    (DP: m·g)."""
    from proxy.pushdown.scope import per_unit_rows
    plan = analyze(parse_statements(KEYED)[0], _rules(1), Settings(model=model))
    assert plan.table.privacy_unit == "unit" and plan.table.max_rows_per_unit == BOUND
    relation_sql = per_unit_rows(plan.per_unit).sql(dialect="duckdb")
    clip = plan.contribution_bound if model == "dp" else None

    def read(rows):
        refill(con, "a", rows)
        relation = {(u, k): n for u, k, n in con.execute(relation_sql).fetchall()}
        stats = compute_statistics(plan, column_needs(plan, 1), DuckDBBackend.capabilities,
                                   clip, lambda sql: con.execute(sql).fetchall())
        return relation, {key: stats[key].rows if key in stats else 0
                          for key in (("p",), ("q",))}

    rng = random.Random(f"keyed{model}")
    checked = 0
    for rows in _datasets(33, 2, 4, 3, False):
        relation, counts = read(rows)
        assert relation == pytest.approx(_keyed_relation(rows)), rows
        units = sorted({row[0] for row in rows}, key=lambda u: (u is None, u or 0))
        for unit in [*units, 99] + ([None] if None not in units else []):
            kept = [row for row in rows if row[0] != unit]
            for index, replaced in enumerate(_replacements(unit, rng, BOUND + 1, False)):
                if index % 17:
                    continue
                again, moved = read(kept + replaced)
                assert {key for key in relation.keys() ^ again.keys()} | {
                    key for key in relation.keys() & again.keys()
                    if relation[key] != pytest.approx(again[key])} <= {
                    key for key in relation.keys() | again.keys() if key[0] == unit}
                rows_of_unit = max(sum(1 for row in rows if row[0] == unit), len(replaced))
                most = BOUND if model == "dp" else rows_of_unit
                deltas = [abs(moved[key] - counts[key]) for key in counts]
                assert max(deltas) <= most and sum(deltas) <= 2 * most, (unit, replaced)
                checked += 1
    assert checked > 20
