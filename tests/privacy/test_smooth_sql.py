"""DP with the smooth sensitivity through SQL on both backends: the settings, the
refusals (nothing spent) and the released law, checked against the smooth sensitivity
computed here from the loaded values (KS test at significance 1e-4, as test_samplers)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from proxy.errors import BadSetting, NotSupported
from proxy.privacy import smooth_noise
from proxy.privacy.smooth_sensitivity import (
    smooth_sensitivity_of_max,
    smooth_sensitivity_of_percentile,
)
from proxy.session import Session
from proxy.statistics import percentile_rank
from tests.factories import Table, engine_fixture
from tests.privacy.laws import ALPHA, smooth_cdf
from tests.privacy.reference import by_hand
from tests.probes import run

pytestmark = pytest.mark.postgres

RULES = """
[defaults]
answer_cache = false

[analysts.zoe]
budget = 1000

[tables.scores]
privacy_unit = "id"
max_rows_per_unit = 1
[tables.scores.columns]
score = { type = "float", domain = [0, 100] }
kind = { type = "text", keys = ["a", "b"] }
"""

SCORES = [float(v) for v in np.round(np.random.default_rng(5).normal(50, 10, 301), 3)]


TABLES = {"scores": Table(
    {"id": list(range(301)), "score": SCORES, "kind": ["a", "b"] * 150 + ["a"]},
    {"id": "INTEGER", "score": "DOUBLE PRECISION", "kind": "TEXT"})}
engine = engine_fixture(RULES, TABLES)
# One per backend for the refusals (which compare the whole ledger before and after their
# own statement) and the bad settings (a session's SET, refused): the table loaded once,
# not once per case.
refusing_engine = engine_fixture(RULES, TABLES, shared=True, name="refusing_engine")


def _noise_law_check(engine, sql, true, sensitivity, epsilon, gamma, count=120):
    session = Session.open(engine, "zoe")
    run(session, f"SET idp.model = 'dp'; SET idp.sensitivity = 'smooth'; "
                 f"SET idp.epsilon = {epsilon}; SET idp.gamma = {gamma}")
    scale = sensitivity / smooth_noise.admissible(epsilon, gamma)[0]
    draws = []
    for _ in range(count):
        (answer,) = run(session, sql)
        assert answer.privacy["ci95"] == {answer.columns[0]: [None]}
        assert "smooth sensitivity" in answer.privacy["mechanism"]
        draws.append(answer.rows[0][0])
    # the answer is clamped to [0, 100]: compare the law where it is not
    inside = [(v - true) / scale for v in draws if 0 < v < 100]
    low, high = (0 - true) / scale, (100 - true) / scale
    cdf = smooth_cdf(gamma)
    mass = cdf(high) - cdf(low)

    def clipped_cdf(z):
        return (np.vectorize(cdf)(z) - cdf(low)) / mass
    assert stats.kstest(inside, clipped_cdf).pvalue > ALPHA


def test_the_median_follows_the_smooth_law(engine):
    values = sorted(SCORES)
    rank = percentile_rank(len(values), Fraction(1, 2))
    epsilon, gamma = 1.0, 3.0
    beta = smooth_noise.admissible(epsilon, gamma)[1]
    sensitivity = by_hand(smooth_sensitivity_of_percentile(len(values), rank, 1, beta, 0, 100),
                          values)
    _noise_law_check(engine, "SELECT MEDIAN(score) FROM scores", values[rank - 1],
                     sensitivity, epsilon, gamma)


def test_the_maximum_follows_the_smooth_law(engine):
    values = sorted(SCORES)
    epsilon, gamma = 1.0, 2.0
    beta = smooth_noise.admissible(epsilon, gamma)[1]
    sensitivity = by_hand(smooth_sensitivity_of_max(len(values), 1, beta, 0, 100), values)
    _noise_law_check(engine, "SELECT MAX(score) FROM scores", values[-1], sensitivity,
                     epsilon, gamma)


@pytest.mark.parametrize("settings,sql,error", [
    ("SET idp.sensitivity = 'smooth'", "SELECT MEDIAN(score) FROM scores", BadSetting),
    ("SET idp.model = 'dp'; SET idp.sensitivity = 'smooth'",
     "SELECT kind, MEDIAN(score) FROM scores GROUP BY kind", NotSupported),
])
def test_refusals_spend_nothing(refusing_engine, settings, sql, error):
    engine = refusing_engine
    session = Session.open(engine, "zoe")
    run(session, settings)
    before = engine.ledger.entries(), engine.ledger.budgets()
    with pytest.raises(error):
        run(session, sql)
    assert (engine.ledger.entries(), engine.ledger.budgets()) == before


@pytest.mark.parametrize("value", ["1", "0.5", "abc", "1000"])
def test_gamma_must_be_above_one(refusing_engine, value):
    with pytest.raises(BadSetting):
        run(Session.open(refusing_engine, "zoe"), f"SET idp.gamma = {value!r}")


def test_show_gamma_and_the_ledger_names_the_mechanism(engine):
    session = Session.open(engine, "zoe")
    assert run(session, "SHOW idp.gamma")[0].rows == [("3",)]
    run(session, "SET idp.model = 'dp'; SET idp.sensitivity = 'smooth'; SET idp.gamma = 2.5")
    (answer,) = run(session, "SELECT MIN(score), COUNT(*) FROM scores")
    assert answer.privacy["ci95"]["count"] == [0.0]
    assert engine.ledger.entries("zoe")[-1][5] == "dp smooth gamma=2.5: min,public count"
