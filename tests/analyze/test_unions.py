"""UNION [ALL] of aggregate queries (``proxy.analyze.outer.union_plan``): each branch a
release of its own, answered as if sent alone, its constant items written in the union;
the union of the released rows, its ORDER BY and LIMIT, post-processing. Noise off, each
answer is PostgreSQL's own; the ledger charges the branches' ε; what is not a union of
aggregate queries is refused in one line, for free."""

from __future__ import annotations

import datetime as dt

import pytest

from proxy.errors import BudgetExhausted
from proxy.rules import parse_rules
from proxy.session import Session
from tests.databases import postgres_truth
from tests.factories import Table, engine_fixture
from tests.probes import refused_for_free

pytestmark = pytest.mark.postgres

RULES = parse_rules("""
[defaults]
model = "idp"
epsilon_per_query = 0.25
budget_per_analyst = 100000
answer_cache = false

[analysts.alice]
[analysts.poor]
budget = 0.6
[analysts.rich]
budget = 0.3
[analysts.rich2]
budget = 0.3

[tables.people]
privacy_unit = "person_id"
[tables.people.columns]
person_id = { type = "int" }
region = { type = "text", keys = ["north", "south", "east"] }
sex    = { type = "text", keys = ["f", "m"] }
age    = { type = "int", domain = [0, 120] }

[tables.visits]
privacy_unit = "person_id"
[tables.visits.columns]
person_id = { type = "int" }
days      = { type = "int", domain = [0, 30] }
at        = { type = "timestamp", domain = [2024-01-01T00:00:00, 2024-12-31T23:59:59] }
""", "unions.toml")
PEOPLE = {"person_id": list(range(1, 201)),
          "region": [["north", "south", "east"][i % 3] for i in range(200)],
          "sex": ["fm"[i * 7 % 5 % 2] for i in range(200)],
          "age": [i * 13 % 100 for i in range(200)]}
VISITS = {"person_id": [1 + i % 150 for i in range(400)], "days": [i % 31 for i in range(400)],
          "at": [dt.datetime(2024, 1, 1) + dt.timedelta(hours=i * 19) for i in range(400)]}
PEOPLE_TYPES = {"person_id": "INTEGER", "region": "TEXT", "sex": "TEXT", "age": "INTEGER"}
VISITS_TYPES = {"person_id": "INTEGER", "days": "INTEGER", "at": "TIMESTAMP"}

engine = engine_fixture(RULES, lambda: {"people": Table(PEOPLE, PEOPLE_TYPES),
                                        "visits": Table(VISITS, VISITS_TYPES)}, shared=True)


@pytest.fixture(scope="module")
def truth(postgres_url):
    with postgres_truth(postgres_url, {"people": (PEOPLE, PEOPLE_TYPES),
                                       "visits": (VISITS, VISITS_TYPES)}) as answer:
        yield answer


UNIONS = [
    "SELECT 'people' AS t, COUNT(*) AS n FROM people UNION ALL SELECT 'visits', COUNT(*) "
    "FROM visits",
    "SELECT 'f' AS sex, region, COUNT(*) AS n FROM people WHERE sex = 'f' GROUP BY region "
    "UNION ALL SELECT 'm', region, COUNT(*) FROM people WHERE sex = 'm' GROUP BY region",
    "SELECT region, SUM(age) AS s FROM people GROUP BY 1 UNION SELECT 'all', SUM(age) FROM "
    "people UNION ALL SELECT 'young', SUM(age) FROM people WHERE age < 30 ORDER BY 2 DESC "
    "LIMIT 3",
    # the review's three: positions after a constant item, queries in brackets, an EXISTS
    # inside a query (each refused before)
    "SELECT 'x' AS t, region, COUNT(*) AS n FROM people GROUP BY 2 UNION ALL SELECT 'y', "
    "sex, COUNT(*) FROM people GROUP BY 1, 2",
    "(SELECT region, COUNT(*) AS n FROM people GROUP BY 1 ORDER BY 1 LIMIT 1) UNION ALL "
    "(SELECT sex, COUNT(*) FROM people GROUP BY 1) ORDER BY 1",
    "SELECT COUNT(*) AS n FROM people p WHERE EXISTS (SELECT * FROM visits v WHERE "
    "v.person_id = p.person_id AND v.days > 20) UNION ALL SELECT COUNT(*) FROM people",
]


@pytest.mark.parametrize("sql,names", list(zip(UNIONS, [
    ["t", "n"], ["sex", "region", "n"], ["region", "s"], ["t", "region", "n"],
    ["region", "n"], ["n"]])))
@pytest.mark.usefixtures("no_noise")
def test_a_union_of_releases_is_postgresql_s_union(engine, truth, sql, names):
    (answer,) = list(Session.open(engine, "alice").execute(sql))
    wanted = truth(sql)
    if "ORDER BY" in sql:
        assert answer.rows == wanted
    else:
        assert sorted(answer.rows) == sorted(wanted)
    assert answer.columns == names  # the first query's, as PostgreSQL names them
    assert "the UNION of the releases ran on the released answers" in " ".join(
        answer.privacy["notes"])


def test_each_branch_is_charged_as_if_sent_alone_in_one_ledger_row(engine):
    session = Session.open(engine, "alice")
    before = engine.ledger.entries()
    (answer,) = list(session.execute(UNIONS[1]))
    assert answer.privacy["epsilon_spent"] == pytest.approx(0.5)
    (row,) = engine.ledger.entries()[len(before):]
    assert float(row[6]) == pytest.approx(0.5) and "; then " in row[5]


def test_a_budget_short_of_every_branch_refuses_before_any_is_computed(engine):
    """Three branches at ε 0.25 with 0.6 left: the one charge of 0.75 is refused, nothing
    spent (the review found the first two charged, then the third refused)."""
    sql = " UNION ALL ".join(f"SELECT COUNT(*) FROM people WHERE age > {age}"
                             for age in (3, 4, 5))
    with pytest.raises(BudgetExhausted):
        list(Session.open(engine, "poor").execute(sql))
    assert [(float(e[6]), e[9]) for e in engine.ledger.entries("poor")] == [
        (0.75, "refused: budget")]
    assert float(engine.ledger.remaining("poor")) == pytest.approx(0.6)


@pytest.mark.parametrize("sql,sqlstate,fragment", [
    ("SELECT region, COUNT(*) FROM people GROUP BY 1 UNION ALL SELECT COUNT(*) FROM people",
     "42601", "same number of columns"),
    ("SELECT COUNT(*) FROM people INTERSECT SELECT COUNT(*) FROM visits", "0A000",
     "INTERSECT and EXCEPT are not supported"),
    ("SELECT COUNT(*) FROM people UNION ALL SELECT age FROM people", "42501", "age"),
    ("SELECT COUNT(*) FROM people UNION ALL SELECT 1", "0A000", "must compute an aggregate"),
    (" UNION ALL ".join(["SELECT COUNT(*) FROM people"] * 65), "54000", "more than the 64"),
    # what the released rows would fail on is found on a typed row before the debit
    # (the review found these charged, then failed): types no cast joins, a label cast
    ("SELECT 'x', MAX(at) FROM visits UNION ALL SELECT 'y', COUNT(*) FROM visits WHERE "
     "days > 4", "0A000", "could not be computed on the released values"),
    ("SELECT region, COUNT(*) FROM people GROUP BY region UNION ALL SELECT sex, COUNT(*) "
     "FROM people GROUP BY sex ORDER BY CAST(region AS INT)", "0A000",
     "Could not convert string"),
    ("SELECT region, TO_CHAR(COUNT(*), '999') FROM people GROUP BY region", "0A000",
     "TO_CHAR takes a date or timestamp here"),
    # an outer query over a release is run on its public keys before the debit too
    ("SELECT CAST(region AS INT), n FROM (SELECT region, COUNT(*) AS n FROM people GROUP BY "
     "1) s", "0A000", "Could not convert string"),
])
def test_what_is_no_union_of_aggregate_queries_is_refused_for_free(engine, sql, sqlstate,
                                                                   fragment):
    refused_for_free(engine, sql, sqlstate, fragment)


@pytest.mark.usefixtures("no_noise")
def test_to_char_of_a_moment_beyond_python_s_years_is_null(engine):
    """to_timestamp of a released count far beyond year 9999 (year 65,000 here), which
    DuckDB hands the formatter as text: NULL, not a failure after the debit (the review
    found "'str' object has no attribute 'year'")."""
    (answer,) = list(Session.open(engine, "alice").execute(
        "SELECT TO_CHAR(to_timestamp(COUNT(*) * 1e10), 'YYYY') AS y FROM people WHERE age > 3"))
    assert answer.rows == [(None,)]


def test_a_query_with_no_group_costs_nothing_wherever_it_stands(engine):
    """Budget 0.3 and a query of ε 0.25 beside one whose WHERE admits no key: the one
    charge is 0.25 (0.5 would be refused), the empty query first or last alike (the
    second review found the order deciding it)."""
    grouped = "SELECT region, COUNT(*) FROM people WHERE age > {} GROUP BY region"
    empty = "SELECT region, COUNT(*) FROM people WHERE region = 'nowhere' GROUP BY region"
    for analyst, parts in (("rich", [grouped.format(3), empty]),
                           ("rich2", [empty, grouped.format(4)])):
        (answer,) = list(Session.open(engine, analyst).execute(" UNION ALL ".join(parts)))
        assert answer.privacy["epsilon_spent"] == pytest.approx(0.25)
        assert [float(e[6]) for e in engine.ledger.entries(analyst)] == [0.25]
    # every part without a group: nothing read, nothing recorded (it was written as a
    # "served from cache" row, though nothing came from the cache; review of 2026-11-29)
    before = engine.ledger.entries("rich")
    (answer,) = list(Session.open(engine, "rich").execute(f"{empty} UNION ALL {empty}"))
    assert answer.rows == [] and engine.ledger.entries("rich") == before
