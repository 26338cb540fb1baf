"""Post-processing reads nothing but the released values (issue 33 item 2, SPEC §5.3):
on every neighbour of a small data set (tests/privacy/harness.py: one person's rows, each
changed to any other value) whose releases come out the same, every post-processed
answer — windows over the groups, NULLIF ratios, HAVING, an outer query, a CROSS JOIN of
one-row releases — is the same, row for row, and charged the same ε.

The releases are pinned: each count's draw is replaced by the next of a fixed list, which
no row can move, so that any difference left would come from post-processing reading the
data."""

from __future__ import annotations

import itertools

from proxy.privacy import noisy_answers
from proxy.privacy.mechanisms import Noisy
from proxy.session import Session
from tests.factories import Table, open_engine
from tests.privacy.harness import neighbours

RULES = """
[defaults]
model = "idp"
epsilon_per_query = 0.5
budget_per_analyst = 1000000
answer_cache = false

[analysts.alice]

[tables.people]
privacy_unit = "person_id"
max_rows_per_unit = 2
[tables.people.columns]
person_id = { type = "int" }
age = { type = "int", domain = [0, 100] }
region = { type = "text", keys = ["a", "b", "c"] }
"""
TYPES = {"person_id": "INTEGER", "age": "INTEGER", "region": "TEXT"}
BASE = [(1, 20, "a"), (1, 22, "a"), (2, 70, "b"), (3, 35, "a"), (4, 8, "c"), (4, 90, "b"),
        (5, 55, "c"), (6, 41, "b")]
OTHERS = [(3, "c"), (99, "b")]  # what a changed person's rows become (age, region)

STATEMENTS = [
    "SELECT region, COUNT(*) AS n, COUNT(*) * 1.0 / SUM(COUNT(*)) OVER () AS share, "
    "LAG(COUNT(*)) OVER (ORDER BY region) AS prev, NTILE(2) OVER (ORDER BY COUNT(*), region) "
    "AS half, RANK() OVER (ORDER BY COUNT(*) DESC) AS place FROM people WHERE age > 10 "
    "GROUP BY region ORDER BY region",
    "SELECT CAST(COUNT(CASE WHEN age > 50 THEN 1 END) AS FLOAT) / NULLIF(COUNT(*), 0) AS r "
    "FROM people WHERE age >= 5",
    "SELECT region, COUNT(*) AS n FROM people WHERE age > 1 GROUP BY region HAVING "
    "COUNT(*) > 4 ORDER BY 2 DESC LIMIT 2",
    "SELECT r, n, SUM(n) OVER (ORDER BY r) AS running FROM (SELECT region AS r, COUNT(*) AS n "
    "FROM people WHERE age < 95 GROUP BY 1) s WHERE n <> 2 ORDER BY r",
    "SELECT a.n * 1.0 / NULLIF(b.m, 0) AS ratio, MAX(a.n) OVER () AS top FROM (SELECT "
    "COUNT(*) AS n FROM people WHERE region = 'a') a CROSS JOIN (SELECT COUNT(*) AS m FROM "
    "people WHERE age < 60) b",
]
PINNED = [5, 9, 2, 7, 0, 4, 6]


def _answers(url: str, rows: list[tuple], monkeypatch) -> list[tuple]:
    table = Table({name: [row[i] for row in rows] for i, name in enumerate(TYPES)}, TYPES)
    outcomes = []
    with open_engine(url, RULES, {"people": table}) as engine:
        for sql in STATEMENTS:
            draws = itertools.cycle(PINNED)
            monkeypatch.setattr(noisy_answers, "laplace_integer",
                                lambda true, *args, **kwargs: Noisy(next(draws), 0.0, "none"))
            answer, = Session.open(engine, "alice").execute(sql)
            outcomes.append((answer.columns, answer.rows, answer.privacy["epsilon_spent"]))
    return outcomes


def test_post_processing_gives_every_neighbour_the_same_answer(tmp_path, monkeypatch):
    datasets = [BASE, *neighbours(BASE, OTHERS)]  # each of one person's rows to any other
    outcomes = [_answers(f"duckdb:///{tmp_path}/d{i}.duckdb", rows, monkeypatch)
                for i, rows in enumerate(datasets)]
    for sql, *each in zip(STATEMENTS, *outcomes):
        assert each[0][1], sql  # rows answered
        for rows, outcome in zip(datasets[1:], each[1:]):
            assert outcome == each[0], (sql, rows)


def test_the_pinned_releases_are_what_is_post_processed(tmp_path, monkeypatch):
    """The pinning reaches every release of these statements: with other pinned draws
    each answer moves (so the equality above is not that of constants)."""
    first = _answers(f"duckdb:///{tmp_path}/base.duckdb", BASE, monkeypatch)
    PINNED.reverse()
    try:
        second = _answers(f"duckdb:///{tmp_path}/again.duckdb", BASE, monkeypatch)
    finally:
        PINNED.reverse()
    for sql, one, other in zip(STATEMENTS, first, second):
        assert one[1] != other[1], sql
