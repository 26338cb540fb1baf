"""The implied conjunct over a public joined table (issue 34, TPC-H Q19;
docs/privacy.md §3.9, "Implied conjuncts"): where the WHERE is an OR of branches that
each test the joined table's own columns, the statement also holds the OR of those
tests, and on DuckDB and PostgreSQL it reads exactly the rows and statistics it reads
without it — NULL and NaN in every column the tests read, dangling and NULL join keys."""

from __future__ import annotations

import math

import pytest

from proxy.analyze import analyze, parse_statements
from proxy.pushdown.scope import LONG_CONDITION, connectors, filtered_source, implied_conjuncts
from proxy.rules import parse_rules
from proxy.settings import Settings
from tests.factories import open_engine, table_of_rows
from tests.probes import recorded_statistics

RULES = """
[defaults]
noise_scale = "local"  # raw iDP: the statistics its sensitivities read

[tables.orders]
privacy_unit = "o_custkey"
max_rows_per_unit = 3
[tables.orders.columns]
o_orderkey = { type = "int" }
o_custkey  = { type = "int" }

[tables.lineitem]
unit_via = { l_orderkey = "orders.o_orderkey" }
max_rows_per_link = 4
[tables.lineitem.columns]
l_orderkey = { type = "int" }
l_partkey  = { type = "int" }
l_quantity = { type = "float", domain = [0, 50] }
l_mode     = { type = "text", keys = ["air", "sea"] }

[tables.part]
public = true
unique = ["p_partkey"]
[tables.part.columns]
p_partkey = { type = "int" }
p_brand   = { type = "text" }
p_size    = { type = "int" }
p_weight  = { type = "float" }
"""
NAN = float("nan")
ORDERS = [(o, o % 5) for o in range(1, 13)]
BRANDS = ["b1", "b2", "b3", None]
SIZES = [1, 3, 5, 7, None]
WEIGHTS = [0.5, 2.0, 3.5, NAN, None, math.inf]
# parts with every mix of NULL and NaN in the tested columns, one with a NULL key
PARTS = [(p, BRANDS[p % 4], SIZES[p % 5], WEIGHTS[p % 6]) for p in range(1, 41)]
PARTS += [(None, "b1", 3, 3.5)]
QUANTITIES = [0.5, 4.0, 10.0, 15.0, NAN, None, 30.0]
# line items of every part, of dangling (99) and NULL parts
LINES = [(1 + i % 12, (None if i % 23 == 0 else 99 if i % 17 == 0 else 1 + i % 41),
          QUANTITIES[i % 7], "air" if i % 3 else "sea") for i in range(200)]


def _tables():
    return {
        "orders": table_of_rows(ORDERS, {"o_orderkey": "BIGINT", "o_custkey": "BIGINT"}),
        "lineitem": table_of_rows(LINES, {"l_orderkey": "BIGINT", "l_partkey": "BIGINT",
                                          "l_quantity": "DOUBLE PRECISION",
                                          "l_mode": "TEXT"}),
        "part": table_of_rows(PARTS, {"p_partkey": "BIGINT", "p_brand": "TEXT",
                                      "p_size": "BIGINT", "p_weight": "DOUBLE PRECISION"}),
    }


Q19_LIKE = """SELECT l_mode, COUNT(*), SUM(l_quantity), MEDIAN(l_quantity)
FROM lineitem, part
WHERE (p_partkey = l_partkey AND p_brand = 'b1' AND p_size BETWEEN 1 AND 5
       AND l_quantity >= 1 AND l_quantity <= 11)
   OR (p_partkey = l_partkey AND p_brand IN ('b2', 'b3') AND p_weight > 2
       AND l_quantity >= 10 AND l_mode = 'air')
   OR (p_partkey = l_partkey AND NOT p_weight < 1 AND l_quantity < 20)
GROUP BY l_mode"""


def test_the_implied_conjunct_reads_the_same_rows(backend_url):
    with open_engine(backend_url, RULES, _tables) as engine:
        plan = analyze(parse_statements(Q19_LIKE)[0], engine.rules, Settings())
        (implied,) = implied_conjuncts(plan)
        text = implied.sql(dialect=engine.backend.dialect)
        # each branch's tests of the part alone, nothing of the line item
        assert "p_brand" in text and "p_weight" in text and "l_quantity" not in text
        _, groups, keys, statements = recorded_statistics(engine, Q19_LIKE)
        with_it = [sql for sql, _ in statements if f"AND ({text})" in sql]
        assert with_it  # every statement over the scope's rows holds it
        assert all(f"AND ({text})" in sql for sql, _ in statements if "p_brand" in sql)
        for sql in with_it:
            without = sql.replace(f"AND ({text})", "")
            assert "p_brand" in without  # the WHERE itself stays
            assert _rows(engine, sql) == _rows(engine, without)
        # and the statistics are those of the plain query's rows
        counts = _plain_counts(engine)
        assert sum(counts.values()) > 0
        for (mode,) in keys:
            assert groups[(mode,)].rows == counts.get(mode, 0)


def _rows(engine, sql: str) -> list[tuple]:
    """The statement's rows, NaN made comparable."""
    rows = engine.backend.query(sql)
    return sorted((tuple("nan" if isinstance(v, float) and math.isnan(v) else v
                         for v in row) for row in rows), key=repr)


def _plain_counts(engine) -> dict:
    """The plain query's rows per mode, counted by the backend itself."""
    plain = Q19_LIKE.replace(", SUM(l_quantity), MEDIAN(l_quantity)", "")
    return {mode: count for mode, count in engine.backend.query(plain)}


@pytest.mark.parametrize("where", [
    # a branch without a test of the part alone: nothing implied
    "(p_partkey = l_partkey AND p_brand = 'b1') OR (p_partkey = l_partkey AND l_quantity > 3)",
    # a test reading both tables is no test of the part alone
    "(p_partkey = l_partkey AND p_size < l_quantity) OR (p_partkey = l_partkey AND p_size > 4)",
])
def test_nothing_is_implied_where_a_branch_does_not_test_the_table_alone(where):
    sql = f"SELECT COUNT(*) FROM lineitem, part WHERE {where}"
    plan = analyze(parse_statements(sql)[0], parse_rules(RULES), Settings())
    assert implied_conjuncts(plan) == []


def test_a_long_where_is_sent_without_it():
    """A WHERE that the implied conjunct would take beyond LONG_CONDITION ANDs and ORs is
    wrapped whole (``opaque_if_long``), the conjunct with it: it is left out."""
    rules = parse_rules(RULES)
    branch = "(p_partkey = l_partkey AND p_size = {0} AND l_quantity > {0})"
    short = " OR ".join(branch.format(i) for i in range(3))
    long = " OR ".join(branch.format(i) for i in range(12))
    for where, implied in ((short, True), (long, False)):
        plan = analyze(parse_statements(f"SELECT COUNT(*) FROM lineitem, part WHERE {where}")[0],
                       rules, Settings())
        (conjunct,) = implied_conjuncts(plan)
        assert (connectors(plan.where) + connectors(conjunct) + 1 <= LONG_CONDITION) == implied
        _, sent = filtered_source(plan)
        assert connectors(sent) > connectors(plan.where) if implied \
            else connectors(sent) == connectors(plan.where)
