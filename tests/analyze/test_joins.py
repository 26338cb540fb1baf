"""Issue 18, item 1: a protected table joined with public tables on a unique key, in
process on both backends: the rules' ``unique`` key and its check at start, the answers
(true statistics equal to the join's, the public GROUP BY keys read from the public
table once per data version), the pushdown (as many backend statements as the plain
query, none returning rows), and every refusal in one line, spending nothing."""

from __future__ import annotations

from contextlib import closing

import pytest

from proxy.backends import open_backend
from proxy.engine import Engine
from proxy.errors import Refused, RulesError
from proxy.pushdown import unit_bound_sql
from proxy.rules import load_rules, parse_rules
from proxy.session import Session
from tests.factories import Table, load, open_engine, table_of_rows
from tests.probes import recorded_statistics, refused_for_free

RULES = """
[defaults]
noise_scale = "local"  # raw iDP: the statistics its sensitivities read
budget_per_analyst = 10
max_groups = {max_groups}

[analysts.alice]

[tables.people]
privacy_unit = "person_id"
max_rows_per_unit = 1
[tables.people.columns]
person_id = {{ type = "int" }}
age       = {{ type = "int", domain = [0, 120] }}
income    = {{ type = "float", domain = [0, 1000] }}
region    = {{ type = "text" }}
sex       = {{ type = "text", keys = ["f", "m"] }}

[tables.visits]
privacy_unit = "person_id"
[tables.visits.columns]
person_id = {{ type = "int" }}
cost      = {{ type = "float", domain = [0, 100] }}

[tables.regions]
public = true
unique = ["code"]
[tables.regions.columns]
code = {{ type = "text" }}
name = {{ type = "text" }}
zone = {{ type = "int" }}

[tables.districts]
public = true
unique = ["code"]
[tables.districts.columns]
code = {{ type = "text" }}
name = {{ type = "text" }}

[tables.labels]
public = true
[tables.labels.columns]
code = {{ type = "text" }}
"""
# code -> (name, zone); "c" has no people, people of "x" have no region row
REGIONS = {"a": ("Alpha", 1), "b": ("Beta", 2), "c": ("Gamma", 2)}
PEOPLE = [(i, 20 + i % 50, float(i % 97) * 10, ("a", "b", "x", None, "a")[i % 5], "fm"[i % 2])
          for i in range(1, 301)]


def _rules(max_groups: int = 100):
    return parse_rules(RULES.format(max_groups=max_groups), "joins.toml")


def _tables(regions=REGIONS) -> dict[str, Table]:
    return {
        "people": table_of_rows(PEOPLE, {"person_id": "BIGINT", "age": "INTEGER",
                                         "income": "DOUBLE PRECISION", "region": "TEXT",
                                         "sex": "TEXT"}),
        "visits": Table({"person_id": [1, 1, 2], "cost": [1.0, 2.0, 3.0]},
                        {"person_id": "BIGINT", "cost": "DOUBLE PRECISION"}),
        "regions": table_of_rows([(code, *row) for code, row in regions.items()],
                                 {"code": "TEXT", "name": "TEXT", "zone": "INTEGER"}),
        "districts": Table({"code": ["a"], "name": ["Ay"]}, {"code": "TEXT", "name": "TEXT"}),
        "labels": Table({"code": ["a"]}, {"code": "TEXT"}),
    }


def test_unique_is_a_declared_column_of_a_public_table():
    with pytest.raises(RulesError, match=r"joins.toml:\d+: \[tables.people.unique\] is for "
                                         "public tables"):
        parse_rules(RULES.format(max_groups=9).replace(
            'max_rows_per_unit = 1\n[tables.people.columns]',
            'max_rows_per_unit = 1\nunique = ["age"]\n[tables.people.columns]', 1),
            "joins.toml")
    with pytest.raises(RulesError, match=r"\[tables.regions.unique\] kode is not a declared"):
        parse_rules(RULES.format(max_groups=9).replace('unique = ["code"]', 'unique = ["kode"]'),
                    "joins.toml")
    with pytest.raises(RulesError, match=r"\[tables.regions.unique\] must be a list"):
        parse_rules(RULES.format(max_groups=9).replace('unique = ["code"]', 'unique = "code"'),
                    "joins.toml")


def test_start_refuses_a_unique_key_the_data_repeats(backend_url, tmp_path):
    load(backend_url, _tables({"a": ("Alpha", 1)}))
    path = tmp_path / "joins.toml"
    path.write_text(RULES.format(max_groups=9))
    line = RULES.format(max_groups=9).splitlines().index('unique = ["code"]') + 1
    with closing(open_backend(backend_url)) as backend:
        backend.query("INSERT INTO regions VALUES ('a', 'Again', 3)")
        with pytest.raises(RulesError) as refused:
            Engine(load_rules(path), backend)
    message = str(refused.value)
    assert message.startswith(f"{path}:{line}: [tables.regions.unique] code is not unique"), \
        message
    assert "\n" not in message and "Again" not in message  # one line, no data value


def _truth(where=lambda p, r: True, left=False):
    """(name or None) -> (rows, sum of incomes) of people joined with REGIONS."""
    groups: dict = {}
    for person in PEOPLE:
        region = REGIONS.get(person[3])
        if region is None and not left:
            continue
        if not where(person, region):
            continue
        name = region[0] if region else None
        rows, total = groups.get(name, (0, 0.0))
        groups[name] = (rows + 1, total + person[2])
    return groups


def test_joined_answers_are_the_joins_and_pushed_down(backend_url):
    with open_engine(backend_url, _rules(), _tables) as engine:
        grouped = ("SELECT r.name, COUNT(*), SUM(p.income), MEDIAN(income) FROM people p "
                   "JOIN regions r ON p.region = r.code WHERE r.zone = 2 OR age < 30 "
                   "GROUP BY r.name")
        shift, groups, keys, statements = recorded_statistics(engine, grouped)
        truth = _truth(lambda p, r: r[1] == 2 or p[1] < 30)
        assert shift == 1 and keys == [("Alpha",), ("Beta",), ("Gamma",)]  # Gamma: no one
        for (name,) in keys:
            stats = groups.get((name,))
            rows, total = truth.get(name, (0, 0.0))
            assert (stats.rows if stats else 0) == rows
            assert (stats.column("income").total if stats else 0.0) == pytest.approx(total)
        # the plain query over the table computes its statistics in as many statements
        # (c, read by the first and kept for people's data version, aside); none returns
        # more rows than there are groups (no protected row leaves)
        plain = "SELECT sex, COUNT(*), SUM(income), MEDIAN(income) FROM people GROUP BY sex"
        *_, plain_statements = recorded_statistics(engine, plain)
        c = unit_bound_sql("people", "person_id", engine.backend.dialect)
        steps = [text for text, _ in statements if "DISTINCT" not in text]  # the keys' read
        assert [text for text, _ in statements].count(c) == 1
        assert len(steps) - 1 == len(plain_statements)
        assert all(rows <= len(keys) for text, rows in statements if "DISTINCT" not in text)
        assert all(" JOIN " in text for text in steps if "income" in text)

        # a left join keeps every protected row: its whole COUNT(*) is public
        session = Session.open(engine, "alice")
        (answer,) = session.execute("SELECT COUNT(*) FROM people p LEFT JOIN regions r "
                                    "ON p.region = r.code")
        assert answer.rows == [(len(PEOPLE),)] and answer.privacy["epsilon_spent"] == 0
        (answer,) = session.execute("SELECT COUNT(*) FROM people p JOIN regions r "
                                    "ON p.region = r.code")
        assert answer.privacy["epsilon_spent"] == pytest.approx(0.1)
        _, groups, _, _ = recorded_statistics(engine, "SELECT COUNT(*) FROM people p LEFT JOIN "
                                              "regions r ON p.region = r.code WHERE r.name "
                                              "IS NULL")
        assert groups[()].rows == _truth(lambda p, r: r is None, left=True)[None][0]

        # the public keys: read once per data version of the public table
        list(session.execute(grouped))
        assert len(engine._public_keys) == 1
        engine.backend.query("INSERT INTO regions VALUES ('d', 'Delta', 2)")
        (answer,) = session.execute(grouped)
        assert [row[0] for row in answer.rows] == ["Alpha", "Beta", "Delta", "Gamma"]
        # a key written twice after start matches nothing: no row is counted twice
        engine.backend.query("INSERT INTO regions VALUES ('b', 'Beta again', 2)")
        _, groups, keys, _ = recorded_statistics(engine, grouped)
        assert ("Beta",) in keys and ("Beta",) not in groups
        assert groups[("Alpha",)].rows == _truth(lambda p, r: p[1] < 30)["Alpha"][0]

        # DP: the clipped scope (a window per unit) reads the join as well
        *_, answer = session.execute(f"SET idp.model = 'dp'; {grouped}")
        assert answer.privacy["model"] == "DP" and len(answer.rows) == 5


def test_a_public_table_left_joined_to_a_protected_one_is_their_inner_join(backend_url):
    """``FROM regions r LEFT JOIN people p`` (Metabase and Looker starting from a
    dimension table), grouped by the public table's columns and aggregating the
    protected table's: the inner join from people, whose keys are every public row's
    (Gamma, without people, counts 0 as the LEFT JOIN's does); the answers equal
    PostgreSQL's semantics of the LEFT JOIN."""
    with open_engine(backend_url, _rules(), _tables) as engine:
        sql = ("SELECT r.name, COUNT(p.person_id), SUM(p.income) FROM regions r LEFT JOIN "
               "people p ON p.region = r.code WHERE r.zone = 2 OR p.age < 30 GROUP BY 1")
        _, groups, keys, _ = recorded_statistics(engine, sql)
        truth = _truth(lambda p, r: r[1] == 2 or p[1] < 30)
        assert keys == [("Alpha",), ("Beta",), ("Gamma",)]
        for (name,) in keys:
            stats = groups.get((name,))
            rows, total = truth.get(name, (0, 0.0))
            assert (stats.column("person_id").n if stats else 0) == rows
            assert (stats.column("income").total if stats else 0.0) == pytest.approx(total)
        direct = dict(engine.backend.read(sql.replace(", SUM(p.income)", "")))
        assert direct == {name: truth.get(name, (0,))[0] for (name,) in keys}
        # its columns unqualified, each of the one table declaring it (refused as a
        # group of people's until the review of 2026-11-29)
        _, again, unqualified, _ = recorded_statistics(engine, (
            "SELECT name, COUNT(person_id) FROM regions LEFT JOIN people ON region = code "
            "WHERE zone = 2 OR age < 30 GROUP BY name"))
        assert unqualified == keys and all(
            again[key].column("person_id").n == groups[key].column("person_id").n
            for key in groups)


def test_public_keys_beyond_max_groups_are_refused_before_the_debit(duckdb_url):
    with open_engine(duckdb_url, _rules(max_groups=2), _tables) as engine:
        before = engine.ledger.entries(), engine.ledger.budgets()
        with pytest.raises(Refused) as refused:
            list(Session.open(engine, "alice").execute(
                "SELECT r.name, COUNT(*) FROM people p JOIN regions r ON p.region = r.code "
                "GROUP BY r.name"))
        assert refused.value.sqlstate == "0A000" and "max_groups = 2" in str(refused.value)
        assert (engine.ledger.entries(), engine.ledger.budgets()) == before



def test_the_wheres_conditions_on_the_public_table_alone_restrict_its_keys(backend_url):
    """Keys of a public column are read among the public rows the WHERE's conditions
    on that table alone keep (zone 2: Beta and Gamma; max_groups 2 now holds), not
    where a condition reads the protected table too (zone 2 OR age < 30: every name)."""
    with open_engine(backend_url, _rules(max_groups=2), _tables) as engine:
        session = Session.open(engine, "alice")
        (answer,) = session.execute(f"SELECT r.name, COUNT(*) {JOIN} WHERE r.zone = 2 "
                                    "AND r.name <> 'Alpha' AND age >= 0 GROUP BY r.name")
        assert [row[0] for row in answer.rows] == ["Beta", "Gamma"]
        with pytest.raises(Refused, match="max_groups = 2"):
            list(session.execute(f"SELECT r.name, COUNT(*) {JOIN} WHERE r.zone = 2 "
                                 "OR age < 30 GROUP BY r.name"))
JOIN = "FROM people p JOIN regions r ON p.region = r.code"
REFUSED = [
    ("SELECT COUNT(*) FROM regions r LEFT JOIN people p ON p.region = r.code", "0A000",
     "COUNT(*) counts a row of regions without rows of people as 1"),
    ("SELECT r.name, COUNT(r.code) FROM regions r LEFT JOIN people p ON p.region = r.code "
     "GROUP BY 1", "0A000", "COUNT(r.code) reads regions"),
    # not NULL on a row of regions without people, so counting it (the review of
    # 2026-11-29: answered as the inner join, 0 where PostgreSQL gives 1)
    ("SELECT r.name, COUNT(1) FROM regions r LEFT JOIN people p ON p.region = r.code "
     "GROUP BY 1", "0A000", "COUNT(1) is not NULL on a row of regions"),
    ("SELECT name, COUNT(1) FROM regions LEFT JOIN people ON region = code GROUP BY name",
     "0A000", "COUNT(1) is not NULL on a row of regions"),
    ("SELECT r.name, SUM(COALESCE(p.age, 100)) FROM regions r LEFT JOIN people p ON "
     "p.region = r.code GROUP BY 1", "0A000", "so it would count that row"),
    ("SELECT MAX(CASE WHEN p.age IS NULL THEN 1 ELSE 0 END) FROM regions r LEFT "
     "JOIN people p ON p.region = r.code", "0A000", "is not NULL on a row of regions"),
    ("SELECT p.sex, COUNT(p.age) FROM regions r LEFT JOIN people p ON p.region = r.code "
     "GROUP BY 1", "0A000", "grouped by p.sex, a row of regions without rows of people"),
    ("SELECT COUNT(p.age) FROM regions r LEFT JOIN people p ON p.region = r.code "
     "LEFT JOIN districts d ON p.region = d.code", "0A000", "put the protected table first"),
    # a condition of the ON keeps the public rows it fails (Beta with no one), which the
    # inner join's keys would leave out
    ("SELECT r.name, COUNT(p.age) FROM regions r LEFT JOIN people p ON p.region = r.code "
     "AND r.zone = 1 GROUP BY 1", "0A000", "its ON holds what is not an equality"),
    ("SELECT COUNT(*) FROM people p RIGHT JOIN regions r ON p.region = r.code", "0A000",
     "RIGHT joins are not supported"),
    ("SELECT COUNT(*) FROM people p FULL JOIN regions r ON p.region = r.code", "0A000",
     "FULL joins"),
    ("SELECT COUNT(*) FROM people p CROSS JOIN regions r", "0A000", "CROSS joins"),
    ("SELECT COUNT(*) FROM people p, regions r WHERE p.age > 3", "0A000",
     "joins without ON"),
    ("SELECT COUNT(*) FROM people p NATURAL JOIN regions r", "0A000", "NATURAL joins"),
    # USING is its ON equality (proxy.analyze.explicit_joins): people has no code
    ("SELECT COUNT(*) FROM people p JOIN regions r USING (code)", "42703",
     'column "code" specified in USING clause does not exist in left table'),
    ("SELECT COUNT(*) FROM people p JOIN regions r ON p.region = r.name", "0A000",
     "must match its unique key code"),
    ("SELECT COUNT(*) FROM people p JOIN labels l ON p.region = l.code", "0A000",
     "[tables.labels] unique"),
    ("SELECT COUNT(*) FROM people p JOIN visits v ON p.age = v.cost", "0A000",
     "join on their privacy unit or along a declared link only"),
    ("SELECT COUNT(*) FROM people p LEFT JOIN regions r ON p.region = r.code AND r.zone = 2",
     "0A000", "filter with WHERE"),
    ("SELECT COUNT(*) FROM people p JOIN regions r ON p.region = r.code AND r.zone = 'x'",
     "22P02", "invalid input syntax for type bigint: 'x'"),
    ("SELECT COUNT(*) FROM people p JOIN regions r ON p.age = r.code", "0A000",
     "same type"),
    (f"SELECT COUNT(*) {JOIN} WHERE p.age > r.code", "0A000", "different types"),
    (("SELECT COUNT(*) FROM people p JOIN (SELECT code FROM regions GROUP BY code) r "
      "ON p.region = r.code"), "0A000", "join"),
    # a public column is a value of the joined row: aggregated with its declared domain
    (f"SELECT SUM(r.zone) {JOIN}", "0A000", "needs a declared domain for r.zone"),
    (f"SELECT r.name {JOIN}", "42501", "would return rows"),
    (f"SELECT p.region, COUNT(*) {JOIN} GROUP BY p.region", "0A000", "public list of keys"),
    (f"SELECT COUNT(*) {JOIN} WHERE r.nope = 1", "42703", "not declared for regions"),
    (f"SELECT COUNT(*) {JOIN} JOIN districts d ON p.region = d.code WHERE name = 'a'",
     "42702", "ambiguous"),
    (f"SELECT income {JOIN} WHERE person_id = 3", "42501", "would return rows"),
]


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    """One DuckDB engine for the refusals (decided from the text: no backend differs)."""
    url = f"duckdb:///{tmp_path_factory.mktemp('joins') / 'data.duckdb'}"
    with open_engine(url, _rules(), _tables) as engine:
        yield engine


@pytest.mark.parametrize("sql,sqlstate,fragment", REFUSED)
def test_refused_joins_say_what_is_allowed_and_spend_nothing(engine, sql, sqlstate, fragment):
    refused_for_free(engine, sql, sqlstate, fragment)


def test_an_older_demo_file_names_its_region_columns_as_the_rules_do(tmp_path):
    import duckdb

    from proxy.demo import REGION_NAMES, REGIONS, needs_upgrade, upgrade_demo

    path = tmp_path / "demo.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE regions AS SELECT * FROM (VALUES ('north', 'Northern district')) "
                "v(region, label)")
    con.execute("CREATE TABLE visits (visit_id BIGINT, visited_at TIMESTAMP)")
    assert needs_upgrade(lambda sql: con.execute(sql).fetchall())
    con.close()
    upgrade_demo(path)
    upgrade_demo(path)  # once upgraded, nothing to do
    con = duckdb.connect(str(path))
    assert con.execute("SELECT code, name FROM regions").fetchall() == [
        (REGIONS[0], REGION_NAMES[0])]
    assert not needs_upgrade(lambda sql: con.execute(sql).fetchall())
    con.close()
