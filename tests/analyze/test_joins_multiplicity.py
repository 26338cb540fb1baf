"""Issue 18, item 1's last piece: a protected table joined with a public table on a key
whose values occur in several rows, bounded in the rules (``max_rows_per_key``), in
process on both backends: the rules' key and its check at start (file, key, reason),
the shift multiplied by the bound (by the product of several, times c of two protected
tables joined on the unit; DP: the contribution bound times it), the answers equal to
the join's with their metadata, the bound enforced in every query (rows written beyond
it later match nothing), the LEFT join's row count charged, per-unit counts clamped to
the joined bound, and every refusal in one line, spending nothing."""

from __future__ import annotations

from collections import Counter
from contextlib import closing

import pytest

from proxy.backends import open_backend
from proxy.engine import Engine
from proxy.errors import RulesError
from proxy.rules import load_rules, parse_rules
from proxy.session import Session
from tests.factories import Table, engine_fixture, load, table_of_rows
from tests.probes import recorded_statistics, refused_for_free

RULES = """
[defaults]
noise_scale = "local"  # raw iDP: the statistics its sensitivities read
budget_per_analyst = 10
delta = 1e-6

[analysts.alice]

[tables.people]
privacy_unit = "person_id"
max_rows_per_unit = 1
[tables.people.columns]
person_id = { type = "int" }
age       = { type = "int", domain = [0, 120] }
income    = { type = "float", domain = [0, 1000] }
kind      = { type = "text" }

[tables.visits]
privacy_unit = "person_id"
max_rows_per_unit = 2
[tables.visits.columns]
person_id = { type = "int" }
cost      = { type = "float", domain = [0, 100] }

[tables.events]
[tables.events.columns]
kind = { type = "text" }
size = { type = "int", domain = [0, 10] }

[tables.tags]
public = true
max_rows_per_key = { kind = 3 }
[tables.tags.columns]
kind = { type = "text" }
tag  = { type = "text" }

[tables.moods]
public = true
max_rows_per_key = { kind = 2 }
[tables.moods.columns]
kind = { type = "text" }
mood = { type = "text" }
"""
# kind -> its tags (a: 3, b: 1, c: 2; people of "x" and NULL have none) and moods
TAGS = {"a": ["red", "green", "blue"], "b": ["red"], "c": ["green", "blue"]}
MOODS = {"a": ["calm", "glad"], "b": ["calm"]}
PEOPLE = [(i, 20 + i % 50, float(i * 7 % 97) * 10, ("a", "b", "c", "x", None)[i % 5])
          for i in range(1, 61)]
VISITS = [(i, float(i * 13 % 101), ) for i in range(1, 31) for _ in range(i % 3)]


def _rules():
    return parse_rules(RULES, "multiplicity.toml")


def _tables() -> dict[str, Table]:
    tables = {
        "people": table_of_rows(PEOPLE, {"person_id": "BIGINT", "age": "INTEGER",
                                         "income": "DOUBLE PRECISION", "kind": "TEXT"}),
        "visits": table_of_rows(VISITS, {"person_id": "BIGINT", "cost": "DOUBLE PRECISION"}),
        "events": Table({"kind": ["a", "b", "c"], "size": [1, 2, 3]},
                        {"kind": "TEXT", "size": "INTEGER"}),
    }
    for name, column, rows in (("tags", "tag", TAGS), ("moods", "mood", MOODS)):
        pairs = [(kind, value) for kind, values in rows.items() for value in values]
        tables[name] = table_of_rows(pairs, {"kind": "TEXT", column: "TEXT"})
    return tables


# one engine per backend for the module (its tests read the tables)
engine = engine_fixture(_rules(), _tables, shared=True)


GROUPED = ("SELECT t.tag, COUNT(*), SUM(p.income), AVG(income), MEDIAN(p.income), MAX(age) "
           "FROM people p JOIN tags t ON p.kind = t.kind WHERE p.age < 60 GROUP BY t.tag")


def test_a_bounded_join_is_answered_with_the_shift_times_the_bound(engine):
    shift, groups, keys, statements = recorded_statistics(engine, GROUPED)
    assert shift == 3  # c = 1 row per person, each meeting up to 3 tags
    assert keys == [("blue",), ("green",), ("red",)]
    for (tag,) in keys:
        scope = [p for p in PEOPLE if p[3] in TAGS and tag in TAGS[p[3]] and p[1] < 60]
        assert groups[(tag,)].rows == len(scope)
        assert groups[(tag,)].column("income").total == pytest.approx(sum(p[2] for p in scope))
    assert all(rows <= len(keys) for text, rows in statements if "DISTINCT" not in text)
    # DP: the contribution bound 1 times 3, enforced on the joined rows in scope
    assert recorded_statistics(engine, GROUPED, model="dp")[0] == 3
    # two bounded joins multiply (3 · 2); with two protected tables, c · 3
    both = ("SELECT COUNT(*) FROM people p JOIN tags t ON p.kind = t.kind "
            "JOIN moods m ON p.kind = m.kind")
    shift, groups, _, _ = recorded_statistics(engine, both)
    assert shift == 6
    assert groups[()].rows == sum(len(TAGS.get(p[3], [])) * len(MOODS.get(p[3], []))
                                  for p in PEOPLE)
    visits = ("SELECT SUM(v.cost) FROM visits v JOIN people p ON v.person_id = p.person_id "
              "JOIN tags t ON p.kind = t.kind")
    assert recorded_statistics(engine, visits)[0] == max(Counter(VISITS).values()) * 3 == 6
    assert recorded_statistics(engine, visits, model="dp")[0] == 2 * 1 * 3
    # a row-level table: each record is 1 row, times 3
    assert recorded_statistics(engine, "SELECT COUNT(*) FROM events e JOIN tags t "
                                       "ON e.kind = t.kind")[0] == 3


def test_the_answer_says_why_its_noise_is_wider(engine):
    session = Session.open(engine, "alice")
    (answer,) = session.execute(GROUPED)
    assert [row[0] for row in answer.rows] == ["blue", "green", "red"]
    privacy = answer.privacy
    assert privacy["model"] == "iDP" and privacy["epsilon_spent"] == pytest.approx(0.5)
    assert privacy["neighbours"] == "modify all records of one person_id"
    assert any("tags.kind (at most 3 rows per value)" in note and "up to 3 times" in note
               for note in privacy["notes"]), privacy["notes"]
    # a LEFT join keeps every person but may repeat one: its row count is charged
    (answer,) = session.execute("SELECT COUNT(*) FROM people p LEFT JOIN tags t "
                                "ON p.kind = t.kind")
    assert answer.privacy["epsilon_spent"] == pytest.approx(0.1)
    # per person, the joined rows are clamped to 1 · 3
    (answer,) = session.execute("SELECT SUM(n) FROM (SELECT p.person_id, COUNT(*) AS n "
                                "FROM people p JOIN tags t ON p.kind = t.kind "
                                "GROUP BY p.person_id) s")
    assert any("clamped to [0, 3] (max_rows_per_unit times max_rows_per_key)" in note
               for note in answer.privacy["notes"]), answer.privacy["notes"]


REFUSED = [
    ("SELECT COUNT(*) FROM people p JOIN tags t ON p.kind = t.tag", "0A000",
     "must match its declared key kind"),
    ("SELECT e.kind, COUNT(*) FROM events e JOIN tags t ON e.kind = t.kind GROUP BY e.kind",
     "0A000", "not answered over a join on a key with several rows per value"),
    ("SELECT SUM(t.tag) FROM people p JOIN tags t ON p.kind = t.kind", "42883",
     "SUM(t.tag) needs a numeric column"),
    ("SELECT COUNT(*) FROM tags t LEFT JOIN people p ON p.kind = t.kind", "0A000",
     "COUNT(*) counts a row of tags without rows of people as 1"),
]


def test_refused_bounded_joins_spend_nothing(engine):
    for sql, sqlstate, fragment in REFUSED:
        refused_for_free(engine, sql, sqlstate, fragment)


def test_the_bound_is_a_positive_whole_number_for_declared_columns_of_public_tables():
    cases = [
        ("max_rows_per_key = { kind = 3 }\n[tables.tags.columns]",
         "max_rows_per_key = { kind = 0 }\n[tables.tags.columns]",
         r"\[tables.tags.max_rows_per_key.kind\] must be a whole number of at least 1"),
        ("max_rows_per_key = { kind = 3 }\n[tables.tags.columns]",
         "max_rows_per_key = { kinds = 3 }\n[tables.tags.columns]",
         r"\[tables.tags.max_rows_per_key\] kinds is not a declared column"),
        ("max_rows_per_key = { kind = 3 }\n[tables.tags.columns]",
         'max_rows_per_key = ["kind"]\n[tables.tags.columns]',
         r"\[tables.tags.max_rows_per_key\] must be an inline table"),
        ("max_rows_per_key = { kind = 3 }\n[tables.tags.columns]",
         'unique = ["kind"]\nmax_rows_per_key = { kind = 3 }\n[tables.tags.columns]',
         r"kind is listed in unique too"),
        ("max_rows_per_unit = 2\n[tables.visits.columns]",
         "max_rows_per_unit = 2\nmax_rows_per_key = { cost = 2 }\n[tables.visits.columns]",
         r"\[tables.visits.max_rows_per_key\] is for public tables"),
    ]
    for old, new, message in cases:
        assert old in RULES
        with pytest.raises(RulesError, match=message):
            parse_rules(RULES.replace(old, new, 1), "multiplicity.toml")
    once = parse_rules(RULES.replace("{ kind = 3 }", "{ kind = 1 }"), "m.toml")
    assert once.tables["tags"].join_keys == {("kind",): 1}  # the same as unique


def test_start_refuses_a_table_beyond_its_bound_and_queries_enforce_it(backend_url, tmp_path):
    load(backend_url, _tables())
    path = tmp_path / "multiplicity.toml"
    path.write_text(RULES)
    with closing(open_backend(backend_url)) as backend:
        engine = Engine(load_rules(path), backend)
        # a fourth tag of "a" written after start: "a" then matches nothing
        backend.query("INSERT INTO tags VALUES ('a', 'violet')")
        _, groups, keys, _ = recorded_statistics(engine, GROUPED)
        assert ("violet",) in keys and ("violet",) not in groups
        scope = [p for p in PEOPLE if p[3] == "b" and p[1] < 60]
        assert groups[("red",)].rows == len(scope)
        line = RULES.splitlines().index("max_rows_per_key = { kind = 3 }") + 1
        with pytest.raises(RulesError) as refused:
            Engine(load_rules(path), backend)
    message = str(refused.value)
    assert message.startswith(f"{path}:{line}: [tables.tags.max_rows_per_key] kind = 3 does "
                              "not hold in the backend's table tags"), message
    assert "\n" not in message and "violet" not in message
