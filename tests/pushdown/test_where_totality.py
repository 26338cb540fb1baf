"""The WHERE clause's SQL is total and admits PostgreSQL's rows (docs/privacy.md §3.6
"Totality"): the WHERE fuzzer (tests/where_totality.py) on DuckDB and PostgreSQL, a fixed
seed and the cases it found, one by one. Each is refused at analysis (nothing spent), or
its statistics run without error over adversarial rows and its rows in scope (and time
buckets) are those PostgreSQL's own evaluation of the original statement gives, in UTC
and in Europe/Berlin."""

from __future__ import annotations

import pytest

from proxy.analyze import analyze, parse_statements
from proxy.errors import Refused
from proxy.session import Session
from proxy.settings import Settings
from tests import where_totality as fuzz
from tests.databases import load_table, new_database
from tests.factories import Table, backend_database, open_engine

pytestmark = pytest.mark.postgres


@pytest.fixture(scope="module")
def truth(postgres_url):
    with new_database(postgres_url) as url:
        load_table(url, fuzz.TABLE, fuzz.rows(), fuzz.TYPES)
        answer = fuzz.postgres_truth(url)
        for statement in fuzz.infinities():
            answer(statement, "UTC")
        yield answer
        answer.close()


@pytest.fixture(scope="module", params=["duckdb", "postgres"])
def engine(request, tmp_path_factory, postgres_url):
    with backend_database(request.param, tmp_path_factory.mktemp("where"), postgres_url) \
            as url, open_engine(url, fuzz.RULES, {fuzz.TABLE: Table(fuzz.rows(), fuzz.TYPES)}
                                ) as engine:
        for statement in fuzz.infinities():
            engine.backend.query(statement)
        yield engine


# Statements per backend in the suite (benchmarks/totality_fuzz.py --where runs more):
# about 2 s of CPU each.
FUZZ = 120


def test_random_where_clauses_are_refused_or_total_and_exact(engine, truth):
    outcome = fuzz.run(engine, truth, seed=11, count=FUZZ)
    assert outcome.failures == []
    assert outcome.admitted >= FUZZ // 4 and outcome.refused > 0


# What the fuzzer found (zone, statement): each is now refused or answered with
# PostgreSQL's rows.
FOUND = [
    # DuckDB reads fewer spellings of a boolean: 'off' failed after the debit; 'maybe'
    # and a number (PostgreSQL fails on both) were answered
    ("UTC", "f > 'off'"), ("UTC", "f IN ('off', ' Yes ')"), ("UTC", "f BETWEEN '0' AND 'on'"),
    # a date column against a timestamp with a time of day: PostgreSQL compares the
    # date's midnight, the folded constant was read as a date
    ("UTC", "d >= '2023-10-29 02:30:00'::timestamptz"),
    ("Europe/Berlin", "d < TIMESTAMP '2019-12-31 12:00:00.1234567'"),
    ("UTC", "d <> TO_TIMESTAMP('2020-01-01 01:30', 'YYYY-MM-DD HH24:MI')"),
    ("UTC", "d BETWEEN '2025-01-01 02:30:00'::timestamptz AND DATE '9999-12-31'"),
    # ... and its midnight is the same day's
    ("Europe/Berlin", "d >= TIMESTAMPTZ '2024-02-29 00:00:00'"),
    # an IN list with a timestamp reads its quoted items as timestamps
    ("Europe/Berlin", "d NOT IN ('2023-03-26T00:00:00.5+05:30', TIMESTAMPTZ '2024-02-29')"),
    # a date plus an interval is a timestamp (folded as a date, the hour was dropped)
    ("UTC", "d < DATE '2023-01-01' + INTERVAL '1 hour'"),
    ("UTC", "at < DATE '2023-03-26' + INTERVAL '90 minutes'"),
    ("UTC", "d < CAST('2023-01-01' AS date) - INTERVAL '1 month'"),
    # a substring of a text column compared with a number (PostgreSQL: no such operator)
    ("UTC", "substring(t, 1, 1) <= 5"),
    # an int column against a decimal of many places: DuckDB compared as DECIMAL(38, 31)
    # and failed on 2³¹ − 1 after the debit; beyond 38 digits it read a double
    ("UTC", "n >= 0.0000000000000000000000000000001"),
    ("UTC", "n IN (1.00000000000000000000000000000000001, 5.000000000000000000000000000000)"),
    ("UTC", "NOT (0.5 < n) OR n = 1.5 OR n BETWEEN -1.5 AND 1e308"),
    ("UTC", "n >= 1.0000000000000000000000000000000000000001"),
    # TRUE or FALSE beside a text, number or time: DuckDB cast only the rows reaching
    # the comparison, so a charged statement failed or not as the rows were (a review
    # of 2026-11-29, not the fuzzer: its literals are of their column's kind)
    ("UTC", "x > 0 AND TRUE = t"), ("UTC", "t IN ('a', FALSE)"), ("UTC", "n IS TRUE"),
    ("UTC", "at IS NOT FALSE"), ("UTC", "d BETWEEN FALSE AND TRUE"), ("UTC", "(x > 0) = f"),
    # a typed time constant beside a text column, a negative number beside a text, time
    # or bool column: PostgreSQL has no such operator, the proxy compared the folded
    # constant (the fuzzer's literals of other kinds, 2026-11-29)
    ("UTC", "t <> TO_DATE('9999-12-31', 'YYYY-MM-DD')"),
    ("UTC", "t IN ('50%', '2023-03-26'::date)"), ("UTC", "x = DATE '2024-01-01'"),
    ("UTC", "t BETWEEN -2.5 AND 'zz'"), ("Europe/Berlin", "at < -(3)"), ("UTC", "f != -0.0"),
    # an array cast to boolean or date[] beside a text column (its elements had been
    # read as text); beside a bool or date column, its elements' own values
    ("UTC", "t = ANY('{t,f}'::boolean[])"), ("UTC", "t = ANY('{2024-01-01}'::date[])"),
    ("UTC", "f = ANY('{t,off}'::boolean[])"),
    ("Europe/Berlin", "d = ANY('{2024-02-29,2020-01-01}'::date[])"),
    ("UTC", "at = ANY(CAST('{2023-03-26 02:30:00}' AS timestamp[]))"),
    # a year read as a range of the column as it is (1 to 9998), not clamped: the
    # fuzzer's truth had clamped it (tests/where_totality.py extract_term)
    ("Europe/Berlin", "NOT (NOT (date_part('year', wf.d) = 1))"),
    ("UTC", "date_part('year', wf.at) < 2020"),
]


@pytest.mark.parametrize("zone,where", FOUND)
def test_what_the_fuzzer_found_is_refused_or_exact(engine, truth, zone, where):
    sql = f"SELECT COUNT(*), SUM(x), MEDIAN(n) FROM {fuzz.TABLE} WHERE {where}"
    outcome = fuzz.check(sql, where, engine, truth, zone)
    assert outcome.failures == []


def test_a_cached_shape_does_not_bind_a_decimal_into_an_int_comparison(engine):
    """The shape cache (proxy.analyze.shapes) binds a new literal of the same class into a
    kept plan: a decimal is not of a whole number's class, so ``n >= 5``'s plan is not
    reused for ``n >= 0.000…1``, which the analysis writes as ``n >= 1``."""
    session = Session.open(engine, "zoe")
    for number in ("5", "0.0000000000000000000000000000001", "2"):
        list(session.execute(f"SELECT COUNT(*) FROM {fuzz.TABLE} WHERE n >= {number}"))


@pytest.mark.parametrize("where,sqlstate", [("f > 'maybe'", "22P02"), ("f = 1", "0A000"),
                                            ("f IN (TRUE, 'o')", "22P02"),
                                            ("d >= TIMESTAMP '2024-01-31 08:00'", "0A000"),
                                            ("substring(t, 1, 1) <= 5", "42883"),
                                            ("t = DATE '2024-01-01'", "42883"),
                                            ("t < -2.5", "42883")])
def test_the_refusals_name_their_cause(where, sqlstate):
    with pytest.raises(Refused) as refused:
        analyze(parse_statements(f"SELECT COUNT(*) FROM {fuzz.TABLE} WHERE {where}")[0],
                fuzz.RULES, Settings())
    assert refused.value.sqlstate == sqlstate
