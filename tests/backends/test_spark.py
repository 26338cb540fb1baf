"""The Spark backend (Spark Connect, here a Sail server started once per test session):
the same statistics as DuckDB on the same rows, every percentile computed exactly
(never ``percentile_approx``), and the ledger kept out of Spark."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import time
from decimal import Decimal

import pytest
import sqlglot
from sqlglot import exp
from sqlglot.errors import UnsupportedError

from proxy.admin import Analyst
from proxy.analyze import analyze, parse_statements
from proxy.backends import open_backend
from proxy.backends.duckdb_backend import DuckDBBackend
from proxy.backends.spark_dialect import DIALECT
from proxy.cli import LEDGER_NOT_SPARK, LEDGER_ONLY_SPARK, SPARK_NEEDS_LEDGER
from proxy.engine import Engine
from proxy.errors import BackendFailed, NotSupported, Refused, RulesError
from proxy.ledger import Ledger
from proxy.privacy.contribution_bounds import rungs
from proxy.privacy.microaggregation import METHODS
from proxy.privacy.noisy_answers import column_needs
from proxy.pushdown import compute_statistics
from proxy.pushdown.contributions import bucket_sql, contribution_ladders
from proxy.pushdown.scope import exact_sum, read_sum
from proxy.pushdown.ungrouped import _beyond, _beyond_test, _extremes
from proxy.rules import parse_rules
from proxy.settings import Settings
from proxy.statistics import Contribution
from tests import forked_cli
from tests.contract import (
    APPROXIMATE,
    CONTRACT,
    DEEP_GROUPED,
    DEEP_RULES,
    RULES,
    RULES_TEXT,
    load_deep,
)
from tests.wireserver import admin, running_proxy


@pytest.mark.parametrize("sql", CONTRACT)
def test_same_statistics_on_spark_and_duckdb(sql, engines):
    plan = analyze(parse_statements(sql)[0], RULES, Settings())
    on_spark, on_duckdb = (engine.statistics(plan) for engine in engines)
    assert on_spark[0] == on_duckdb[0]  # the per-unit bound's shift
    assert on_spark[1] == on_duckdb[1]
    assert on_spark[2] is None  # no data version on a plain Spark table: nothing cached


# t with its units' rows bounded, for aggregates over per-unit values
PER_UNIT_RULES = parse_rules(RULES_TEXT.replace('privacy_unit = "unit"',
                                                'privacy_unit = "unit"\nmax_rows_per_unit = 3'))
NEWER_FORMS = [  # the forms of 2026-11-29, whose statements Spark's dialect writes too
    "SELECT MEDIAN(s) FROM (SELECT unit, SUM(x) AS s FROM t GROUP BY unit) q",
    "SELECT MAX(s), MIN(s) FROM (SELECT unit, SUM(y) AS s FROM t GROUP BY unit) q",
    "SELECT AVG(s) FROM (SELECT unit, SUM(x) AS s FROM t GROUP BY unit) q",
    "SELECT grp, AVG(s) FROM (SELECT unit, grp, SUM(x) AS s FROM t GROUP BY unit, grp) q "
    "GROUP BY grp",
    "SELECT SUM(ln(x + 1)), AVG(log(10, x + 1)), SUM(exp(y / 10.0)), AVG(power(x, 2)) FROM t",
    "SELECT COUNT(*), SUM(y) FROM t WHERE grp SIMILAR TO '[ab]%' AND LENGTH(grp) = 1",
]


@pytest.mark.parametrize("sql", NEWER_FORMS)
def test_the_newer_forms_read_the_same_on_spark(sql, engines):
    """Aggregates over per-unit values (their ladders and ranks), log/exp/power inside
    aggregates, keyed terms decided per key: the same statistics as DuckDB's. (STDDEV of
    per-unit values is left out: its M2 is the backends' own VAR_POP, equal only to the
    last bits.)"""
    plan = analyze(parse_statements(sql)[0], PER_UNIT_RULES, Settings())
    on_spark, on_duckdb = (engine.statistics(plan) for engine in engines)
    assert on_spark[:2] == on_duckdb[:2]


def test_no_percentile_sent_to_spark_is_approximate(engines):
    spark = engines[0].backend
    sent: list[str] = []

    def execute(sql: str):
        sent.append(sql)
        return spark.query(sql)

    for sql in CONTRACT:
        plan = analyze(parse_statements(sql)[0], RULES, Settings())
        compute_statistics(plan, column_needs(plan, 3), spark.capabilities, None, execute)
    assert any("PERCENTILE_DISC" in sql for sql in sent)
    assert not [sql for sql in sent if any(word in sql.upper() for word in APPROXIMATE)]


def test_the_spark_dialect_renders_percentiles_exactly_or_not_at_all():
    ordered = "PERCENTILE_DISC(0.5D) WITHIN GROUP (ORDER BY x NULLS LAST)"
    assert sqlglot.transpile("SELECT percentile_disc(0.5) WITHIN GROUP (ORDER BY x) FROM t",
                             read="postgres", write=DIALECT) == [f"SELECT {ordered} FROM t"]
    assert sqlglot.transpile("SELECT quantile_disc(x, [0.5, 0.9]) FROM t", read="duckdb",
                             write=DIALECT) == [
        f"SELECT ARRAY({ordered}, {ordered.replace('0.5D', '0.9D')}) FROM t"]
    assert sqlglot.transpile("SELECT quantile_cont(x, 0.5) FROM t", read="duckdb",
                             write=DIALECT) == [f"SELECT {ordered.replace('DISC', 'CONT')} FROM t"]
    with pytest.raises(UnsupportedError):
        sqlglot.transpile("SELECT approx_quantile(x, 0.5) FROM t", read="duckdb", write=DIALECT,
                          unsupported_level=sqlglot.ErrorLevel.RAISE)


def test_a_fraction_compares_as_the_double_it_names(engines):
    """Spark reads ``526.431`` as a DECIMAL(6, 3), and Sail compares a double with it
    wrongly (the double 526.431 is not ≤ it there); ``sparkexact`` writes it as a DOUBLE,
    so a value read back and written as a literal selects itself on Spark as on DuckDB
    (the exponential mechanism's windows are cut at such literals)."""
    value = exp.Div(this=exp.cast(exp.Literal.number(526431), "DOUBLE"),
                    expression=exp.Literal.number(1000))
    literal = exp.Literal.number(repr(526431 / 1000))
    statement = exp.select(exp.LTE(this=value, expression=literal),
                           exp.EQ(this=value.copy(), expression=literal.copy()))
    answers = [engine.backend.query(statement.sql(dialect=engine.backend.dialect))
               for engine in engines]
    assert answers[0] == answers[1] == [(True, True)]


def test_an_exact_sum_past_a_bigint_is_the_same_on_spark(engines):
    """``exact_sum`` scales each value by 10⁶ into a BIGINT; three values of 4·10¹² sum
    to 1.2·10¹⁹, past a BIGINT, which DuckDB widens and Spark does not (Sail wrapped it
    to a negative total): on Spark the integers are summed as DECIMAL(38, 0)."""
    rows = exp.union(*[exp.select(exp.alias_(exp.cast(exp.Literal.number(4 * 10**12),
                                                      "DOUBLE"), "v")) for _ in range(3)],
                     distinct=False)
    for lower, upper in ((0, 9e12), (None, None)):  # the narrow and the wide forms
        statement = exp.select(exact_sum(exp.column("v"), lower, upper)).from_(
            rows.subquery("r"))
        totals = [read_sum(engine.backend.query(statement.sql(
            dialect=engine.backend.dialect))[0][0]) for engine in engines]
        assert totals[0] == totals[1] == 1.2e13


@pytest.mark.parametrize("sql", ["SELECT SUM(x) FROM t",
                                 "SELECT grp, SUM(x) FROM t WHERE y > -20 GROUP BY grp"])
def test_crossed_buckets_on_spark_give_duckdbs_ladders(sql, engines):
    """Two contributions' buckets (a signed one), grouped crossed on Spark
    (``crossed_buckets``: both bucket columns at once, 22·9 cells) and by grouping sets
    on DuckDB: the same counts beyond and clipped sums at every rung of every group."""
    plan = analyze(parse_statements(sql)[0], RULES, Settings())
    wanted = (Contribution("x", 0.0, 2), Contribution("y", 0.0))
    ladders = tuple(rungs(c, plan.table.columns[c.column], 3) for c in wanted)
    assert [engine.backend.capabilities.crossed_buckets for engine in engines] == [True, False]
    assert "GROUPING SETS" not in bucket_sql(plan, wanted, ladders, None, crossed=True).sql()
    found = [contribution_ladders(plan, wanted, ladders, engine.backend.capabilities, None,
                                  engine.backend.query) for engine in engines]
    assert found[0] == found[1]
    assert any(any(ladder.beyond) and any(ladder.clipped) for group in found[0].values()
               for ladder in group.values())


def test_counts_clipped_across_groups_give_duckdbs_ladders_on_spark(engines):
    """A unit's presence per group (COUNT(DISTINCT unit): ``CASE WHEN u IS NULL …`` in
    the unit's GROUP BY) and its non-NULL values (COUNT(x)), on the window's ladder,
    clipped across groups (each unit's total over the groups, its first group): the same
    counts beyond and clipped sums at every rung of every group as on DuckDB."""
    plan = analyze(parse_statements("SELECT grp, COUNT(DISTINCT unit), COUNT(x) FROM t "
                                    "GROUP BY grp")[0], RULES, Settings())
    wanted = (Contribution("", power=0, units=True, fine=True),
              Contribution("x", power=0, fine=True))
    ladders = tuple(rungs(c, None, 3) for c in wanted)
    found = [contribution_ladders(plan, wanted, ladders, engine.backend.capabilities, None,
                                  engine.backend.query, frozenset(wanted))
             for engine in engines]
    assert found[0] == found[1]
    assert any(ladder.beyond[0] for group in found[0].values() for ladder in group.values())


def test_ordered_lists_and_slices_read_the_same_on_spark(engines):
    """The extremes' forms (``ARRAY_AGG(v ORDER BY v)``, a slice, a FILTER on it), which
    sqlglot's Spark would render unordered: the same values as DuckDB."""
    x = exp.column("x")
    items = [_beyond(x, 50.0, 3, "top"), _beyond(x, 50.0, 2, "bottom", raw=exp.column("x")),
             _extremes(x, 3, "bottom", exp.select("x").from_("t")),
             exp.CountIf(this=_beyond_test(x, 50.0, "top", exp.column("x"), inclusive=True))]
    statement = exp.select(*items).from_("t").where("x = x")  # NaN = NaN is true in both
    answers = [engine.backend.query(statement.sql(dialect=engine.backend.dialect))
               for engine in engines]
    assert answers[0] == answers[1]
    assert [len(values) for values in answers[0][0][:3]] == [3, 2, 3]
    assert answers[0][0][3] >= 3  # the values at or beyond 50, the check of a deep read


def test_the_ledger_refuses_a_spark_backend(engines):
    with pytest.raises(BackendFailed) as refused:
        Ledger(engines[0].backend, RULES)
    assert refused.value.sqlstate == "0A000"
    assert refused.value.message == ("the Spark backend cannot hold the ledger (no transactions); "
                                     "keep the ledger in DuckDB or PostgreSQL")


def test_a_query_over_spark_is_answered_and_charged_in_the_ledger_beside_it(engines):
    spark = engines[0]
    ledger = spark.ledger
    before = len(ledger.entries("ann"))
    answers = []
    Analyst(spark).query("ann", "SELECT MEDIAN(x), COUNT(*) FROM t WHERE y > 0", None, None, None,
                         answers.append)
    (answer,) = answers
    assert answer["columns"] and len(answer["rows"]) == 1 and "spent epsilon" in answer["notice"]
    assert len(ledger.entries("ann")) == before + 1  # the debit, in the DuckDB store
    with pytest.raises(Refused):  # refused as on the other backends, nothing spent
        Analyst(spark).query("ann", "SELECT * FROM t", None, None, None, answers.append)
    assert len(ledger.entries("ann")) == before + 1


def test_a_release_over_spark_is_refused_before_anything_is_spent(engines):
    spark = engines[0]
    before = len(spark.ledger.entries("ann"))
    with pytest.raises(NotSupported) as refused:
        Analyst(spark).release("ann", "t", "x", 5, "1", METHODS[0], "equal", None, [], None,
                               "table:out", lambda step: None)
    assert refused.value.sqlstate == "0A000" and "Spark" in refused.value.message
    assert len(spark.ledger.entries("ann")) == before


@pytest.mark.parametrize("command", [["serve"], ["budget", "show", "--user", "ann"]])
def test_the_cli_refuses_spark_without_a_ledger_beside_it(command, tmp_path):
    """No server needed: refused before anything is opened, in one line."""
    env = {**os.environ, "IDP_PROXY_HOME": str(tmp_path)}
    out = forked_cli.run([*command, "--backend", "sc://127.0.0.1:1"], env=env)
    assert (out.returncode, out.stderr.strip()) == (1, f"ERROR [0A000]: {SPARK_NEEDS_LEDGER}")
    out = forked_cli.run([*command, "--backend", "sc://127.0.0.1:1", "--ledger", "sc://h:1"],
                         env=env)
    assert (out.returncode, out.stderr.strip()) == (1, f"ERROR [22023]: {LEDGER_NOT_SPARK}")
    # elsewhere the ledger lives in the backend: a second one would hold full budgets
    for backend in ([], ["--backend", f"duckdb:///{tmp_path / 'd.duckdb'}"]):
        out = forked_cli.run([*command, *backend, "--ledger",
                              f"duckdb:///{tmp_path / 'l.duckdb'}"], env=env)
        assert (out.returncode, out.stderr.strip()) == (1, f"ERROR [22023]: {LEDGER_ONLY_SPARK}")
    assert not list(tmp_path.iterdir())  # not even the demo was created


def test_the_budget_commands_read_the_ledger_url_without_reaching_spark(tmp_path):
    rules = tmp_path / "rules.toml"
    rules.write_text("[analysts.ann]\nbudget = 3\n[tables.t]\npublic = true\n")
    where = ["--rules", str(rules), "--backend", "sc://127.0.0.1:1",  # nothing listens
             "--ledger", f"duckdb:///{tmp_path / 'ledger.duckdb'}"]
    out = forked_cli.run(["budget", "show", *where, "--format", "json", "--user", "ann"])
    assert out.returncode == 0, out.stderr
    assert "ann" in out.stdout and (tmp_path / "ledger.duckdb").exists()


DEMO_SCRIPT = r"""
\dt
\d visits
\d regions
SELECT COUNT(*) FROM people;
SELECT region, MEDIAN(income) FROM people GROUP BY region ORDER BY region;
SELECT r.name, COUNT(*) FROM people p JOIN regions r ON p.region = r.code GROUP BY r.name;
SELECT department, AVG(cost) FROM visits WHERE visited_at >= '2024-01-01' GROUP BY department;
SELECT * FROM people;
SELECT code, name FROM regions ORDER BY code;
SHOW idp.budget;
"""


def test_psql_through_serve_over_sail_with_the_ledger_in_duckdb(sail_url, tmp_path):
    """The acceptance of issue 20: the demo loaded into Spark by ``idp-proxy demo``,
    served from another process (whose Sail session reads the tables from the rules'
    locations), psql's catalog queries answered, refusals as on the other backends, the
    debits in the DuckDB ledger."""
    rules, ledger = tmp_path / "demo-spark.toml", f"duckdb:///{tmp_path / 'ledger.duckdb'}"
    loaded = forked_cli.run(["demo", "--backend", sail_url, "--location",
                             str(tmp_path / "demo-data"), "--rules-out", str(rules)])
    assert loaded.returncode == 0, loaded.stderr
    with running_proxy(rules, sail_url, tmp_path / "home", ledger=ledger) as proxy:
        out = subprocess.run([shutil.which("psql"), "-X", proxy.dsn("alice", sslmode="disable"),
                              "-f", "-"], input=DEMO_SCRIPT, capture_output=True, text=True,
                             timeout=120, check=False)
    listing, notices = out.stdout, [line for line in out.stderr.splitlines() if "NOTICE" in line]
    for table in ("people", "visits", "regions"):
        assert f" {table} " in listing and "| table" in listing
    described = {line.split("|")[0].strip(): line.split("|")[1].strip()
                 for line in listing.splitlines() if line.count("|") >= 4}
    assert described["visited_at"] == "timestamp without time zone"
    assert described["cost"] == "double precision" and described["code"] == "text"
    count = int(listing.split("count")[1].split()[1])  # noisy, ε 0.1: within a few dozen
    assert abs(count - 20_000) < 500
    assert all(f" {region} " in listing for region in ("north", "Northern district"))
    assert len(notices) == 4 and all("spent epsilon" in line for line in notices)
    refusals = [line for line in out.stderr.splitlines() if "ERROR" in line]
    assert refusals == ["psql:<stdin>:9: ERROR:  SELECT * would return rows of the protected "
                        "table people; ask for aggregates instead: " + refusals[0].split(
                            "ask for aggregates instead: ")[1]]
    spent = Decimal(100) - Decimal(listing.split("budget")[1].split()[1])
    entries = json.loads(admin(rules, sail_url, tmp_path / "home", "ledger", "--format", "json",
                               ledger=ledger).stdout, parse_float=Decimal)
    assert sum(Decimal(e["epsilon"]) for e in entries if e["status"] == "charged") == spent > 0


def test_a_location_is_read_by_spark_only_and_must_hold_parquet(engines, tmp_path):
    text = "[tables.t]\npublic = true\nlocation = '{}'\nunique = ['x']\n" \
           "[tables.t.columns]\nx = {{ type = 'int' }}\n"
    rules = parse_rules(text.format(tmp_path / "nothing"), "r.toml")
    with pytest.raises(RulesError) as refused:
        Engine(rules, DuckDBBackend(":memory:"))
    assert str(refused.value) == ("r.toml: [tables.t] location is read by the Spark backend "
                                  "only; this backend reads its own tables")
    with pytest.raises(RulesError) as refused:  # the process's one Spark session
        Engine(rules, engines[0].backend, store=DuckDBBackend(":memory:"))
    assert str(refused.value) == ("r.toml: [tables.t] the Spark backend cannot read Parquet "
                                  f"files at {tmp_path / 'nothing'}")
    out = forked_cli.run(["demo", "--backend", "duckdb:///x.duckdb", "--location", "d",
                          "--rules-out", str(tmp_path / "r.toml")])
    assert (out.returncode, out.stderr.strip()) == (
        1, ("ERROR [22023]: idp-proxy demo loads the demo into Spark (--backend "
            "sc://host:port); the DuckDB demo is created on first use"))


def test_an_unreachable_spark_fails_in_seconds_not_minutes(tmp_path):
    """pyspark would retry a server that does not answer for 10 minutes or more (a query,
    or the session's release when the server stops): the backend gives up within a second."""
    rules = tmp_path / "rules.toml"
    rules.write_text("[analysts.ann]\n[tables.t]\nprivacy_unit = 'u'\n"
                     "[tables.t.columns]\nu = { type = 'int' }\n")
    started = time.monotonic()
    out = forked_cli.run(["query", "--rules", str(rules), "--backend", "sc://127.0.0.1:1",
                          "--ledger", f"duckdb:///{tmp_path / 'ledger.duckdb'}", "--user", "ann",
                          "SELECT COUNT(*) FROM t"], timeout=60)
    assert (out.returncode, out.stderr.strip()) == (
        1, "ERROR [08006]: the database behind the proxy is unreachable")
    assert time.monotonic() - started < 20


def test_a_condition_of_more_ands_and_ors_than_sail_plans_quickly_is_refused_for_free(engines):
    """Sail plans a chain of ANDs in time growing faster than its length, and a chain of
    500 crashed the server (issue 30): on Spark a statement whose conditions (WHERE,
    FILTER) hold more than max_connectors ANDs and ORs is refused at analysis with
    54001, nothing charged; one under the limit is answered, as fast as DuckDB's."""
    from proxy.session import Session

    spark = engines[0]
    limit = spark.backend.capabilities.max_connectors
    assert limit == 256 and engines[1].backend.capabilities.max_connectors is None
    session = Session.open(spark, "ann")
    before = spark.ledger.remaining("ann"), len(spark.ledger.entries("ann"))
    chain = " AND ".join(f"(y <> {i} OR x > 5)" for i in range(1_900))
    for sql in (f"SELECT COUNT(*) FROM t WHERE {chain}",
                "SELECT " + ", ".join("COUNT(*) FILTER (WHERE " + " AND ".join(
                    f"(y <> {i} OR x > {k})" for i in range(30)) + ")" for k in range(6))
                + " FROM t",  # 6 FILTERs of 59 ANDs and ORs
                "SELECT COUNT(*) FROM t WHERE " + " OR ".join(
                    f"x > {i}.5" for i in range(limit + 2))):  # 257 ORs
        with pytest.raises(Refused) as refused:
            list(session.execute(sql))
        assert refused.value.sqlstate == "54001" and "more than 256" in str(refused.value)
    assert (spark.ledger.remaining("ann"), len(spark.ledger.entries("ann"))) == before
    started = time.perf_counter()
    (answer,) = session.execute("SELECT COUNT(*) FROM t WHERE " + " OR ".join(
        f"x > {i}.5" for i in range(limit + 1)))  # 256 ORs: at the limit
    assert answer.rows and time.perf_counter() - started < 3.0


def test_exists_over_a_table_of_the_same_unit_is_computed_on_sail(engines, sail_url,
                                                                  tmp_path):
    """Sail computes a correlated EXISTS in a SELECT list (the probe at the engine's
    start says so), so TPC-H Q04's and Q21's EXISTS and NOT EXISTS over line items of
    the outer row's own customer are answered on it, with DuckDB's statistics."""
    from proxy.backends import open_backend
    from tests.analyze.chains import RULES as CHAINS
    from tests.analyze.chains import tables as chains
    from tests.factories import load

    rules, tables = parse_rules(CHAINS), chains()
    duckdb_url = f"duckdb:///{tmp_path / 'chains.duckdb'}"
    load(sail_url, tables)
    load(duckdb_url, tables)
    spark, duck = engines[0].backend, open_backend(duckdb_url)  # the module's session
    try:
        engines = Engine(rules, spark, store=DuckDBBackend(":memory:")), Engine(rules, duck)
        assert spark.capabilities.exists_in_select
        for sql in ("SELECT COUNT(*) FROM orders WHERE o_orderkey > 100 AND EXISTS (SELECT * "
                    "FROM lineitem WHERE l_orderkey = o_orderkey AND l_price > 60)",
                    "SELECT n_name, COUNT(*), SUM(l1.l_price) FROM supplier, lineitem l1, "
                    "orders, nation WHERE s_suppkey = l1.l_suppkey AND o_orderkey = "
                    "l1.l_orderkey AND EXISTS (SELECT * FROM lineitem l2 WHERE l2.l_orderkey "
                    "= l1.l_orderkey AND l2.l_suppkey <> l1.l_suppkey) AND NOT EXISTS (SELECT "
                    "* FROM lineitem l3 WHERE l3.l_orderkey = l1.l_orderkey AND l3.l_suppkey "
                    "<> l1.l_suppkey AND l3.l_price > 60) AND s_nationkey = n_nationkey "
                    "GROUP BY n_name"):
            plan = analyze(parse_statements(sql)[0], rules, Settings())
            on_spark, on_duckdb = (engine.statistics(plan) for engine in engines)
            assert on_spark[:2] == on_duckdb[:2] and on_duckdb[1]
    finally:
        duck.close()


def test_drawn_windows_are_read_on_spark_as_on_duckdb(sail_url, tmp_path):
    """An ungrouped drawn MAX or MIN reads its first windows (thousands of values from
    one end) in the statistics' first pass on Spark too (``extremes_in_pass``: beyond
    a pilot's threshold, checked by a count in the same pass), not in a deep top-k of
    their own; under GROUP BY each group's first windows come from a histogram and the
    values inside the buckets that hold them (``bucketed_ranks``), not a ROW_NUMBER
    over every row. The same values read, hence the same draws from the same random
    source, as DuckDB's list aggregates, ties, NULLs, NaN, values beyond the domain,
    a NULL key and a key the rules do not list included."""
    from tests.privacy.laws import SeededSource

    duckdb_url = f"duckdb:///{tmp_path / 'deep.duckdb'}"
    load_deep(sail_url)
    load_deep(duckdb_url)
    backends = open_backend(sail_url), DuckDBBackend(":memory:"), open_backend(duckdb_url)
    try:
        for sql in ("SELECT MAX(x) FROM deep", "SELECT MIN(x) FROM deep WHERE a < 8",
                    *DEEP_GROUPED):
            plan = analyze(parse_statements(sql)[0], DEEP_RULES, Settings())
            spark = Engine(DEEP_RULES, backends[0], rng=SeededSource(7), store=backends[1])
            duck = Engine(DEEP_RULES, backends[2], rng=SeededSource(7))
            (_, on_spark, _), (_, on_duckdb, _) = spark.statistics(plan), duck.statistics(plan)
            assert on_spark == on_duckdb, sql
            if "GROUP BY" not in sql:
                assert len(on_spark[()].columns["x"].values) > 1000  # the deep windows, read
            assert all(group.instance for group in on_spark.values())  # and drawn from
            spark.ledger.close()
            duck.ledger.close()
    finally:
        for backend in backends:
            backend.close()


def test_weighted_ranks_are_read_on_spark_as_on_duckdb(sail_url, tmp_path, monkeypatch):
    """A grouped percentile of a user-level table is drawn over weighted ranks
    (docs/privacy.md §5.3): the weights' COUNT window and integer division, the running
    weights per group and a group's own wider windows read on Spark as on DuckDB — the
    same draws from the same random source — with NULL, NaN, ±inf, values beyond the
    domain, rows out of the WHERE and a NULL key; with first windows of one unit each
    side, so that every group reads its own wider ones."""
    import random

    from proxy.privacy import inverse_sensitivity
    from tests.factories import Table, load
    from tests.privacy.laws import SeededSource

    rules = parse_rules("""
[tables.w]
privacy_unit = "u"
max_rows_per_unit = 4
[tables.w.columns]
u = { type = "int" }
x = { type = "float", domain = [0, 100] }
g = { type = "int", keys = [0, 1, 2] }
""")
    rng = random.Random(3)
    rows = [(unit, rng.choice([None, math.nan, math.inf, -math.inf, 150.0]) if rng.random() < 0.05
             else round(rng.lognormvariate(3, 0.5), 2), rng.choice([0, 1, 2, None]))
            for unit in range(600) for _ in range(rng.randint(1, 4))]
    tables = {"w": Table({"u": [r[0] for r in rows], "x": [r[1] for r in rows],
                          "g": [r[2] for r in rows]},
                         {"u": "INTEGER", "x": "DOUBLE PRECISION", "g": "INTEGER"})}
    duckdb_url = f"duckdb:///{tmp_path / 'weighted.duckdb'}"
    load(sail_url, tables)
    load(duckdb_url, tables)
    backends = open_backend(sail_url), DuckDBBackend(":memory:"), open_backend(duckdb_url)
    monkeypatch.setattr(inverse_sensitivity, "first_reach", lambda scale, grid: 1)
    try:
        for sql, epsilon in (("SELECT g, MEDIAN(x) FROM w GROUP BY g", 1),
                             ("SELECT g, PERCENTILE_DISC(0.9) WITHIN GROUP (ORDER BY x) "
                              "FROM w WHERE x < 60 GROUP BY g", 0.5)):
            plan = analyze(parse_statements(sql)[0], rules, Settings(epsilon=epsilon))
            spark = Engine(rules, backends[0], rng=SeededSource(5), store=backends[1])
            duck = Engine(rules, backends[2], rng=SeededSource(5))
            (_, on_spark, _), (_, on_duckdb, _) = spark.statistics(plan), duck.statistics(plan)
            assert on_spark == on_duckdb, sql
            assert all(group.instance for group in on_spark.values())
            spark.ledger.close()
            duck.ledger.close()
    finally:
        for backend in backends:
            backend.close()
