"""Issue 16's list of analyst SQL that was refused, and issue 18's joins (with a public
table, of two protected tables on the privacy unit) and aggregates over per-unit
aggregates, on the demo through ``idp-proxy serve`` on both backends: each statement is
answered with noise and its privacy notice, charged once (ε per aggregate), and its
repeat comes from the answer cache, free and the same."""

from __future__ import annotations

from decimal import Decimal

import psycopg
import pytest

pytestmark = pytest.mark.postgres

EPSILON = Decimal("0.1")  # rules/demo.toml's epsilon_per_query

# (statement, aggregates charged)
ASKED = [
    ("WITH a AS (SELECT * FROM people WHERE age > 30) SELECT COUNT(*) FROM a", 1),
    ("SELECT COUNT(*) FROM (SELECT * FROM people WHERE income > 50000) t", 1),
    ("SELECT region, COUNT(*) FROM people GROUP BY 1", 1),
    (("SELECT date_trunc('month', visited_at) AS month, COUNT(*) FROM visits "
     "GROUP BY date_trunc('month', visited_at)"), 1),
    ("SELECT age / 10 * 10 AS decade, COUNT(*) FROM people GROUP BY age / 10 * 10", 1),
    ("SELECT width_bucket(age, 0, 100, 10) AS bucket, COUNT(*) FROM people GROUP BY 1", 1),
    ("SELECT SUM(CASE WHEN age > 30 THEN 1 ELSE 0 END) FROM people", 1),
    ("SELECT COUNT(*) FILTER (WHERE age > 40) FROM people", 1),
    ("SELECT AVG(cost * days) FROM visits", 1),
    ("SELECT COUNT(DISTINCT person_id) FROM visits", 1),
    ("SELECT region, COUNT(*) FROM people GROUP BY region HAVING COUNT(*) > 10", 1),
    ("SELECT STDDEV(age), VARIANCE(income) FROM people", 2),
    # issue 18: the protected table joined with the public regions table on its unique code
    (("SELECT r.name, MEDIAN(p.income) FROM people p JOIN regions r ON p.region = r.code "
      "GROUP BY r.name"), 1),
    (("SELECT COUNT(*), AVG(p.age) FROM people p LEFT JOIN regions r ON p.region = r.code "
      "WHERE r.name <> 'Western district'"), 2),
    # issue 18, item 2: two protected tables joined on the privacy unit, and a public one
    (("SELECT p.region, COUNT(*) FROM visits v JOIN people p ON v.person_id = p.person_id "
      "GROUP BY p.region"), 1),
    (("SELECT r.name, SUM(v.cost), MEDIAN(p.age) FROM visits v JOIN people p "
      "ON v.person_id = p.person_id JOIN regions r ON p.region = r.code GROUP BY r.name"), 2),
    # issue 18, item 3: aggregates over per-unit aggregates
    (("SELECT COUNT(*) FROM (SELECT person_id, COUNT(*) AS n FROM visits GROUP BY person_id) t "
      "WHERE n > 3"), 1),
    (("WITH t AS (SELECT person_id, COUNT(*) AS n FROM visits WHERE cost > 100 "
      "GROUP BY person_id) SELECT AVG(n), COUNT(DISTINCT person_id) FROM t"), 2),
]


def _budget(con) -> Decimal:
    return Decimal(con.execute("SHOW idp.budget").fetchone()[0])


@pytest.mark.parametrize("sql,aggregates", ASKED)
def test_answered_with_its_notice_charged_once(demo_server, sql, aggregates):
    with psycopg.connect(demo_server.dsn("alice"), autocommit=True) as con:
        notices: list[str] = []
        con.add_notice_handler(lambda notice: notices.append(notice.message_primary))
        before = _budget(con)
        rows = con.execute(sql).fetchall()
        assert rows and all(value is not None for row in rows for value in row), rows
        assert len(notices) == 1 and notices[0].startswith("iDP"), notices
        assert before - _budget(con) == aggregates * EPSILON
        assert con.execute(sql).fetchall() == rows  # the cache: the same release, free
        assert before - _budget(con) == aggregates * EPSILON


def test_a_where_on_the_group_column_answers_only_its_keys(demo_server):
    """issue 32 item 4 over the wire: no phantom groups. The two departments asked for,
    one ε; a WHERE no declared key meets answers no row, for free, with a notice."""
    with psycopg.connect(demo_server.dsn("bob"), autocommit=True) as con:
        notices: list[str] = []
        con.add_notice_handler(lambda notice: notices.append(notice.message_primary))
        before = _budget(con)
        rows = con.execute("SELECT department, COUNT(*) FROM visits WHERE department IN "
                           "('cardiology', 'oncology') GROUP BY department").fetchall()
        assert [row[0] for row in rows] == ["cardiology", "oncology"]
        assert all(row[1] > 5000 for row in rows)  # about 8,800 visits each
        assert before - _budget(con) == EPSILON
        cursor = con.execute("SELECT department, MEDIAN(cost) FROM visits WHERE department "
                             "= 'neurology' GROUP BY 1")
        assert cursor.fetchall() == [] and [c.name for c in cursor.description] == \
            ["department", "median"]
        assert before - _budget(con) == EPSILON
        assert "admits none of the GROUP BY keys" in notices[-1]


def test_in_over_a_public_table_is_the_join_on_its_unique_key(demo_server):
    """``region IN (SELECT code FROM regions)`` said "subqueries over protected tables are
    not supported", then named the join on the public table's unique key; it is that
    join, answered (under OR it still names the join to write, nothing spent)."""
    with psycopg.connect(demo_server.dsn("bob"), autocommit=True) as con:
        con.execute("SET idp.epsilon = 1")
        joined = con.execute("SELECT COUNT(*) FROM people JOIN regions ON region = "
                             "regions.code WHERE regions.name LIKE 'North%'").fetchone()[0]
        semi = con.execute("SELECT COUNT(*) FROM people WHERE region IN (SELECT code FROM "
                           "regions WHERE name LIKE 'North%')").fetchone()[0]
        assert abs(semi - joined) < 40 and 5000 < semi < 9000  # ~7,050 north, noise ±7
        before = _budget(con)
        with pytest.raises(psycopg.Error) as refused:
            con.execute("SELECT COUNT(*) FROM people WHERE age > 90 OR region IN (SELECT "
                        "code FROM regions WHERE name <> 'x')")
        assert refused.value.sqlstate == "0A000" and _budget(con) == before
        assert "JOIN regions ON region = regions.code" in str(refused.value)


def test_a_filters_values_over_the_wire_are_the_declared_keys(demo_server):
    """Superset's native filter and Metabase's field values over a real client, the
    extended protocol included (a bound parameter in the WHERE): the declared keys,
    nothing spent, a notice."""
    with psycopg.connect(demo_server.dsn("bob"), autocommit=True) as con:
        notices: list[str] = []
        con.add_notice_handler(lambda notice: notices.append(notice.message_primary))
        before = _budget(con)
        rows = con.execute("SELECT DISTINCT department FROM visits ORDER BY 1").fetchall()
        assert [row[0] for row in rows] == ["cardiology", "dermatology", "oncology",
                                            "orthopedics", "pediatrics"]
        rows = con.execute("SELECT department FROM visits WHERE department <> %s GROUP BY 1 "
                           "ORDER BY 1 DESC LIMIT 2", ("pediatrics",)).fetchall()
        assert rows == [("orthopedics",), ("oncology",)]
        assert _budget(con) == before and "declared keys of department" in notices[-1]
