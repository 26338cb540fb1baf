"""The engine end to end on both backends: answers, metadata, ledger and refusals."""

from __future__ import annotations

import statistics
from decimal import Decimal

import psycopg
import pytest

from proxy import engine as engine_module
from proxy.analyze import analyze, parse_statements
from proxy.backends import open_backend
from proxy.engine import Engine, PerVersion
from proxy.errors import BudgetExhausted, Refused
from proxy.rules import parse_rules
from proxy.session import Session
from proxy.settings import Settings
from tests.databases import load_table, new_database
from tests.factories import (
    ENGINE_RULES,
    MANY_KEYS,
    MANY_RULES,
    ODD,
    Table,
    engine_fixture,
    load,
    many,
    open_engine,
    people,
)
from tests.probes import run

pytestmark = pytest.mark.postgres


def _engine_tables() -> dict[str, Table]:
    return {"people": people(),
            "regions": Table({"region": ["north", "south"], "label": ["N", "S"]},
                             {"region": "TEXT", "label": "TEXT"}),
            "odd": ODD}


# A new engine for each test on each backend: its tests compare budgets.
engine = engine_fixture(ENGINE_RULES, _engine_tables)
# One per backend for the refusals, which run nothing and compare the whole ledger
# (entries and budgets) before and after their own statement: 64 engines' tables loaded
# once instead of once each (in the suite, about 6 s of setup), as a served deployment's
# sessions share one engine.
refusing_engine = engine_fixture(ENGINE_RULES, _engine_tables, shared=True,
                                 name="refusing_engine")


def ledger_state(engine):
    return engine.ledger.entries(), engine.ledger.budgets()


def test_fourth_query_is_refused_at_budget_one_and_epsilon_point_three(engine):
    session = Session.open(engine, "alice")
    for sql in ("SELECT MEDIAN(income) FROM people", "SELECT COUNT(*) FROM people WHERE age > 30",
                "SELECT MAX(age) FROM people"):
        (answer,) = run(session, sql)
        assert answer.privacy["epsilon_spent"] == 0.3
    with pytest.raises(BudgetExhausted) as refused:
        run(session, "SELECT MIN(age) FROM people")
    assert refused.value.sqlstate == "PB001"
    statuses = [entry[9] for entry in engine.ledger.entries("alice")]
    assert statuses == ["charged"] * 3 + ["refused: budget"]
    assert engine.ledger.remaining("alice") == Decimal("0.1")
    assert sum(e[6] for e in engine.ledger.entries("alice") if e[9] == "charged") == Decimal("0.9")


def test_answer_carries_privacy_metadata(engine):
    (answer,) = run(Session.open(engine, "zoe"), "SELECT MEDIAN(income) AS m FROM people")
    privacy = answer.privacy
    assert answer.columns == ["m"]
    assert privacy["model"] == "iDP" and "Laplace" in privacy["mechanism"]
    assert privacy["epsilon_spent"] == 0.3 and privacy["epsilon_remaining"] == 99.7
    (half_width,) = privacy["ci95"]["m"]
    assert half_width > 0
    assert "95% error bound" in answer.notice


def test_local_sensitivity_is_never_reported_exactly(engine):
    """The bound comes from the power-of-two sensitivity: it is ln(20)-ish × 2^k/ε."""
    (answer,) = run(Session.open(engine, "zoe"), "/*+ epsilon=1 */ SELECT MEDIAN(income) FROM people")
    (half_width,) = answer.privacy["ci95"]["median"]
    ratios = [half_width / 2.0 ** k for k in range(-10, 30)]
    assert any(2.9 < r < 3.1 for r in ratios)  # ≈ ln(20)·2^k


def test_whole_table_count_is_public(engine):
    """Modifying records never changes the number of rows: it is public, exact and free."""
    (answer,) = run(Session.open(engine, "zoe"), "SELECT COUNT(*) FROM people")
    assert answer.rows == [(2000,)]
    assert answer.privacy["ci95"]["count"] == [0.0] and answer.privacy["epsilon_spent"] == 0


def test_group_by_answers_every_declared_key_in_order(engine):
    (answer,) = run(Session.open(engine, "zoe"),
                    "SELECT region, COUNT(*) AS n FROM people GROUP BY region ORDER BY n DESC LIMIT 3")
    assert len(answer.rows) == 3
    counts = [row[1] for row in answer.rows]
    assert counts == sorted(counts, reverse=True)
    assert {row[0] for row in answer.rows} <= {"north", "south", "east", "west"}


def test_empty_groups_are_answered_from_the_domain(engine):
    """A declared key with no row in scope still gets every aggregate (SPEC §3.4): a
    WHERE on another column (ages are 18 to 89) leaves every key, whose values stay
    within the declared domains."""
    (answer,) = run(Session.open(engine, "zoe"),
                    "SELECT region, COUNT(age), MEDIAN(age), AVG(income), MAX(age) FROM people "
                    "WHERE age > 100 GROUP BY region")
    assert [row[0] for row in answer.rows] == ["north", "south", "east", "west"]
    for row in answer.rows:
        assert 0 <= row[2] <= 120 and 0 <= row[4] <= 120 and 0 <= row[3] <= 10_000_000


def test_an_empty_groups_median_is_drawn_over_the_domain_not_pinned_to_its_end(engine):
    """docs/privacy.md §3.3: under the default mechanism for percentiles, MAX and MIN
    (the exponential mechanism), an empty group's value is a draw over the column's
    grid, as any group's: inside the domain, not its top or bottom every time."""
    session = Session.open(engine, "zoe")
    run(session, "SET idp.sensitivity = 'instance'")
    values = [row[1] for i in range(12) for row in run(
        session, f"SELECT region, MEDIAN(income), MAX(age) FROM people WHERE age > 100 "
                 f"AND person_id > -{i} GROUP BY region")[0].rows]
    assert all(0 <= value <= 10_000_000 for value in values)
    assert len(set(values)) > len(values) // 2  # draws, not one fixed fallback
    assert sum(value in (0, 10_000_000) for value in values) < len(values) // 4


def test_a_where_on_the_key_column_answers_its_keys_with_their_share_of_epsilon(engine):
    """issue 32 item 4: WHERE region IN (…) answers those keys only (no phantom groups),
    and each group's noise is widened by the groups one person can touch among the keys
    answered (docs/privacy.md §3.5): one key, a count's noise is the ungrouped count's;
    two keys or four, min(2, G) times that. Charged ε per aggregate, as always."""
    session = Session.open(engine, "zoe")

    def bound(sql):
        (answer,) = run(session, sql)
        return answer, answer.privacy["ci95"]["count"][0]

    _, alone = bound("SELECT COUNT(*) FROM people WHERE region = 'north'")
    one, one_bound = bound("SELECT region, COUNT(*) FROM people WHERE region = 'north' "
                           "GROUP BY region")
    two, two_bound = bound("SELECT region, COUNT(*) FROM people WHERE region IN "
                           "('east', 'north') GROUP BY region")
    _, four_bound = bound("SELECT region, COUNT(*) FROM people GROUP BY region")
    assert [row[0] for row in one.rows] == ["north"]
    assert [row[0] for row in two.rows] == ["north", "east"]  # the declared order
    assert one_bound == alone and two_bound == four_bound > one_bound
    assert [e[6] for e in engine.ledger.entries("zoe")] == [Decimal("0.3")] * 4


def _regions_of(region_of_one: str) -> Table:
    """Twenty people in the north and one, person 21, in ``region_of_one``."""
    return Table({"person_id": list(range(1, 22)), "age": [30 + i for i in range(21)],
                  "income": [1000.0 * i for i in range(21)],
                  "region": ["north"] * 20 + [region_of_one]},
                 {"person_id": "INTEGER", "age": "INTEGER", "income": "DOUBLE PRECISION",
                  "region": "TEXT"})


def test_neighbouring_data_release_the_same_keys(backend_url, second_backend_url):
    """The released keys depend on the rules and the text only: on two data sets that
    differ in one person's region (east, the only one there, or south) the same
    keys are answered, the emptied one included."""
    released = []
    for url, region in ((backend_url, "east"), (second_backend_url, "south")):
        tables = {"people": _regions_of(region), "odd": ODD, "regions": Table(
            {"region": ["north"], "label": ["N"]}, {"region": "TEXT", "label": "TEXT"})}
        with open_engine(url, ENGINE_RULES, tables) as engine_here:
            session = Session.open(engine_here, "zoe")
            released.append([[row[0] for row in run(session, sql)[0].rows] for sql in (
                "SELECT region, COUNT(*), MEDIAN(age) FROM people WHERE region IN "
                "('north', 'east') GROUP BY region",
                "SELECT region, MAX(income) FROM people WHERE region <> 'south' GROUP BY 1",
                "SELECT region, COUNT(*) FROM people WHERE age > 45 GROUP BY 1")])
    assert released[0] == released[1] == [["north", "east"], ["north", "east", "west"],
                                          ["north", "south", "east", "west"]]


# 1,000 declared keys; the data has rows for the first 990 only (3 each).
many_keys_engine = engine_fixture(MANY_RULES, lambda: {"many": many()}, name="many_keys_engine")


def test_a_thousand_key_group_by_answers_every_key(many_keys_engine, no_noise):
    """Every declared key once, in the declared order, with its own count (0 for the
    keys without rows): releasing does not depend on listing the keys per group."""
    (answer,) = run(Session.open(many_keys_engine, "zoe"),
                    "SELECT key, COUNT(*) AS n FROM many GROUP BY key")
    assert [row[0] for row in answer.rows] == MANY_KEYS
    assert [row[1] for row in answer.rows] == [3] * 990 + [0] * 10


def test_each_group_is_calibrated_to_the_number_of_groups(many_keys_engine, monkeypatch):
    """The noise of every group takes its share of epsilon over all the groups one unit
    can touch: the count handed to the calibration is the number of answered groups,
    for one term and for the product of two."""
    from proxy.privacy import sensitivity

    seen = []
    touched = sensitivity.groups_touched
    monkeypatch.setattr(sensitivity, "groups_touched",
                        lambda shift, count: seen.append(count) or touched(shift, count))
    session = Session.open(many_keys_engine, "zoe")
    for sql in ("SELECT key, MEDIAN(age) FROM many GROUP BY key",
                "SELECT key, floor(age / 50) * 50 AS half, MAX(age) FROM many GROUP BY 1, 2"):
        seen.clear()
        (answer,) = run(session, sql)
        assert seen and set(seen) == {len(answer.rows)}
    assert len(answer.rows) == 3000  # 1,000 keys × the bins 0, 50, 100


def test_empty_scope_is_answered_not_refused(engine):
    """SPEC §3.4: tiny scopes fall back to a data-independent sensitivity."""
    (answer,) = run(Session.open(engine, "zoe"), "SELECT MEDIAN(age) FROM people WHERE age > 200")
    assert 0 <= answer.rows[0][0] <= 120


def test_public_table_passes_through_unchanged_and_free(engine):
    session = Session.open(engine, "zoe")
    before = engine.ledger.remaining("zoe")
    (answer,) = run(session, "SELECT * FROM regions ORDER BY region")
    assert answer.rows == [("north", "N"), ("south", "S")]
    assert engine.ledger.remaining("zoe") == before


REFUSALS = [
    ("SELECT * FROM people", "42501"),
    ("SELECT income FROM people", "42501"),
    ("SELECT income, COUNT(*) FROM people GROUP BY income", "0A000"),
    ("SELECT COUNT(*) FROM people p JOIN regions r ON p.region = r.region", "0A000"),
    ("SELECT COUNT(*) FROM (SELECT * FROM people LIMIT 10) t", "0A000"),
    (("WITH t AS (SELECT region, COUNT(*) AS c FROM people GROUP BY region) SELECT AVG(c) "
     "FROM t"), "0A000"),
    ("SELECT COUNT(*) FROM people INTERSECT SELECT COUNT(*) FROM people", "0A000"),
    ("SELECT SUM(income) OVER () FROM people", "0A000"),
    ("SELECT COUNT(*) FROM people WHERE md5(region) = 'north'", "42883"),
    ("SELECT COUNT(*) FROM people WHERE age IN (SELECT age FROM people)", "0A000"),
    ("SELECT COUNT(DISTINCT age, sex) FROM people", "0A000"),
    ("SELECT MEDIAN(income / age) FROM people", "0A000"),
    ("SELECT COUNT(*) FROM people GROUP BY region HAVING age > 3", "0A000"),
    ("SELECT COUNT(*) FROM secrets", "42P01"),
    ("SELECT MAX(salary) FROM people", "42703"),
    ("DELETE FROM people", "25006"),
    ("DROP TABLE people", "25006"),
    ("INSERT INTO people VALUES (1, 2, 3, 'x')", "25006"),
    ("COPY people TO STDOUT", "25006"),
    ("SET ROLE postgres", "25006"),
    ("SELECT MEDIAN(region) FROM people", "0A000"),
    ("/*+ epsilon=5 */ SELECT COUNT(*) FROM people", "22023"),
    ("/*+ epsilon=1e-3 */ SELECT COUNT(*) FROM people", "22023"),
    ("SET idp.epsilon = -1", "22023"),
    ("SET idp.epsilon = 'NaN'", "22023"),
    ("SET idp.model = 'magic'", "22023"),
    ("SELECT COUNT(*) FROM people; SELECT * FROM people", "42501"),
    ("SELEC COUNT(*) FROM people", "42601"),
    ("SELECT COUNT(*) FROM people WHERE age > 'old'", "22P02"),
    ("SELECT COUNT(*) FROM people WHERE region = 5", "42883"),  # PostgreSQL's: text = int
    ("SELECT COUNT(*) FROM people WHERE region IN ('north', 3)", "42883"),
    ("SELECT COUNT(*) FROM people WHERE age BETWEEN 'a' AND 'z'", "22P02"),
]


@pytest.mark.parametrize("sql,sqlstate", REFUSALS)
def test_refusals_spend_nothing_and_say_what_is_allowed(refusing_engine, sql, sqlstate):
    engine = refusing_engine
    session = Session.open(engine, "alice")
    before = ledger_state(engine)
    with pytest.raises(Refused) as refused:
        run(session, sql)
    assert refused.value.sqlstate == sqlstate
    message = refused.value.message
    assert "\n" not in message and len(message) < 400
    assert ledger_state(engine) == before


def test_refused_second_statement_refuses_the_first_too(engine):
    before = ledger_state(engine)
    with pytest.raises(Refused):
        run(Session.open(engine, "alice"), "SELECT COUNT(*) FROM people WHERE age > 3; SELECT * FROM people")
    assert ledger_state(engine) == before


def test_rules_naming_a_missing_table_stop_the_engine_at_start(backend_url):
    from proxy.errors import RulesError

    load(backend_url, {"people": people(10)})
    load_table(backend_url, "odd", {"x": [1.0]}, {"x": "DOUBLE PRECISION"})
    ghost = "[tables.ghost]\n[tables.ghost.columns]\nx = { type = 'int' }\n"
    backend = open_backend(backend_url)
    with pytest.raises(RulesError, match=r"\[tables.ghost\] the backend has no table ghost"):
        Engine(parse_rules(ENGINE_RULES + ghost), backend)
    backend.close()


def test_rules_naming_a_missing_column_stop_the_engine_at_start(backend_url):
    from proxy.errors import RulesError

    load(backend_url, {"people": people(10)})
    load_table(backend_url, "odd", {"y": ["1"]}, {"y": "TEXT"})
    backend = open_backend(backend_url)
    with pytest.raises(RulesError, match=r"\[tables.odd\].*lacks the declared column\(s\) x"):
        Engine(parse_rules(ENGINE_RULES), backend)
    backend.close()


def test_unknown_analyst_is_refused(engine):
    with pytest.raises(Refused) as refused:
        Session.open(engine, "mallory")
    assert refused.value.sqlstate == "28000"


def test_a_declared_type_the_backend_does_not_hold_stops_the_engine_at_start(backend_url,
                                                                            tmp_path):
    """Issue 30 item 7: ``x`` declared float but stored as text started fine, and every
    query reading it was charged and failed in the backend (58000). Now the engine does
    not start, naming the rule's line and both types; nothing was ever charged."""
    from proxy.errors import RulesError
    from proxy.rules import load_rules

    load(backend_url, {"people": people(10)})
    load_table(backend_url, "odd", {"x": ["0.5", "half"]}, {"x": "TEXT"})
    path = tmp_path / "rules.toml"
    path.write_text(ENGINE_RULES)
    line = ENGINE_RULES.splitlines().index('x = { type = "float", domain = [0, 1] }') + 1
    backend = open_backend(backend_url)
    with pytest.raises(RulesError) as refused:
        Engine(load_rules(path), backend)
    assert str(refused.value) == (
        f"{path}:{line}: [tables.odd.columns.x] declared float, the backend's column is "
        "text; declare it as the column is stored, or cast it in a view")
    backend.close()


def test_settings_and_show(engine):
    session = Session.open(engine, "zoe")
    run(session, "SET idp.epsilon = 0.05")
    (answer,) = run(session, "SELECT COUNT(*) FROM people WHERE age < 50")
    assert answer.privacy["epsilon_spent"] == 0.05
    (shown,) = run(session, "SHOW idp.budget")
    assert Decimal(shown.rows[0][0]) == Decimal("99.95")
    run(session, "RESET idp.epsilon")
    (answer,) = run(session, "SELECT COUNT(*) FROM people WHERE age < 50")
    assert answer.privacy["epsilon_spent"] == 0.3


def test_several_aggregates_cost_the_sum_of_their_epsilon(engine):
    (answer,) = run(Session.open(engine, "zoe"),
                    "SELECT COUNT(*), MEDIAN(age), MAX(income) FROM people WHERE age > 20")
    assert answer.privacy["epsilon_spent"] == pytest.approx(0.9)


def test_a_hint_after_a_semicolon_on_its_line_is_the_next_statements(engine):
    """A script's ``…; /*+ epsilon=0.05 */ SELECT …``: the tokenizer gives the comment
    to the semicolon, and the second statement was charged the default ε (0.3 here),
    six times what it asked (the review of 2026-11-30); over the wire each statement's
    own text was read, and the hint held."""
    answers = run(Session.open(engine, "zoe"),
                  "SELECT COUNT(*) FROM people WHERE age > 21; /*+ epsilon=0.05 */ "
                  "SELECT COUNT(*) FROM people WHERE age > 22;\n/*+ epsilon=0.07 */ "
                  "SELECT COUNT(*) FROM people WHERE age > 23")
    assert [a.privacy["epsilon_spent"] for a in answers] == pytest.approx([0.3, 0.05, 0.07])
    assert [e[6] for e in engine.ledger.entries()] == [Decimal("0.3"), Decimal("0.05"),
                                                       Decimal("0.07")]


def test_a_grouped_query_is_charged_once_per_aggregate_not_per_group(engine):
    """docs/privacy.md §3.5: the cells share the query's ε (their noise is widened by
    the cells a neighbour can touch), so four groups cost what one does."""
    (answer,) = run(Session.open(engine, "zoe"), "SELECT region, COUNT(*), MEDIAN(age) FROM people "
                    "WHERE income > 30000 GROUP BY region")
    assert len(answer.rows) == 4
    entries = engine.ledger.entries()
    assert [(e[9], e[6]) for e in entries] == [("charged", Decimal("0.6"))]
    assert engine.ledger.remaining("zoe") == Decimal("99.4")


def test_idp_median_is_orders_of_magnitude_more_accurate_than_dp(engine):
    """SPEC: on demo-like data the iDP median at ε = 1 beats the DP (global sensitivity)
    median by orders of magnitude in mean absolute error, over 20 fresh releases each
    (each text differs, so the answer cache does not repeat one draw; every row has
    person_id ≥ 1, so the scope is the whole table)."""
    true = statistics.median_low(people().columns["income"])
    session = Session.open(engine, "zoe")
    errors = {}
    for model, sensitivity in (("idp", "local"), ("dp", "global")):
        run(session, f"SET idp.model = '{model}'; SET idp.sensitivity = '{sensitivity}'")
        answers = [run(session, "/*+ epsilon=1 */ SELECT MEDIAN(income) FROM people "
                                f"WHERE person_id > -{i}")[0].rows[0][0] for i in range(20)]
        errors[model] = statistics.mean(abs(a - true) for a in answers)
    assert errors["idp"] * 100 < errors["dp"]


def test_unit_bound_follows_the_data(engine):
    """c is cached per fingerprint of the unit column and recomputed when it changes:
    a person who gains rows widens every later answer's sensitivity at once, and the
    older version's c is let go (a server's memory grows with its tables, not writes)."""
    session = Session.open(engine, "zoe")
    plan_sql = "SELECT COUNT(*) FROM people WHERE age > 40"
    run(session, plan_sql)
    assert list(engine._unit_bounds.values()) == [1]
    engine.backend.query("INSERT INTO people VALUES (7, 40, 1.0, 'north')")
    engine.backend.query("INSERT INTO people VALUES (7, 41, 2.0, 'north')")
    (answer,) = run(session, plan_sql)
    assert engine._unit_bounds.values() == [3]
    assert answer.privacy["ci95"]["count"][0] > 20  # scale 4/0.3 rather than 1/0.3


def test_unit_bound_is_kept_per_data_version_for_later_processes(engine):
    """c, once read, is kept in the store under its statement and the data version: a new
    engine over the same store (a restart) reads it from there instead of scanning the
    table again (the entry planted here is what it gets), and a write to the table is a
    new version, whose c is computed afresh and replaces the older entry."""
    sql = "SELECT COUNT(*) FROM people WHERE age > 40"
    session = Session.open(engine, "zoe")
    run(session, sql)
    store = engine.ledger.backend
    assert store.read("SELECT table_name, bound FROM idp.unit_bounds") == [("people", 1)]
    run(session, sql.replace("40", "41"))  # the same version and statement of c: one entry
    assert store.read("SELECT count(*) FROM idp.unit_bounds")[0][0] == 1
    store.query("UPDATE idp.unit_bounds SET bound = 5")
    plan = analyze(parse_statements(sql)[0], engine.rules, Settings())
    again = Engine(engine.rules, engine.backend, store=store)
    try:
        assert again.statistics(plan)[0] == 5
        engine.backend.query("INSERT INTO people VALUES (7, 40, 1.0, 'north')")
        engine.backend.query("INSERT INTO people VALUES (7, 41, 2.0, 'north')")
        assert again.statistics(plan)[0] == 3
    finally:
        again.ledger.close()
    assert store.read("SELECT bound FROM idp.unit_bounds") == [(3,)]


# ENGINE_RULES with regions' key declared unique, so that people may join it.
keyed_regions_engine = engine_fixture(
    ENGINE_RULES.replace("[tables.regions]\npublic = true",
                         "[tables.regions]\npublic = true\nunique = [\"region\"]\n"
                         "[tables.regions.columns]\nregion = { type = \"text\" }"),
    lambda: {"people": people(), "odd": ODD, "regions": Table(
        {"region": ["north", "south"], "label": ["N", "S"]},
        {"region": "TEXT", "label": "TEXT"})}, name="keyed_regions_engine")


def test_unit_bound_is_shared_by_plans_that_differ_in_public_joins(keyed_regions_engine):
    """c is keyed by the data version of the tables it is read from alone (people's),
    not by the plan's, which names the public table joined too: a query joining regions
    gets the c its table's own query kept (the entry planted here), and the two keep one
    entry. Keyed by the plan's version, each such pair of plans read c again in turn and
    evicted the other's (TPC-H Q22's two stages: a GROUP BY unit every answer)."""
    engine = keyed_regions_engine
    alone = "SELECT COUNT(*) FROM people WHERE age > 40"
    joined = ("SELECT COUNT(*) FROM people p JOIN regions r ON p.region = r.region "
              "WHERE p.age > 40")
    run(Session.open(engine, "zoe"), alone)
    store = engine.ledger.backend
    store.query("UPDATE idp.unit_bounds SET bound = 5")
    again = Engine(engine.rules, engine.backend, store=store)
    try:
        for sql in (joined, alone, joined):
            plan = analyze(parse_statements(sql)[0], engine.rules, Settings())
            assert again.statistics(plan)[0] == 5
    finally:
        again.ledger.close()
    assert store.read("SELECT table_name, bound FROM idp.unit_bounds") == [("people", 5)]


def test_without_noise_every_aggregate_is_the_true_statistic(engine, no_noise):
    """The pushed-down statistics and the release agree with a direct computation."""
    data = people().columns
    scope = [(a, i, r) for a, i, r in zip(data["age"], data["income"], data["region"]) if a > 25]
    ages = sorted(a for a, _, _ in scope)
    incomes = sorted(i for _, i, _ in scope)
    (answer,) = run(Session.open(engine, "zoe"),
                    "SELECT COUNT(*), MEDIAN(income), PERCENTILE_DISC(0.9) WITHIN GROUP "
                    "(ORDER BY income), MAX(age), MIN(age), SUM(age), AVG(income) "
                    "FROM people WHERE age > 25")
    n = len(scope)
    winsorized_ages = sum(ages) - ages[0] - ages[-1] + ages[1] + ages[-2]
    winsorized_incomes = sum(incomes) - incomes[0] - incomes[-1] + incomes[1] + incomes[-2]
    assert answer.rows == [(
        n, incomes[(n + 1) // 2 - 1], incomes[-(-9 * n // 10) - 1], ages[-1], ages[0],
        pytest.approx(winsorized_ages), pytest.approx(winsorized_incomes / n),
    )]


def test_count_of_a_text_column_counts_its_values(engine, no_noise):
    """COUNT(col) of a text column counts its non-NULL values: only numbers are
    normalised (a text column compared with numeric bounds failed in the backend,
    after the debit)."""
    data = people().columns
    (answer,) = run(Session.open(engine, "zoe"), "SELECT COUNT(region) FROM people WHERE age > 40")
    assert answer.rows == [(sum(1 for a in data["age"] if a > 40),)]


def test_without_noise_group_by_answers_each_group(engine, no_noise):
    data = people().columns
    (answer,) = run(Session.open(engine, "zoe"),
                    "SELECT region, MEDIAN(age), MAX(income) FROM people GROUP BY region")
    for region, median, largest in answer.rows:
        ages = sorted(a for a, r in zip(data["age"], data["region"]) if r == region)
        incomes = [i for i, r in zip(data["income"], data["region"]) if r == region]
        assert median == ages[(len(ages) + 1) // 2 - 1]
        assert largest == max(incomes)


def test_a_global_budget_is_debited_with_the_analysts_all_or_nothing(engine):
    rules = parse_rules(ENGINE_RULES.replace("budget_per_analyst = 1.0",
                                           "budget_per_analyst = 1.0\nglobal_budget = 0.5")
                        .replace("[analysts.zoe]\nbudget = 100", "[analysts.zoe]\nbudget = 0.2"))
    engine = Engine(rules, engine.backend)
    alice, zoe = Session.open(engine, "alice"), Session.open(engine, "zoe")
    run(alice, "SELECT COUNT(*) FROM people WHERE age > 0")  # 0.3 of the global 0.5
    assert engine.ledger.remaining("alice") == Decimal("0.2")  # the global is the smaller
    with pytest.raises(BudgetExhausted) as refused:  # zoe's own 0.2 < 0.3
        run(zoe, "SELECT COUNT(*) FROM people WHERE age > 0")
    assert "your budget" in refused.value.message
    run(zoe, "SET idp.epsilon = 0.2")
    run(zoe, "SELECT COUNT(*) FROM people WHERE age > 0")  # the global: 0.5 - 0.3 - 0.2 = 0
    with pytest.raises(BudgetExhausted) as refused:  # a new query: the same one is cached
        run(alice, "SELECT COUNT(*) FROM people WHERE age > 30")
    assert "global budget" in refused.value.message
    budgets = {name: spent for name, _, spent, _ in engine.ledger.budgets()}
    assert budgets == {"(global)": Decimal("0.5"), "alice": Decimal("0.3"),
                       "zoe": Decimal("0.2")}  # the refusals took nothing from anyone
    statuses = [entry[9] for entry in engine.ledger.entries()]
    assert statuses == ["charged", "refused: budget", "charged", "refused: budget"]


def test_intervals_as_columns_show_the_reported_bound(engine):
    """``SET idp.intervals = on``: each answer followed by the ends of its 95% interval
    (here the owner opted into report_scale "rounded")."""
    session = Session.open(engine, "zoe")
    run(session, "SET idp.intervals = on")
    (answer,) = run(session, "SELECT region, COUNT(*) AS n, MEDIAN(income) FROM people "
                             "WHERE age > 0 GROUP BY region")
    assert answer.columns == ["region", "n", "n_ci95_low", "n_ci95_high", "median",
                              "median_ci95_low", "median_ci95_high"]
    for _, n, low, high, median, median_low, median_high in answer.rows:
        assert low < n < high and median_low < median < median_high
        assert high - n == pytest.approx(n - low)


@pytest.mark.postgres
def test_a_role_without_the_privileges_it_needs_stops_the_engine_naming_the_grant(
        postgres_url):
    """Issue 30 item 7: a proxy role without CREATE on the database got "the backend
    could not run this query" (58000) for every query, the cause in --debug only. Now
    the engine does not start, and says which GRANT to run: SELECT on a protected table
    first, then the right to create the schema idp."""
    from urllib.parse import urlsplit

    from proxy.errors import PrivilegeMissing

    with new_database(postgres_url) as url:
        load(url, {"people": people(10)})
        load_table(url, "odd", {"x": [0.5]}, {"x": "DOUBLE PRECISION"})
        parts = urlsplit(url)
        database = parts.path.lstrip("/")
        with psycopg.connect(url, autocommit=True) as con:
            con.execute("DROP ROLE IF EXISTS weak_proxy")
            con.execute("CREATE ROLE weak_proxy LOGIN PASSWORD 'weak'")
        weak = f"postgresql://weak_proxy:weak@{parts.hostname}:{parts.port}/{database}"
        backend = open_backend(weak)
        with pytest.raises(PrivilegeMissing) as refused:
            Engine(parse_rules(ENGINE_RULES), backend)
        assert str(refused.value) == ("the proxy's database role weak_proxy may not read the "
                                      "table people: as its owner, run GRANT SELECT ON "
                                      "people TO weak_proxy")
        with psycopg.connect(url, autocommit=True) as con:
            con.execute("GRANT SELECT ON people, odd TO weak_proxy")
        with pytest.raises(PrivilegeMissing) as refused:
            Engine(parse_rules(ENGINE_RULES), backend)
        assert refused.value.sqlstate == "42501" and str(refused.value).endswith(
            f"run GRANT CREATE ON DATABASE {database} TO weak_proxy, or CREATE SCHEMA idp "
            "AUTHORIZATION weak_proxy")
        with psycopg.connect(url, autocommit=True) as con:
            con.execute(f'GRANT CREATE ON DATABASE "{database}" TO weak_proxy')
        engine = Engine(parse_rules(ENGINE_RULES), backend)
        assert engine.ledger.remaining("zoe") == Decimal(0)  # started: no budget opened yet
        backend.close()
        with psycopg.connect(url, autocommit=True) as con:
            con.execute("DROP SCHEMA idp CASCADE")
            con.execute(f'REVOKE ALL ON DATABASE "{database}" FROM weak_proxy')
            con.execute("REVOKE ALL ON people, odd FROM weak_proxy")
            con.execute("DROP ROLE weak_proxy")


def test_reads_per_version_keep_each_key_s_latest_version_and_a_bounded_number_of_keys(
        monkeypatch):
    """``PerVersion``: a value is read once per (key, version); a newer version replaces
    the older one's value, which is read again if a snapshot still asks for it; past
    READS_KEPT keys the least recently used goes."""
    monkeypatch.setattr(engine_module, "READS_KEPT", 3)
    memo, reads = PerVersion(), []

    def read(key, version):
        return memo.get(key, version, lambda: reads.append((key, version)) or (key, version))

    assert [read("a", 1), read("a", 1), read("a", 2), read("a", 1)] == [
        ("a", 1), ("a", 1), ("a", 2), ("a", 1)]
    assert reads == [("a", 1), ("a", 2), ("a", 1)] and len(memo) == 1
    for key in "bcd":
        read(key, 1)
    assert len(memo) == 3 and memo.values() == [("b", 1), ("c", 1), ("d", 1)]
