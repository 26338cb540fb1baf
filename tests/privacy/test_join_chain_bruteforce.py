"""Brute-force neighbours of a protected table joined to a public table, and that one to
a second public table on the second's unique key (a chain, TPC-H's ``l_suppkey =
s_suppkey AND s_nationkey = n_nationkey``), with public columns inside the aggregates
(TPC-H Q14's ``SUM(CASE WHEN p_type LIKE 'PROMO%' THEN … END)``, and a public column
as a value, ``v * r.price``), and a table unique on two columns together matched on one
protected column and one of the chain (TPC-H Q09's partsupp, ``ps_partkey = l_partkey
AND ps_suppkey = l_suppkey``).

Each public key is unique (a code or zone the public table repeats matches nothing, as
the pushdown enforces), so a protected row meets at most one ``pub`` row and that one
at most one ``zones`` row: the joined row is a function of the protected row alone, and
every column of it — the public ones too, normalised to their declared domain — is a
value of one record (docs/privacy.md §3.9). Checked end to end: the statistics and the
sensitivities come from the real pushed-down SQL over DuckDB (public group keys read as
the engine reads them), and they equal a Python reference of the chain; every
neighbour — all records of one unit set to any value (NULL, NaN, ±inf, the domain
bounds) and any code (one whose zone is unique, repeated, NULL, a repeated code, no
code, NULL) — changes no group's aggregate by more than its sensitivity, the counts'
histogram by more than min(2, G)·s, nor more groups than the share ε is divided by.
"""

from __future__ import annotations

import functools
import math
from dataclasses import replace

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
from tests.privacy.reference import normalise

RULES = parse_rules("""
[defaults]
noise_scale = "local"  # raw iDP: the local sensitivities tested here
[tables.t]
privacy_unit = "unit"
[tables.t.columns]
unit = { type = "int" }
v    = { type = "float", domain = [0, 10] }
code = { type = "text" }

[tables.pub]
public = true
unique = ["code"]
[tables.pub.columns]
code  = { type = "text" }
name  = { type = "text" }
zone  = { type = "int" }
price = { type = "float", domain = [0, 4] }

[tables.zones]
public = true
unique = ["zone"]
[tables.zones.columns]
zone  = { type = "int" }
label = { type = "text" }

[tables.costs]
public = true
unique = [["code", "zone"]]
[tables.costs.columns]
code = { type = "text" }
zone = { type = "int" }
cost = { type = "float", domain = [0, 4] }
""")
# "d" is repeated (matches nothing); "c"'s zone 3 is repeated in zones (so c's rows have
# no zone); "f" has a NULL zone; "g" a NULL price; "h" a price beyond the domain
PUB = [("a", "AB", 1, 1.5), ("b", "B", 2, 0.0), ("c", "A", 3, 4.0), ("d", "D", 2, 1.0),
       ("d", "E", 1, 1.0), ("f", "F", None, 2.0), ("g", "A", 2, None), ("h", "H", 1, 9.0)]
ZONES = [(1, "x"), (2, "y"), (3, "z"), (3, "w"), (4, "v")]
CODES = {code: row[1:] for row in PUB if sum(r[0] == row[0] for r in PUB) == 1
         for code in [row[0]]}
LABELS = {zone: label for zone, label in ZONES if sum(z == zone for z, _ in ZONES) == 1}
# unique on (code, zone) together: ("b", 2) is repeated (matches nothing), "a" has two
# zones (one matching a's), a NULL zone matches nothing
COSTS = [("a", 1, 2.0), ("a", 2, 3.0), ("b", 2, 1.0), ("b", 2, 5.0), ("c", 3, 9.0),
         ("g", 2, 0.5), ("h", 1, None), ("f", None, 1.0)]
COST = {(code, zone): cost for code, zone, cost in COSTS
        if sum((c, z) == (code, zone) for c, z, _ in COSTS) == 1}
VALUES = [0.0, 2.5, 10.0, 2.5, float("nan"), float("inf"), -1.0, None]
KEYS = ["a", "b", "c", "d", "e", "f", "g", "h", None]
NEIGHBOUR_VALUES = [0.0, 2.5, 10.0, float("nan"), float("inf"), None]

AGGREGATES = ("COUNT(*), SUM(t.v), SUM(CASE WHEN r.name LIKE 'A%' THEN v ELSE 0 END), "
              "SUM(v * r.price)")
# name -> (SQL, LEFT joins, WHERE(v, pub, label), grouped by the label); the last
# aggregate multiplies v by pub's price, or in "composite key" by the cost of the costs
# row matched on (t.code, pub's zone)
QUERIES = {
    "chain, by label": (f"SELECT z.label, {AGGREGATES} FROM t JOIN pub r ON t.code = r.code "
                        "JOIN zones z ON r.zone = z.zone GROUP BY z.label",
                        False, lambda v, pub, label: True, True),
    "comma": (f"SELECT {AGGREGATES} FROM t, pub r, zones z WHERE t.code = r.code AND "
              "r.zone = z.zone AND (z.label = 'y' OR v < 3)", False,
              lambda v, pub, label: label == "y" or (
                  v is not None and not math.isnan(v) and v < 3), False),
    "left, by label": (f"SELECT z.label, {AGGREGATES} FROM t LEFT JOIN pub r ON t.code = "
                       "r.code LEFT JOIN zones z ON r.zone = z.zone GROUP BY z.label",
                       True, lambda v, pub, label: True, True),
    "composite key": ("SELECT COUNT(*), SUM(t.v), SUM(CASE WHEN r.name LIKE 'A%' THEN v "
                      "ELSE 0 END), SUM(v * k.cost) FROM t JOIN pub r ON t.code = r.code "
                      "JOIN costs k ON k.code = t.code AND k.zone = r.zone",
                      False, lambda v, pub, label: True, False),
}


def _joined(row, query: str):
    """The joined row of ``row`` (v, pub's (name, zone, price), zones' label), or None
    when an inner join drops it; in "composite key", pub's price is the cost matched."""
    left = QUERIES[query][1]
    pub = CODES.get(row[2])
    if pub is None and not left:
        return None
    if query == "composite key":
        cost = COST.get((row[2], pub[1]), "none") if pub[1] is not None else "none"
        return None if cost == "none" else (row[1], (*pub[:2], cost), None)
    label = LABELS.get(pub[1]) if pub is not None else None
    if label is None and not left:
        return None
    return row[1], pub, label


def _answers(rows, query: str, keys) -> dict:
    """Each group's COUNT(*) and the three clamped sums (as released before noise for a
    shift above 1): v, v when the name starts with A (else 0), v times the price, each
    read at its normalised value and the product clamped to its domain [0, 40]."""
    _, _, where, grouped = QUERIES[query]
    out = {key: [0, 0.0, 0.0, 0.0] for key in keys}
    for row in rows:
        joined = _joined(row, query)
        if joined is None or not where(*joined):
            continue
        raw, pub, label = joined
        key = (label,) if grouped else ()
        if key not in out:
            continue
        cell = out[key]
        cell[0] += 1
        v = normalise(raw, 0.0, 10.0) if raw is not None else None
        if v is None:
            continue
        cell[1] += v
        name = pub[0] if pub is not None else None
        cell[2] += v if name is not None and name.startswith("A") else 0.0
        price = pub[2] if pub is not None else None
        if price is not None:
            cell[3] += normalise(v * normalise(price, 0.0, 4.0), 0.0, 40.0)
    return out


def _datasets(seed: int, count: int, units: int, rows_per_unit: int):
    row = lambda rng, unit: (unit, rng.choice(VALUES), rng.choice(KEYS))
    return random_datasets(seed, count, rows_of(row, (1, rows_per_unit)), units=(1, units))


def _neighbours(rows):
    return neighbours(rows, [(v, k) for v in NEIGHBOUR_VALUES for k in KEYS])


@functools.cache
def _plan(query: str):
    """The query's plan, analysed once: analysis reads no data."""
    return analyze(parse_statements(QUERIES[query][0])[0], RULES, Settings())


@pytest.fixture(scope="module")
def con():
    connection = duckdb.connect()
    connection.execute("CREATE TABLE pub (code TEXT, name TEXT, zone INTEGER, price DOUBLE)")
    connection.executemany("INSERT INTO pub VALUES (?, ?, ?, ?)", PUB)
    connection.execute("CREATE TABLE zones (zone INTEGER, label TEXT)")
    connection.executemany("INSERT INTO zones VALUES (?, ?)", ZONES)
    connection.execute("CREATE TABLE costs (code TEXT, zone INTEGER, cost DOUBLE)")
    connection.executemany("INSERT INTO costs VALUES (?, ?, ?)", COSTS)
    connection.execute("CREATE TABLE t (unit BIGINT, v DOUBLE, code TEXT)")
    yield connection
    connection.close()


@pytest.mark.parametrize("query", list(QUERIES))
@pytest.mark.parametrize("units,rows_per_unit,count", [(5, 1, 8), (3, 2, 5)])
def test_chain_sensitivities_bound_every_neighbour(con, query, units, rows_per_unit, count):
    for rows in _datasets(sum(map(ord, query)) + units, count, units, rows_per_unit):
        refill(con, "t", rows)
        plan = _plan(query)
        execute = lambda sql: con.execute(sql).fetchall()
        plan = replace(plan, group_by=tuple(
            replace(term, keys=tuple(r[0] for r in execute(
                public_keys_sql(plan, term, 100, "duckdb")))) if term.kind == PUBLIC else term
            for term in plan.group_by))
        shift = max(sum(r[0] == unit for r in rows) for unit, *_ in rows)
        groups = compute_statistics(plan, column_needs(plan, shift),
                                    DuckDBBackend.capabilities, None, execute)
        keys = plan.group_keys() if plan.group_by else [()]
        if plan.group_by:
            assert keys == [("v",), ("w",), ("x",), ("y",), ("z",)]
        calibration = Calibration("idp", shift, local=True)
        base = _answers(rows, query, keys)
        checked = (0, 1, 2, 3) if shift > 1 else (0,)  # s = 1: SUM is winsorized
        bounds = {}
        for key in keys:
            stats = groups.get(key, GroupStats())
            assert stats.rows == base[key][0], (rows, key)
            sensitivities = [count_sensitivity(shift)]
            for i, aggregate in enumerate(plan.aggregates[1:], 1):
                answer, sensitivity, _ = _answer_and_sensitivity(
                    aggregate, stats.column(aggregate.column),
                    plan.table.columns[aggregate.column], calibration)
                if shift > 1:  # the clamped sum, released as is
                    assert answer == pytest.approx(base[key][i]), (rows, key, i)
                sensitivities.append(sensitivity)
            bounds.update(((key, j), sensitivities[i]) for j, i in enumerate(checked))
        bounds.update(group_totals(bool(plan.group_by), len(keys), shift))

        def released(data, keys=keys, checked=checked):
            answers = _answers(data, query, keys)
            return {key: [answers[key][i] for i in checked] for key in keys}

        assert_sound(released, lambda _, bounds=bounds: bounds, [rows], _neighbours,
                     change=group_changes)
