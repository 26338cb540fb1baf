"""Issue 18, item 4: GROUP BY a column without declared keys, keyed by a partition
selection, through the engine on both backends: the common keys are answered and the
keys of one person are not, the answer's metadata and notice carry δ, the ledger's row
stores it (a repeat from the cache: none), the cap and the model switch, and every
refusal (no δ in the rules, a unit table without ``max_rows_per_unit``, a float column)
in one line, spending nothing."""

from __future__ import annotations

from decimal import Decimal

import pytest

from proxy.engine import Engine
from proxy.rules import parse_rules
from proxy.session import Session
from tests.factories import Table, engine_fixture
from tests.probes import refused_for_free

pytestmark = pytest.mark.postgres

RULES = """
[defaults]
budget_per_analyst = 100
max_groups = 4
{delta}

[analysts.alice]

[tables.visits]
privacy_unit = "person_id"
max_rows_per_unit = 2
[tables.visits.columns]
person_id = {{ type = "int" }}
city      = {{ type = "text" }}
day       = {{ type = "date" }}
kind      = {{ type = "text", keys = ["w", "x", "y", "z"] }}
band      = {{ type = "text", keys = ["lo", "hi"] }}
cost      = {{ type = "float", domain = [0, 100] }}
stay      = {{ type = "int", domain = [0, 10] }}

[tables.claims]
privacy_unit = "person_id"
[tables.claims.columns]
person_id = {{ type = "int" }}
city      = {{ type = "text" }}

[tables.events]
[tables.events.columns]
city  = {{ type = "text" }}
stay  = {{ type = "int" }}
"""
DELTA = "delta = 1e-9"
# 600 people in paris, 500 in lyon, two visits each; 30 people alone in a city of their own
PEOPLE = [(i, "paris") for i in range(600)] + [(600 + i, "lyon") for i in range(500)] + \
    [(2000 + i, f"hamlet{i}") for i in range(30)]
VISITS = {"person_id": [p for p, _ in PEOPLE for _ in (0, 1)],
          "city": [c for _, c in PEOPLE for _ in (0, 1)],
          "day": [None] * (2 * len(PEOPLE)),
          "kind": ["wxyz"[(p + v) % 4] for p, _ in PEOPLE for v in (0, 1)],
          "band": [("lo", "hi")[p % 2] for p, _ in PEOPLE for _ in (0, 1)],
          "cost": [float(p % 97) for p, _ in PEOPLE for _ in (0, 1)],
          "stay": [p % 11 for p, _ in PEOPLE for _ in (0, 1)]}
COMMON = ("lyon", "paris")


def _tables() -> dict[str, Table]:
    # stay stored as floats in events, NaN and ±inf among them: never keys, never an error
    stays = [float(v) for v in VISITS["stay"][:-600]] + [float("nan"), float("inf")] * 300
    return {"visits": Table(VISITS, {"person_id": "INTEGER", "city": "TEXT", "day": "DATE",
                                     "kind": "TEXT", "band": "TEXT",
                                     "cost": "DOUBLE PRECISION", "stay": "INTEGER"}),
            "claims": Table({"person_id": [1], "city": ["paris"]},
                            {"person_id": "INTEGER", "city": "TEXT"}),
            "events": Table({"city": VISITS["city"], "stay": stays},
                            {"city": "TEXT", "stay": "DOUBLE PRECISION"})}


# One engine per backend for the module (its tests read the tables and look at their
# own ledger rows).
engine = engine_fixture(parse_rules(RULES.format(delta=DELTA), "selection.toml"), _tables,
                        shared=True)


def ask(engine, sql, session=None):
    session = session or Session.open(engine, "alice")
    (answer,) = list(session.execute(sql))
    return answer, engine.ledger.entries("alice")[-1]


def test_the_common_keys_are_answered_and_delta_is_shown_and_recorded(engine):
    """T = 1 + ⌈8·ln(2/((1 + α)·10⁻⁹))⌉ = 168 at ε = 0.5 for the keys: paris (600
    people) and lyon (500) pass whatever the noise, a person alone in a town passes with
    probability about 10⁻⁹."""
    answer, row = ask(engine, "/*+ epsilon=1 */ SELECT city, COUNT(*) AS n FROM visits "
                              "GROUP BY city ORDER BY city")
    assert [city for city, _ in answer.rows] == list(COMMON)
    assert abs(answer.rows[0][1] - 1000) < 100 and abs(answer.rows[1][1] - 1200) < 100
    privacy = answer.privacy
    assert privacy["delta"] == 1e-9 and privacy["epsilon_spent"] == 1
    assert "partition selection" in privacy["mechanism"]
    assert "spent epsilon 1 and delta 1e-09" in answer.notice
    assert "epsilon 0.5 of the 1 spent" in answer.notice and "reaches 168" in answer.notice
    assert row[6] == 1 and row[7] == 1e-9 and row[9] == "charged"
    assert "partition selection, threshold 168" in row[5]
    again, repeat = ask(engine, "/*+ epsilon=1 */ SELECT city, COUNT(*) AS n FROM visits "
                                "GROUP BY city ORDER BY city")
    assert again.rows == answer.rows and again.privacy["delta"] == 0
    assert repeat[6] == 0 and repeat[7] == 0 and repeat[9] == "served from cache"


def test_every_aggregate_with_where_and_a_declared_term(engine):
    """Keys selected among the rows in scope and in the other term's keys; the answers
    of the aggregates are over the released keys only, with half the ε each."""
    answer, row = ask(engine, "/*+ epsilon=1 */ SELECT city, band, MEDIAN(cost), SUM(stay) "
                              "FROM visits WHERE stay < 11 GROUP BY city, band")
    assert {city for city, *_ in answer.rows} == set(COMMON)
    assert len(answer.rows) == 4 and row[6] == 2 and row[7] == 1e-9


def test_the_cap_keeps_the_largest_counts(engine):
    """max_groups = 4 with four declared kinds leaves one city: paris, the most people."""
    answer, _ = ask(engine, "/*+ epsilon=1 */ SELECT kind, city, COUNT(*) FROM visits "
                            "GROUP BY kind, city")
    assert {city for _, city, _ in answer.rows} == {"paris"} and len(answer.rows) == 4


def test_dp_model_row_level_and_no_key_released(engine):
    session = Session.open(engine, "alice")
    list(session.execute("SET idp.model = 'dp'"))
    answer, row = ask(engine, "/*+ epsilon=1 */ SELECT city, AVG(cost) FROM visits "
                              "GROUP BY city", session)
    assert {city for city, _ in answer.rows} == set(COMMON) and row[4] == "dp"
    answer, row = ask(engine, "/*+ epsilon=1 */ SELECT city, stay, COUNT(*) FROM events "
                              "GROUP BY city, stay")
    assert {city for city, *_ in answer.rows} <= set(COMMON) and row[7] == 1e-9
    answer, _ = ask(engine, "/*+ epsilon=1 */ SELECT stay, COUNT(*) FROM events GROUP BY stay")
    assert {stay for stay, _ in answer.rows} <= set(range(11)) and len(answer.rows) == 4
    assert all(type(stay) is int for stay, _ in answer.rows)  # bigint, as declared
    answer, row = ask(engine, "/*+ epsilon=1 */ SELECT w.city, COUNT(*) FROM visits v "
                              "JOIN visits w ON v.person_id = w.person_id GROUP BY w.city")
    # k = 2·2: T = 345, scale 16; lyon's 500 people miss it with probability 3·10⁻⁵ (400: 2 %)
    assert {city for city, _ in answer.rows} == set(COMMON)
    assert "threshold 345" in row[5]
    answer, row = ask(engine, "SELECT city, COUNT(*) FROM visits WHERE person_id >= 2000 "
                              "GROUP BY city")
    assert answer.rows == [] and row[6] == Decimal("0.1") and row[7] == 1e-9 and row[9] == "charged"


@pytest.mark.parametrize("model", ["idp", "dp"])
def test_drawn_aggregates_where_no_key_is_released(engine, model):
    """Percentiles, MAX and MIN drawn by the exponential mechanism, and clipped sums and
    spreads, over keys of which the selection released none (30 towns of one person each: each passes with
    probability about 10⁻⁹) answer no row, charged as the COUNT above; the draw divided
    each group's ε by the groups a unit touches, none, and failed after the debit
    (XX000, ZeroDivisionError: the review of 2026-11-30)."""
    session = Session.open(engine, "alice")
    list(session.execute(f"SET idp.model = '{model}'"))
    answer, row = ask(engine, "SELECT city, MEDIAN(cost), MAX(stay), MIN(cost), "
                              "PERCENTILE_DISC(0.9) WITHIN GROUP (ORDER BY cost) FROM visits "
                              "WHERE person_id >= 2000 GROUP BY city", session)
    assert answer.rows == [] and row[4] == model and row[9] == "charged"
    assert row[6] == Decimal("0.4") and row[7] == 1e-9
    # sums clipped at a drawn bound and spreads around drawn centres (two visits a
    # person: clipped per unit) divided alike
    answer, row = ask(engine, "SELECT city, SUM(cost), AVG(stay), STDDEV(cost), "
                              "CORR(cost, stay) FROM visits WHERE person_id >= 2000 "
                              "GROUP BY ROLLUP(city)", session)
    assert [r[0] for r in answer.rows] == [None] and row[9] == "charged"


@pytest.mark.parametrize("sql,fragment", [
    ("SELECT city, COUNT(*) FROM claims GROUP BY city", "needs max_rows_per_unit"),
    (("SELECT v.city, COUNT(*) FROM visits v JOIN claims c ON v.person_id = c.person_id "
      "GROUP BY v.city"), "of every protected table it reads"),
    ("SELECT cost, COUNT(*) FROM visits GROUP BY cost", "not float"),
    ("SELECT day, COUNT(*) FROM visits GROUP BY day", "date_trunc('day', day)"),
])
def test_refusals_spend_nothing(engine, sql, fragment):
    refused_for_free(engine, sql, "0A000", fragment)


def test_without_delta_it_is_refused_as_before(engine):
    strict = Engine(parse_rules(RULES.format(delta=""), "strict.toml"), engine.backend)
    refused_for_free(strict, "SELECT city, COUNT(*) FROM visits GROUP BY city", "0A000",
                     "needs a public list of keys in the rules")
    refused_for_free(strict, "SELECT day, COUNT(*) FROM visits GROUP BY day", "0A000",
                     "[defaults] delta")
