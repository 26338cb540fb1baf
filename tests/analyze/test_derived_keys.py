"""GROUP BY terms computed from columns with public values (``proxy.analyze.derived_keys``):
``LOWER(region)``, ``COALESCE``, ``||``, CONCAT, ``ROUND(age, -1)``, ``LEAST``, a CASE
whose output is a column. Each answer, noise off, is PostgreSQL's own answer to the same
statement over the same rows (values within the declared keys and domains), on both
backends; a value outside an int domain lands where its clamped value does, an
undeclared key in no group; terms that read a column without public values, or compute
what is not evaluated exactly, keep their refusal, for free."""

from __future__ import annotations

import datetime as dt

import pytest

from proxy.rules import parse_rules
from proxy.session import Session
from tests.databases import postgres_truth
from tests.factories import Table, engine_fixture, open_engine
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

[tables.people]
privacy_unit = "person_id"
[tables.people.columns]
person_id = { type = "int" }
region = { type = "text", keys = ["north", "south", "east", "west", " East "] }
sex    = { type = "text", keys = ["f", "m"] }
age    = { type = "int", domain = [0, 120] }
days   = { type = "int", domain = [-7, 60] }
income = { type = "float", domain = [0, 100000] }
at     = { type = "timestamp", domain = [2024-01-01T00:00:00, 2024-12-31T23:59:59] }
vip    = { type = "bool", keys = [false, true] }
"""
RULES = parse_rules(RULES_TEXT, "derived_keys.toml")
TYPES = {"person_id": "INTEGER", "region": "TEXT", "sex": "TEXT", "age": "INTEGER",
         "days": "INTEGER", "income": "DOUBLE PRECISION", "at": "TIMESTAMP", "vip": "BOOLEAN"}
REGIONS = ["north", "south", "east", "west", " East ", None]
ROWS = {
    "person_id": list(range(1, 301)),
    "region": [REGIONS[(i * 7) % 6] for i in range(300)],
    "sex": [None if i % 41 == 2 else "fm"[(i * 3) % 5 % 2] for i in range(300)],
    "age": [None if i % 37 == 4 else (i * 13) % 121 for i in range(300)],
    "days": [(i * 11) % 68 - 7 for i in range(300)],
    "income": [float(i * 331 % 100000) for i in range(300)],
    "at": [dt.datetime(2024, 1, 1) + dt.timedelta(hours=29 * i + i % 5) for i in range(300)],
    "vip": [None if i % 23 == 1 else i % 3 == 0 for i in range(300)],
}

engine = engine_fixture(RULES, lambda: {"people": Table(ROWS, TYPES)}, shared=True)


@pytest.fixture(scope="module")
def truth(postgres_url):
    with postgres_truth(postgres_url, {"people": Table(ROWS, TYPES)}) as answer:
        yield answer


def _answered(engine, sql: str) -> dict:
    (answer,) = list(Session.open(engine, "alice").execute(sql))
    keys = [row[0] for row in answer.rows]
    assert len(keys) == len(set(keys))
    return dict(answer.rows)


# (term, WHERE, whether PostgreSQL's NULL group is answered)
TERMS = [
    ("LOWER(region)", "", False),
    ("UPPER(TRIM(region))", "", False),  # ' East ' and 'east' are one key
    ("INITCAP(region)", "", False),  # ' East ' keeps its blanks (the probe of 2026-11-29)
    ("LENGTH(region)", "", False),  # 4, 5 and 6 (' East '); CHAR_LENGTH as well
    ("CHAR_LENGTH(sex || region) + 1", "WHERE age > 20", False),
    ("TRIM(LEADING ' ' FROM region)", "WHERE sex = 'f'", False),
    ("COALESCE(region, 'unknown')", "", False),  # the NULL region's rows: a key
    ("region || '/' || sex", "", False),
    ("CONCAT(region, '-', sex)", "", False),  # CONCAT skips a NULL
    ("CONCAT(FLOOR(age / 10) * 10, ' - ', (FLOOR(age / 10) + 1) * 10 - 1)", "", False),
    ("ROUND(age, -1)", "", False),  # 25 rounds to 30, as a numeric does
    ("LEAST(days, 10)", "", False),
    ("GREATEST(days, 0) / 7", "", False),  # integer division truncates
    ("ABS(days) % 4", "WHERE days < 20", False),
    ("CASE WHEN age > 90 THEN 90 ELSE age END", "WHERE age >= 80", False),
    # a NULL region's rows: in no group, as for GROUP BY region (SQL groups them)
    ("CASE WHEN region IN ('north', 'south') THEN 'north & south' ELSE region END", "",
     False),
    ("CASE WHEN age > 30 THEN region END", "", True),
    ("NULLIF(region, 'north')", "", True),
    ("CAST(age AS text) || '+'", "WHERE age > 95", False),
    ("substring(region, 1, 2)", "", False),
    # negative whole numbers: division and % truncate toward zero, ROUND half away from it
    ("days / 7", "", False),
    ("days % 4", "", False),
    ("ROUND(days, -1)", "", False),
    ("CONCAT_WS('-', region, sex)", "", False),  # a NULL argument is skipped
    ("GREATEST(days, NULL, -3)", "", False),
    ("UPPER(sex) || CAST(age / 50 AS text)", "WHERE age IS NOT NULL", False),
    # conditions of literals: a branch never taken is no key (it was answered beside the
    # ELSE's, as an empty group the select list then relabelled: two rows of 'b'), one
    # always taken ends the CASE
    ("CASE WHEN NULL THEN 'a' ELSE 'b' END", "", False),
    ("CASE WHEN 1 = 0 THEN 'a' WHEN age > 50 THEN 'old' ELSE 'young' END", "", False),
    ("CASE WHEN TRUE THEN 'a' WHEN age > 50 THEN 'old' ELSE 'b' END", "", False),
    ("CASE WHEN NOT (2 > 1.5) THEN 1 ELSE 2 END", "", False),
    ("CASE WHEN NULL THEN 'a' END", "", True),
    # strings' equality, AND and OR of literals and with a column (the review of
    # 2026-11-29: two rows of 'y', and 'a' beside an empty 'b')
    ("CASE WHEN 'a' = 'a' THEN 'y' ELSE 'z' END", "", False),
    ("CASE WHEN 'a' <> 'a' THEN 'y' ELSE 'z' END", "", False),
    ("CASE WHEN TRUE OR region = 'north' THEN 'a' ELSE 'b' END", "", False),
    ("CASE WHEN 1 = 0 AND region = 'north' THEN 'a' ELSE 'b' END", "", False),
    ("CASE WHEN NULL AND FALSE THEN 'a' WHEN NULL OR TRUE THEN 'c' ELSE 'b' END", "", False),
    ("CASE WHEN NULL OR 1 = 0 THEN 'a' ELSE 'b' END", "", False),
    # a capped bin of a float column (no public values: group_keys._capped_bin)
    ("LEAST(FLOOR(income / 25000), 2)", "", False),
    ("GREATEST(LEAST(FLOOR(income / 10000) * 10000, 70000), 20000, 5)", "WHERE income > 15000",
     False),
]


@pytest.mark.parametrize("term,where,null_group", TERMS)
@pytest.mark.usefixtures("no_noise")
def test_each_derived_key_is_postgresql_s_own(engine, truth, term, where, null_group):
    sql = f"SELECT {term} AS k, COUNT(*), SUM(income) FROM people {where} GROUP BY 1"
    answered = _answered(engine, f"SELECT {term} AS k, COUNT(*) FROM people {where} GROUP BY 1")
    wanted = {key: count for key, count, _ in truth(sql) if null_group or key is not None}
    assert set(wanted) <= set(answered), sorted(set(wanted) - set(answered), key=str)[:5]
    assert answered == {key: wanted.get(key, 0) for key in answered}
    assert (None in answered) == null_group


@pytest.mark.usefixtures("no_noise")
def test_the_keys_come_from_the_rules_and_the_where_not_the_data(engine):
    # every decade of the domain, the empty ones too; the WHERE drops those it excludes
    assert list(_answered(engine, "SELECT ROUND(age, -1) AS d, COUNT(*) FROM people "
                                  "GROUP BY 1 ORDER BY 1")) == list(range(0, 121, 10))
    assert list(_answered(engine, "SELECT ROUND(age, -1) AS d, COUNT(*) FROM people "
                                  "WHERE age BETWEEN 31 AND 54 GROUP BY 1 ORDER BY 1")) == \
        [30, 40, 50]
    # no region is NULL-free in the rules: 'unknown' is answered whether or not rows have it
    assert "unknown" in _answered(engine, "SELECT COALESCE(region, 'unknown'), COUNT(*) "
                                          "FROM people WHERE region IS NOT NULL GROUP BY 1")


@pytest.mark.usefixtures("no_noise")
def test_a_value_beyond_the_domain_lands_where_its_clamped_value_does(backend_url):
    rows = {"person_id": [1, 2, 3, 4, 5], "region": ["north", "nowhere", None, "west", "east"],
            "sex": ["f"] * 5, "age": [-5, 130, 64, 65, None], "days": [0] * 5,
            "income": [1.0] * 5, "at": [dt.datetime(2024, 5, 1)] * 5, "vip": [True] * 5}
    with open_engine(backend_url, RULES, lambda: {"people": Table(rows, TYPES)}) as made:
        decades = _answered(made, "SELECT ROUND(age, -1), COUNT(*) FROM people GROUP BY 1")
        regions = _answered(made, "SELECT UPPER(region), COUNT(*) FROM people GROUP BY 1")
    assert {key: n for key, n in decades.items() if n} == {0: 1, 120: 1, 60: 1, 70: 1}
    # 'nowhere' is no declared key: in no group, as for GROUP BY region itself
    assert {key: n for key, n in regions.items() if n} == {"NORTH": 1, "WEST": 1, "EAST": 1}


@pytest.mark.usefixtures("no_noise")
def test_a_capped_bin_puts_null_where_postgresql_s_least_does(backend_url):
    """LEAST and GREATEST skip a NULL: a NULL income (and a NaN, read as NULL) is in the
    cap's bucket; a value beyond the domain in the first or last bin, as clamped."""
    rows = {"person_id": [1, 2, 3, 4, 5, 6], "region": ["north"] * 6, "sex": ["f"] * 6,
            "age": [1] * 6, "days": [0] * 6, "income": [None, -5.0, 24999.99, 25000.0,
                                                        float("nan"), 1e9],
            "at": [dt.datetime(2024, 5, 1)] * 6, "vip": [True] * 6}
    with open_engine(backend_url, RULES, lambda: {"people": Table(rows, TYPES)}) as made:
        capped = _answered(made, "SELECT LEAST(FLOOR(income / 25000), 2) AS b, COUNT(*) "
                                 "FROM people GROUP BY 1")
        floored = _answered(made, "SELECT GREATEST(FLOOR(income / 25000), 1) AS b, COUNT(*) "
                                  "FROM people WHERE income IS NULL GROUP BY 1")
    assert capped == {0: 2, 1: 1, 2: 3}
    assert floored == {1: 1}  # the WHERE lets no value of another bin in


@pytest.mark.parametrize("sql,fragment", [
    ("SELECT LEAST(FLOOR(income / 25000), 2.5), COUNT(*) FROM people GROUP BY 1",
     "whole numbers"),
    ("SELECT LEAST(FLOOR(income / 25000), income), COUNT(*) FROM people GROUP BY 1",
     "public set of keys"),
    ("SELECT LOWER(CAST(income AS text)), COUNT(*) FROM people GROUP BY 1",
     "public set of keys"),  # a float without keys: no public values
    ("SELECT person_id % 10, COUNT(*) FROM people GROUP BY 1", "declared domain"),
    ("SELECT CASE WHEN age > 30 THEN income END, COUNT(*) FROM people GROUP BY 1", "literals"),
    ("SELECT ROUND(age / 3.0, 1), COUNT(*) FROM people GROUP BY 1", "public set of keys"),
    ("SELECT age * 1.5, COUNT(*) FROM people GROUP BY 1", "public set of keys"),
    ("SELECT 10 / (days - days), COUNT(*) FROM people GROUP BY 1", "public set of keys"),
    ("SELECT LEAST(region, sex), COUNT(*) FROM people GROUP BY 1", "public set of keys"),
    # a condition of constants the proxy cannot decide as the backend would (a text
    # order: the collation's): it split the rows in two groups with one label (the
    # second review of 2026-11-29)
    ("SELECT CASE WHEN 'a' < 'b' THEN 'x' ELSE 'y' END, COUNT(*) FROM people GROUP BY 1",
     "reads no column"),
])
def test_what_is_not_evaluated_exactly_keeps_its_refusal_for_free(engine, sql, fragment):
    refused_for_free(engine, sql, "0A000", fragment)


def test_a_where_admitting_no_key_answers_no_rows_for_free(engine):
    before = engine.ledger.entries()
    (answer,) = list(Session.open(engine, "alice").execute(
        "SELECT LOWER(region), COUNT(*) FROM people WHERE region = 'atlantis' GROUP BY 1"))
    assert answer.rows == [] and engine.ledger.entries() == before


# a select item computed from the GROUP BY terms, not one itself: computed on the released
# keys by the post-processor, after the noise (Looker writes its months so)
OF_KEYS = [
    ("UPPER(region)", "region", ""),
    ("region || '/' || sex", "region, sex", "WHERE sex IS NOT NULL"),
    ("TO_CHAR(DATE_TRUNC('month', at), 'YYYY-MM')", "DATE_TRUNC('month', at)", ""),
    ("TO_CHAR(DATE_TRUNC('week', at), 'FMMonth DD, YYYY')", "(DATE_TRUNC('week', at))",
     "WHERE at < '2024-03-01'"),
    ("LENGTH(TRIM(region)) + 1", "region", ""),
]


@pytest.mark.parametrize("item,group,where", OF_KEYS)
@pytest.mark.usefixtures("no_noise")
def test_a_function_of_the_keys_is_computed_on_the_released_keys(engine, truth, item, group,
                                                                 where):
    sql = f"SELECT {item} AS k, COUNT(*) AS n FROM people {where} GROUP BY {group}"
    (answer,) = list(Session.open(engine, "alice").execute(sql))
    assert "the select list ran on the released answers" in " ".join(answer.privacy["notes"])
    wanted = {}
    for key, n in truth(sql):
        if key is not None:
            wanted[key] = wanted.get(key, 0) + n
    answered = {}
    for key, n in answer.rows:
        answered[key] = answered.get(key, 0) + n
    assert {k: n for k, n in answered.items() if n} == wanted


@pytest.mark.usefixtures("no_noise")
def test_a_one_to_one_function_of_a_key_groups_by_the_key(engine, truth):
    # Grafana's to_timestamp around the epoch bin, grouped by position: the bin's groups,
    # the moment computed on each released bin
    sql = ("SELECT to_timestamp(floor(extract(epoch from at) / 86400) * 86400) AS k, "
           "COUNT(*) AS n FROM people WHERE at < '2024-02-01' GROUP BY 1")
    answered = _answered(engine, sql)
    assert {k: n for k, n in answered.items() if n} == dict(truth(sql)) and len(answered) == 31


UNDECLARED = {"person_id": [1, 2, 3, 4, 5, 6], "region": ["north", "nowhere", None, "south",
                                                         "nowhere", None],
              "sex": ["f"] * 6, "age": [3, 3, 30, 30, 30, 200], "days": [0] * 6,
              "income": [1.0] * 6, "at": [dt.datetime(2024, 5, 1)] * 6, "vip": [True] * 6}


@pytest.mark.parametrize("term,wanted", [
    ("NULLIF(region, 'north')", {"south": 1, None: 3}),
    ("CASE WHEN region = 'north' THEN NULL ELSE age END", {30: 2, 120: 1, None: 1}),
    ("CASE WHEN age > 100 THEN NULL ELSE region END", {"north": 1, "south": 1, None: 2}),
])
@pytest.mark.usefixtures("no_noise")
def test_a_row_of_an_undeclared_value_is_in_no_group_not_the_null_one(backend_url, term,
                                                                      wanted):
    """A region no rule declares ('nowhere') puts its row in no group, as for GROUP BY
    region, also where the term has a NULL group (the review found such rows counted in
    it: the CASE's own ELSE is NULL); a NULL input is a value of the term like any other
    (age 200, beyond the domain, counts as 120)."""
    with open_engine(backend_url, RULES, {"people": Table(UNDECLARED, TYPES)}) as made:
        answered = _answered(made, f"SELECT {term} AS k, COUNT(*) FROM people GROUP BY 1")
    assert set(wanted) <= set(answered)
    assert {key: count for key, count in answered.items() if count} == wanted


@pytest.mark.parametrize("term,where", [
    ("CONCAT(vip, 'x')", ""),  # CONCAT writes a boolean t or f
    ("CAST(vip AS text) || 'x'", ""),  # a cast and || write true or false
    ("NULLIF(age, '5')", "WHERE age < 10"),  # the quoted 5 is read as age's number
    ("ROUND(age, 0)", "WHERE age < 10"),
    ("FLOOR(age / 4.0 * 4)", ""),  # a quotient of at most 15 places: exact there too
    # a literal with an exponent is a numeric: 25 / 2e0 is 12.5, not an integer's 12
    ("CEIL(age / 2e0)", ""),
    ("FLOOR(age / 1e1)", "WHERE age > 50"),
    # a quotient below 1: 16 significant digits are 20 places, 25 / 1024 is exact there
    ("FLOOR(age * 1.0 / 1024 * 1024)", "WHERE age < 40"),
    # numerics as numeric.c computes them: a quotient rounded to 16 significant digits
    # (25 / 3.0 * 3 is 24.9999999999999999), texts of every place of the scale
    ("FLOOR(age / 3.0 * 3)", ""),
    ("CEIL(age * 1.0 / 7 * 7)", ""),
    ("CEIL((age * 1000000000000.0 + 1023) / 1024.0 * 1024)", "WHERE age > 100"),
    ("CONCAT(ROUND(age, 1), 'x')", "WHERE age < 30"),  # 25.0x
    ("CAST(ROUND(age, 2) AS TEXT)", "WHERE age > 100"),  # 25.00
    ("CONCAT(age / 3.0, '|', days * 1.50)", "WHERE age < 20 AND days < 0"),
    ("CONCAT(ROUND(days / 7.0, 2), '')", ""),  # half away from zero, negatives too
    ("CAST(-days * 0.5 + 0.25 AS text)", ""),
    # CEIL of an integer is a double, and so is a double minus a numeric: 0x, not 0.00x
    ("CONCAT(CEIL(age) - ROUND(age, 2), 'x')", ""),
])
@pytest.mark.usefixtures("no_noise")
def test_labels_are_postgresql_s_where_its_types_decide_them(engine, truth, term, where):
    sql = f"SELECT {term} AS k, COUNT(*) FROM people {where} GROUP BY 1"
    answered = _answered(engine, sql)
    wanted = {key: count for key, count in truth(sql)}
    assert {key: count for key, count in answered.items() if count} == {
        key: count for key, count in wanted.items() if key is not None or None in answered}


@pytest.mark.parametrize("term", [
    "age * 100000 * 100000",  # integer out of range in PostgreSQL
    "age * 1.0",  # the numeric 25.0: a key of places is not sent as one here
    # types PostgreSQL fails on where values never meet them (the CASE's 'x' is read as
    # an integer, unknown + unknown has no one operator)
    "CASE WHEN age > 200 THEN 'x' ELSE age END",
    "COALESCE(region, NULL + '')",
    "NULLIF('5', CAST(NULL AS INT))",  # the integer 5 there, the text '5' here
    "CAST(region AS CHAR)",  # char(1)
    "NULLIF(region, age)",  # PostgreSQL has no text = integer
    "CONCAT_WS(age, region)",  # nor concat_ws of an integer separator
    # an integer condition (CASE WHEN age …): PostgreSQL's 42804, test_bi_small_forms
    "NULLIF(age, 'five')",
    "NULLIF(age, '5.0')",  # no integer's input in PostgreSQL
])
def test_labels_postgresql_computes_otherwise_or_refuses_are_refused_for_free(engine, term):
    refused_for_free(engine, f"SELECT {term} AS k, COUNT(*) FROM people GROUP BY 1", "0A000",
                     "")


@pytest.mark.parametrize("order", ["1 NULLS FIRST", "1 DESC", "2 DESC NULLS LAST, 1 NULLS FIRST"])
@pytest.mark.usefixtures("no_noise")
def test_released_rows_are_ordered_as_postgresql_orders_them(engine, truth, order):
    """ORDER BY over the released rows keeps NULLS FIRST and NULLS LAST as written (they
    were ignored: ``ORDER BY b DESC NULLS LAST LIMIT 1`` answered the NULL group; the
    review of 2026-11-29), PostgreSQL's defaults otherwise."""
    sql = (f"SELECT CASE WHEN age > 30 THEN region END AS k, COUNT(*) AS n FROM people "
           f"GROUP BY 1 ORDER BY {order}")
    (answer,) = list(Session.open(engine, "alice").execute(sql))
    wanted = [key for key, _ in truth(sql)]
    assert [key for key, n in answer.rows if n or key in wanted] == wanted
