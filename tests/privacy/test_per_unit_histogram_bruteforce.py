"""Brute-force neighbours of a histogram of per-unit counts (TPC-H Q13: how many
customers have n orders), over a LEFT join of two protected tables of one unit whose ON
also filters the joined table's rows:

    SELECT n, COUNT(*) FROM (SELECT p.unit, COUNT(o.note) AS n FROM p LEFT JOIN o
        ON p.unit = o.unit AND o.note NOT LIKE '%s%' WHERE p.seg = 'a' GROUP BY p.unit) t
    GROUP BY n

The relation of one row per unit is row-level (each unit's row a function of its own
records: its p rows, its o rows that pass the ON's condition); its counts' keys are
0 … B, B the product of the tables' ``max_rows_per_unit`` (docs/privacy.md §3.11); a
unit whose count exceeds B is in no group. Checked end to end: the pushed-down
statistics (DuckDB) equal a Python reference; every neighbour — all records of one unit set to any segment
and note — moves no cell by more than 1 (g), the histogram's L1 by more than 2, nor
more cells than the share ε is divided by.
"""

from __future__ import annotations

import random

import duckdb
import pytest

from proxy.analyze import analyze, parse_statements
from proxy.backends.duckdb_backend import DuckDBBackend
from proxy.privacy.noisy_answers import column_needs
from proxy.privacy.sensitivity import count_sensitivity, groups_touched
from proxy.pushdown import compute_statistics
from proxy.rules import parse_rules
from proxy.settings import Settings
from proxy.statistics import GroupStats
from tests.databases import refill
from tests.privacy.harness import assert_sound, group_changes, neighbours

RULES = parse_rules("""
[defaults]
noise_scale = "local"  # raw iDP
[tables.p]
privacy_unit = "unit"
max_rows_per_unit = 1
[tables.p.columns]
unit = { type = "int" }
seg  = { type = "text", keys = ["a", "b"] }

[tables.o]
privacy_unit = "unit"
max_rows_per_unit = 2
[tables.o.columns]
unit = { type = "int" }
note = { type = "text" }
""")
QUERY = ("SELECT n, COUNT(*) FROM (SELECT p.unit, COUNT(o.note) AS n FROM p LEFT JOIN o "
         "ON p.unit = o.unit AND o.note NOT LIKE '%s%' WHERE p.seg = 'a' GROUP BY p.unit) t "
         "GROUP BY n")
NOTES = ["x", "sx", "is", None]  # "sx", "is": filtered out by NOT LIKE '%s%'; NULL: uncounted
SEGMENTS = ["a", "b"]


def _answers(records, keys) -> dict:
    """Each count's number of units: a unit with a p row of segment 'a' counts its
    p rows times its o rows whose note passes (at least one row: LEFT), non-NULL notes."""
    out = {key: [0] for key in keys}
    units = {r[1] for r in records if r[0] == "p"}
    for unit in units:
        mine = [r for r in records if r[0] == "p" and r[1] == unit and r[2] == "a"]
        if not mine:
            continue
        passing = [r for r in records if r[0] == "o" and r[1] == unit
                   and r[2] is not None and "s" not in r[2]]
        n = len(mine) * len(passing)
        if (n,) in out:
            out[(n,)][0] += 1
    return out


def _datasets(seed: int, count: int):
    """2–4 units, each with 1–2 rows of p (more than its bound, sometimes) and 0–3 of o;
    sometimes o rows of a unit p does not have."""
    rng = random.Random(seed)
    for _ in range(count):
        records = []
        for unit in range(1, rng.randint(2, 4) + 1):
            records += [("p", unit, rng.choice(SEGMENTS))
                        for _ in range(1 if rng.random() < 0.8 else 2)]
            records += [("o", unit, rng.choice(NOTES)) for _ in range(rng.randint(0, 3))]
        if rng.random() < 0.5:
            records.append(("o", 9, "x"))
        yield records


def _neighbours(records):
    """All records of one unit set to any segment (p) and note (o) each."""
    return neighbours(records, lambda r: SEGMENTS if r[0] == "p" else NOTES,
                      unit=lambda r: r[1], make=lambda r, option: (r[0], r[1], option))


@pytest.fixture(scope="module")
def con():
    connection = duckdb.connect()
    connection.execute("CREATE TABLE p (unit BIGINT, seg TEXT)")
    connection.execute("CREATE TABLE o (unit BIGINT, note TEXT)")
    yield connection
    connection.close()


def test_histogram_of_per_unit_counts_bounds_every_neighbour(con):
    plan = analyze(parse_statements(QUERY)[0], RULES, Settings())
    keys = plan.group_keys()
    assert keys == [(0,), (1,), (2,)]  # 0 … B, B = 1 · 2
    shift = plan.table.group_size  # a unit is one record of the relation
    assert shift == 1 and plan.joins[0].read is not None
    execute = lambda sql: con.execute(sql).fetchall()
    for records in _datasets(13, 25):
        for table in ("p", "o"):
            refill(con, table, [r[1:] for r in records if r[0] == table])
        groups = compute_statistics(plan, column_needs(plan, shift), DuckDBBackend.capabilities,
                                    None, execute)
        expected = _answers(records, keys)
        assert {key: [groups.get(key, GroupStats()).rows] for key in keys} == expected, records
        bounds = {(key, 0): count_sensitivity(shift) for key in keys}
        bounds["counts"] = min(2, len(keys)) * count_sensitivity(shift)
        bounds["groups"] = groups_touched(shift, len(keys))
        assert_sound(lambda data: _answers(data, keys), lambda _, bounds=bounds: bounds,
                     [records], _neighbours, change=group_changes)
