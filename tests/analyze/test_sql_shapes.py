"""The SQL analysts and BI tools send (issue 16, items 1 and 2), end to end on both
backends: row-level CTEs and subqueries merged into one query, outer queries and
Superset's series limit answered as post-processing of one release (charged once),
GROUP BY terms whose keys are public by construction, and every refused shape refused
in one line without spending anything."""

from __future__ import annotations

import datetime as dt
import functools
import math
from collections import Counter
from decimal import Decimal

import duckdb
import pytest
from sqlglot import exp

from proxy.analyze import analyze, parse_statements
from proxy.analyze.group_keys import epoch_seconds
from proxy.backends import open_backend
from proxy.errors import Refused, RulesError
from proxy.pushdown.group_sql import group_value
from proxy.rules import parse_rules
from proxy.session import Session
from proxy.settings import Settings
from tests.databases import load_table
from tests.factories import PEOPLE_TYPES, Table, engine_fixture
from tests.privacy.buckets import bucket_of

pytestmark = pytest.mark.postgres

EPSILON = 0.25
RULES_TEXT = """
[defaults]
model = "idp"
epsilon_per_query = 0.25
budget_per_analyst = 100000
answer_cache = false
max_groups = 400

[analysts.zoe]
[analysts.bob]
[analysts.alice]

[tables.people]
privacy_unit = "person_id"
[tables.people.columns]
person_id = { type = "int" }
age    = { type = "int",   domain = [0, 100] }
income = { type = "float", domain = [0, 100000] }
region = { type = "text",  keys = ["north", "south", "east", "west"] }

[tables.events]
privacy_unit = "person_id"
[tables.events.columns]
person_id = { type = "int" }
kind = { type = "text", keys = ["a", "b", "c"] }
at   = { type = "timestamp", domain = [2024-01-01T00:00:00, 2024-06-30T23:59:59] }
day  = { type = "date", domain = ["2024-01-01", "2024-12-31"] }
seen = { type = "timestamp" }
cost = { type = "float", domain = [0, 100] }

[tables.regions]
public = true
"""
RULES = parse_rules(RULES_TEXT)
REGIONS = ["north", "south", "east", "west"]


def _people() -> dict[str, list]:
    """Ages beyond the domain at both ends (clamped into the first and last bins),
    NULLs, ties; incomes with a NULL."""
    ages = [(i * 37) % 97 for i in range(300)] + [-5, 130, 100, 0, None, 55, 55]
    return {
        "person_id": list(range(1, len(ages) + 1)),
        "age": ages,
        "income": [None if i % 50 == 7 else float((i * 7919) % 90000) for i in range(len(ages))],
        "region": [REGIONS[(i * 5) % 4] if i % 23 else "elsewhere" for i in range(len(ages))],
    }


def _events() -> dict[str, list]:
    """Times inside the domain, before and after it (clamped into the first and last
    month), exactly at its bounds, and NULL; several events per person."""
    start = dt.datetime(2024, 1, 1)
    times = [start + dt.timedelta(hours=37 * i + (i % 5)) for i in range(120)]
    times += [dt.datetime(2023, 5, 1), dt.datetime(2031, 1, 1), start,
              dt.datetime(2024, 6, 30, 23, 59, 59), None]
    return {
        "person_id": [1 + i // 3 for i in range(len(times))],
        "kind": ["abc"[i % 3] if i % 11 else "z" for i in range(len(times))],
        "at": times,
        "day": [t.date() if t is not None else None for t in times],
        "seen": times,
        "cost": [float(i % 17) for i in range(len(times))],
    }


# One engine per backend for the module: its tests only read the tables, compare their
# own ledger entries (``ask``), and the answer cache is off.
engine = engine_fixture(RULES, lambda: {
    "people": Table(_people(), PEOPLE_TYPES),
    "events": Table(_events(), {"person_id": "INTEGER", "kind": "TEXT", "at": "TIMESTAMP",
                                "day": "DATE", "seen": "TIMESTAMP", "cost": "DOUBLE PRECISION"}),
    "regions": Table({"region": ["north"], "label": ["N"]}, {"region": "TEXT", "label": "TEXT"})},
    shared=True)


def ask(engine, sql, analyst="zoe"):
    """One statement's answer, and the ε its ledger entries charged."""
    before = len(engine.ledger.entries(analyst))
    (answer,) = list(Session.open(engine, analyst).execute(sql))
    return answer, [entry[6] for entry in engine.ledger.entries(analyst)[before:]]


# 1. Row-level steps merged: the same answer and charge as the query written directly.

MERGED = [
    ("WITH a AS (SELECT * FROM people WHERE age > 30) SELECT COUNT(*) FROM a",
     "SELECT COUNT(*) FROM people WHERE age > 30"),
    ("SELECT COUNT(*) FROM (SELECT * FROM people WHERE age > 30) t",
     "SELECT COUNT(*) FROM people WHERE age > 30"),
    (("SELECT region, COUNT(*) FROM (SELECT region, income FROM people WHERE age > 20) AS "
     "virtual_table GROUP BY region"),
     "SELECT region, COUNT(*) FROM people WHERE age > 20 GROUP BY region"),
    (("SELECT r, MEDIAN(inc) FROM (SELECT region AS r, income AS inc FROM (SELECT * FROM people "
     "WHERE age > 20) x WHERE income < 50000) v GROUP BY r ORDER BY 2 DESC LIMIT 2"),
     ("SELECT region AS r, MEDIAN(income) FROM people WHERE age > 20 AND income < 50000 "
     "GROUP BY region ORDER BY 2 DESC LIMIT 2")),
    (("WITH a AS (SELECT * FROM people WHERE age > 20), b AS (SELECT age AS years, region FROM a "
     "WHERE region <> 'west') SELECT MAX(years) AS oldest, COUNT(*) FROM b"),
     "SELECT MAX(age) AS oldest, COUNT(*) FROM people WHERE age > 20 AND region <> 'west'"),
    ("SELECT d, COUNT(*) FROM (SELECT floor(age / 10) * 10 AS d FROM people) t GROUP BY d",
     "SELECT floor(age / 10) * 10 AS d, COUNT(*) FROM people GROUP BY 1"),
    (("WITH w AS (SELECT * FROM events WHERE at >= TIMESTAMP '2024-02-01') "
     "SELECT kind, COUNT(*) FROM w GROUP BY kind"),
     "SELECT kind, COUNT(*) FROM events WHERE at >= '2024-02-01 00:00:00' GROUP BY kind"),
    ("SELECT SUM(x) FROM (SELECT income * 2 AS x FROM people) t",  # an aggregate's expression
     "SELECT SUM(income * 2) FROM people"),
]


@pytest.mark.parametrize("shaped,direct", MERGED)
@pytest.mark.usefixtures("no_noise")
def test_row_level_steps_are_one_query(engine, shaped, direct):
    answer, charged = ask(engine, shaped)
    expected, expected_charge = ask(engine, direct, analyst="bob")
    assert (answer.columns, answer.rows, answer.kinds) == (
        expected.columns, expected.rows, expected.kinds)
    assert charged == expected_charge and len(charged) == 1  # one ledger row: charged once
    assert charged[0] == Decimal(str(EPSILON)) * sum(
        1 for o in answer.columns if o in ("count", "median", "oldest", "sum"))


# 2. GROUP BY terms with public key sets: every key answered, values as the rules say.

def _clamp(value, low, high):
    return None if value is None else min(max(value, low), high)


def _expected_counts(values, bucket):
    counts = Counter(bucket(v) for v in values)
    counts.pop(None, None)
    return counts


PEOPLE, EVENTS = _people(), _events()
FIRST, LAST = dt.datetime(2024, 1, 1), dt.datetime(2024, 6, 30, 23, 59, 59)
GROUPED = [
    ("SELECT floor(age / 10) * 10 AS decade, COUNT(*) FROM people GROUP BY decade",
     PEOPLE["age"], lambda a: None if a is None else math.floor(_clamp(a, 0, 100) / 10) * 10,
     list(range(0, 101, 10))),
    ("SELECT age / 25 * 25, COUNT(*) FROM people GROUP BY age / 25 * 25",
     PEOPLE["age"], lambda a: None if a is None else int(_clamp(a, 0, 100) / 25) * 25,
     [0, 25, 50, 75, 100]),
    ("SELECT width_bucket(age, 20, 80, 3) AS b, COUNT(*) FROM people GROUP BY 1",
     PEOPLE["age"], lambda a: None if a is None else (
         0 if a < 20 else 4 if _clamp(a, 0, 100) >= 80 else (a - 20) * 3 // 60 + 1),
     [0, 1, 2, 3, 4]),
    (("SELECT CASE WHEN age >= 65 THEN 'senior' WHEN age >= 18 THEN 'adult' ELSE 'minor' END "
     "AS band, COUNT(*) FROM people GROUP BY band"),
     PEOPLE["age"], lambda a: "minor" if a is None else  # NULL meets no WHEN: the ELSE
     "senior" if a >= 65 else "adult" if a >= 18 else "minor",
     ["senior", "adult", "minor"]),
    ("SELECT date_trunc('month', at) AS month, COUNT(*) FROM events GROUP BY 1",
     EVENTS["at"], lambda t: None if t is None else
     dt.datetime(_clamp(t, FIRST, LAST).year, _clamp(t, FIRST, LAST).month, 1),
     [dt.datetime(2024, m, 1) for m in range(1, 7)]),
    ("SELECT date_trunc('quarter', day), COUNT(*) FROM events GROUP BY date_trunc('quarter', day)",
     EVENTS["day"], lambda d: None if d is None else dt.datetime(
         _clamp(d, dt.date(2024, 1, 1), dt.date(2024, 12, 31)).year,
         3 * ((_clamp(d, dt.date(2024, 1, 1), dt.date(2024, 12, 31)).month - 1) // 3) + 1, 1,
         tzinfo=dt.UTC),  # a date's date_trunc is a timestamptz, as PostgreSQL's
     [dt.datetime(2024, m, 1, tzinfo=dt.UTC) for m in (1, 4, 7, 10)]),
    ("SELECT extract(isodow FROM at) AS weekday, COUNT(*) FROM events GROUP BY weekday",
     EVENTS["at"], lambda t: None if t is None else _clamp(t, FIRST, LAST).isoweekday(),
     list(range(1, 8))),
    ("SELECT date_part('hour', at), COUNT(*) FROM events GROUP BY 1",
     EVENTS["at"], lambda t: None if t is None else _clamp(t, FIRST, LAST).hour,
     list(range(24))),
    (('SELECT floor(extract(epoch from "at")/86400)*86400 AS "time", COUNT(*) FROM events '
     "GROUP BY time"),  # Grafana's $__timeGroupAlias(at, 1d)
     EVENTS["at"], lambda t: None if t is None else
     epoch_seconds(_clamp(t, FIRST, LAST)) // 86400 * 86400,
     [epoch_seconds(FIRST) + i * 86400 for i in range(182)]),
    ("SELECT floor(extract(epoch from day) / 604800), COUNT(*) FROM events GROUP BY 1",
     EVENTS["day"], lambda d: None if d is None else epoch_seconds(dt.datetime.combine(
         _clamp(d, dt.date(2024, 1, 1), dt.date(2024, 12, 31)), dt.time())) // 604800,
     list(range(epoch_seconds(FIRST) // 604800,
                epoch_seconds(dt.datetime(2024, 12, 31)) // 604800 + 1))),
]


@pytest.mark.parametrize("sql,values,bucket,keys", GROUPED)
@pytest.mark.usefixtures("no_noise")
def test_every_public_key_is_answered_with_its_bucket(engine, sql, values, bucket,
                                                      keys):
    answer, charged = ask(engine, sql)
    assert [row[0] for row in answer.rows] == keys  # every key, in the rules' order
    expected = _expected_counts(values, bucket)
    assert {row[0]: row[1] for row in answer.rows} == {k: expected.get(k, 0) for k in keys}
    assert charged == [Decimal("0.25")]


DAY = dt.timedelta(days=1)


@pytest.mark.parametrize("where,scope,keys", [
    ("at >= '2024-03-01' AND at < '2024-03-04'",
     (dt.datetime(2024, 3, 1), dt.datetime(2024, 3, 4) - dt.timedelta(microseconds=1)),
     [dt.datetime(2024, 3, 1) + i * DAY for i in range(3)]),
    ("at BETWEEN '2024-03-01 10:00' AND '2024-03-03'",
     (dt.datetime(2024, 3, 1, 10), dt.datetime(2024, 3, 3)),
     [dt.datetime(2024, 3, 1) + i * DAY for i in range(3)]),
    ("'2024-06-29 12:00' < at", (dt.datetime(2024, 6, 29, 12, 0, 0, 1), dt.datetime.max),
     [dt.datetime(2024, 6, 29), dt.datetime(2024, 6, 30)]),
    ("at > '2030-01-01'", (dt.datetime(2030, 1, 1, 0, 0, 0, 1), dt.datetime.max),
     [dt.datetime(2024, 6, 30)]),  # beyond the domain: in its last day, as without WHERE
    ("at >= '2024-03-01T00:00:00Z' AND at < '2024-03-04T00:00:00.000Z'",  # as Grafana sends
     (dt.datetime(2024, 3, 1), dt.datetime(2024, 3, 4) - dt.timedelta(microseconds=1)),
     [dt.datetime(2024, 3, 1) + i * DAY for i in range(3)]),
    ("at BETWEEN '2024-03-01T08:00:00+02:00' AND '2024-03-02T17:00:00+02:00'",  # the zone
     (dt.datetime(2024, 3, 1, 8), dt.datetime(2024, 3, 2, 17)),  # dropped, as PostgreSQL's
     [dt.datetime(2024, 3, 1) + i * DAY for i in range(2)]),
    ("at >= '2024-01-01' OR kind = 'a'", None,  # not a range: the whole domain
     [dt.datetime(2024, 1, 1) + i * DAY for i in range(182)]),
])
@pytest.mark.usefixtures("no_noise")
def test_time_buckets_are_listed_within_the_where_range(engine, where, scope, keys):
    """A time range in WHERE (as BI tools send) lists only the buckets it lets rows into
    — from the text, never the data — so a fine grain over a short range stays within
    max_groups; rows beyond the domain are in its last bucket, as without WHERE."""
    answer, _ = ask(engine, f"SELECT date_trunc('day', at), COUNT(*) FROM events WHERE {where} "
                            "GROUP BY 1")
    assert [row[0] for row in answer.rows] == keys
    if scope is not None:
        inside = [min(max(t, FIRST), LAST) for t in EVENTS["at"]
                  if t is not None and scope[0] <= t <= scope[1]]
        counts = Counter(dt.datetime(t.year, t.month, t.day) for t in inside)
        assert {row[0]: row[1] for row in answer.rows} == {k: counts.get(k, 0) for k in keys}


@pytest.mark.usefixtures("no_noise")
def test_grafana_time_series_bins_epochs_within_its_time_range(engine):
    """Grafana's $__timeGroupAlias and $__timeFilter as it expands them: hourly epoch
    bins, only those of the dashboard's range (read as UTC), the constant metric name
    carried on every row, ordered by time."""
    answer, charged = ask(engine, (
        'SELECT floor(extract(epoch from "at")/3600)*3600 AS "time", count(*), \'n\' as metric '
        "FROM events WHERE \"at\" BETWEEN '2024-03-01T00:00:00Z' AND '2024-03-05T23:59:59Z' "
        "GROUP BY 1 ORDER BY 1"))
    start = epoch_seconds(dt.datetime(2024, 3, 1))
    keys = [start + i * 3600 for i in range(5 * 24)]
    inside = Counter(epoch_seconds(t) // 3600 * 3600 for t in EVENTS["at"] if t is not None
                     and dt.datetime(2024, 3, 1) <= t <= dt.datetime(2024, 3, 5, 23, 59, 59))
    assert answer.rows == [(k, inside.get(k, 0), "n") for k in keys]
    assert answer.columns == ["time", "count", "metric"]
    # as PostgreSQL types it: floor of a numeric EXTRACT is numeric (PostgreSQL 14+)
    assert answer.kinds == ["numeric", "bigint", "text"]
    assert charged == [Decimal("0.25")]


def test_a_fine_grain_over_a_short_range_stays_within_max_groups(engine):
    answer, _ = ask(engine, "SELECT date_trunc('minute', at), COUNT(*) FROM events WHERE "
                            "at >= '2024-03-01 10:00' AND at < '2024-03-01 11:00' GROUP BY 1")
    assert len(answer.rows) == 60


# issue 32 item 4: a WHERE on a GROUP BY column restricts the keys answered (no phantom
# groups). (GROUP BY term, WHERE, the keys answered, the term's key of a row in Python)
DECADES = list(range(0, 101, 10))


def _decade(age):
    return None if age is None else min(max(age, 0), 100) // 10 * 10


def _region(region):
    return region if region in REGIONS else None


KEYED = [
    ("region", "region IN ('north', 'east')", ["north", "east"], _region),
    ("region", "region = 'south' OR region = 'west'", ["south", "west"], _region),
    ("region", "region <> 'north' AND age > 50", ["south", "east", "west"], _region),
    ("region", "NOT (region = 'east') AND region NOT IN ('west', 'elsewhere')",
     ["north", "south"], _region),
    ("region", "age > 50", REGIONS, _region),  # another column: every key
    ("region", "region = 'north' OR age > 90", REGIONS, _region),  # not one column's
    # an OR whose every branch tests the column: the OR of those tests (TPC-H Q07's pairs)
    ("region", "(region = 'north' AND age > 50) OR (age < 20 AND region IN ('east', 'x'))",
     ["north", "east"], _region),
    ("region", "(region = 'north' AND age > 50) OR age < 20", REGIONS, _region),
    ("region", "region > 'm'", REGIONS, _region),  # text order is the backend's collation
    # patterns are read as PostgreSQL reads them (they answered every key)
    ("region", "region LIKE '%th'", ["north", "south"], _region),
    ("region", "region NOT LIKE 'n%' AND region NOT ILIKE 'S_U%'", ["east", "west"], _region),
    ("region", "region ILIKE 'E%' OR region LIKE 'w\\_st' OR region LIKE 'w!%' ESCAPE '!'",
     ["east"], _region),
    # Metabase's case-insensitive "contains" (it was refused: LIKE took a column only)
    ("region", "LOWER(region) LIKE '%th' OR UPPER(\"people\".\"region\") LIKE 'W%'",
     ["north", "south", "west"], _region),
    ("region", "region IS NOT NULL", REGIONS, _region),
    ("floor(age / 10) * 10", "age >= 30 AND age < 50", [30, 40], _decade),
    ("floor(age / 10) * 10", "age BETWEEN 25 AND 30", [20, 30], _decade),
    ("floor(age / 10) * 10", "age > 95", [90, 100], _decade),
    ("floor(age / 10) * 10", "age > 150", [100], _decade),  # beyond U: clamped into the last
    ("floor(age / 10) * 10", "-10 > age", [0], _decade),
    ("floor(age / 10) * 10", "age IN (5, 77) OR age = 100", [0, 70, 100], _decade),
    ("floor(age / 10) * 10", "age <> 50", DECADES, _decade),
    ("floor(age / 10) * 10", "age > 20 OR region = 'north'", DECADES, _decade),
    ("floor(age / 10) * 10", "(age < 15 AND region = 'north') OR (region = 'east' AND age "
     ">= 90)", [0, 10, 90, 100], _decade),
    ("age / 10", "age >= 30 AND age < 50", [3, 4], lambda a: None if a is None else _decade(a) // 10),
]


@functools.cache
def _people_rows() -> duckdb.DuckDBPyConnection:
    """PEOPLE in an in-memory DuckDB of this test process, made once (inserting its rows
    one by one took a tenth of a second per case)."""
    con = duckdb.connect()
    con.execute("CREATE TABLE people (person_id INTEGER, age INTEGER, income DOUBLE, "
                "region TEXT)")
    con.executemany("INSERT INTO people VALUES (?, ?, ?, ?)", list(zip(*PEOPLE.values())))
    return con


@pytest.mark.parametrize("term,where,keys,key_of", KEYED)
@pytest.mark.usefixtures("no_noise")
def test_a_where_on_a_group_column_answers_only_the_keys_it_admits(engine, term, where, keys,
                                                                   key_of):
    """The keys answered are the declared ones (or the bins) the WHERE lets rows into,
    decided from the text alone; each answered group holds exactly its rows in scope,
    so no row in scope is lost with the keys left out; one ε per aggregate."""
    answer, charged = ask(engine, f"SELECT {term} AS k, COUNT(*) FROM people WHERE {where} "
                                  "GROUP BY 1")
    assert [row[0] for row in answer.rows] == keys
    column = "region" if term == "region" else "age"
    in_scope = [value for (value,) in _people_rows().execute(
        f"SELECT {column} FROM people WHERE {where}").fetchall()]
    counts = Counter(key for key in map(key_of, in_scope) if key is not None)
    assert set(counts) <= set(keys)
    assert {row[0]: row[1] for row in answer.rows} == {k: counts.get(k, 0) for k in keys}
    assert charged == [Decimal("0.25")]


@pytest.mark.parametrize("sql", [
    "SELECT region, COUNT(*) FROM people WHERE region = 'atlantis' GROUP BY region",
    "SELECT region, MEDIAN(age) FROM people WHERE region IS NULL GROUP BY region",
    "SELECT region, COUNT(*) FROM people WHERE region IN ('north') AND region <> 'north' "
    "GROUP BY 1",
    "SELECT region, COUNT(*) FROM people WHERE region NOT IN ('south', NULL) GROUP BY 1",
    "SELECT floor(age / 10) * 10 AS d, MAX(income) FROM people WHERE age IS NULL GROUP BY 1",
    "SELECT region, floor(age / 10) * 10 AS d, COUNT(*) FROM people WHERE age > 20 AND "
    "region = 'nowhere' GROUP BY 1, 2",
    ("SELECT date_trunc('month', at), COUNT(*) FROM events WHERE at > '2024-05-01' AND "
     "at < '2024-03-01' GROUP BY 1"),
])
def test_a_where_that_admits_no_key_answers_no_row_for_free(engine, sql):
    """By the text no group can hold a row: zero rows, nothing read, charged or
    recorded, and a notice that says so."""
    answer, charged = ask(engine, sql)
    assert answer.rows == [] and answer.command == "SELECT 0"
    assert charged == [] and answer.privacy["epsilon_spent"] == 0
    assert "admits none of the GROUP BY keys" in answer.notice


def test_released_keys_are_decided_by_the_text_alone():
    """The keys come from the analysis, which reads no data (a session without a
    backend), so two neighbouring data sets release the same keys."""
    from tests.corpora import checking_session

    ((_, plan),) = checking_session(RULES).check(
        "SELECT region, floor(age / 10) * 10, COUNT(*) FROM people WHERE region IN "
        "('west', 'north') AND age BETWEEN 40 AND 59 GROUP BY 1, 2")
    assert [term.keys for term in plan.group_by] == [("north", "west"), (40, 50)]
    assert plan.group_count == 4


@pytest.mark.usefixtures("no_noise")
def test_several_group_columns_answer_the_product_of_their_keys(engine):
    answer, _ = ask(engine, "SELECT region, floor(age / 50) * 50 AS half, COUNT(*) "
                            "FROM people GROUP BY 1, 2")
    keys = [(r, h) for r in REGIONS for h in (0, 50, 100)]
    assert [row[:2] for row in answer.rows] == keys
    data = PEOPLE
    for region, half, count in answer.rows:
        assert count == sum(1 for a, r in zip(data["age"], data["region"])
                            if r == region and a is not None
                            and math.floor(_clamp(a, 0, 100) / 50) * 50 == half)


def test_group_key_types_reach_the_client(engine):
    answer, _ = ask(engine, "SELECT date_trunc('month', at), extract(month FROM at), kind, "
                            "COUNT(*) FROM events GROUP BY 1, 2, 3")
    assert answer.columns == ["date_trunc", "extract", "kind", "count"]
    assert answer.kinds == ["timestamp", "numeric", "text", "bigint"]  # EXTRACT: numeric
    assert len(answer.rows) == 6 * 6 * 3  # the months the domain (January to June) holds


def _keys_in_backend(url: str, rules, term_sql: str):
    """The GROUP BY term ``term_sql`` over table t (columns i, and the term's), and the
    key the backend computes for each row, in the order of i."""
    plan = analyze(parse_statements(f"SELECT {term_sql}, COUNT(*) FROM t GROUP BY 1")[0],
                   rules, Settings())
    (term,) = plan.group_by
    backend = open_backend(url)
    try:
        sql = exp.select("i", group_value(term, rules.tables["t"])).from_("t").order_by("i")
        return term, [row[1] for row in backend.query(sql.sql(dialect=backend.dialect))]
    finally:
        backend.close()


EDGES = [None, -1e308, -5.0, 0.0, 9.999, 10.0, 19.5, 20.0, 79.999, 80.0, 99.5, 100.0, 130.0,
         1e308, float("nan"), float("inf"), float("-inf")]


@pytest.mark.parametrize("term_sql", ["floor(x / 10) * 10", "floor(x / 7)", "x / 10 * 10",
                                      "width_bucket(x, 20, 80, 6)", "width_bucket(x, -10, 200, 7)"])
def test_the_backend_buckets_as_the_reference_does(backend_url, term_sql):
    """The SQL of a bucket (NaN → no group, ±inf and values beyond the domain clamped to
    it) agrees with tests/privacy/buckets.py, which the brute-force tests use, on both
    backends; and every bucket is one of the listed keys."""
    kind = "INTEGER" if term_sql.startswith("x /") else "DOUBLE PRECISION"
    values = [v for v in EDGES if kind == "DOUBLE PRECISION" or v is None
              or (math.isfinite(v) and abs(v) < 1e9 and v == int(v))]
    values = [v if v is None or kind != "INTEGER" else int(v) for v in values]
    load_table(backend_url, "t", {"i": list(range(len(values))), "x": values},
               {"i": "INTEGER", "x": kind})
    rules = parse_rules(f"""
[tables.t]
[tables.t.columns]
x = {{ type = "{'int' if kind == 'INTEGER' else 'float'}", domain = [-3, 100] }}
""")
    term, got = _keys_in_backend(backend_url, rules, term_sql)
    assert got == [bucket_of(term, rules.tables["t"].columns["x"], v) for v in values]
    assert {g for g in got if g is not None} <= set(term.keys)


MOMENTS = ["-infinity", "infinity", None, "2023-12-31 23:59:59.999999", "2024-01-01 00:00:00",
           "2024-01-01 23:59:59.999999", "2024-01-02 00:00:00", "2024-03-05 10:00:00",
           "2024-06-30 23:59:59", "2024-06-30 23:59:59.5", "2031-01-01 00:00:00"]


@pytest.mark.parametrize("term_sql", ["floor(extract(epoch from at) / 86400) * 86400",
                                      "floor(extract(epoch from at) / 3600)",
                                      "floor(date_part('epoch', at) / 604800) * 604800",
                                      "date_trunc('day', at)",
                                      "(CAST(EXTRACT(dow FROM at) AS integer) + 1) * -3"])
def test_the_backend_bins_epochs_as_the_reference_does(backend_url, term_sql):
    """Epoch bins (and a date_trunc) on both engines, of moments at bin and domain bounds, a microsecond
    before them, beyond the domain and ±infinity, agree with tests/privacy/buckets.py;
    every bin is a listed key."""
    load_table(backend_url, "raw", {"i": list(range(len(MOMENTS))), "s": MOMENTS},
               {"i": "INTEGER", "s": "TEXT"})
    view = "CREATE VIEW t AS SELECT i, CAST(s AS TIMESTAMP) AS at FROM raw"
    if backend_url.startswith("duckdb"):
        con = duckdb.connect(backend_url.removeprefix("duckdb:///"))
        con.execute(view)
        con.close()
    else:
        import psycopg

        with psycopg.connect(backend_url, autocommit=True) as con:
            con.execute(view)
    rules = parse_rules('[tables.t]\n[tables.t.columns]\nat = { type = "timestamp", '
                        'domain = [2024-01-01T00:00:00, 2024-06-30T23:59:59] }\n')
    term, got = _keys_in_backend(backend_url, rules, term_sql)
    column = rules.tables["t"].columns["at"]
    moments = [None if m is None else dt.datetime.min if m == "-infinity" else dt.datetime.max
               if m == "infinity" else dt.datetime.fromisoformat(m) for m in MOMENTS]
    assert got == [bucket_of(term, column, m) for m in moments]
    assert {g for g in got if g is not None} <= set(term.keys)


def test_time_buckets_clamp_infinite_timestamps(fresh_postgres):
    """PostgreSQL's ±infinity timestamps land in the first and last buckets, as the
    reference clamps them."""
    import psycopg

    with psycopg.connect(fresh_postgres, autocommit=True) as con:
        con.execute("CREATE TABLE t (i int, at timestamp)")
        con.execute("INSERT INTO t VALUES (1, '-infinity'), (2, 'infinity'), (3, NULL), "
                    "(4, '2024-03-05 10:00')")
    rules = parse_rules('[tables.t]\n[tables.t.columns]\nat = { type = "timestamp", '
                        'domain = [2024-01-01T00:00:00, 2024-06-30T23:59:59] }\n')
    plan = analyze(parse_statements("SELECT date_trunc('month', at), COUNT(*) FROM t "
                                    "GROUP BY 1")[0], rules, Settings())
    backend = open_backend(fresh_postgres)
    try:
        sql = exp.select("i", group_value(plan.group_by[0], rules.tables["t"])).from_("t")
        got = dict(backend.query(sql.order_by("i").sql(dialect="postgres")))
    finally:
        backend.close()
    assert got == {1: dt.datetime(2024, 1, 1), 2: dt.datetime(2024, 6, 1), 3: None,
                   4: dt.datetime(2024, 3, 1)}


# 3. Post-processing of one release: outer queries and Superset's series limit.

@pytest.mark.usefixtures("no_noise")
def test_an_outer_query_post_processes_one_release(engine):
    direct, _ = ask(engine, "SELECT region, COUNT(*) AS c FROM people GROUP BY region",
                    analyst="bob")
    answer, charged = ask(engine, "SELECT t.region AS r, t.c * 2 AS twice, t.c / 7 AS seventh "
                                  "FROM (SELECT region, COUNT(*) AS c FROM people GROUP BY "
                                  "region) t WHERE c > 60 ORDER BY c DESC LIMIT 2")
    kept = sorted((row for row in direct.rows if row[1] > 60), key=lambda r: -r[1])[:2]
    assert answer.rows == [(r, 2 * c, c // 7) for r, c in kept]  # integer division, as PG
    assert answer.columns == ["r", "twice", "seventh"]
    assert answer.kinds == ["text", "bigint", "bigint"]
    assert charged == [Decimal("0.25")]
    assert "post-processing" in answer.notice


def test_an_outer_query_keeps_the_bounds_of_the_values_it_passes_on(engine):
    answer, _ = ask(engine, "SELECT * FROM (SELECT region, COUNT(*) FROM people GROUP BY 1) t "
                            "ORDER BY count DESC")
    assert list(answer.privacy["ci95"]) == ["count"] and len(answer.privacy["ci95"]["count"]) == 4
    session = Session.open(engine, "zoe")
    described = session.describe("SELECT region, count + 1 AS more FROM (SELECT region, COUNT(*) "
                                 "FROM people GROUP BY 1) t")
    assert described == [("region", "text"), ("more", "bigint")]


SERIES_BAR = ("SELECT region AS region, count(*) AS count FROM people JOIN (SELECT region AS "
              "region__, count(*) AS mme_inner__ FROM people WHERE age > 10 GROUP BY region "
              "ORDER BY mme_inner__ DESC LIMIT 2) AS series_limit ON region = region__ "
              "WHERE age > 10 GROUP BY region ORDER BY count DESC LIMIT 10000")
_SINCE = "TO_TIMESTAMP('2024-02-01 00:00:00.000000', 'YYYY-MM-DD HH24:MI:SS.US')"
SERIES_TIME = (f"SELECT DATE_TRUNC('month', at) AS at, kind AS kind, COUNT(*) AS count "
               f"FROM public.events JOIN (SELECT kind AS kind__, COUNT(*) AS mme_inner__ "
               f"FROM public.events WHERE at >= {_SINCE} GROUP BY kind ORDER BY mme_inner__ "
               f"DESC LIMIT 2) AS series_limit ON kind = kind__ WHERE at >= {_SINCE} "
               f"GROUP BY DATE_TRUNC('month', at), kind ORDER BY count DESC LIMIT 10000")


@pytest.mark.usefixtures("no_noise")
def test_superset_series_limit_is_the_top_groups_of_one_release(engine):
    answer, charged = ask(engine, SERIES_BAR)
    direct, _ = ask(engine, "SELECT region, COUNT(*) FROM people WHERE age > 10 GROUP BY 1 "
                            "ORDER BY 2 DESC LIMIT 2", analyst="bob")
    assert answer.rows == direct.rows and charged == [Decimal("0.25")]


@pytest.mark.usefixtures("no_noise")
def test_superset_time_series_limit_ranks_series_by_their_released_total(engine):
    answer, charged = ask(engine, SERIES_TIME)
    direct, _ = ask(engine, "SELECT date_trunc('month', at), kind, COUNT(*) FROM events "
                            "WHERE at >= '2024-02-01' GROUP BY 1, 2", analyst="bob")
    totals = Counter()
    for _, kind, count in direct.rows:
        totals[kind] += count
    top = {kind for kind, _ in totals.most_common(2)}
    assert sorted(answer.rows, key=str) == sorted(
        (row for row in direct.rows if row[1] in top), key=str)
    assert charged == [Decimal("0.25")]


SERIES_AVG = (f"SELECT DATE_TRUNC('month', at) AS at, kind AS kind, AVG(cost) AS \"AVG(cost)\" "
              f"FROM public.events JOIN (SELECT kind AS kind__, AVG(cost) AS mme_inner__ "
              f"FROM public.events WHERE at >= {_SINCE} GROUP BY kind ORDER BY mme_inner__ "
              f"DESC LIMIT 2) AS series_limit ON kind = kind__ WHERE at >= {_SINCE} "
              f"GROUP BY DATE_TRUNC('month', at), kind ORDER BY \"AVG(cost)\" DESC LIMIT 5")


@pytest.mark.usefixtures("no_noise")
def test_superset_time_series_limit_by_avg_ranks_series_by_a_release_of_its_own(engine):
    """A series' AVG over all its months is in no release of the chart's query: the
    top-N subquery is answered (and charged) beside it, and the join keeps the chart's
    rows of its top 2 kinds, then the chart's ORDER BY and LIMIT 5 (after the join)."""
    answer, charged = ask(engine, SERIES_AVG)
    ranking, _ = ask(engine, "SELECT kind, AVG(cost) FROM events WHERE at >= '2024-02-01' "
                             "GROUP BY 1 ORDER BY 2 DESC LIMIT 2", analyst="bob")
    direct, _ = ask(engine, "SELECT date_trunc('month', at), kind, AVG(cost) FROM events "
                            "WHERE at >= '2024-02-01' GROUP BY 1, 2 ORDER BY 3 DESC",
                    analyst="bob")
    top = {kind for kind, _ in ranking.rows}
    assert len(top) == 2
    assert answer.rows == [row for row in direct.rows if row[1] in top][:5]
    assert answer.columns == ["at", "kind", "AVG(cost)"]
    assert len(answer.privacy["ci95"]["AVG(cost)"]) == 5
    assert charged == [Decimal("0.5")]  # two releases, one charge
    assert "ranked by its own release" in answer.notice


@pytest.mark.usefixtures("no_noise")
def test_superset_virtual_dataset_with_a_series_limit(engine):
    virtual = "(SELECT region, income FROM people WHERE age > 20) AS virtual_table"
    answer, charged = ask(engine, f"SELECT region AS region, sum(income) AS \"SUM(income)\" FROM "
                                  f"{virtual} JOIN (SELECT region AS region__, sum(income) AS "
                                  f"mme_inner__ FROM {virtual} GROUP BY region ORDER BY "
                                  f"sum(income) DESC LIMIT 3) AS series_limit ON region = "
                                  f"region__ GROUP BY region ORDER BY \"SUM(income)\" DESC "
                                  f"LIMIT 10000")
    direct, _ = ask(engine, "SELECT region, SUM(income) FROM people WHERE age > 20 GROUP BY 1 "
                            "ORDER BY 2 DESC LIMIT 3", analyst="bob")
    assert answer.rows == direct.rows and answer.columns == ["region", "SUM(income)"]
    assert charged == [Decimal("0.25")]


# 3b. HAVING and results computed from aggregates: post-processing of the one release.

APRIL = dt.datetime(2024, 4, 1)
HAVING = [
    # (query, the same query without HAVING, which of its rows HAVING keeps, the columns
    #  and values of a kept row, epsilon charged)
    ("SELECT region, COUNT(*) FROM people GROUP BY region HAVING COUNT(*) > 73",
     "SELECT region, COUNT(*) FROM people GROUP BY region", lambda r: r[1] > 73,
     (["region", "count"], lambda r: r), 0.25),
    ("SELECT region FROM people GROUP BY region HAVING AVG(income) > 46700",
     "SELECT region, AVG(income) FROM people GROUP BY region", lambda r: r[1] > 46700,
     (["region"], lambda r: r[:1]), 0.25),  # the HAVING aggregate is released, charged
    ("SELECT region, COUNT(*) FROM people GROUP BY region HAVING AVG(income) > 46700",
     "SELECT region, COUNT(*), AVG(income) FROM people GROUP BY region",
     lambda r: r[2] > 46700, (["region", "count"], lambda r: r[:2]), 0.5),
    (("SELECT region, COUNT(*) AS n FROM people GROUP BY 1 HAVING n > 72 AND "
      "(SUM(income) / COUNT(*) > 46000 OR region = 'west') ORDER BY n DESC, region LIMIT 2"),
     "SELECT region, COUNT(*), SUM(income) FROM people GROUP BY 1",
     lambda r: r[1] > 72 and (r[2] / r[1] > 46000 or r[0] == "west"),
     (["region", "n"], lambda r: r[:2]), 0.5),
    (("SELECT floor(age / 25) * 25 AS q, COUNT(*) AS n FROM people GROUP BY q "
      "HAVING q >= 50 AND n > 0"),  # select aliases of a bucket and of an aggregate
     "SELECT floor(age / 25) * 25 AS q, COUNT(*) AS n FROM people GROUP BY q",
     lambda r: r[0] >= 50 and r[1] > 0, (["q", "n"], lambda r: r), 0.25),
    (("SELECT COUNT(*) FROM events GROUP BY date_trunc('month', at) "
      "HAVING date_trunc('month', at) >= '2024-04-01'"),  # a group term not selected
     "SELECT COUNT(*), date_trunc('month', at) FROM events GROUP BY 2",
     lambda r: r[1] >= APRIL, (["count"], lambda r: r[:1]), 0.25),
    ("SELECT COUNT(*) FROM people WHERE age > 30 HAVING COUNT(*) > 200",  # one group
     "SELECT COUNT(*) FROM people WHERE age > 30", lambda r: r[0] > 200,
     (["count"], lambda r: r), 0.25),
    (("SELECT region, COUNT(*) * 2 AS twice, COUNT(*) / 7, 'count' AS metric FROM people "
      "GROUP BY region"),  # computed results and a constant, as Grafana sends
     "SELECT region, COUNT(*) FROM people GROUP BY region", lambda r: True,
     (["region", "twice", "?column?", "metric"], lambda r: (r[0], 2 * r[1], r[1] // 7,
                                                           "count")), 0.25),
]


@pytest.mark.parametrize("sql,unfiltered,keep,result,charge", HAVING)
@pytest.mark.usefixtures("no_noise")
def test_having_filters_the_released_rows_of_one_query(engine, sql, unfiltered, keep, result,
                                                       charge):
    answer, charged = ask(engine, sql)
    direct, _ = ask(engine, unfiltered, analyst="bob")
    kept = [row for row in direct.rows if keep(row)]
    if "ORDER BY" in sql:  # n DESC, region; LIMIT 2
        kept = sorted(kept, key=lambda r: (-r[1], r[0]))[:2]
    columns, values = result
    assert answer.columns == columns
    assert answer.rows == [values(row) for row in kept]
    assert 0 < len(kept) < len(direct.rows) or "metric" in columns or "> 200" in sql
    assert charged == [Decimal(str(charge))]  # one ledger row: charged once
    assert "post-processing" in answer.notice


def test_having_reads_the_released_values_not_the_true_ones(engine, monkeypatch):
    """With every released count 1000 above the true one, HAVING COUNT(*) > 1000 keeps
    every group (it filters what is released) and the kept values are the released ones;
    a filter on the true counts would keep none."""
    from proxy.privacy import noisy_answers
    from proxy.privacy.mechanisms import Noisy

    monkeypatch.setattr(noisy_answers, "laplace_integer",
                        lambda true, *args, **kwargs: Noisy(true + 1000, 0.0, "none"))
    answer, _ = ask(engine, "SELECT region, COUNT(*) FROM people GROUP BY region "
                            "HAVING COUNT(*) > 1000")
    expected = Counter(r for r in PEOPLE["region"] if r in REGIONS)
    assert answer.rows == [(r, expected[r] + 1000) for r in REGIONS]


def test_having_keeps_the_bounds_and_types_of_what_it_shows(engine):
    answer, _ = ask(engine, "SELECT region, COUNT(*) AS n FROM people GROUP BY region "
                            "HAVING AVG(income) > -1")
    assert list(answer.privacy["ci95"]) == ["n"]  # the HAVING-only AVG is not shown
    assert "HAVING ran on the released answers" in answer.notice
    described = Session.open(engine, "zoe").describe(
        "SELECT region, COUNT(*) * 2 AS twice, 'avg' AS metric FROM people GROUP BY 1 "
        "HAVING SUM(income) > 0")
    assert described == [("region", "text"), ("twice", "bigint"), ("metric", "text")]


# 4. Refused shapes: one line, a stable SQLSTATE, nothing spent.

REFUSED = [
    ("SELECT width_bucket(age, -1e308, 1e307, 10) AS b, COUNT(*) FROM people GROUP BY 1",
     "0A000", "bounds must be within"),
    ("SELECT floor(age / 1e300) * 1e300 AS b, COUNT(*) FROM people GROUP BY 1",
     "0A000", "positive whole number up to"),
    ('SELECT SUM(age * 2) FROM people WHERE "age * 2" > 10', "42703", "not declared"),
    ("SELECT AVG(c) FROM (SELECT region, COUNT(*) AS c FROM people GROUP BY region) t",
     "0A000", "aggregate over the answers"),
    (("WITH t AS (SELECT region, COUNT(*) AS c FROM people GROUP BY region) "
     "SELECT COUNT(*) FROM t"), "0A000", "aggregate over the answers"),
    ("SELECT COUNT(*) FROM (SELECT * FROM people LIMIT 10) t", "0A000", "LIMIT"),
    ("SELECT COUNT(*) FROM (SELECT DISTINCT region FROM people) t", "0A000", "DISTINCT"),
    ("SELECT * FROM (SELECT * FROM people) t", "42501", "SELECT *"),
    ("WITH a AS (SELECT region FROM people) SELECT region FROM a", "42501", "region"),
    ("SELECT COUNT(*) FROM (SELECT p.age FROM people p JOIN regions r ON p.region = r.region) t",
     "0A000", "join"),
    ("SELECT md5(region) FROM (SELECT region, COUNT(*) FROM people GROUP BY 1) t",
     "0A000", "released values"),
    ("SELECT c FROM (SELECT region, COUNT(*) AS c FROM people GROUP BY 1) t, people",
     "0A000", "join"),
    ("SELECT COUNT(nope) FROM (SELECT * FROM people) t", "42703", "nope"),
    ("WITH people AS (SELECT * FROM people) SELECT * FROM regions, people", "42501",
     "SELECT *"),  # a CTE named like a table hides nothing
    ("WITH regions AS (SELECT * FROM people LIMIT 5) SELECT * FROM regions", "42501", "rows"),
    ("WITH a AS (SELECT * FROM regions) SELECT * FROM a", "0A000", "declare the tables'"),
    ("SELECT date_trunc('minute', at), COUNT(*) FROM events GROUP BY 1", "0A000", "max_groups"),
    ("SELECT kind, date_trunc('day', at), COUNT(*) FROM events GROUP BY 1, 2", "0A000",
     "max_groups"),
    ("SELECT date_trunc('month', seen), COUNT(*) FROM events GROUP BY 1", "0A000",
     "declared domain"),
    ("SELECT date_trunc('month', age), COUNT(*) FROM people GROUP BY 1", "42883",
     "date or timestamp"),
    ("SELECT floor(income / 0.5), COUNT(*) FROM people GROUP BY 1", "0A000", "whole number"),
    ("SELECT income / 10 * 10, COUNT(*) FROM people GROUP BY 1", "0A000", "floor("),
    ("SELECT CASE WHEN age > 30 THEN income END, COUNT(*) FROM people GROUP BY 1", "0A000",
     "literals"),
    ("SELECT COUNT(*) FROM people GROUP BY 5", "42P10", "position 5"),
    ("SELECT COUNT(*) AS n FROM people GROUP BY 1", "0A000", "aggregate"),
    ("SELECT lower(CAST(income AS text)), COUNT(*) FROM people GROUP BY 1", "0A000",
     "public set of keys"),
    ("SELECT person_id % 10, COUNT(*) FROM people GROUP BY 1", "0A000", "declared domain"),
    ("SELECT income, COUNT(*) FROM people GROUP BY income", "0A000", "floor(income / 10)"),
    ("SELECT width_bucket(age, 80, 20, 3), COUNT(*) FROM people GROUP BY 1", "0A000", "lo < hi"),
    ("SELECT COUNT(*) FROM events WHERE at > '2024-13-01'", "0A000", "compare it with a date"),
    ("SELECT COUNT(*) FROM events WHERE at > TIMESTAMP 'yesterday'", "0A000",
     "not a date"),
    (SERIES_BAR.replace("WHERE age > 10 GROUP BY region ORDER BY count", "GROUP BY region "
                        "ORDER BY count"), "0A000", "filter as the outer query"),
    (SERIES_BAR.replace("count(*) AS mme_inner__", "max(age) AS mme_inner__"), "0A000",
     "the query does not ask for"),
    ("SELECT region, COUNT(*) FROM people GROUP BY region HAVING age > 30", "0A000",
     "neither an aggregate nor a GROUP BY key"),
    ("SELECT COUNT(*) AS age FROM people GROUP BY region HAVING age > 3", "0A000",
     "neither an aggregate"),  # a column of the table, not the alias, as in PostgreSQL
    ("SELECT region, COUNT(*) FROM people GROUP BY region HAVING md5(region) = 'north'",
     "0A000", "released values"),
    ("SELECT region, COUNT(*) FROM people GROUP BY region HAVING COUNT(*) > (SELECT 1)",
     "0A000", "subqueries"),
    ("SELECT region, COUNT(*) FROM people GROUP BY region HAVING MEDIAN(region) > 'a'",
     "0A000", "numeric column"),
    ("SELECT region, COUNT(*) FROM people GROUP BY 1 HAVING COUNT(*) > 1 ORDER BY AVG(age)",
     "0A000", "not a result column"),
    ("SELECT region, COUNT(*) FROM people GROUP BY 1 HAVING COUNT(*) > 1 LIMIT 'all'",
     "0A000", "whole number"),
    ("SELECT 'avg' AS metric FROM people", "0A000", "next to aggregates"),
    ("SELECT COUNT(*) FROM people GROUP BY COUNT(*) + 1 HAVING COUNT(*) + 1 > 2", "0A000",
     "public set of keys"),
    # ISO 8601 forms Python's fromisoformat reads and DuckDB or PostgreSQL do not: the
    # backend failed on them after the debit (redteam); and a zone that moves a moment
    # out of Python's years (OverflowError)
    *((f"SELECT COUNT(*) FROM events WHERE {column} >= '{moment}'", "0A000",
       "compare it with a date")
      for column in ("at", "day")
      for moment in ("20240101", "2024-W01-1", "2024-01-01T00", "2024-01-01T0000",
                     "2024-01-01 00:00:00,5", "2024-01-01 ", " 2024-01-01", "2024-01-01\t",
                     "2024-001")),
    *((f"SELECT COUNT(*) FROM events WHERE {column} >= '{moment}'::timestamptz", "0A000",
       "beyond the years") for column in ("at", "day")
      for moment in ("0001-01-01T00:00:00+05:00", "9999-12-31T23:00:00-05:00")),
    # a substring's start or length beyond PostgreSQL's int (or DuckDB's BIGINT) failed
    # in the backend after the debit (redteam)
    *((f"SELECT COUNT(*) FROM people WHERE substring(region, {start}, {length}) = 'no'",
       "42883", "not allowed in WHERE")
      for start, length in (("2147483648", "2"), ("1", "2147483648"),
                            ("1", "99999999999999999999"))),
]


@pytest.mark.parametrize("sql,sqlstate,fragment", REFUSED)
def test_refused_shapes_say_why_in_one_line_and_spend_nothing(engine, sql, sqlstate, fragment):
    before = engine.ledger.entries(), engine.ledger.budgets()
    with pytest.raises(Refused) as refused:
        list(Session.open(engine, "alice").execute(sql))
    assert refused.value.sqlstate == sqlstate
    assert fragment in refused.value.message and "\n" not in refused.value.message
    assert (engine.ledger.entries(), engine.ledger.budgets()) == before


def test_steps_over_public_tables_pass_through_merged():
    """A CTE over a public table whose columns the rules declare merges away and passes
    through; one whose name shadows a protected table reads that table and is refused."""
    from proxy.vocabulary import PassthroughPlan

    rules = parse_rules(RULES_TEXT.replace("[tables.regions]\npublic = true",
                                           "[tables.regions]\npublic = true\n"
                                           "[tables.regions.columns]\n"
                                           'region = { type = "text" }\nlabel = { type = "text" }'))
    plan = analyze(parse_statements("WITH people AS (SELECT * FROM regions WHERE label <> 'x') "
                                    "SELECT region FROM people")[0], rules, Settings())
    assert isinstance(plan, PassthroughPlan)
    assert [t.name for t in plan.sql.find_all(exp.Table)] == ["regions"]
    with pytest.raises(Refused):
        analyze(parse_statements("WITH regions AS (SELECT * FROM people) SELECT region FROM "
                                 "regions")[0], rules, Settings())


# 5. Rules: timestamp columns, their domain, max_groups.

@pytest.mark.parametrize("column,problem", [
    ('{ type = "timestamp", domain = [2024-02-01, 2024-01-01] }', "must be before"),
    ('{ type = "timestamp", domain = ["soon", 2024-01-01] }', "not a date"),
    ('{ type = "date", domain = [2024-01-01] }', "[first, last]"),
    ('{ type = "timestamp", domain = [2024-01-01T00:00:00Z, 2024-02-01T00:00:00Z] }',
     "not a date"),
    ('{ type = "text", domain = [0, 1] }', "int, float, date and timestamp"),
])
def test_a_bad_time_domain_is_rejected_with_its_line(column, problem):
    with pytest.raises(RulesError) as rejected:
        parse_rules(f"[tables.t]\n[tables.t.columns]\nx = {column}\n", "r.toml")
    assert problem in str(rejected.value) and "r.toml:3" in str(rejected.value)


def test_max_groups_must_be_a_positive_whole_number():
    assert RULES.defaults.max_groups == 400
    assert parse_rules("").defaults.max_groups == 10_000
    with pytest.raises(RulesError, match="max_groups"):
        parse_rules("[defaults]\nmax_groups = 0\n")


def test_an_old_demo_file_gains_the_visit_times(tmp_path):
    from proxy.demo import add_visit_times, create_demo, visits_columns

    path = tmp_path / "demo.duckdb"
    create_demo(path)
    con = duckdb.connect(str(path))
    con.execute("ALTER TABLE visits DROP COLUMN visited_at")
    con.close()
    add_visit_times(path)
    con = duckdb.connect(str(path))
    stored = [row[0] for row in con.execute("SELECT visited_at FROM visits ORDER BY visit_id")
              .fetchall()]
    con.close()
    fresh = visits_columns()["visited_at"]
    assert stored == [t.astype("datetime64[us]").item() for t in fresh]
    assert min(stored) >= dt.datetime(2023, 1, 1) and max(stored) <= dt.datetime(2024, 12, 31,
                                                                               23, 59, 59)
