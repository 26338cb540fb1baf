"""Brute-force neighbours of EXISTS and NOT EXISTS over a second protected table of the
same privacy unit (TPC-H Q04, Q21; ``proxy.analyze.semi_joins``).

``SELECT kind, COUNT(*), SUM(v) FROM t WHERE [NOT] EXISTS (SELECT * FROM e WHERE e.unit =
t.unit AND e.k = t.k AND e.w > 2) GROUP BY kind``: the EXISTS equates the two rows'
units (the analysis refuses one that does not), so whether a row of t is in scope
depends on its own unit's records only (docs/privacy.md §3.15). The data sets make that matter: keys shared across units (a row of e of unit 2
with the key of a row of t of unit 1), rows of e without a row of t, NULL keys and
units, values beyond the domain. Checked end to end: the statistics come from the real
pushed-down SQL over DuckDB and equal a Python reference of the semi-join; every
neighbour — all records of one unit, in both tables, set to any key and value —
changes no group's COUNT or SUM by more than its sensitivity (with the shift c of t
alone), the histogram by more than min(2, G)·s, nor more groups than the share ε is
divided by. Without the unit equality it fails (a record of e of one unit moving
another unit's row out of scope).
"""

from __future__ import annotations

import math
import random

import duckdb
import pytest

from proxy.analyze import analyze, parse_statements
from proxy.backends.duckdb_backend import DuckDBBackend
from proxy.privacy.noisy_answers import Calibration, _answer_and_sensitivity, column_needs
from proxy.privacy.sensitivity import count_sensitivity
from proxy.pushdown import compute_statistics
from proxy.rules import parse_rules
from proxy.settings import Settings
from proxy.statistics import GroupStats
from tests.databases import refill
from tests.privacy.harness import assert_sound, group_changes, group_totals, neighbours
from tests.privacy.reference import normalise

RULES = parse_rules("""
[defaults]
noise_scale = "local"  # raw iDP: the local sensitivities tested here
[tables.t]
privacy_unit = "unit"
[tables.t.columns]
unit = { type = "int" }
k    = { type = "int" }
v    = { type = "float", domain = [0, 10] }
kind = { type = "text", keys = ["a", "b"] }

[tables.e]
privacy_unit = "unit"
[tables.e.columns]
unit = { type = "int" }
k    = { type = "int" }
w    = { type = "float", domain = [0, 5] }
""")
KEYS = [1, 2, 3, None]
VALUES = [0.0, 2.5, 10.0, 12.0, float("nan"), None]
W = [0.0, 3.0, float("nan"), None]
NEIGHBOUR_T = [(k, v, kind) for k in (1, 2, None) for v in (0.0, 10.0, None)
               for kind in ("a", "b")]
NEIGHBOUR_E = [(k, w) for k in (1, 2, None) for w in (0.0, 3.0)]

QUERIES = {
    "exists, by kind": ("SELECT kind, COUNT(*), SUM(v) FROM t WHERE EXISTS (SELECT * FROM e "
                        "WHERE e.unit = t.unit AND e.k = t.k AND w > 2) GROUP BY kind", False,
                        True),
    "not exists": ("SELECT COUNT(*), SUM(v) FROM t WHERE v < 11 AND NOT EXISTS (SELECT 1 "
                   "FROM e AS x WHERE x.k = t.k AND x.w > 2 AND t.unit = x.unit)", True,
                   False),
    "exists or": ("SELECT kind, COUNT(*), SUM(v) FROM t WHERE v > 5 OR EXISTS (SELECT * "
                  "FROM e WHERE k = t.k AND unit = t.unit) GROUP BY kind", None, True),
}


def _gt(value, bound) -> bool:
    """``value > bound`` in SQL: NULL is unknown, NaN above every number."""
    return value is not None and (math.isnan(value) or value > bound)


def _found(records, unit, key, late_only: bool) -> bool:
    """Whether e has a row of ``unit`` with ``key`` (and w > 2 when ``late_only``)."""
    return any(r[0] == "e" and r[1] == unit and unit is not None and r[2] == key
               and key is not None and (not late_only or _gt(r[3], 2)) for r in records)


def _in_scope(records, row, query: str) -> bool:
    _, unit, key, v, _ = row
    negated = QUERIES[query][1]
    if negated is None:  # v > 5 OR EXISTS (any row of the key)
        return _gt(v, 5) or _found(
            records, unit, key, False)
    found = _found(records, unit, key, True)
    if negated:
        return not found and v is not None and not _gt(v, 11) and v != 11
    return found


def _answers(records, query: str, keys) -> dict:
    """Each group's COUNT(*) and clamped SUM(v) over the rows of t in scope."""
    grouped = QUERIES[query][2]
    out = {key: [0, 0.0] for key in keys}
    for row in records:
        if row[0] != "t" or not _in_scope(records, row, query):
            continue
        key = (row[4],) if grouped else ()
        if key not in out:
            continue
        out[key][0] += 1
        value = normalise(row[3], 0.0, 10.0) if row[3] is not None else None
        if value is not None:  # NaN is NULL
            out[key][1] += value
    return out


def _datasets(seed: int, count: int):
    """Up to 3 units with 1–2 rows of t and 0–2 rows of e each, keys shared across
    units; sometimes an e row of a unit without t rows, or of a NULL unit."""
    rng = random.Random(seed)
    for _ in range(count):
        records = []
        for unit in range(1, rng.randint(2, 3) + 1):
            records += [("t", unit, rng.choice(KEYS), rng.choice(VALUES), rng.choice("ab"))
                        for _ in range(rng.randint(1, 2))]
            records += [("e", unit, rng.choice(KEYS), rng.choice(W))
                        for _ in range(rng.randint(0, 2))]
        if rng.random() < 0.5:
            records.append(("e", rng.choice([9, None]), rng.choice(KEYS), 3.0))
        yield records


def _neighbours(records):
    """All records of one unit (in t and in e) set to any key and value each."""
    return neighbours(records, lambda r: NEIGHBOUR_T if r[0] == "t" else NEIGHBOUR_E,
                      unit=lambda r: r[1], make=lambda r, option: (r[0], r[1], *option))


@pytest.fixture(scope="module")
def con():
    connection = duckdb.connect()
    connection.execute("CREATE TABLE t (unit BIGINT, k BIGINT, v DOUBLE, kind TEXT)")
    connection.execute("CREATE TABLE e (unit BIGINT, k BIGINT, w DOUBLE)")
    yield connection
    connection.close()


@pytest.mark.parametrize("query", list(QUERIES))
def test_semi_join_sensitivities_bound_every_neighbour(con, query):
    checked_sums = 0
    for records in _datasets(sum(map(ord, query)), 6):
        for table in ("t", "e"):
            refill(con, table, [r[1:] for r in records if r[0] == table])
        plan = analyze(parse_statements(QUERIES[query][0])[0], RULES, Settings())
        assert [semi.table.name for semi in plan.semi_joins] == ["e"]
        units = [r[1] for r in records if r[0] == "t"]
        shift = max(units.count(unit) for unit in units)  # c of t alone
        groups = compute_statistics(plan, column_needs(plan, shift),
                                    DuckDBBackend.capabilities, None,
                                    lambda sql: con.execute(sql).fetchall())
        keys = plan.group_keys() if plan.group_by else [()]
        calibration = Calibration("idp", shift, local=True)
        base = _answers(records, query, keys)
        checked = (0, 1) if shift > 1 else (0,)  # s = 1: SUM is winsorized
        bounds = {}
        for key in keys:
            stats = groups.get(key, GroupStats())
            assert stats.rows == base[key][0], (records, key)
            answer, sum_bound, _ = _answer_and_sensitivity(
                plan.aggregates[1], stats.column("v"), plan.table.columns["v"], calibration)
            if shift > 1:
                assert answer == pytest.approx(base[key][1]), (records, key)
                checked_sums += 1
            sensitivities = (count_sensitivity(shift), sum_bound)
            bounds.update(((key, j), sensitivities[i]) for j, i in enumerate(checked))
        bounds.update(group_totals(bool(plan.group_by), len(keys), shift))

        def released(data, keys=keys, checked=checked):
            answers = _answers(data, query, keys)
            return {key: [answers[key][i] for i in checked] for key in keys}

        assert_sound(released, lambda _, bounds=bounds: bounds, [records], _neighbours,
                     change=group_changes)
    assert checked_sums


def test_without_the_unit_equality_a_neighbour_moves_another_units_row():
    """The semi-join as the analyst wrote it, without ``e.unit = t.unit``: unit 2's row
    of e decides whether unit 1's row of t is in scope, so a neighbour changing unit 2
    alone moves a count beyond the sensitivity of its own rows."""
    records = [("t", 1, 1, 1.0, "a"), ("t", 2, 2, 1.0, "a"), ("e", 2, 1, 3.0)]
    across = lambda data: sum(1 for r in data if r[0] == "t" and any(
        o[0] == "e" and o[2] == r[2] and o[3] is not None and o[3] > 2 for o in data))
    assert across(records) == 1 and _answers(records, "exists, by kind", [("a",)]) == {
        ("a",): [0, 0.0]}
    with pytest.raises(AssertionError, match="unsound"):
        assert_sound(across, lambda _: count_sensitivity(1) - 1, [records], _neighbours)
    assert_sound(lambda data: _answers(data, "exists, by kind", [("a",)])[("a",)][0],
                 lambda _: count_sensitivity(1), [records], _neighbours)
