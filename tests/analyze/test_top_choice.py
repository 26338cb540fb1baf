"""A step's largest group kept by comparing with its MAX (TPC-H Q15's form,
proxy/analyze/staged.py ``top_choice_plan``, proxy/privacy/top_choice.py), on both
backends: the group is chosen privately among the public table's keys and only its sum
released, the statement then runs over that row and the public table, in its own
columns and order, charged once; its neighbouring forms are refused before anything is
spent; the backend's L∞ ladder is the reference's."""

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
TABLES = {
    "sales": Table({"customer": CUSTOMERS, "supplier": SUPPLIERS, "amount": AMOUNTS},
                   {"customer": "INTEGER", "supplier": "INTEGER",
                    "amount": "DOUBLE PRECISION"}),
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
