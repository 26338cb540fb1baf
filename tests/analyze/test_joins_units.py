"""Issue 18, item 2: two protected tables joined on their privacy unit, in process on
both backends: the shift (the largest number of joined rows one unit owns, inner and
LEFT) read once per pair of data versions, the answers (true statistics equal to the
join's, also with a public table joined to the second protected table), the pushdown
(as many backend statements as a plain query, none returning rows), DP's product of the
declared bounds enforced on the joined rows, and every refusal in one line, spending
nothing."""

from __future__ import annotations

import pytest

from proxy.errors import Refused
from proxy.rules import parse_rules
from proxy.session import Session
from tests.factories import Table, open_engine, table_of_rows
from tests.probes import counted_rows, recorded_statistics, refused_for_free

RULES = parse_rules("""
[defaults]
noise_scale = "local"  # raw iDP: the statistics its sensitivities read
budget_per_analyst = 10

[analysts.alice]

[tables.people]
privacy_unit = "person_id"
max_rows_per_unit = 1
[tables.people.columns]
person_id = { type = "int" }
age       = { type = "int", domain = [0, 120] }
income    = { type = "float", domain = [0, 1000] }
region    = { type = "text", keys = ["a", "b"] }
note      = { type = "text" }

[tables.visits]
privacy_unit = "person_id"
max_rows_per_unit = 2
[tables.visits.columns]
person_id = { type = "int" }
cost      = { type = "float", domain = [0, 100] }
kind      = { type = "text", keys = ["x", "y"] }

[tables.claims]
privacy_unit = "person_id"
[tables.claims.columns]
person_id = { type = "int" }
amount    = { type = "float", domain = [0, 100] }

[tables.accounts]
privacy_unit = "account_id"
[tables.accounts.columns]
account_id = { type = "int" }
person_id  = { type = "int" }

[tables.lab]
[tables.lab.columns]
person_id = { type = "int" }

[tables.regions]
public = true
unique = ["code"]
[tables.regions.columns]
code = { type = "text" }
name = { type = "text" }
""", "units.toml")
# people 1..40 (41..45 have no visits; person 7 has two rows of people, beyond the
# declared max_rows_per_unit = 1), visits of people 1..30 (i % 4 each: 0 to 3), of 50
# and 51 (no people row) and one without a person
PEOPLE = [(i, 20 + i % 50, float(i * 7 % 97) * 10, "ab"[i % 2] if i % 9 else None)
          for i in range(1, 46)] + [(7, 60, 5.0, "b")]
VISITS = [(i, float((i * 13 + k * 29) % 101), "xy"[(i + k) % 2])
          for i in range(1, 31) for k in range(i % 4)]
VISITS += [(50, 9.0, "x"), (51, 1.0, "y"), (None, 2.0, "x")]
REGIONS = {"a": "Alpha", "b": "Beta"}


def _tables() -> dict[str, Table]:
    return {
        "people": table_of_rows([(*p, "n") for p in PEOPLE],
                                {"person_id": "BIGINT", "age": "INTEGER",
                                 "income": "DOUBLE PRECISION", "region": "TEXT",
                                 "note": "TEXT"}),
        "visits": table_of_rows(VISITS, {"person_id": "BIGINT", "cost": "DOUBLE PRECISION",
                                         "kind": "TEXT"}),
        "claims": Table({"person_id": [1], "amount": [1.0]},
                        {"person_id": "BIGINT", "amount": "DOUBLE PRECISION"}),
        "lab": Table({"person_id": [1]}, {"person_id": "BIGINT"}),
        "accounts": Table({"account_id": [1], "person_id": [1]},
                          {"account_id": "BIGINT", "person_id": "BIGINT"}),
        "regions": Table({"code": list(REGIONS), "name": list(REGIONS.values())},
                         {"code": "TEXT", "name": "TEXT"}),
    }


def _joined(left: bool = False):
    """(visit, person or None) of visits JOIN people ON person_id (LEFT: every visit)."""
    for visit in VISITS:
        people = [p for p in PEOPLE if visit[0] is not None and p[0] == visit[0]]
        for person in people or ([None] if left else []):
            yield visit, person


def _largest(left: bool) -> int:
    per_unit: dict = {}
    for visit, _ in _joined(left):
        per_unit[visit[0]] = per_unit.get(visit[0], 0) + 1
    return max(per_unit.values())


def test_unit_joins_answer_the_join_with_the_largest_joined_rows_per_unit(backend_url):
    with open_engine(backend_url, RULES, _tables) as engine:
        grouped = ("SELECT p.region, COUNT(*), SUM(v.cost), MEDIAN(p.income) FROM visits v "
                   "JOIN people p ON v.person_id = p.person_id WHERE cost > 20 OR p.age < 30 "
                   "GROUP BY p.region")
        shift, groups, keys, statements = recorded_statistics(engine, grouped)
        # person 7: 3 visits x 2 rows of people; 3 visits x 1 row for 3, 11, 15, ...
        assert shift == _largest(left=False) == 6 and keys == [("a",), ("b",)]
        assert any("GROUP BY" in text and "people" in text for text, _ in statements)
        for (region,) in keys:
            scope = [(v, p) for v, p in _joined() if p[3] == region and (v[1] > 20 or p[1] < 30)]
            stats = groups[(region,)]
            assert stats.rows == len(scope)
            assert stats.column("cost").total == pytest.approx(sum(v[1] for v, _ in scope))
            assert stats.column("p.income").n == len(scope)
        # the shift is read once per pair of data versions: the plain query's statements
        _, _, _, again = recorded_statistics(engine, grouped)
        plain = "SELECT kind, COUNT(*), SUM(cost), MEDIAN(cost) FROM visits GROUP BY kind"
        recorded_statistics(engine, plain)
        *_, plain_statements = recorded_statistics(engine, plain)
        assert len(again) == len(plain_statements)
        assert all(rows <= len(keys) for _, rows in again)  # no protected row leaves
        assert all(" JOIN " in text for text, _ in again if "cost" in text)
        engine.backend.query("INSERT INTO people VALUES (20, 99, 1.0, 'a', 'n')")  # 20: 0 visits
        engine.backend.query("INSERT INTO visits VALUES (3, 1.0, 'x')")  # 3: 4 visits x 1 person
        assert recorded_statistics(engine, grouped)[0] == 6
        engine.backend.query("INSERT INTO visits VALUES (7, 1.0, 'x')")  # 7: 4 visits x 2 people
        assert recorded_statistics(engine, grouped)[0] == 8
        engine.backend.query("DELETE FROM visits WHERE cost = 1.0 AND person_id IN (3, 7)")
        engine.backend.query("DELETE FROM people WHERE person_id = 20 AND age = 99")

        # LEFT: every visit stays (50, 51 and the one without a person: NULL columns)
        left = ("SELECT COUNT(*), MEDIAN(v.cost) FROM visits v LEFT JOIN people p "
                "ON v.person_id = p.person_id WHERE p.age IS NULL OR p.age > 40")
        shift, groups, _, _ = recorded_statistics(engine, left)
        scope = [v for v, p in _joined(left=True) if p is None or p[1] > 40]
        assert shift == _largest(left=True) and groups[()].rows == len(scope)
        assert groups[()].column("cost").n == len(scope)

        # a public table joined to the second protected table
        three = ("SELECT r.name, COUNT(*), COUNT(DISTINCT person_id) FROM visits v "
                 "JOIN people p ON v.person_id = p.person_id "
                 "JOIN regions r ON p.region = r.code GROUP BY r.name")
        shift, groups, keys, _ = recorded_statistics(engine, three)
        assert shift == 6 and keys == [("Alpha",), ("Beta",)]
        for (name,) in keys:
            scope = [(v, p) for v, p in _joined() if REGIONS.get(p[3]) == name]
            assert groups[(name,)].rows == len(scope)
            assert groups[(name,)].units == len({v[0] for v, _ in scope})

        # a table joined with itself on the unit: b = a, c = the most rows squared
        own = ("SELECT COUNT(*) FROM visits v JOIN visits w ON v.person_id = w.person_id "
               "WHERE w.cost > 50")
        shift, groups, _, _ = recorded_statistics(engine, own)
        per_person: dict = {}
        for visit in VISITS:
            per_person[visit[0]] = per_person.get(visit[0], 0) + 1
        assert shift == max(n * n for unit, n in per_person.items() if unit is not None)
        assert groups[()].rows == sum(1 for v in VISITS for w in VISITS if v[0] is not None
                                      and v[0] == w[0] and w[1] > 50)

        # the joined COUNT(*) is never public: charged, as every aggregate of a join
        session = Session.open(engine, "alice")
        (answer,) = session.execute("SELECT COUNT(*) FROM visits v LEFT JOIN people p "
                                    "ON v.person_id = p.person_id")
        assert answer.privacy["epsilon_spent"] == pytest.approx(0.1)
        (answer,) = session.execute(grouped)
        assert [row[0] for row in answer.rows] == ["a", "b"]
        assert engine.ledger.entries()[-1][8] == ("modify all records of one person_id in "
                                                  "visits and people")

        # DP: one unit contributes at most 2 x 1 joined rows, whatever the data (7 owns 6)
        ungrouped = ("SELECT COUNT(*) FROM visits v JOIN people p "
                     "ON v.person_id = p.person_id WHERE v.cost >= 0")
        shift, groups, _, _ = recorded_statistics(engine, ungrouped, model="dp")
        per_unit: dict = {}
        for visit, _ in _joined():
            per_unit[visit[0]] = per_unit.get(visit[0], 0) + 1
        assert shift == 2 and counted_rows(groups[()]) == sum(min(2, n) for n in per_unit.values())
        *_, answer = session.execute(f"SET idp.model = 'dp'; {grouped}")
        assert answer.privacy["model"] == "DP" and len(answer.rows) == 2

        # without a cheap data version (a table the proxy's role does not own) c is read
        # afresh for each query, in the query's snapshot
        engine.backend.data_version = lambda tx, table: None
        for _ in range(2):
            shift, _, _, statements = recorded_statistics(engine, left)
            assert shift == _largest(left=True)
            assert sum("GROUP BY" in text and "people" in text for text, _ in statements) == 1


JOIN = "FROM visits v JOIN people p ON v.person_id = p.person_id"
REFUSED = [
    ("SELECT COUNT(*) FROM visits v JOIN people p ON v.cost = p.income", "0A000",
     "FROM visits a [LEFT] JOIN people b ON a.person_id = b.person_id"),
    ("SELECT COUNT(*) FROM visits v JOIN people p ON v.person_id = p.age", "0A000",
     "on their privacy unit or along a declared link only"),
    (("SELECT COUNT(*) FROM visits v LEFT JOIN people p ON v.person_id = p.person_id "
      "AND p.age > v.cost"), "0A000",
     "ON their privacy units or their declared link, and conditions on the joined table's "
     "own columns, only"),
    ("SELECT COUNT(*) FROM visits v RIGHT JOIN people p ON v.person_id = p.person_id",
     "0A000", "RIGHT joins are not supported"),
    ("SELECT COUNT(*) FROM visits v, people p WHERE v.cost > 3", "0A000",
     "joins without ON"),
    (f"SELECT COUNT(*) {JOIN} JOIN accounts a ON a.account_id = v.person_id", "0A000",
     "different privacy units (person_id, account_id)"),
    ("SELECT COUNT(*) FROM accounts a JOIN people p ON a.person_id = p.person_id", "0A000",
     "different privacy units (account_id, person_id)"),
    ("SELECT COUNT(*) FROM lab l JOIN people p ON l.person_id = p.person_id", "0A000",
     "lab has no privacy_unit"),
    (f"SELECT p.note, COUNT(*) {JOIN} GROUP BY p.note", "0A000", "public list of keys"),
    (f"SELECT COUNT(*) {JOIN} WHERE cost > age AND note = 1", "42883", "compare it"),
    (f"SELECT cost {JOIN}", "42501", "would return rows"),
    (f"SELECT COUNT(*) {JOIN} WHERE p.nope = 1", "42703", "not declared for people"),
]


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    """One DuckDB engine for the refusals (decided from the text: no backend differs)."""
    url = f"duckdb:///{tmp_path_factory.mktemp('units') / 'data.duckdb'}"
    with open_engine(url, RULES, _tables) as engine:
        yield engine


@pytest.mark.parametrize("sql,sqlstate,fragment", REFUSED)
def test_refused_unit_joins_say_what_is_allowed_and_spend_nothing(engine, sql, sqlstate,
                                                                  fragment):
    refused_for_free(engine, sql, sqlstate, fragment)


def test_dp_over_a_unit_join_needs_both_bounds(engine):
    session = Session.open(engine, "alice")
    list(session.execute("SET idp.model = 'dp'"))
    before = engine.ledger.entries(), engine.ledger.budgets()
    with pytest.raises(Refused, match="DP model on claims needs max_rows_per_unit"):
        list(session.execute("SELECT COUNT(*) FROM people p JOIN claims c "
                             "ON c.person_id = p.person_id WHERE amount > 1"))
    assert (engine.ledger.entries(), engine.ledger.budgets()) == before
