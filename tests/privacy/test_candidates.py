"""The exponential mechanism's candidates (privacy/inverse_sensitivity.candidate_grid,
docs/privacy.md §5.3): every multiple of Λ within 256·Λ of the domain's point nearest 0,
then 128 per octave of the distance from it, so that an empty stretch of a wide domain
holds logarithmically many candidates, not linearly many. Before (issue 32, held-out
corpus): a uniform grid of 12.8 million candidates on cost's [0, 100,000] by cents, whose
empty part above the data outweighed the few candidates near a p95 of 750 values
(answers of 30,000–68,000 against about 2,000 in 7–10 of 24 months)."""

from __future__ import annotations

import bisect
import math
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from proxy.analyze import analyze, parse_statements
from proxy.privacy.inverse_sensitivity import candidate_grid, exponent, extreme_offset
from proxy.settings import Settings
from proxy.statistics import percentile_rank
from tests.factories import Table, engine_fixture
from tests.privacy.laws import ALPHA, SeededSource, log_probabilities, pooled
from tests.privacy.reference import instance_draws

DOMAINS = [(0, 100_000, 0.01, False), (0, 10_000_000, 0.01, False), (0, 120, 1.0, True),
           (-50, 50, 1.0, True), (5, 1_000_000, 1.0, True), (-1_000_000, -5, 1.0, True),
           (0, 10, 0.25, False), (1e-200, 1, 1e-3, False), (-3.7, 1e9, 0.5, False)]


@pytest.mark.parametrize("domain", DOMAINS, ids=str)
def test_candidates_are_geometric_beyond_the_resolution(domain):
    """Increasing, inside [L, U], neighbours at most Λ or 2⁻⁷ of their distance from the
    origin apart (the one nearer it), every multiple of Λ near the origin; ``below`` and
    ``at_or_below`` count them as a sorted list does, at candidates and between them."""
    grid = candidate_grid(*domain)
    lower, upper = domain[:2]
    values = [grid.value(k) for k in range(grid.first, grid.last + 1)]
    origin, step = grid.origin * grid.step, grid.step
    assert lower <= values[0] and values[-1] <= upper
    for a, b in zip(values, values[1:]):
        assert a < b
        near = min(abs(Fraction(a) - origin), abs(Fraction(b) - origin))
        assert Fraction(b) - Fraction(a) <= max(step, near / 128), (a, b)
    assert all(Fraction(v) / step % 1 == 0 for v in values)
    for end, nearest in ((Fraction(lower), values[0]), (Fraction(upper), values[-1])):
        assert abs(end - Fraction(nearest)) <= max(step, abs(end - origin) / 128)
    probes = values + [(a + b) / 2 for a, b in zip(values, values[1:])] + [
        lower - 1, upper + 1, math.nextafter(values[0], -math.inf),
        math.nextafter(values[-1], math.inf)]
    for x in probes:
        assert grid.below(x) == bisect.bisect_left(values, x), x
        assert grid.at_or_below(x) == bisect.bisect_right(values, x), x
    # ``places`` (a window's values at once) counts as they do, on the geometric grid and
    # the uniform one, also at 0, −0, the least subnormal and beyond any grid
    rng = np.random.default_rng(5)
    near = [math.nextafter(v, way) for v in rng.choice(values, 200) for way in (-math.inf,
                                                                                math.inf)]
    extra = [0.0, -0.0, 5e-324, -5e-324, 1e300, -1e300, 2.0 ** 60, *near]
    ordinary = [x for x in probes + near if x == 0 or 1e-300 < abs(x) < 1e12]
    for candidates in (grid, candidate_grid(*domain, digits=None)):
        for xs in (probes + extra, ordinary):
            expected = ([candidates.below(x) for x in xs],
                        [candidates.at_or_below(x) for x in xs])
            with pytest.MonkeyPatch.context() as patch:
                if xs is ordinary:  # in numpy: not one by one
                    for name in ("below", "at_or_below"):
                        patch.setattr(type(grid), name, None)
                assert candidates.places(xs) == expected


def test_an_empty_stretch_holds_logarithmically_many_candidates():
    """Cost's [0, 100,000] by cents: 2,244 candidates (12,800,001 on the uniform grid),
    at most 0.78 % apart; MAX's offset K falls with ln |G| (38 → 21 ranks at ε 1; 18 since
    its guard became 1/4, ``EXTREME_GUARD``), and a
    narrow integer domain keeps every integer (ages: 121, K unchanged)."""
    cost = candidate_grid(0, 100_000, 0.01, False)
    assert (cost.step, cost.count) == (Fraction(1, 128), 2_244)
    assert candidate_grid(0, 100_000, 0.01, False, digits=None).count == 12_800_001
    above = cost.count - cost.below(20_000.0)  # the empty stretch above a cost's largest
    assert above == 295
    assert extreme_offset(Fraction(1), 1, cost) == 18
    assert extreme_offset(Fraction(1), 1, candidate_grid(0, 10_000_000, 0.01, False)) == 18
    ages = candidate_grid(0, 120, 1.0, True)
    assert ages.count == 121 and [ages.value(k) for k in (0, 99, 120)] == [0, 99, 120]
    assert extreme_offset(Fraction(1), 1, ages) == 12


# 500 log-normal costs by cents (median 416, largest 8,282) in a domain of 100,000
COSTS = np.round(np.random.default_rng(33).lognormal(6, 1, 500), 2).tolist()
RULES = """
[defaults]
answer_cache = false

[analysts.zoe]
budget = 100000

[tables.visits]
privacy_unit = "visit"
max_rows_per_unit = 1
[tables.visits.columns]
visit = { type = "int" }
cost = { type = "float", domain = [0, 100000], resolution = 0.01 }
"""
engine = engine_fixture(RULES, {"visits": Table(
    {"visit": list(range(len(COSTS))), "cost": COSTS},
    {"visit": "INTEGER", "cost": "DOUBLE PRECISION"})}, shared=True, rng=SeededSource(33))
DRAWS = 400


def _draws(engine, sql: str, epsilon: str) -> list[float]:
    """DRAWS fresh draws of the statement's one percentile, the windows read once from
    the backend and answered again to each draw (tests/privacy/reference.instance_draws)."""
    plan = analyze(parse_statements(sql)[0], engine.rules, Settings(epsilon=Decimal(epsilon)))
    return instance_draws(engine, plan, DRAWS)


def test_a_high_percentile_over_a_wide_domain_lands_near_the_truth(engine):
    """p95 of 500 sparse costs at ε 0.5 (one record a unit: λ = ε/2 = 1/4): 25 ranks
    from the target to the data's largest value, then 92 % of the domain empty. The law
    (computed below from the mechanism's own block weights) puts 0.954 of its mass
    within a factor 2 of the truth (on the uniform grid of main: 0.587, the rest spread
    over the empty stretch; there 233 of the 400 draws landed within it); ≥ 360 of 400
    seeded draws must (the binomial's chance of fewer is below 10⁻⁵ at 0.954), and the
    draws follow the law (χ² at ALPHA). The window is the backend's, the sampler the
    product's."""
    values = sorted(COSTS)
    rank = percentile_rank(len(values), Fraction(95, 100))
    true = values[rank - 1]
    grid = candidate_grid(0, 100_000, 0.01, False)
    scale = float(exponent(Fraction(1, 2), 1))
    law = np.exp(log_probabilities(values, rank, grid, scale))
    points = np.array([grid.value(k) for k in range(grid.first, grid.last + 1)])
    near = (points >= true / 2) & (points <= true * 2)
    assert law[near].sum() > 0.95
    drawn = _draws(engine, "SELECT PERCENTILE_DISC(0.95) WITHIN GROUP (ORDER BY cost) "
                           "FROM visits", "0.5")
    assert sum(true / 2 <= d <= 2 * true for d in drawn) >= 360, sorted(drawn)[-50:]
    assert stats.binom.cdf(359, DRAWS, law[near].sum()) < 1e-5
    observed = np.bincount([grid.at_or_below(d) - 1 for d in drawn], minlength=grid.count)
    seen, wanted = pooled(observed.astype(float), law * DRAWS)
    assert stats.chisquare(seen, np.array(wanted) * sum(seen) / sum(wanted)).pvalue > ALPHA
