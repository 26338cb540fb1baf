"""Knowledge refinement (seed 001): exact masses against the paper's numbers, the
``else`` branch, the e^ε bound between neighbouring outputs, and the sampler's law
(rejection at significance 1e-4, as in test_samplers)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from proxy.privacy.refinement import (
    Discrete,
    TruncatedNormal,
    Uniform,
    discrete,
    factors,
    parse_prior,
    refine,
)
from tests.privacy.test_samplers import ALPHA, SeededSource

# seed 001 Table 5: uniform prior on [0, 1], f(D) = 0.5, individual query:
# ε -> (variance, size of U_u, P(answer in U_u))
TABLE_5 = {0.1: (0.077, 0.475, 0.525), math.log(2): (0.046, 0.333, 0.667),
           1.0: (0.034, 0.269, 0.731), 2.0: (0.012, 0.119, 0.881)}


def _ball(refined):
    (inside,) = [s for s in refined.segments if s.factor > 1]
    return inside


def _second_moment(refined, centre):
    """E[(X − centre)²] of a refined uniform-[0, 1] prior (quantile = value), exactly."""
    return sum(s.factor * ((s.end - centre) ** 3 - (s.start - centre) ** 3) / 3
               for s in refined.segments)


@pytest.mark.parametrize("epsilon", TABLE_5)
def test_table_5_of_seed_001(epsilon):
    variance, size, inside = TABLE_5[epsilon]
    refined = refine(Uniform(0, 1), 0.5, *factors(epsilon, individual=True))
    ball = _ball(refined)
    assert round(ball.end - ball.start, 3) == size
    assert round(refined.mass(ball.start, ball.end), 3) == inside
    assert round(_second_moment(refined, 0.5), 3) == variance


def test_boolean_example_of_seed_001():
    """§6.1: P(B = 1) = 0.01, ε = 1, individual query (the else branch: no ball has the
    mass p_u = 0.269)."""
    prior = discrete([(0, 0.99), (1, 0.01)], nominal=True)
    alpha_u, alpha_d = factors(1.0, individual=True)
    given_0 = dict(refine(prior, 0, alpha_u, alpha_d).atoms())
    given_1 = dict(refine(prior, 1, alpha_u, alpha_d).atoms())
    assert f"{given_0[1]:.4g}" == "0.003679" and f"{given_1[1]:.4g}" == "0.02718"
    assert given_0[0] + given_0[1] == pytest.approx(1) == given_1[0] + given_1[1]


def test_the_then_branch_when_a_ball_has_exactly_the_mass():
    alpha_u, alpha_d = factors(1.0, individual=True)
    p_u = (1 - alpha_d) / (alpha_u - alpha_d)
    refined = refine(discrete([(0, p_u), (1, 1 - p_u)]), 0, alpha_u, alpha_d)
    assert [s.factor for s in refined.segments] == [alpha_u, alpha_d]


def test_the_else_branch_splits_at_the_group_that_crosses_p_u():
    """Atoms at equal distance go together: for answer 2, {2} then {1, 3} then {0, 4}."""
    prior = discrete([(0, 0.3), (1, 0.2), (2, 0.1), (3, 0.1), (4, 0.3)])
    alpha_u, alpha_d = factors(1.0, individual=True)  # p_u = 0.269
    refined = refine(prior, 2, alpha_u, alpha_d)
    by_value = {s.value: s.factor for s in refined.segments}
    assert by_value[2] == alpha_u  # the ball {2} (0.1 < p_u)
    assert by_value[0] == by_value[4] == alpha_d  # outside the ball {1, 2, 3} (0.4 > p_u)
    middle = (1 - alpha_u * 0.1 - alpha_d * 0.6) / 0.3
    assert by_value[1] == by_value[3] == pytest.approx(middle)
    assert alpha_d < middle < alpha_u
    assert sum(p for _, p in refined.atoms()) == pytest.approx(1)


def _random_prior(rng, size, nominal):
    weights = rng.dirichlet(np.ones(size))
    return discrete([(v, float(w)) for v, w in enumerate(weights)], nominal=nominal)


@pytest.mark.parametrize("nominal", [False, True])
@pytest.mark.parametrize("epsilon", [0.1, 0.5, 1.0, 3.0])
def test_neighbouring_outputs_stay_within_e_to_the_epsilon(nominal, epsilon):
    """Exhaustively over small discrete ranges: a statistical query's outputs for any
    two true answers differ by at most e^ε at every value; an individual query's output
    stays within [e^−ε, e^ε] of the prior. Every output has total mass 1."""
    rng = np.random.default_rng(11)
    for _ in range(40):
        prior = _random_prior(rng, int(rng.integers(2, 7)), nominal)
        values = [v for v, _ in prior.atoms]
        for individual in (False, True):
            alpha_u, alpha_d = factors(epsilon, individual)
            laws = {v: dict(refine(prior, v, alpha_u, alpha_d).atoms()) for v in values}
            for law in laws.values():
                assert sum(law.values()) == pytest.approx(1)
            bound = math.exp(epsilon) * (1 + 1e-9)
            if individual:
                for law in laws.values():
                    assert all(1 / bound <= law[v] / p <= bound for v, p in prior.atoms)
            else:
                for first, second in itertools.permutations(laws.values(), 2):
                    assert all(first[v] / second[v] <= bound for v in values)


@pytest.mark.parametrize("prior", [Uniform(0, 1), TruncatedNormal(0.3, 0.2, 0, 1)])
def test_continuous_neighbours_stay_within_e_to_the_epsilon(prior):
    """Densities (as factors on the prior) for true answers across the range."""
    alpha_u, alpha_d = factors(1.0, individual=False)
    grid = np.linspace(0.0005, 0.9995, 1000)
    answers = [0.0, 0.1, 0.3, 0.5, 0.9, 1.0]
    factor_at = {}
    for answer in answers:
        refined = refine(prior, answer, alpha_u, alpha_d)
        ball = _ball(refined)
        assert refined.mass(0, 1) == pytest.approx(1)
        factor_at[answer] = np.where((grid >= ball.start) & (grid < ball.end), alpha_u, alpha_d)
    for first, second in itertools.permutations(answers, 2):
        assert np.all(factor_at[first] / factor_at[second] <= math.exp(1.0) * (1 + 1e-9))


def test_the_statistical_factors_minimise_the_expected_error_of_a_uniform_prior():
    """α_u = e^{ε/2} beats every other split of α_u/α_d = e^ε on E|X − f(D)|."""
    for epsilon in (0.1, 1.0, 2.0):
        chosen = _absolute_error(epsilon, factors(epsilon, individual=False)[0])
        for t in np.linspace(0.01, 0.99, 99):
            assert chosen <= _absolute_error(epsilon, math.exp(t * epsilon)) + 1e-12


def _absolute_error(epsilon, alpha_u):
    """E|X − ½| of the refined uniform-[0, 1] prior for f(D) = ½, exactly."""
    refined = refine(Uniform(0, 1), 0.5, alpha_u, alpha_u * math.exp(-epsilon))
    half = [(s.factor, s.start - 0.5, s.end - 0.5) for s in refined.segments]
    return sum(f * (abs(b) * b - abs(a) * a) / 2 for f, a, b in half)


@pytest.mark.parametrize("answer", [0, 2, 5])
def test_discrete_samples_follow_the_refined_masses(answer):
    prior = discrete([(v, p) for v, p in enumerate([0.05, 0.1, 0.2, 0.3, 0.2, 0.1, 0.05])])
    refined = refine(prior, answer, *factors(1.0, individual=True))
    source = SeededSource(answer)
    draws = [refined.sample(source) for _ in range(20_000)]
    observed = [draws.count(v) for v, _ in refined.atoms()]
    expected = [p * len(draws) for _, p in refined.atoms()]
    assert stats.chisquare(observed, expected).pvalue > ALPHA


@pytest.mark.parametrize("prior", [Uniform(0, 200_000), TruncatedNormal(40_000, 15_000, 0, 200_000)])
def test_continuous_samples_follow_the_refined_law(prior):
    refined = refine(prior, 41_000, *factors(0.5, individual=False))
    source = SeededSource(7)
    quantiles = np.array([prior.cdf(refined.sample(source)) for _ in range(20_000)])
    edges = np.unique(np.concatenate([np.linspace(0, 1, 41),
                                      [s.start for s in refined.segments]]))
    observed, _ = np.histogram(quantiles, bins=edges)
    expected = [refined.mass(a, b) * len(quantiles) for a, b in itertools.pairwise(edges)]
    keep = np.array(expected) > 0
    assert stats.chisquare(observed[keep], np.array(expected)[keep]).pvalue > ALPHA
    assert all(0 <= refined.sample(source) <= 200_000 for _ in range(1000))


def test_a_discrete_prior_must_be_a_distribution():
    with pytest.raises(ValueError, match="sum to 1"):
        discrete([(0, 0.5), (1, 0.4)])
    assert isinstance(discrete([(1, 0.5), (0, 0.5)]), Discrete)


@pytest.mark.parametrize("text,built", [
    ("uniform(0, 200000)", Uniform(0.0, 200000.0)),
    ("  UNIFORM( -1.5 ,2 ) ", Uniform(-1.5, 2.0)),
    ("normal(40000, 15000)", TruncatedNormal(40000.0, 15000.0, 0.0, 200000.0)),
])
def test_priors_as_analysts_write_them(text, built):
    assert parse_prior(text).over(0.0, 200000.0) == built


def test_a_prior_table():
    prior = parse_prior('{"0": 0.99, "1": 0.01}').over(0, 1, cast=int)
    assert prior.atoms == ((0, 0.99), (1, 0.01))
    nominal = parse_prior('{"north": 0.5, "south": 0.5}').over(None, None, nominal=True,
                                                                 cast=str)
    assert nominal.nominal and nominal.distance("north", "south") == 1


@pytest.mark.parametrize("text,fragment", [
    ("gaussian(0, 1)", "unknown prior"),
    ("uniform(5, 1)", "needs a < b"),
    ("normal(0, 0)", "sigma > 0"),
    ("uniform(a, b)", "must be numbers"),
    ("uniform(0, inf)", "finite"),
    ('{"0": 0.5, "1": 0.4}', "sum to 1"),
    ('{"0": "half"}', "maps values to probabilities"),
    ("{0: 1}", "not valid JSON"),
])
def test_a_bad_prior_says_what_is_allowed(text, fragment):
    with pytest.raises(ValueError, match=fragment):
        parse_prior(text)
