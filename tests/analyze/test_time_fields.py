"""Fields extracted from a time column (``proxy.analyze.time_fields``, issue 33): EXTRACT
compared with numbers in a CASE condition of a GROUP BY term, of an aggregate's argument,
in WHERE and FILTER; a condition as a GROUP BY key (false, true); EXTRACT inside an
aggregate's argument; Tableau's week from Sunday.

Each answer, noise off, is PostgreSQL's own answer to the same statement over the same
rows with the time column clamped to its declared domain (as every time bucket reads
it), on both backends, over rows at the edges: NULL, ±infinity, years 1 and 9999,
moments just outside the domain. The demo's four statements of the issue are answered
over the wire as PostgreSQL answers them. What is not such a comparison keeps a
refusal, for free."""

from __future__ import annotations

import datetime as dt

import psycopg
import pytest

from proxy.rules import parse_rules
from proxy.session import Session
from tests.databases import postgres_truth
from tests.factories import Table, demo_database, demo_served_fresh, open_engine
from tests.probes import refused_for_free

pytestmark = pytest.mark.postgres

RULES_TEXT = """
[defaults]
model = "idp"
epsilon_per_query = 0.25
budget_per_analyst = 100000
answer_cache = false
max_groups = 2000

[analysts.alice]

[tables.visits]
privacy_unit = "person_id"
max_rows_per_unit = 1
[tables.visits.columns]
person_id  = { type = "int" }
department = { type = "text", keys = ["a", "b"] }
cost       = { type = "float", domain = [0, 100] }
at         = { type = "timestamp", domain = [2023-01-01T00:00:00, 2024-12-31T23:59:59] }
day        = { type = "date", domain = ["2023-01-01", "2024-12-31"] }
free       = { type = "timestamp" }
label      = { type = "text" }
"""
RULES = parse_rules(RULES_TEXT, "time_fields.toml")
TYPES = {"person_id": "INTEGER", "department": "TEXT", "cost": "DOUBLE PRECISION",
         "at": "TIMESTAMP", "day": "DATE", "free": "TIMESTAMP", "label": "TEXT"}
_T = dt.datetime
EDGES = [None, _T(1, 1, 1), _T(9999, 12, 31, 23, 59, 59), _T(2022, 12, 31, 23, 59, 59),
         _T(2025, 1, 1, 0, 0, 1), _T(2024, 12, 31, 23, 59, 59), _T(2023, 1, 1)]
COUNT = 400
ROWS = {
    "person_id": list(range(1, COUNT + 1)),
    "department": ["ab"[i % 2] if i % 13 else None for i in range(COUNT)],
    "cost": [float(i * 7 % 101) for i in range(COUNT)],
    # every hour of every weekday, months and years of the domain, and the edges
    "at": [EDGES[i % 40] if i % 40 < len(EDGES)
           else _T(2023, 1, 1) + dt.timedelta(hours=i * 37 + i % 11, minutes=i % 60)
           for i in range(COUNT)],
    "day": [None if i % 30 == 0 else EDGES[i % 30].date() if i % 30 < len(EDGES)
            else dt.date(2023, 1, 1) + dt.timedelta(days=i * 5) for i in range(COUNT)],
    "free": [None] * COUNT,
    "label": ["x"] * COUNT,
}
# the last rows' moments are ±infinity (no Python value holds them)
INFINITE = {COUNT: "infinity", COUNT - 1: "-infinity"}
# (PostgreSQL's least and greatest skip a NULL: NULL is kept by the CASE)
CLAMPED = {"at": "CASE WHEN at IS NOT NULL THEN least(greatest(at, TIMESTAMP '2023-01-01'), "
                 "TIMESTAMP '2024-12-31 23:59:59') END",
           "day": "CAST(CASE WHEN day IS NOT NULL THEN least(greatest(day, DATE '2023-01-01'), "
                  "DATE '2024-12-31') END AS timestamp)"}


def _infinities() -> list[str]:
    return [f"UPDATE visits SET \"at\" = '{text}', day = '{text}' WHERE person_id = {row}"
            for row, text in INFINITE.items()]


@pytest.fixture(scope="module")
def engine(module_backend_url):
    with open_engine(module_backend_url, RULES, {"visits": Table(ROWS, TYPES)},
                     then=tuple(_infinities())) as made:
        yield made


@pytest.fixture(scope="module")
def truth(postgres_url):
    with postgres_truth(postgres_url, {"visits": Table(ROWS, TYPES)},
                        tuple(_infinities())) as answer:
        yield answer


def _clamped(sql: str) -> str:
    """The statement as PostgreSQL answers it over the clamped moments: each extract
    reads its column clamped to the domain."""
    for column, clamped in CLAMPED.items():
        sql = sql.replace(f"FROM {column})", f"FROM {clamped})").replace(
            f"', {column})", f"', {clamped})")
    return sql


def _answered(engine, sql: str) -> dict:
    (answer,) = list(Session.open(engine, "alice").execute(sql))
    return {row[0]: tuple(row[1:]) for row in answer.rows}


def _close(got: tuple, wanted: tuple) -> bool:
    """Equal, but for sums of values rounded to 6 decimals each (SUM_DECIMALS)."""
    return len(got) == len(wanted) and all(
        (g is None and w is None) or (g is not None and w is not None
                                      and abs(float(g) - float(w)) <= 1e-3)
        for g, w in zip(got, wanted))


# statements whose every group (or the one row) is PostgreSQL's over the clamped moments
GROUPED = [
    "SELECT CASE WHEN EXTRACT(DOW FROM at) IN (0, 6) THEN 'weekend' ELSE 'weekday' END AS k, "
    "COUNT(*), SUM(cost) FROM visits GROUP BY 1",
    "SELECT CASE WHEN EXTRACT(HOUR FROM at) BETWEEN 9 AND 16 THEN 'office' WHEN "
    "EXTRACT(HOUR FROM at) < 9 THEN 'early' END AS k, COUNT(*) FROM visits GROUP BY 1",
    "SELECT CASE WHEN date_part('month', at) >= 6.5 THEN 'late' ELSE 'early' END AS k, "
    "COUNT(*) FROM visits GROUP BY 1",  # a fraction: the next whole number
    "SELECT CASE WHEN EXTRACT(YEAR FROM at) = 2024 AND EXTRACT(QUARTER FROM at) <> 1 THEN 1 "
    "ELSE 0 END AS k, COUNT(*) FROM visits GROUP BY 1",
    "SELECT CASE WHEN (EXTRACT(MINUTE FROM at)) > -1 AND EXTRACT(DAY FROM at) IN (1, 31.5, "
    "99999999999999999999) THEN 'first' ELSE 'other' END AS k, COUNT(*) FROM visits GROUP BY 1",
    "SELECT CASE WHEN EXTRACT(DOW FROM day) = 0 OR EXTRACT(HOUR FROM day) <> 0 THEN 's' "
    "ELSE 'o' END AS k, COUNT(*) FROM visits GROUP BY 1",
    "SELECT CASE WHEN EXTRACT(ISODOW FROM at) IS NULL THEN 'none' ELSE 'some' END AS k, "
    "COUNT(*) FROM visits GROUP BY 1",
    "SELECT department AS k, COUNT(*) FROM visits WHERE EXTRACT(HOUR FROM at) >= 12 "
    "AND EXTRACT(DOW FROM at) NOT IN (0, 6) GROUP BY 1",
    "SELECT department AS k, COUNT(*) FILTER (WHERE EXTRACT(MONTH FROM at) BETWEEN 3 AND 5), "
    "SUM(CASE WHEN EXTRACT(DOW FROM at) = 1 THEN cost END) FROM visits GROUP BY 1",
    "SELECT department AS k, SUM(EXTRACT(HOUR FROM at)), AVG(EXTRACT(MONTH FROM at)), "
    "SUM(cost * EXTRACT(ISODOW FROM at)), MAX(EXTRACT(YEAR FROM day)) FROM visits GROUP BY 1",
    "SELECT department AS k, SUM(EXTRACT(DOY FROM at) / 7), COUNT(EXTRACT(WEEK FROM at)) "
    "FROM visits GROUP BY 1",
    # the ISO year: 2023-01-01 (a Sunday) is in 2022's, 2024-12-31 in 2025's
    "SELECT EXTRACT(ISOYEAR FROM at) AS k, COUNT(*) FROM visits "
    "WHERE date_part('isoyear', day) <> 2023 GROUP BY 1",
]


@pytest.mark.parametrize("sql", GROUPED)
@pytest.mark.usefixtures("no_noise")
def test_each_answer_is_postgresql_s_over_the_clamped_moments(engine, truth, sql):
    answered = _answered(engine, sql)
    # NULL: a CASE's group (no ELSE) is SQL's; a NULL field is in no group
    wanted = {row[0]: tuple(row[1:]) for row in truth(_clamped(sql))
              if row[0] is not None or None in answered}
    assert set(wanted) <= set(answered), (sorted(map(str, wanted)), sorted(map(str, answered)))
    for key, values in answered.items():
        if key in wanted:
            assert _close(values, wanted[key]), (key, values, wanted[key])
        else:  # a key no row has: counted 0
            assert values[0] == 0, (key, values)


@pytest.mark.usefixtures("no_noise")
def test_a_kept_plan_binds_a_new_number_compared_with_a_field(engine, truth):
    """The shape cache (proxy.analyze.shapes) reuses the plan of a statement with other
    numbers: each answer is still PostgreSQL's (a fraction, a class of its own, is
    analysed afresh and rounded)."""
    for number in ("12", "7", "6.5", "99999999999999999999", "-1", "7"):
        sql = (f"SELECT department AS k, COUNT(*) FROM visits WHERE EXTRACT(HOUR FROM at) "
               f">= {number} GROUP BY 1")
        wanted = {row[0]: (row[1],) for row in truth(_clamped(sql)) if row[0] is not None}
        assert _answered(engine, sql) == {key: wanted.get(key, (0,)) for key in ("a", "b")}


@pytest.mark.usefixtures("no_noise")
def test_a_kept_plan_of_a_year_outside_1_to_9998_is_not_bound_to_a_year_inside(engine, truth):
    """EXTRACT(YEAR …) = 2024 is the range of the column (PostgreSQL's own answer), = 0
    the clamped field: the plan of one is not the other's (the review found 2024 answered
    through 0's plan, over the clamped moments)."""
    session = Session.open(engine, "alice")
    for number in ("0", "2024", "9999", "2023", "0", "2024"):
        sql = (f"SELECT department AS k, COUNT(*) FROM visits WHERE EXTRACT(YEAR FROM at) "
               f"= {number} GROUP BY 1")
        read = sql if 1 <= int(number) <= 9998 else _clamped(sql)
        wanted = {row[0]: (row[1],) for row in truth(read) if row[0] is not None}
        (answer,) = list(session.execute(sql))
        assert {row[0]: tuple(row[1:]) for row in answer.rows} == {
            key: wanted.get(key, (0,)) for key in ("a", "b")}, number


@pytest.mark.usefixtures("no_noise")
def test_a_condition_is_a_group_by_key_false_and_true(engine, truth):
    """``EXTRACT(isodow FROM at) IN (6, 7)`` as a key: false and true, from the rules
    alone; a row where the condition is NULL (a NULL moment) belongs to neither, as a
    NULL column value belongs to no group."""
    sql = ("SELECT EXTRACT(ISODOW FROM at) IN (6, 7) AS weekend, COUNT(*), AVG(cost) "
           "FROM visits GROUP BY 1 ORDER BY 1")
    (answer,) = list(Session.open(engine, "alice").execute(sql))
    assert [row[0] for row in answer.rows] == [False, True]
    wanted = {row[0]: tuple(row[1:]) for row in truth(_clamped(sql))}
    assert None in wanted  # PostgreSQL's NULL group (the NULL moments): not a key
    for key, *values in answer.rows:
        assert _close(tuple(values), wanted[key]), (key, values, wanted[key])
    both = _answered(engine, "SELECT cost > 50 AND department = 'a', COUNT(*) FROM visits "
                             "GROUP BY 1")
    assert set(both) == {False, True}


@pytest.mark.usefixtures("no_noise")
def test_tableau_s_sunday_weeks_are_the_sundays_of_the_where_s_range(engine, truth):
    sql = ("SELECT CAST((DATE_TRUNC('DAY', \"visits\".\"at\") + (-EXTRACT(DOW FROM "
           "\"visits\".\"at\") * INTERVAL '1 DAY')) AS DATE) AS w, COUNT(1) FROM "
           "\"visits\" \"visits\" WHERE ((\"visits\".\"at\" >= (TIMESTAMP '2024-01-07 00:00:00')) "
           "AND (\"visits\".\"at\" < (TIMESTAMP '2024-03-03 00:00:00'))) GROUP BY 1")
    answered = _answered(engine, sql)
    assert list(answered) == [dt.date(2024, 1, 7) + dt.timedelta(weeks=i) for i in range(8)]
    wanted = dict(truth(sql))
    assert {key: n for key, (n,) in answered.items()} == {
        key: wanted.get(key, 0) for key in answered}
    # a date column's Sunday, the form with a minus sign, the whole domain
    days = _answered(engine, "SELECT date_trunc('day', day) - EXTRACT(DOW FROM day) * "
                             "INTERVAL '1 day' AS w, COUNT(*) FROM visits GROUP BY 1")
    assert all(key.weekday() == 6 for key in days) and len(days) == 105
    wanted = dict(truth(f"SELECT CAST(date_trunc('day', {CLAMPED['day']}) - EXTRACT(DOW FROM "
                        f"{CLAMPED['day']}) * INTERVAL '1 day' AS date), COUNT(*) FROM visits "
                        "WHERE day IS NOT NULL GROUP BY 1"))
    assert {key.date(): n for key, (n,) in days.items() if n} == wanted


@pytest.mark.parametrize("sql,fragment", [
    ("SELECT CASE WHEN EXTRACT(DOW FROM at) = '1' THEN 'a' END, COUNT(*) FROM visits "
     "GROUP BY 1", "compared with numbers"),
    ("SELECT CASE WHEN EXTRACT(DOW FROM at) + 1 = 2 THEN 'a' END, COUNT(*) FROM visits "
     "GROUP BY 1", "operator + (EXTRACT(DOW FROM at) + 1) is not allowed"),
    ("SELECT COUNT(*) FROM visits WHERE EXTRACT(DOW FROM at) = EXTRACT(DOW FROM day)",
     "compared with numbers"),
    # (compared with a number it is the range of at it means, time_filters._epoch_range)
    ("SELECT COUNT(*) FROM visits WHERE EXTRACT(EPOCH FROM at) IN (5, 6)", "one of"),
    ("SELECT COUNT(*) FROM visits WHERE EXTRACT(HOUR FROM free) = 5", "declared domain"),
    ("SELECT COUNT(*) FROM visits WHERE EXTRACT(HOUR FROM label) = 5", "date or timestamp"),
    ("SELECT AVG(EXTRACT(HOUR FROM free)) FROM visits", "declared domain"),
    # (an epoch of the column itself, or of its difference with a moment, is a number:
    # tests/bi/test_reach4.py)
    ("SELECT AVG(EXTRACT(EPOCH FROM at + INTERVAL '1 hour')) FROM visits",
     "difference with a moment"),
    ("SELECT AVG(EXTRACT(EPOCH FROM free)) FROM visits", "declared domain"),
    # a condition compared with text failed in the backend, after the debit
    ("SELECT EXTRACT(DOW FROM at) IN (0, 6) = label, COUNT(*) FROM visits GROUP BY 1",
     "compares a condition with"),
    ("SELECT COUNT(*) FROM visits WHERE (cost > 3) = label", "compares a condition with"),
    ("SELECT COUNT(*) FROM visits WHERE (cost > 3) = 1", "compares a condition with"),
])
def test_what_is_not_a_field_compared_with_numbers_is_refused_for_free(engine, sql, fragment):
    refused_for_free(engine, sql, "0A000", fragment)


# -- the demo over the wire ----------------------------------------------------------------

DEMO = [  # issue 33's four statements, verbatim (tests/bi/ holds them too)
    "SELECT CASE WHEN EXTRACT(DOW FROM visited_at) IN (0, 6) THEN 'weekend' ELSE 'weekday' "
    "END AS part, COUNT(*) AS n FROM visits GROUP BY 1 ORDER BY 1",
    "SELECT EXTRACT(ISODOW FROM visited_at) IN (6, 7) AS weekend, AVG(cost) AS avg_cost "
    "FROM visits GROUP BY 1 ORDER BY 1",
    "SELECT department, AVG(EXTRACT(HOUR FROM visited_at)) AS avg_hour FROM visits "
    "GROUP BY 1 ORDER BY 1",
    "SELECT CAST((DATE_TRUNC('DAY', \"visits\".\"visited_at\") + (-EXTRACT(DOW FROM "
    "\"visits\".\"visited_at\") * INTERVAL '1 DAY')) AS DATE) AS \"twk:visited_at:ok\", "
    "COUNT(1) AS \"cnt:visits:ok\" FROM \"public\".\"visits\" \"visits\" WHERE "
    "((\"visits\".\"visited_at\" >= (TIMESTAMP '2024-01-07 00:00:00')) AND "
    "(\"visits\".\"visited_at\" < (TIMESTAMP '2024-03-03 00:00:00'))) GROUP BY 1",
]


@pytest.fixture(scope="module", params=["duckdb", "postgres"])
def demo(request, tmp_path_factory, postgres_url):
    with demo_served_fresh(request.param, tmp_path_factory.mktemp("fields"),
                           postgres_url) as served:
        yield served


@pytest.fixture(scope="module")
def demo_truth(tmp_path_factory, postgres_url):
    with demo_database("postgres", tmp_path_factory.mktemp("truth"), postgres_url) as url, \
            psycopg.connect(url, autocommit=True) as con:
        yield lambda sql: con.execute(sql).fetchall()


@pytest.mark.parametrize("sql", DEMO, ids=["case-dow", "isodow-key", "avg-hour", "tableau-week"])
@pytest.mark.usefixtures("no_noise")
def test_the_demo_s_statements_over_the_wire_are_postgresql_s(demo, demo_truth, sql):
    """The demo's visits lie inside the declared domain, one to six a person (none
    dropped), so PostgreSQL's answer to the very statement is the truth."""
    with psycopg.connect(demo.dsn("alice"), autocommit=True) as con:
        before = con.execute("SHOW idp.budget").fetchone()
        rows = con.execute(sql).fetchall()
        assert con.execute("SHOW idp.budget").fetchone() != before
    wanted = demo_truth(sql)
    assert [row[0] for row in rows] == sorted(row[0] for row in wanted)
    wanted = {row[0]: row[1:] for row in wanted}
    for key, *values in rows:
        assert _close(tuple(values), tuple(wanted[key])), (key, values, wanted[key])


@pytest.mark.usefixtures("no_noise")
def test_metabase_s_earliest_and_latest_over_the_wire(demo, demo_truth):
    """Metabase's "Earliest" and "Latest" of a timestamp (tests/analyze/
    test_moment_extremes.py): timestamps on the wire, each one of the per-person
    extremes (the draw's target rank, noise off) cut to a second, near the true extreme
    (the demo's visits lie inside the domain)."""
    sql = ('SELECT min("public"."visits"."visited_at") AS "min", '
           'max("public"."visits"."visited_at") AS "max" FROM "public"."visits"')
    with psycopg.connect(demo.dsn("alice"), autocommit=True) as con:
        earliest, latest = con.execute(sql).fetchone()
    firsts, lasts = zip(*demo_truth(
        "SELECT date_trunc('second', MIN(visited_at)), date_trunc('second', "
        "MAX(visited_at)) FROM visits GROUP BY person_id"))
    assert isinstance(earliest, dt.datetime) and isinstance(latest, dt.datetime)
    assert earliest in firsts and latest in lasts
    assert dt.timedelta(0) <= earliest - min(firsts) <= dt.timedelta(days=7)
    assert dt.timedelta(0) <= max(lasts) - latest <= dt.timedelta(days=7)
