"""Comma joins and unqualified join columns (issue 34: 12 TPC-H queries write their joins
``FROM a, b WHERE a.x = b.y``): rewritten into explicit inner joins before the join
rules decide (``proxy.analyze.explicit_joins``). The comma form's statistics equal the
explicit form's on both backends, for public joins, joins of two protected tables on
the unit, and equalities every branch of an OR holds (Q19); a cross product stays
refused as before, an ambiguous column is PostgreSQL's 42702, and neither spends
anything."""

from __future__ import annotations

import pytest
import sqlglot

from proxy.analyze.explicit_joins import explicit_joins
from proxy.errors import AmbiguousColumn
from proxy.rules import parse_rules
from tests.factories import Table, open_engine, table_of_rows
from tests.probes import recorded_statistics, refused_for_free

RULES = parse_rules("""
[defaults]
noise_scale = "local"  # raw iDP: the statistics its sensitivities read
budget_per_analyst = 10

[analysts.alice]

[tables.people]
privacy_unit = "person_id"
[tables.people.columns]
person_id = { type = "int" }
age       = { type = "int", domain = [0, 120] }
income    = { type = "float", domain = [0, 1000] }
region    = { type = "text" }

[tables.visits]
privacy_unit = "person_id"
[tables.visits.columns]
person_id = { type = "int" }
cost      = { type = "float", domain = [0, 100] }

[tables.regions]
public = true
unique = ["code"]
[tables.regions.columns]
code = { type = "text" }
name = { type = "text" }
zone = { type = "int" }

[tables.zones]
public = true
unique = ["zone_id"]
[tables.zones.columns]
zone_id = { type = "int" }
label   = { type = "text" }
name    = { type = "text" }
""", "comma.toml")
PEOPLE = [(i, 20 + i % 50, float(i % 97) * 10, ("a", "b", "x", None, "c")[i % 5])
          for i in range(1, 201)]
VISITS = [(i, float((i * 13 + k) % 101)) for i in range(1, 120) for k in range(i % 3)]


def _tables() -> dict[str, Table]:
    return {
        "people": table_of_rows(PEOPLE, {"person_id": "BIGINT", "age": "INTEGER",
                                         "income": "DOUBLE PRECISION", "region": "TEXT"}),
        "visits": table_of_rows(VISITS, {"person_id": "BIGINT", "cost": "DOUBLE PRECISION"}),
        "regions": table_of_rows([("a", "Alpha", 1), ("b", "Beta", 2), ("c", "Gamma", 2)],
                                 {"code": "TEXT", "name": "TEXT", "zone": "INTEGER"}),
        "zones": table_of_rows([(1, "one", "North"), (2, "two", "South")],
                               {"zone_id": "INTEGER", "label": "TEXT", "name": "TEXT"}),
    }


# (comma or unqualified form, the explicit join it is)
SAME = [
    ("SELECT r.name, COUNT(*), SUM(p.income) FROM people p, regions r "
     "WHERE p.region = r.code AND p.age > 30 GROUP BY r.name",
     "SELECT r.name, COUNT(*), SUM(p.income) FROM people p JOIN regions r "
     "ON p.region = r.code WHERE p.age > 30 GROUP BY r.name"),
    # the public table first, columns unqualified
    ("SELECT name, MEDIAN(income) FROM regions r, people p "
     "WHERE code = region AND age < 60 GROUP BY name",
     "SELECT r.name, MEDIAN(p.income) FROM people p JOIN regions r ON p.region = r.code "
     "WHERE p.age < 60 GROUP BY r.name"),
    # two protected tables on the unit, and an inner JOIN among comma joins
    ("SELECT COUNT(*), SUM(cost) FROM visits v, people p JOIN regions r ON region = code "
     "WHERE v.person_id = p.person_id AND zone = 2",
     "SELECT COUNT(*), SUM(v.cost) FROM visits v JOIN people p ON v.person_id = p.person_id "
     "JOIN regions r ON p.region = r.code WHERE r.zone = 2"),
    # TPC-H Q19: the join equality in every branch of an OR
    ("SELECT COUNT(*) FROM people, regions WHERE (code = region AND age < 30 AND zone = 1) "
     "OR (region = code AND age > 60)",
     "SELECT COUNT(*) FROM people p JOIN regions r ON p.region = r.code "
     "WHERE (p.age < 30 AND r.zone = 1) OR p.age > 60"),
    # unqualified columns in an explicit join's ON
    ("SELECT COUNT(*) FROM people JOIN regions ON region = code WHERE name = 'Beta'",
     "SELECT COUNT(*) FROM people p JOIN regions r ON p.region = r.code WHERE r.name = 'Beta'"),
]


@pytest.mark.parametrize("written,explicit", SAME)
def test_comma_joins_are_answered_as_the_explicit_join(backend_url, written, explicit):
    with open_engine(backend_url, RULES, _tables) as engine:
        shift, groups, keys, _ = recorded_statistics(engine, written)
        assert (shift, groups, keys) == recorded_statistics(engine, explicit)[:3]
        assert keys and groups


def test_the_rewrite_moves_join_equalities_into_on_and_keeps_the_rest():
    sql = ("SELECT COUNT(*) FROM people p, zones, regions r WHERE zone_id = r.zone "
           "AND p.region = code AND (age > 1 OR income < 2) AND {} = 'x'")
    with pytest.raises(AmbiguousColumn, match='column reference "name" is ambiguous'):
        explicit_joins(sqlglot.parse_one(sql.format("name"), read="postgres"), RULES)
    select = sqlglot.parse_one(sql.format("r.name"), read="postgres")
    assert explicit_joins(select, RULES).sql("postgres") == (
        "SELECT COUNT(*) FROM people AS p JOIN regions AS r ON p.region = r.code "
        "JOIN zones ON zones.zone_id = r.zone WHERE (p.age > 1 OR p.income < 2) "
        "AND r.name = 'x'")
    assert select.sql("postgres") == sqlglot.parse_one(sql.format("r.name")).sql("postgres")


REFUSED = [
    # a cross product (no join equality) stays refused with the same message
    ("SELECT COUNT(*) FROM people p, regions r WHERE p.age > 3", "0A000",
     "joins without ON (FROM a, b) are not supported"),
    ("SELECT COUNT(*) FROM people p, regions r, zones z WHERE p.region = r.code", "0A000",
     "joins without ON (FROM a, b) are not supported"),
    # an equality inside an OR that not every branch holds is no join condition
    ("SELECT COUNT(*) FROM people p, regions r WHERE p.region = r.code OR p.age > 3",
     "0A000", "joins without ON"),
    # a comma join beside an outer join is left as written
    ("SELECT COUNT(*) FROM people p LEFT JOIN regions r ON p.region = r.code, zones z "
     "WHERE z.zone_id = r.zone", "0A000", "joins without ON"),
    ("SELECT COUNT(*) FROM people p, regions r, zones z WHERE p.region = r.code "
     "AND z.zone_id = r.zone AND name = 'x'", "42702", 'column reference "name" is ambiguous'),
    ("SELECT COUNT(*) FROM people p JOIN regions r ON region = code JOIN zones z "
     "ON zone_id = zone WHERE name = 'x'", "42702", "ambiguous"),
    # the rewritten join is checked by the join rules as if written so
    ("SELECT COUNT(*) FROM people p, visits v WHERE p.age = v.cost", "0A000",
     "join on their privacy unit or along a declared link only"),
    ("SELECT COUNT(*) FROM people p, regions r WHERE p.region = r.name", "0A000",
     "must match its unique key code"),
]


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    """One DuckDB engine for the refusals (decided from the text: no backend differs)."""
    url = f"duckdb:///{tmp_path_factory.mktemp('comma') / 'data.duckdb'}"
    with open_engine(url, RULES, _tables) as engine:
        yield engine


@pytest.mark.parametrize("sql,sqlstate,fragment", REFUSED)
def test_cross_products_and_ambiguous_columns_are_refused_for_free(engine, sql, sqlstate,
                                                                   fragment):
    refused_for_free(engine, sql, sqlstate, fragment)
