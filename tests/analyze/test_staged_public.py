"""A correlated subquery over a protected table inside a subquery over public tables
(TPC-H Q20's shape, proxy/analyze/staged.py, docs/privacy.md §3.16), on both backends:
the subquery is released first per key of the public table it names, then the statement,
which reads public tables only, runs with those values in its place (post-processing,
nothing more charged); refusals spend nothing."""

from __future__ import annotations

from decimal import Decimal

import pytest

from proxy import session as session_module
from proxy.analyze import analyze, staged
from proxy.errors import BudgetExhausted
from proxy.session import Session
from proxy.settings import Settings
from proxy.vocabulary import PassthroughPlan
from tests.analyze.partsupp import LINES, PARTS, Q20, RULES, STOCK, SUPPLIERS
from tests.factories import engine_fixture
from tests.probes import refused_for_free

TABLES = {"lines": LINES, "stock": STOCK, "parts": PARTS, "suppliers": SUPPLIERS}
engine = engine_fixture(RULES, TABLES)
# One per backend for the tests that charge nothing: they check Q20 and run the SQL built
# from its plan with released rows of their own, or are refused (comparing the whole
# ledger before and after): the tables loaded once, not once per case (36 of them).
reading_engine = engine_fixture(RULES, TABLES, shared=True, name="reading_engine")


def _ask(engine, sql: str, analyst: str = "alice"):
    before = len(engine.ledger.entries(analyst))
    (answer,) = list(Session.open(engine, analyst).execute(sql))
    return answer, engine.ledger.entries(analyst)[before:]


def _chosen(values: dict[tuple[int, int], float]) -> list[tuple[str]]:
    """The statement's answer with ``values`` (per forest part and supplier) in the
    subquery's place, computed here from the tables."""
    forest = {k for k, name in zip(PARTS.columns["p_key"], PARTS.columns["p_name"])
              if name.startswith("forest")}
    kept = {supp for part, supp, avail in zip(*STOCK.columns.values())
            if part in forest and (part, supp) in values and avail > values[(part, supp)]}
    return [(f"s{supp}",) for supp in sorted(kept)]


@pytest.mark.usefixtures("no_noise")
def test_a_subquery_inside_a_public_subquery_is_released_per_pair(engine):
    """The half-sums per (forest part, supplier) are released first (one ledger row,
    0.5), then the statement over public tables runs with them (nothing more): s2 for
    (1, 2), and s3 for (4, 3), which shipped nothing and is compared with its released
    value like any other pair (the plain statement compares with NULL and drops it)."""
    answer, entries = _ask(engine, Q20)
    assert answer.rows == [("s2",), ("s3",)] == _chosen(
        {(1, 1): 15.0, (1, 2): 20.0, (2, 2): 10.0, (4, 3): 0.0})
    assert [entry[6] for entry in entries] == [Decimal("0.5")]
    assert answer.privacy["epsilon_spent"] == 0.5
    notes = " ".join(answer.privacy["notes"])
    # keys: the pairs stock holds of a forest part, not every forest part by supplier
    assert "a value for each of 4 keys" in notes and "read public tables only" in notes


def test_with_noise_the_answer_is_the_statement_with_the_released_values(engine,
                                                                         monkeypatch):
    """Noisy: every key, the empty pair (4, 3) too, is released a number, and the answer
    is the statement's with those numbers in the subquery's place."""
    released = []

    def kept(work, rows, rules, **options):
        released.append(rows[0])
        return with_values(work, rows, rules, **options)

    with_values = session_module.with_values
    monkeypatch.setattr(session_module, "with_values", kept)
    answer, entries = _ask(engine, Q20)
    values = {(part, supp): value for part, supp, value in released[0]}
    assert sorted(values) == [(1, 1), (1, 2), (2, 2), (4, 3)]
    assert all(isinstance(value, float) for value in values.values())
    assert answer.rows == _chosen(values) and len(entries) == 1


@pytest.mark.usefixtures("no_noise")
def test_a_negated_comparison_keeps_sqls_null(engine):
    """Under NOT, a comparison whose outer operand is NULL keeps no row in SQL (NOT of
    NULL); the released rows' EXISTS would be false there and NOT would keep the row, so
    the comparison is written out per key: (1, 2)'s stock 30 is NULL here and s2 drops
    (EXISTS kept it), (4, 3)'s 1 ≤ 0 is false and s3 stays, as the plain statement over the
    released values says."""
    negated = Q20.replace("AND avail > (", "AND NOT (CASE WHEN avail <> 30 THEN avail END <= (")
    negated = negated.replace("l_supp = ps_supp))", "l_supp = ps_supp)))")
    answer, _ = _ask(engine, negated)
    values = "(VALUES (1, 1, 15.0), (1, 2, 20.0), (2, 2, 10.0), (4, 3, 0.0)) AS r(p, s, v)"
    truth = engine.backend.query(
        f"SELECT s_name FROM suppliers WHERE s_key IN (SELECT ps_supp FROM stock, {values} "
        "WHERE ps_part IN (SELECT p_key FROM parts WHERE p_name LIKE 'forest%') AND ps_part = "
        "r.p AND ps_supp = r.s AND NOT (CASE WHEN avail <> 30 THEN avail END <= r.v)) "
        "ORDER BY s_name")
    assert answer.rows == [tuple(row) for row in truth] == [("s3",)]


def test_the_statement_with_any_released_values_runs_on_the_backend(reading_engine):
    """Total: the released rows read as a typed list (a NULL value, a negative one, an
    integer, a tiny float), compared as the disjunction per key would."""
    engine = reading_engine
    work = Session.open(engine, "alice").check(Q20)[0][1]
    rows = [(1, 1, None), (1, 2, -0.5), (2, 2, 7), (4, 3, 1e-300)]
    sql = session_module.with_values(work, [rows], engine.rules).sql(
        dialect=engine.backend.dialect)
    _, found = engine.backend.query_with_columns(sql)
    assert found == _chosen({(1, 2): -0.5, (2, 2): 7, (4, 3): 1e-300})  # s2, s3


@pytest.mark.parametrize("rows", [
    [(1, 1, None), (1, 2, -0.5), (2, 2, 7), (4, 3, 1e-300)],
    [(1, 1, 15.0), (1, 2, 20.0), (2, 2, 10.0), (4, 3, 0.0)],
    [(1, 2, 29.999999999999996), (2, 2, 2**53), (None, 3, 1.0), (4, None, 0.5)],
    [(4, 3, 0)],
    [(1, 2, Decimal("29.5")), (2, 2, Decimal("0.2"))],  # post-processing's numeric
])
def test_released_rows_read_as_lists_give_the_values_rows(reading_engine, rows):
    """Where the backend reads released rows from list parameters
    (``Capabilities.released_lists``), the statement gives the rows its VALUES gives:
    NULL keys and values, negatives, integers (2⁵³ too), tiny and long doubles; put back,
    the VALUES is written as before."""
    engine = reading_engine
    work = Session.open(engine, "alice").check(Q20)[0][1]
    statement = session_module.with_values(work, [rows], engine.rules)
    dialect = engine.backend.dialect
    written = statement.sql(dialect=dialect)
    _, expected = engine.backend.query_with_columns(written)
    listed = staged.released_as_lists(statement)
    assert listed is not None
    swaps, params = listed
    assert params == [[r[0] for r in rows], [r[1] for r in rows],
                      [None if r[2] is None else float(r[2]) for r in rows]]
    assert "VALUES" not in (listing := statement.sql(dialect=dialect))
    if engine.backend.capabilities.released_lists:
        _, found = engine.backend.query_with_columns(listing, params)
        assert found == expected
    staged.put_back(swaps)
    assert statement.sql(dialect=dialect) == written


def test_compact_released_rows_filled_are_the_values_written_whole(reading_engine):
    """``compact``: the first released row written, the rest kept aside; filled
    (``fill_released``), the very statement written with every row, which analyses
    alike (a public statement either way)."""
    engine = reading_engine
    work = Session.open(engine, "alice").check(Q20)[0][1]
    rows = [(1, 1, None), (1, 2, -0.5), (2, 2, 7), (4, 3, 1e-300)]
    whole = session_module.with_values(work, [rows], engine.rules)
    compact = session_module.with_values(work, [rows], engine.rules, compact=True)
    assert compact.sql().count("), (") == 0 < whole.sql().count("), (")
    assert type(analyze(compact, engine.rules, Settings())) is PassthroughPlan \
        is type(analyze(whole, engine.rules, Settings()))
    staged.fill_released(compact)
    assert compact.sql(dialect="postgres") == whole.sql(dialect="postgres")


@pytest.mark.parametrize("rows", [
    [(1, 1, float("inf"))], [(1, 1, 2**53 + 1)], [(1.5, 1, 1.0)], [(None, 1, 1.0)],
    [(1, True, 1.0)], [(1, 1, Decimal("NaN"))], [(1, "a", 1.0), (2, 3, 1.0)],
])
def test_released_rows_of_other_kinds_stay_values(reading_engine, rows):
    """A key column neither all integers nor all text (or only NULL), a value not finite,
    beyond 2⁵³ or not a number: no lists, the VALUES as written."""
    engine = reading_engine
    work = Session.open(engine, "alice").check(Q20)[0][1]
    statement = session_module.with_values(work, [rows], engine.rules)
    written = statement.sql(dialect="duckdb")
    assert staged.released_as_lists(statement) is None
    assert statement.sql(dialect="duckdb") == written


@pytest.mark.usefixtures("no_noise")
def test_a_literal_with_percent_s_keeps_the_values(engine):
    """A literal holding ``%s`` (which the backend would read as a placeholder once
    parameters are passed) keeps the VALUES: the same answer."""
    answer, _ = _ask(engine, Q20.replace("'forest%'", "'forest%s%' OR p_name LIKE 'forest%'"))
    assert answer.rows == [("s2",), ("s3",)]


@pytest.mark.usefixtures("no_noise")
def test_a_public_in_on_a_column_not_unique_leaves_the_keys_alone(engine):
    """``ps_part IN (SELECT ps_part FROM stock …)`` is no semi-join on a unique key: the
    release is over every pair stock holds, the statement keeps its IN as written."""
    answer, _ = _ask(engine, Q20.replace("SELECT p_key FROM parts WHERE p_name LIKE "
                                         "'forest%'", "SELECT ps_part FROM stock s2 WHERE "
                                         "s2.avail > 20"))
    assert answer.rows == [("s2",), ("s3",)]  # (1, 2): 30 > 20; (3, 3): 100 > 50
    assert any("a value for each of 5 keys" in note for note in answer.privacy["notes"])


@pytest.mark.usefixtures("no_noise")
def test_an_uncorrelated_subquery_inside_a_public_subquery(engine):
    """The AVG is released, then the public statement runs with it: one ledger row."""
    answer, entries = _ask(engine, "SELECT s_name FROM suppliers WHERE s_key IN (SELECT "
                                   "ps_supp FROM stock WHERE avail > (SELECT AVG(qty) FROM "
                                   "lines)) ORDER BY s_name")
    mean = sum(LINES.columns["qty"]) / len(LINES.columns["qty"])  # 14.6
    assert answer.rows == sorted({(f"s{supp}",) for supp, avail in zip(
        STOCK.columns["ps_supp"], STOCK.columns["avail"]) if avail > mean}) == [("s2",), ("s3",)]
    assert len(entries) == 1


@pytest.mark.parametrize("sql,fragment", [
    # a protected statement reading a public subquery once the release stands in it
    ("SELECT COUNT(*) FROM lines WHERE l_supp IN (SELECT ps_supp FROM stock WHERE avail > "
     "(SELECT SUM(qty) FROM lines l2 WHERE l2.l_part = ps_part AND l2.l_supp = ps_supp))",
     "is answered as the join on ps_supp where the rules declare it unique in stock"),
    # joined with stock on part of its unique key
    ("SELECT s_name FROM suppliers WHERE s_key IN (SELECT ps_supp FROM stock WHERE avail > "
     "(SELECT SUM(qty) FROM lines WHERE l_part = ps_part))", "a scalar subquery over lines"),
    # correlated otherwise than by equal columns
    ("SELECT s_name FROM suppliers WHERE s_key IN (SELECT ps_supp FROM stock WHERE avail > "
     "(SELECT SUM(qty) FROM lines WHERE l_part < ps_part))", "a scalar subquery over lines"),
    # in the HAVING of the subquery around it, not its WHERE
    ("SELECT s_name FROM suppliers WHERE s_key IN (SELECT ps_supp FROM stock GROUP BY ps_supp "
     "HAVING SUM(avail) > (SELECT SUM(qty) FROM lines))", "a scalar subquery over lines"),
    # the subquery around it reads a protected table
    ("SELECT s_name FROM suppliers WHERE s_key IN (SELECT l_supp FROM lines WHERE qty > "
     "(SELECT AVG(qty) FROM lines))", "IN (SELECT … FROM lines)"),
])
def test_what_cannot_be_staged_inside_a_public_subquery_is_refused_for_free(reading_engine,
                                                                           sql, fragment):
    refused_for_free(reading_engine, sql, "0A000", fragment)


def test_a_budget_short_of_the_release_refuses_before_it(engine):
    """One ``refused: budget`` row under the statement's hash, nothing spent."""
    before = engine.ledger.budgets("poor")
    with pytest.raises(BudgetExhausted):
        list(Session.open(engine, "poor").execute(Q20))
    assert [(e[6], e[9]) for e in engine.ledger.entries("poor")] == [
        (Decimal("0.5"), "refused: budget")]
    assert engine.ledger.budgets("poor") == before


def test_a_risky_function_under_exists_is_still_found():
    """EXISTS is not written out whole to test its name (Q20's VALUES of released rows
    each time), but what it holds is walked: a risky function inside still refuses
    passthrough, and a plain EXISTS over VALUES does not."""
    import sqlglot

    from proxy.analyze import _names_functions

    def named(sql: str) -> bool:
        return _names_functions(sqlglot.parse_one(sql, read="duckdb"))

    assert named("SELECT s FROM t WHERE EXISTS (SELECT 1 FROM read_csv('x.csv'))")
    assert named("SELECT s FROM t WHERE EXISTS (SELECT pg_sleep(1))")
    assert not named("SELECT s FROM t WHERE EXISTS (SELECT 1 FROM (VALUES (1, 2.5)) AS r(k, v) "
                     "WHERE r.k = t.s AND CAST(r.v AS DOUBLE) > 1)")


@pytest.mark.usefixtures("no_noise")
def test_a_stage_computed_as_a_decimal_is_written_as_its_number(engine):
    """``0.2 * COUNT(*)`` is post-processed as DECIMAL × BIGINT, its value a Python
    Decimal, which was written ``Decimal('…')`` into the statement: charged, then the
    backend failed (the review of 2026-11-29). Now the statement's own answer."""
    sql = Q20.replace("0.5 * SUM(qty)", "0.5 * COUNT(*)")
    answer, entries = _ask(engine, sql)
    assert answer.rows == _chosen({(1, 1): 1.5, (1, 2): 2.0, (2, 2): 2.0, (4, 3): 0.0})
    assert len(entries) == 1


@pytest.mark.parametrize("item", ["1 / (s_key - 2)", "CAST(s_name AS int)", "s_key * 2",
                                  "-s_key"])
def test_a_public_statement_that_could_fail_on_a_row_is_refused_for_free(reading_engine,
                                                                          item):
    """The statement over public tables runs after the stage is paid for, on the rows its
    released values keep: what can fail on a row there (a division, a cast, integer
    arithmetic) was charged, then failed where a kept row made it fail (the review of
    2026-11-29: PostgreSQL's division by zero); now refused before anything is spent."""
    sql = Q20.replace("SELECT s_name FROM", f"SELECT s_name, {item} FROM")
    refused_for_free(reading_engine, sql, "0A000", "could fail on a row after the subquery")


@pytest.mark.parametrize("change", [
    ("s_key IN (", "s_key = 'abc' AND s_key IN ("), ("s_key IN (", "s_name = 5 AND s_key IN ("),
    ("SELECT s_name FROM", "SELECT COALESCE(s_name, 1) FROM"),
    ("ORDER BY s_name", "ORDER BY 5"),
    ("s_key IN (", "s_name = (SELECT p_name FROM parts) AND s_key IN ("),
    ("ORDER BY s_name", "ORDER BY s_name LIMIT -1"),
])
def test_a_public_statement_the_backend_cannot_plan_is_refused_for_free(reading_engine,
                                                                         change):
    """What fails while the backend plans the public statement (a type mismatch, an
    ORDER BY position beyond the columns), a scalar subquery that may return several
    rows, a negative LIMIT: each was charged, then failed (the review of 2026-11-29);
    the statement is planned on the backend first (its compared values 0), and refused
    for free."""
    sql = Q20.replace(*change)
    refused_for_free(reading_engine, sql, "0A000", "")


@pytest.mark.parametrize("where", ["s_name = (SELECT SUM(qty) FROM lines)",
                                   "NOT (s_name = (SELECT SUM(qty) FROM lines))",
                                   "(SELECT SUM(qty) FROM lines) < s_name"])
def test_a_text_compared_with_a_released_number_is_refused_for_free(reading_engine, where):
    """The held statement's comparison is run on every row: DuckDB folded ``(s_name = 0
    OR TRUE)`` to TRUE, never cast a name, and the released value then failed (charged,
    then 58000; the second review of 2026-11-29)."""
    refused_for_free(reading_engine, f"SELECT s_name FROM suppliers WHERE {where}",
                     "0A000", "cannot run")
