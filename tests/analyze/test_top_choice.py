"""A step's largest group kept by comparing with its MAX (TPC-H Q15's form,
proxy/analyze/staged.py ``top_choice_plan``, proxy/privacy/top_choice.py), on both
backends: the group is chosen privately among the public table's keys and only its sum
released, the statement then runs over that row and the public table, in its own
columns and order, charged once; its neighbouring forms are refused before anything is
spent; the backend's L∞ ladder is the reference's. And the most common value,
``MODE() WITHIN GROUP (ORDER BY col)`` of a column with declared keys (a part of its
own, proxy/analyze/scoped_parts.py): the key of the largest released count, per group,
beside other aggregates; its other forms refused for free."""

from __future__ import annotations

import math
from decimal import Decimal

import pytest

from proxy.errors import BudgetExhausted
from proxy.privacy.contribution_bounds import rungs
from proxy.pushdown.contributions import contribution_ladders
from proxy.session import Session
from proxy.statistics import Contribution
from tests.factories import Table, engine_fixture
from tests.probes import refused_for_free

RULES = """
[defaults]
model = "dp"
epsilon_per_query = 1
budget_per_analyst = 100

[analysts.alice]

[analysts.poor]
budget = 0.5

[tables.sales]
privacy_unit = "customer"
max_rows_per_unit = 2
[tables.sales.columns]
customer = { type = "int" }
supplier = { type = "int" }
amount   = { type = "float", domain = [0, 100], resolution = 0.01 }
channel  = { type = "text", keys = ["phone", "shop", "web"] }
tier     = { type = "text", keys = ["gold", "silver"] }

[tables.suppliers]
public = true
unique = ["s_key"]
[tables.suppliers.columns]
s_key    = { type = "int" }
s_name   = { type = "text" }
s_region = { type = "int" }
"""
# 300 customers: 90 each to supplier 2, 10 each to one of 1, 3, 4, 5; supplier 6 sells
# nothing; a NULL supplier, a NaN and an infinite amount
CUSTOMERS = [*range(300), *range(300), 300, 301, 302]
SUPPLIERS = [*([2] * 300), *({0: 1, 1: 3, 2: 4, 3: 5}[c % 4] for c in range(300)), None, 2, 3]
AMOUNTS = [*([90.0] * 300), *([10.0] * 300), 50.0, math.nan, math.inf]
# the sales' channels: web 226, shop 151, phone 75, NULL 76 and 75 of "fax", a value the
# rules do not declare; gold customers (below 150) web 187 (then phone 38), silver shop 151
# (then web 39); the last three rows: NULL, shop, web
CHANNELS = [*("web" if c < 150 else "shop" for c in range(300)),
            *({0: "phone", 1: "fax", 2: None, 3: "web"}[c % 4] for c in range(300)),
            None, "shop", "web"]
TABLES = {
    "sales": Table({"customer": CUSTOMERS, "supplier": SUPPLIERS, "amount": AMOUNTS,
                    "channel": CHANNELS,
                    "tier": ["gold" if c < 150 else "silver" for c in CUSTOMERS]},
                   {"customer": "INTEGER", "supplier": "INTEGER",
                    "amount": "DOUBLE PRECISION", "channel": "TEXT", "tier": "TEXT"}),
    "suppliers": Table({"s_key": [1, 2, 3, 4, 5, 6],
                        "s_name": ["one", "two", "three", "four", "five", "six"],
                        "s_region": [1, 1, 2, 2, 3, 3]},
                       {"s_key": "INTEGER", "s_name": "TEXT", "s_region": "INTEGER"}),
}

engine = engine_fixture(RULES, TABLES)
# One per backend for the refusals, which compare the whole ledger before and after their
# own statement: the tables loaded once, not once per case.
refusing_engine = engine_fixture(RULES, TABLES, shared=True, name="refusing_engine")
zcdp = engine_fixture(RULES.replace("[defaults]", '[defaults]\naccounting = "zcdp"\n'
                                    "accounting_delta = 1e-6"), TABLES, name="zcdp")

STEP = ("WITH revenue AS (SELECT supplier AS supplier_no, {agg}(amount) AS total "
        "FROM sales WHERE amount > 0 GROUP BY supplier{more}) ")
Q15 = (STEP.format(agg="SUM", more="") +
       "SELECT s_key, s_name, total FROM suppliers, revenue WHERE s_key = supplier_no "
       "AND total = (SELECT MAX(total) FROM revenue) ORDER BY s_key")


def test_the_dominant_supplier_and_its_sum_are_answered_and_charged_once(engine):
    """Supplier 2 sells 27,000 against 750 at most for the others: chosen (any other
    has probability below e^−20), its sum released with Laplace noise (within four
    times its 95 % bound: failing with probability 20^−4), in the statement's columns
    and order; one ledger row of ε 1."""
    before = len(engine.ledger.entries("alice"))
    (answer,) = list(Session.open(engine, "alice").execute(Q15))
    assert answer.columns == ["s_key", "s_name", "total"]
    ((key, name, total),) = answer.rows
    assert (key, name) == (2, "two")
    bound = answer.privacy["ci95"]["total"][0]
    assert 0 < bound < 3_000 and abs(total - 27_000) <= 4 * bound, (total, bound)
    entries = engine.ledger.entries("alice")[before:]
    assert [entry[6] for entry in entries] == [Decimal(1)]
    assert answer.privacy["epsilon_spent"] == 1.0
    assert any("chosen privately" in note for note in answer.privacy["notes"])


@pytest.mark.parametrize("sql,fragment", [
    (STEP.format(agg="AVG", more="") + "SELECT s_key, total FROM suppliers, revenue WHERE "
     "s_key = supplier_no AND total = (SELECT MAX(total) FROM revenue)", "a SUM over"),
    (STEP.format(agg="SUM", more="") + "SELECT s_key, total FROM suppliers LEFT JOIN revenue "
     "ON s_key = supplier_no WHERE total = (SELECT MAX(total) FROM revenue)", "inner-joined"),
    (STEP.format(agg="SUM", more="") + "SELECT s_key, total FROM suppliers, revenue WHERE "
     "s_region = supplier_no AND total = (SELECT MAX(total) FROM revenue)", "unique key"),
    (STEP.format(agg="SUM", more="") + "SELECT s_key, total FROM suppliers, revenue WHERE "
     "s_key = supplier_no AND s_key > 1 AND total = (SELECT MAX(total) FROM revenue)",
     "unique key"),
    (STEP.format(agg="SUM", more=", customer").replace("AS supplier_no,",
                                                       "AS supplier_no, customer,")
     + "SELECT s_key, total FROM suppliers, revenue WHERE s_key = supplier_no AND total = "
       "(SELECT MAX(total) FROM revenue)", "grouped by one column"),
    (STEP.format(agg="SUM", more="") + "SELECT s_key, total FROM suppliers, revenue, sales "
     "WHERE s_key = supplier_no AND total = (SELECT MAX(total) FROM revenue)",
     "one public table"),
])
def test_neighbouring_forms_are_refused_for_free(refusing_engine, sql, fragment):
    refused_for_free(refusing_engine, sql, "0A000", fragment)


def test_gaussian_noise_is_refused_for_free(zcdp):
    """The choice and its value are Laplace's (the zcdp accountant charges their ε²/2):
    a SUM with Gaussian noise asked is refused before the debit."""
    refused_for_free(zcdp, "SET idp.noise = 'gaussian'; " + Q15, "0A000",
                     "keeping the largest group of a step is answered for a SUM")


def test_a_budget_that_cannot_pay_refuses_before_the_choice(engine):
    """One ``refused: budget`` row, nothing spent."""
    before = engine.ledger.entries(), engine.ledger.budgets()
    with pytest.raises(BudgetExhausted):
        list(Session.open(engine, "poor").execute(Q15))
    assert [e[9] for e in engine.ledger.entries()[len(before[0]):]] == ["refused: budget"]
    assert engine.ledger.budgets() == before[1]


def test_the_backend_clips_each_group_and_counts_units_by_their_largest(engine):
    """The release's ladder (L∞, ``largest``): per supplier of the public table, each
    customer's sum in scope clipped to ±B_k; beyond B_k, the customers whose largest sum
    in one supplier exceeds it, each counted once (NaN out of scope, ∞ at 100)."""
    (_, staged), = Session.open(engine, "alice").check(Q15)
    (_, plan), = staged.stages
    contribution = Contribution("amount")
    ladder = rungs(contribution, plan.table.columns["amount"], 2)
    with engine.view(plan) as view:
        found = contribution_ladders(view.plan, (contribution,), (ladder,),
                                     engine.backend.capabilities, 2, view.tx.execute,
                                     frozenset({contribution}), largest=True)
    sums: dict[tuple[int, int], float] = {}
    for customer, supplier, amount in zip(CUSTOMERS, SUPPLIERS, AMOUNTS):
        if supplier is not None and not math.isnan(amount):
            sums[supplier, customer] = sums.get((supplier, customer), 0.0) + min(amount, 100)
    largest: dict[int, float] = {}
    for (_, customer), value in sums.items():
        largest[customer] = max(largest.get(customer, 0.0), value)
    for k, bound in enumerate(ladder):
        assert sum(found[key][contribution].beyond[k] for key in found) == sum(
            1 for value in largest.values() if value > bound)
        for key in found:
            mine = [min(value, bound) for (s, _), value in sums.items() if (s,) == key]
            assert found[key][contribution].clipped[k] == pytest.approx(
                sum(mine), abs=1e-6 * len(mine))  # each rounded to 10⁻⁶ (exact_sum)


def _spent(engine, sql: str) -> tuple[list, list]:
    """(the answer's rows, the ε of the ledger rows its statement added)."""
    before = len(engine.ledger.entries("alice"))
    (answer,) = list(Session.open(engine, "alice").execute(sql))
    return answer, [entry[6] for entry in engine.ledger.entries("alice")[before:]]


def test_mode_is_the_declared_key_of_the_largest_count(refusing_engine):
    """web (226 rows) against shop (151); per tier web (187 against 38) and shop (151
    against 39): with Laplace noise of scale a few units at ε 1, another key wins with
    probability below e^−15, so one draw is the test. One release (ε 1) for MODE, in
    PostgreSQL's column name; beside COUNT(*) a second release (each charged as if sent
    alone, scoped_parts: one ledger row of their sum), grouped or not."""
    answer, spent = _spent(refusing_engine,
                           "SELECT MODE() WITHIN GROUP (ORDER BY channel) FROM sales")
    assert (answer.columns, answer.rows, spent) == (["mode"], [("web",)], [Decimal(1)])
    answer, spent = _spent(refusing_engine, "SELECT tier, MODE() WITHIN GROUP (ORDER BY "
                           "channel) AS m FROM sales GROUP BY tier ORDER BY 1")
    assert (answer.columns, answer.rows, spent) == (
        ["tier", "m"], [("gold", "web"), ("silver", "shop")], [Decimal(1)])
    answer, spent = _spent(refusing_engine, "SELECT tier, COUNT(*) AS n, MODE() WITHIN GROUP "
                           "(ORDER BY channel) FROM sales WHERE customer < 300 GROUP BY 1 "
                           "ORDER BY 1")
    assert [(tier, mode) for tier, _, mode in answer.rows] == [("gold", "web"),
                                                              ("silver", "shop")]
    assert all(abs(n - 300) < 40 for _, n, _ in answer.rows), answer.rows
    assert answer.columns == ["tier", "n", "mode"] and spent == [Decimal(2)]  # one row


def test_mode_ties_go_to_the_first_key_and_null_is_no_candidate(refusing_engine, no_noise):
    """With the noise off the counts are exact: the last three rows (NULL, shop, web)
    tie shop and web at 1, and as PostgreSQL's mode the first key in the MODE's order
    wins (shop; web under DESC), NULL being no value. A value the rules do not declare
    is no candidate: where the WHERE admits no declared key the MODE is NULL beside the
    COUNT's one row (PostgreSQL answers (75, 'fax'); a MODE alone: no row)."""
    tie = "SELECT MODE() WITHIN GROUP (ORDER BY channel{}) FROM sales WHERE customer >= 300"
    assert _spent(refusing_engine, tie.format(""))[0].rows == [("shop",)]
    assert _spent(refusing_engine, tie.format(" DESC"))[0].rows == [("web",)]
    answer, _ = _spent(refusing_engine, "SELECT COUNT(*), MODE() WITHIN GROUP (ORDER BY "
                       "channel) FROM sales WHERE channel = 'fax'")
    assert answer.rows == [(75, None)]


@pytest.mark.parametrize("sql,sqlstate,fragment", [
    ("SELECT MODE() WITHIN GROUP (ORDER BY supplier) FROM sales", "0A000",
     "needs a column whose keys the rules declare (its candidates must be public) "
     "(here: channel, tier)"),
    ("SELECT s_key, MODE() WITHIN GROUP (ORDER BY s_name) FROM sales JOIN suppliers "
     "ON supplier = s_key GROUP BY s_key", "0A000", "needs a column whose keys"),
    ("SELECT MODE() WITHIN GROUP (ORDER BY channel) FILTER (WHERE amount > 1) FROM sales",
     "0A000", "put the condition in the WHERE clause"),
    ("SELECT MODE() WITHIN GROUP (ORDER BY channel, tier) FROM sales", "0A000",
     "takes one column"),
    ("SELECT MODE() WITHIN GROUP (ORDER BY channel) OVER () FROM sales", "0A000", "OVER"),
    ("SELECT MODE() WITHIN GROUP (ORDER BY nothing) FROM sales", "42703", "nothing"),
    ("SELECT MODE() WITHIN GROUP (ORDER BY channel) FROM sales WHERE amount > "
     "(SELECT AVG(amount) FROM sales)", "0A000", "ask the subquery first"),
    ("SELECT COUNT(*) FROM sales UNION ALL SELECT MODE() WITHIN GROUP (ORDER BY channel) "
     "FROM sales", "0A000", "each UNION query must be one aggregate query"),
])
def test_mode_of_other_forms_is_refused_for_free(refusing_engine, sql, sqlstate, fragment):
    refused_for_free(refusing_engine, sql, sqlstate, fragment)
