"""GROUP BY terms over columns of public tables joined to one another are keyed by the
combinations the public rows hold (``QueryPlan.joint``, proxy/engine.py), not by every
combination of each column's keys (docs/privacy.md §3.9): TPC-H's (ps_partkey,
ps_suppkey) pairs. The keys are read from the public tables alone, so they are the same
for every neighbouring data set, and every one is answered, empty or not."""

from __future__ import annotations

import pytest

from proxy.session import Session
from tests.analyze.partsupp import LINES, PARTS, STOCK, SUPPLIERS
from tests.analyze.partsupp import RULES as STAGED
from tests.factories import Table, engine_fixture, open_engine

RULES = STAGED.replace("max_groups = 100000", "max_groups = 1000")  # answers of 3 columns
TABLES = {"lines": LINES, "stock": STOCK, "parts": PARTS, "suppliers": SUPPLIERS}
engine = engine_fixture(RULES, TABLES)

PAIRS = ("SELECT ps_part, ps_supp, COUNT(*) FROM lines JOIN stock ON l_part = ps_part AND "
         "l_supp = ps_supp GROUP BY ps_part, ps_supp")
CHAINED = ("SELECT p_name, ps_supp, SUM(qty) FROM lines JOIN stock ON l_part = ps_part AND "
           "l_supp = ps_supp JOIN parts ON ps_part = p_key WHERE p_name LIKE 'forest%' "
           "GROUP BY p_name, ps_supp ORDER BY p_name, ps_supp")


def _keys(engine, sql: str) -> list[tuple]:
    (answer,) = list(Session.open(engine, "alice").execute(sql))
    return [row[:2] for row in answer.rows]


def test_the_groups_are_the_pairs_the_public_table_holds(engine):
    """5 pairs, (4, 3) without line items among them, rather than 4 parts × 3
    suppliers."""
    assert sorted(_keys(engine, PAIRS)) == [(1, 1), (1, 2), (2, 2), (3, 3), (4, 3)]


def test_a_chain_keys_the_combinations_its_joined_public_rows_hold(engine):
    """parts joined on stock's column: the (name, supplier) its rows form, under the
    WHERE's condition on parts alone."""
    assert _keys(engine, CHAINED) == [("forest a", 1), ("forest a", 2), ("forest b", 2),
                                      ("forest c", 3)]


@pytest.mark.parametrize("kept", [0, 3, len(LINES.columns["cust"])])
def test_the_keys_are_the_same_whatever_the_protected_rows(duckdb_url, kept):
    """Neighbouring (and farther) data sets: no line items, the first 3, all: the same
    keys."""
    lines = Table({name: values[:kept] for name, values in LINES.columns.items()},
                  LINES.types)
    with open_engine(duckdb_url, RULES, {**TABLES, "lines": lines}) as made:
        assert sorted(_keys(made, PAIRS)) == [(1, 1), (1, 2), (2, 2), (3, 3), (4, 3)]
        assert _keys(made, CHAINED) == [("forest a", 1), ("forest a", 2), ("forest b", 2),
                                        ("forest c", 3)]
