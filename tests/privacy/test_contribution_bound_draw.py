"""Where the automatic clipping bound lands on heavy-tailed data (docs/privacy.md §3.14,
"The bound"): AVG(income) per region over lognormal incomes (the demo's: about 49,500
on average, declared [0, 10,000,000]) came back 30 % off in some groups of the held-out
BI corpus, both ways: the old draw (utility −β_k, a prior of ½ a rung) left about a
fifth of its weight on rungs 4–32 times above the largest income, whose noise is of the
domain's scale. The draw's exact distribution is computed here from the ladder the
backend returns and the weights the engine samples (``rung_weights``), so the failure
probability is the stated one, not a sampled estimate."""

from __future__ import annotations

import functools
import math
from fractions import Fraction

import numpy as np
import pytest

from proxy.privacy import noisy_answers
from proxy.privacy.contribution_bounds import BOUND_SHARE, laddered, rung_weights, rungs
from proxy.privacy.mechanisms import Noisy
from proxy.privacy.sensitivity import group_share
from proxy.pushdown.contributions import contribution_ladders
from proxy.session import Session
from proxy.statistics import Contribution
from tests.factories import Table, engine_fixture
from tests.probes import run

REGIONS = ["east", "north", "south", "west"]
FAILURE = 0.01  # the stated failure probability
WITHIN = 3  # times the best rung's error: the clipped mass plus the noise's half-width


@functools.cache
def people() -> Table:
    """6,000 people, one row each, incomes lognormal as the demo's (a heavy right tail:
    the largest about 9 times the mean), regions of 35, 30, 20 and 15 %, a few raw
    values (NaN, −inf, below the domain) and a NULL. None above it: one income of
    10,000,000 among 2,000 is a tenth of their sum, which any useful bound clips."""
    rng = np.random.default_rng(11)
    income = [float(x) for x in np.round(rng.lognormal(10.6, 0.65, 6_000), 2)]
    for i, raw in enumerate([math.nan, -math.inf, -1e300, -5.0, None]):
        income[i * 11] = raw
    region = [str(r) for r in rng.choice(REGIONS, 6_000, p=[0.2, 0.35, 0.3, 0.15])]
    return Table({"person": list(range(6_000)), "region": region, "income": income},
                 {"person": "INTEGER", "region": "TEXT", "income": "DOUBLE PRECISION"})


RULES = f"""
[defaults]
model = "idp"
epsilon_per_query = 1
budget_per_analyst = 100000

[analysts.zoe]

[tables.people]
privacy_unit = "person"
max_rows_per_unit = 1
[tables.people.columns]
person = {{ type = "int" }}
region = {{ type = "text", keys = {REGIONS!r} }}
income = {{ type = "float", domain = [0, 10000000], resolution = 0.01 }}
""".replace("'", '"')

engine = engine_fixture(RULES, lambda: {"people": people()}, shared=True)
AVERAGE = "SELECT region, AVG(income) FROM people GROUP BY region"


def truth() -> dict[str, tuple[float, int]]:
    """(sum, count) of the normalised incomes per region (NaN and NULL out, clamped)."""
    found: dict[str, tuple[float, int]] = {}
    for region, income in zip(people().columns["region"], people().columns["income"]):
        if income is not None and not math.isnan(income):
            total, count = found.get(region, (0.0, 0))
            found[region] = (total + min(max(income, 0.0), 1e7), count + 1)
    return found


def bad_mass(weights, ladder, clipped, true_sum: float, epsilon_s: Fraction) -> float:
    """P(the drawn rung's error — its clipped mass plus its noise's 97.5 % half-width
    (AVG's sum: one of two parts at once) — exceeds WITHIN times the best rung's) under
    ``weights``."""
    logs = [-float(x) for _, x in weights]
    top = max(logs)
    odds = [math.exp(x - top) for x in logs]
    error = [true_sum - c + bound / float(epsilon_s) * math.log(1 / 0.025)
             for bound, c in zip(ladder, clipped)]
    return sum(p for p, e in zip(odds, error) if e > WITHIN * min(error)) / sum(odds)


def test_the_bound_is_near_the_data_with_the_stated_failure_probability(engine):
    """In every region (900 to 2,100 people, ε 1 a query, each group's AVG half of it,
    its sum three quarters of that, a third of the sum's for the bound), the drawn
    rung's error (clipped mass plus the noise's half-width) is within 3 times the best
    rung's with probability ≥ 99 %, exactly (missed with probability 0.12–0.18 %; within
    twice, 0.3–1.2 %). The old rule (no evidence term, ½ a rung) missed it with
    probability 28–34 % (twice: 50–60 %)."""
    session = Session.open(engine, "zoe")
    (_, plan), = session.check(AVERAGE)
    assert laddered(plan) == (Contribution("income"),)
    ladder = rungs(Contribution("income"), plan.table.columns["income"], 1)
    with engine.view(plan) as view:
        groups = contribution_ladders(plan, (Contribution("income"),), (ladder,),
                                      engine.backend.capabilities, None, view.tx.execute)
    part = plan.aggregate_loss * Fraction(1, group_share(plan, 1))
    of_bound, of_sum = part.split(1, 3)[1].split(BOUND_SHARE, 1 - BOUND_SHARE)
    true = truth()
    for region in REGIONS:
        found = groups[region,][Contribution("income")]
        assert found.clipped[-1] == pytest.approx(true[region][0], rel=1e-9)
        now = bad_mass(rung_weights(found.beyond, of_bound.epsilon, 1), ladder,
                       found.clipped, true[region][0], of_sum.epsilon)
        old = bad_mass(rung_weights(found.beyond, of_bound.epsilon, 1, Fraction(1, 2),
                                    evidence=False),
                       ladder, found.clipped, true[region][0], of_sum.epsilon)
        assert now <= FAILURE < old, (region, now, old)


def test_averages_per_region_are_within_a_few_percent(engine):
    """Over 16 fresh releases of AVG(income) per region at ε 1 (the corpus's statement),
    at most 6 of the 64 answers are off by more than 10 % (each about 1 % likely: the
    noise of the rung near the largest incomes, up to 4 % a standard deviation in the
    smallest region) and the median error is within 3 % (the old draw: about one answer
    in six beyond 10 %). Measured over 2,336 releases: 0.75 % of the answers beyond 10 %
    (2 % in the smallest region), the median of 32 answers 1.55 % ± 0.35 %; 8 releases
    with at most 3 of 32 beyond failed with probability about 10⁻⁴ (resampling those
    releases), 16 with at most 6 of 64 in none of 200,000 resamples."""
    session = Session.open(engine, "zoe")
    true = truth()
    errors = []
    for i in range(16):
        answer, = run(session, f"SELECT region, AVG(income) FROM people "
                               f"WHERE income > {-1 - i} GROUP BY region")
        for region, average in answer.rows:
            total, count = true[region]
            errors.append(abs(average / (total / count) - 1))
    assert sum(e > 0.10 for e in errors) <= 6 and np.median(errors) < 0.03, sorted(errors)


@pytest.mark.parametrize("drawn", ["lowest", "top"])
def test_an_average_near_the_bound_drawn_for_it_says_it_was_clipped(engine, monkeypatch,
                                                                    drawn):
    """Drawn at the ladder's lowest rung (a few units of income), every region's AVG is
    that rung, its values nearly all clipped: the answer says the true average may be far
    higher (post-processing of the average and of the drawn bound). Drawn at the top
    rung (nothing clipped), no such note. The sums and counts here are exact, so only
    the rung decides."""
    def at_rung(ladder, *args, **kwargs):
        k = 0 if drawn == "lowest" else len(ladder.rungs) - 1
        return Noisy(ladder.clipped[k], 0.0, "none"), k
    monkeypatch.setattr(noisy_answers, "clipped_sum", at_rung)
    monkeypatch.setattr(noisy_answers, "laplace_integer",
                        lambda true, *args, **kwargs: Noisy(true, 0.0, "none"))
    answer, = run(Session.open(engine, "zoe"),  # named apart: not another test's replay
                  f"SELECT region, AVG(income) AS drawn_{drawn} FROM people GROUP BY region")
    notes = answer.privacy["notes"]
    assert (noisy_answers.NEAR_BOUND_NOTE in notes) == (drawn == "lowest"), notes
    # the foot of the ladder, 2⁻²⁰ of the top: whatever the aggregate, it says so
    assert (noisy_answers.FOOT_NOTE in notes) == (drawn == "lowest"), notes
    assert any(note.startswith("AVG is a noisy SUM") for note in notes), notes
    averages = [average for _, average in answer.rows]
    if drawn == "top":
        true = truth()
        assert averages == pytest.approx([true[r][0] / true[r][1] for r, _ in answer.rows])
    else:
        assert max(averages) < 100, averages
