"""Statements rendered once per plan shape (issue 37; ``proxy.pushdown.scope.reused_sql``)
are byte for byte the ones a fresh rendering gives, over TPC-H's plans (the rules of
benchmarks/tpch.py, customer the unit): the bucketed contributions of every SUM and
COUNT over the unit's chain (``contribution_ladders``), the grouped statistics' first
pass (``grouped_list_statistics``), with and without the keys read as bounded, on both
dialects, for the statement as written and with other literals; and a statement over
public tables (Q11) is analysed once and rendered once per engine. In process, no
backend: the statements are captured as they would be sent."""

from __future__ import annotations

from collections import OrderedDict

from benchmarks.tpch import RULES
from proxy.analyze import statement_tokens
from proxy.analyze.shapes import ShapeCache, shape_of
from proxy.backends.duckdb_backend import DuckDBBackend
from proxy.backends.postgres_backend import PostgresBackend
from proxy.privacy.contribution_bounds import (
    joint_clipped,
    ladder_reads,
    ladders_alone,
    rungs,
)
from proxy.privacy.noisy_answers import column_needs
from proxy.pushdown import compute_statistics, contributions, grouped_lists, scope
from proxy.pushdown.contributions import contribution_ladders
from proxy.pushdown.scope import bounded_keys, bounded_reads
from proxy.rules import parse_rules
from proxy.vocabulary import PassthroughPlan, QueryPlan
from tests.corpora import checking_session

TPCH = parse_rules(RULES)

# TPC-H's Q04, Q05, Q06, Q12, Q14 and Q19 (DuckDB's tpch extension's text, shortened
# where the statement's plan is the same), each with a variant of other literals
QUERIES = {
    "q04": ("SELECT o_orderpriority, count(*) AS order_count FROM orders "
            "WHERE o_orderdate >= CAST('1993-07-01' AS date) "
            "AND o_orderdate < CAST('1993-10-01' AS date) AND EXISTS (SELECT * FROM lineitem "
            "WHERE l_orderkey = o_orderkey AND l_commitdate < l_receiptdate) "
            "GROUP BY o_orderpriority ORDER BY o_orderpriority", "1993-10-01", "1994-01-01"),
    "q05": ("SELECT n_name, sum(l_extendedprice * (1 - l_discount)) AS revenue "
            "FROM customer, orders, lineitem, supplier, nation, region "
            "WHERE c_custkey = o_custkey AND l_orderkey = o_orderkey AND l_suppkey = s_suppkey "
            "AND c_nationkey = s_nationkey AND s_nationkey = n_nationkey "
            "AND n_regionkey = r_regionkey AND r_name = 'ASIA' "
            "AND o_orderdate >= CAST('1994-01-01' AS date) "
            "AND o_orderdate < CAST('1995-01-01' AS date) "
            "GROUP BY n_name ORDER BY revenue DESC", "'ASIA'", "'EUROPE'"),
    "q06": ("SELECT sum(l_extendedprice * l_discount) AS revenue FROM lineitem "
            "WHERE l_shipdate >= CAST('1994-01-01' AS date) "
            "AND l_shipdate < CAST('1995-01-01' AS date) "
            "AND l_discount BETWEEN 0.05 AND 0.07 AND l_quantity < 24", "0.05", "0.04"),
    "q12": ("SELECT l_shipmode, sum(CASE WHEN o_orderpriority = '1-URGENT' "
            "OR o_orderpriority = '2-HIGH' THEN 1 ELSE 0 END) AS high_line_count "
            "FROM orders, lineitem WHERE o_orderkey = l_orderkey "
            "AND l_shipmode IN ('MAIL', 'SHIP') AND l_commitdate < l_receiptdate "
            "AND l_shipdate < l_commitdate AND l_receiptdate >= CAST('1994-01-01' AS date) "
            "AND l_receiptdate < CAST('1995-01-01' AS date) "
            "GROUP BY l_shipmode ORDER BY l_shipmode", "'SHIP'", "'RAIL'"),
    "q14": ("SELECT 100.00 * sum(CASE WHEN p_type LIKE 'PROMO%' THEN "
            "l_extendedprice * (1 - l_discount) ELSE 0 END) "
            "/ sum(l_extendedprice * (1 - l_discount)) AS promo_revenue FROM lineitem, part "
            "WHERE l_partkey = p_partkey AND l_shipdate >= date '1995-09-01' "
            "AND l_shipdate < CAST('1995-10-01' AS date)", "'1995-09-01'", "'1995-08-01'"),
    "q19": ("SELECT sum(l_extendedprice * (1 - l_discount)) AS revenue FROM lineitem, part "
            "WHERE (p_partkey = l_partkey AND p_brand = 'Brand#12' "
            "AND p_container IN ('SM CASE', 'SM BOX') AND l_quantity >= 1 "
            "AND l_quantity <= 1 + 10 AND p_size BETWEEN 1 AND 5 "
            "AND l_shipmode IN ('AIR', 'AIR REG') AND l_shipinstruct = 'DELIVER IN PERSON') "
            "OR (p_partkey = l_partkey AND p_brand = 'Brand#23' "
            "AND p_container IN ('MED BAG', 'MED BOX') AND l_quantity >= 10 "
            "AND l_quantity <= 10 + 10 AND p_size BETWEEN 1 AND 10 "
            "AND l_shipmode IN ('AIR', 'AIR REG') AND l_shipinstruct = 'DELIVER IN PERSON')",
            "'Brand#12'", "'Brand#13'"),
}
Q11 = ("SELECT ps_partkey, sum(ps_supplycost * ps_availqty) AS value "
       "FROM partsupp, supplier, nation WHERE ps_suppkey = s_suppkey "
       "AND s_nationkey = n_nationkey AND n_name = 'GERMANY' GROUP BY ps_partkey "
       "HAVING sum(ps_supplycost * ps_availqty) > (SELECT sum(ps_supplycost * ps_availqty) "
       "* 0.0001000000 FROM partsupp, supplier, nation WHERE ps_suppkey = s_suppkey "
       "AND s_nationkey = n_nationkey AND n_name = 'GERMANY') ORDER BY value DESC")


def _sent(plan: QueryPlan, capabilities, shift: int) -> list[str]:
    """The statistics statements of ``plan`` at the shift s: its bucketed contributions
    (no rows come back) and, where the engine reads more than ladders, its statistics'
    first pass (one row of NULLs)."""
    sent: list[str] = []
    wanted, joint = ladder_reads(plan, joint_clipped(plan, shift))  # as the engine reads
    if wanted:
        ladders = tuple(rungs(c, plan.table.columns.get(c.column), shift // plan.table.group_size)
                        for c in wanted)
        contribution_ladders(plan, wanted, ladders, capabilities, None,
                             lambda sql: sent.append(sql) or [], joint)
    if not ladders_alone(plan, shift):
        compute_statistics(plan, column_needs(plan, shift, False), capabilities, None,
                           lambda sql: sent.append(sql) or [(None,) * 64])
    return sent


def test_a_kept_tpch_statement_is_the_one_rendered_afresh(monkeypatch):
    """Each plan's statements sent three times (the third joined from the pieces kept at
    the second) are the fresh rendering's: each combination differs from the one before
    in one of what the rendering is kept by (the keys read as bounded, the shift and so
    the ladders, the dialect), the WHERE's literals too in the second."""
    built = []
    for module, name in ((contributions, "bucket_sql"), (grouped_lists, "scope_select")):
        original = getattr(module, name)  # counted: what a rendering builds from
        monkeypatch.setattr(module, name, lambda *a, _o=original, **k: built.append(1)
                            or _o(*a, **k))
    kept: OrderedDict = OrderedDict()
    monkeypatch.setattr(scope, "_rendered", kept)
    reused = 0
    duckdb, postgres = DuckDBBackend.capabilities, PostgresBackend.capabilities
    for name, (sql, written, other) in QUERIES.items():
        session = checking_session(TPCH)  # one shape cache: the variant's plan is bound
        variant = sql.replace(written, other)
        for text, capabilities, shift, bounded in ((sql, duckdb, 60, True),
                                                   (variant, duckdb, 60, False),
                                                   (variant, duckdb, 7, False),
                                                   (sql, postgres, 7, True)):
            [(_, plan)] = session.check(text)
            assert isinstance(plan, QueryPlan), name
            with bounded_keys(bounded_reads(plan) if bounded else ()):
                sent = [_sent(plan, capabilities, shift) for _ in range(2)]
                before = len(built)
                sent.append(_sent(plan, capabilities, shift))
                reused += len(built) == before
                monkeypatch.setattr(scope, "_rendered", OrderedDict())
                fresh = _sent(plan, capabilities, shift)
                monkeypatch.setattr(scope, "_rendered", kept)
            assert fresh and sent == [fresh] * 3, (name, text, shift, bounded)
    assert reused == 4 * len(QUERIES), "a rendering was not reused: it was not tested"


def test_a_statement_over_public_tables_is_analysed_and_rendered_once_per_engine():
    """Q11 reads public tables only: it runs as written. Its plan is kept for that very
    statement (every literal as written), by rules, analyst and settings, and its
    rendering with it; another literal is analysed afresh."""
    cache = ShapeCache()
    [(canonical, plan)] = checking_session(TPCH, cache).check(Q11)
    assert canonical is None and isinstance(plan, PassthroughPlan)
    text = plan.text("duckdb")
    assert text == plan.sql.sql(dialect="duckdb") and "'GERMANY'" in text
    assert checking_session(TPCH, cache).check(Q11) == [(None, plan)]
    assert plan.text("duckdb") is text
    assert cache.knows(statement_tokens(Q11)[0])
    [(_, france)] = checking_session(TPCH, cache).check(Q11.replace("GERMANY", "FRANCE"))
    assert france is not plan and "'FRANCE'" in france.text("duckdb") \
        and "'GERMANY'" not in france.text("duckdb")
    assert checking_session(TPCH, cache, analyst="bob").check(Q11)[0][1] is not plan
    other = parse_rules(RULES)
    shape = shape_of(statement_tokens(Q11)[0])
    assert cache.plan(shape, ("zoe", checking_session(TPCH).settings, None), other) is None
    assert checking_session(other, cache).check(Q11)[0][1] is not plan
