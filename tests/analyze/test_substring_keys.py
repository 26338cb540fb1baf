"""GROUP BY substring(col, start, count) on a text column with declared keys
(``proxy.analyze.substrings``): its keys are the declared keys' substrings,
deduplicated; on both backends it is answered as the CASE over the declared keys
(rows of undeclared values in no group); other uses are refused for free."""

from __future__ import annotations

import pytest

from proxy.rules import parse_rules
from proxy.session import Session
from tests.factories import open_engine, table_of_rows
from tests.probes import recorded_statistics, refused_for_free

RULES = parse_rules("""
[defaults]
noise_scale = "local"
budget_per_analyst = 10

[analysts.alice]

[tables.calls]
[tables.calls.columns]
phone = { type = "text", keys = ["13-555", "13-777", "27-100", "31-2", "9"] }
note  = { type = "text" }
cost  = { type = "int", domain = [0, 100] }
""", "substrings.toml")
# "13-999" and "44-1" are no declared key: in no group
PHONES = ["13-555", "13-777", "27-100", "31-2", "9", "13-999", "44-1", None]
CALLS = [(PHONES[i % len(PHONES)], "n", i % 50) for i in range(200)]


def _tables():
    return {"calls": table_of_rows(CALLS, {"phone": "TEXT", "note": "TEXT", "cost": "INTEGER"})}


# (the substring term, the CASE over the declared keys it stands for)
SAME = [
    ("substring(phone FROM 1 FOR 2)",
     "CASE WHEN phone IN ('13-555', '13-777') THEN '13' WHEN phone IN ('27-100') THEN '27' "
     "WHEN phone IN ('31-2') THEN '31' WHEN phone IN ('9') THEN '9' END"),
    ("substr(phone, 0, 3)",  # PostgreSQL counts the position before 1: two characters
     "CASE WHEN phone IN ('13-555', '13-777') THEN '13' WHEN phone IN ('27-100') THEN '27' "
     "WHEN phone IN ('31-2') THEN '31' WHEN phone IN ('9') THEN '9' END"),
    ("substring(phone, 4)",
     "CASE WHEN phone IN ('13-555') THEN '555' WHEN phone IN ('13-777') THEN '777' "
     "WHEN phone IN ('27-100') THEN '100' WHEN phone IN ('31-2') THEN '2' "
     "WHEN phone IN ('9') THEN '' END"),
]


@pytest.mark.parametrize("term,case", SAME)
def test_substring_keys_are_the_declared_keys_substrings(backend_url, term, case):
    with open_engine(backend_url, RULES, _tables) as engine:
        found = recorded_statistics(engine, f"SELECT {term}, COUNT(*), SUM(cost) FROM calls "
                                            "WHERE cost > 3 GROUP BY 1")
        # a CASE without ELSE has a NULL group (SQL's); the substring's rows of undeclared
        # values are in none: the reference's ELSE labels them, its group set aside
        shift, groups, keys, _ = recorded_statistics(
            engine, f"SELECT {case[:-4]} ELSE 'undeclared' END, COUNT(*), SUM(cost) FROM "
                    "calls WHERE cost > 3 GROUP BY 1")
        undeclared = ("undeclared",)
        assert found[:3] == (shift, {k: v for k, v in groups.items() if k != undeclared},
                             [key for key in keys if key != undeclared])
        assert len(found[2]) == len(set(found[2]))


def test_the_answer_names_the_column_substring_and_lists_every_key(duckdb_url):
    with open_engine(duckdb_url, RULES, _tables) as engine:
        *_, answer = Session.open(engine, "alice").execute(
            "SELECT substring(phone, 1, 2), COUNT(*) FROM calls GROUP BY substring(phone, 1, 2)")
        assert answer.columns == ["substring", "count"]
        assert [row[0] for row in answer.rows] == ["13", "27", "31", "9"]


REFUSED = [
    ("SELECT substring(note, 1, 2), COUNT(*) FROM calls GROUP BY 1", "0A000",
     "needs declared keys"),
    ("SELECT substring(phone, 1.5, 2), COUNT(*) FROM calls GROUP BY 1", "0A000",
     "whole numbers"),
    ("SELECT substring(phone, 1, -1), COUNT(*) FROM calls GROUP BY 1", "22011",
     "negative substring length"),
]


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    url = f"duckdb:///{tmp_path_factory.mktemp('substrings') / 'data.duckdb'}"
    with open_engine(url, RULES, _tables) as engine:
        yield engine


@pytest.mark.parametrize("sql,sqlstate,fragment", REFUSED)
def test_other_substring_terms_are_refused_for_free(engine, sql, sqlstate, fragment):
    refused_for_free(engine, sql, sqlstate, fragment)
