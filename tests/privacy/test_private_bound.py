"""The private upper bound of the local sensitivity (privacy/private_bound.py).

1. By enumeration of neighbours on small data sets (ties, domain bounds, records
   leaving the scope, several rows per unit, group size 2): A(0) ≥ the LS of
   privacy/sensitivity.py, A non-decreasing, A(k)(D) ≤ A(k + 1)(D') for every neighbour
   (so every capped distance moves by ≤ 1, also checked), and A(k)(D) ≥ LS(D'') for
   every D'' at distance ≤ k, k ≤ 2.
2. AboveThreshold's ε_b-DP guarantee from its exact output law (a sum over the
   threshold noise, truncated with its exact tail) for every pair of neighbouring
   distance vectors; with half the query noise the same check fails.
3. The exact probability that a level below LS is returned is ≤ failure.
4. The sampler against the exact law: 2,000 draws, each outcome's count inside its
   binomial interval at 1e-6 (Bonferroni over outcomes).
"""

from __future__ import annotations

import functools
import itertools
import math
import random
import zlib
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from proxy.privacy.private_bound import (
    Terms,
    above_threshold,
    distances,
    horizon,
    ladder,
    max_terms,
    min_terms,
    percentile_terms,
    private_level,
    threshold,
)
from proxy.privacy.sensitivity import (
    local_sensitivity_of_max,
    local_sensitivity_of_min,
    local_sensitivity_of_percentile,
    max_refs,
    min_refs,
    percentile_refs,
)
from proxy.statistics import percentile_rank
from tests.privacy.harness import LOWER, TOLERANCE, UPPER, datasets, neighbours, options
from tests.privacy.laws import SeededSource
from tests.privacy.reference import (
    by_hand,
    contribution_bound,
    order_values,
    scope_values,
)

HORIZON = 6
LEVELS = ladder(0.25, UPPER - LOWER)  # 0.25 … 16


def _percentile(fraction):
    def ls(values, shift):
        stats_ = order_values(values, percentile_refs(fraction, shift))
        return local_sensitivity_of_percentile(len(values), stats_, fraction, shift,
                                               LOWER, UPPER)[1]

    def terms(values, shift, k=HORIZON):
        return by_hand(percentile_terms(len(values), percentile_rank(len(values), fraction),
                                        shift, LOWER, UPPER, k), values)
    return ls, terms


CASES = {
    "median": _percentile(Fraction(1, 2)),
    "p25": _percentile(Fraction(1, 4)),
    "p90": _percentile(Fraction(9, 10)),
    "p0": _percentile(Fraction(0)),
    "max": (lambda values, shift: local_sensitivity_of_max(
                order_values(values, max_refs(shift, True)), shift, LOWER, UPPER)[1],
            lambda values, shift, k=HORIZON: by_hand(max_terms(len(values), shift, LOWER,
                                                               UPPER, k), values)),
    "min": (lambda values, shift: local_sensitivity_of_min(
                order_values(values, min_refs(shift, True)), shift, LOWER, UPPER)[1],
            lambda values, shift, k=HORIZON: by_hand(min_terms(len(values), shift, LOWER,
                                                               UPPER, k), values)),
}


def _in_domain(records):
    """The sorted values in scope as the backend reads them with L and U declared:
    NaN dropped (NULL), everything else clamped to [L, U]."""
    return sorted(min(max(v, LOWER), UPPER) for v in scope_values(records)
                  if not math.isnan(v))


def _scopes(records, steps):
    """The distinct scopes at distance ≤ ``steps`` (a step modifies g units, so
    ``steps``·g units). A neighbour's raw value only matters through what it reads as:
    one value per class (NaN reads as out of scope, ±inf and huge values as L or U)."""
    classes = {min(max(v, LOWER), UPPER) for v, _, _ in options() if not math.isnan(v)}
    moves = [(v, True, 0) for v in sorted(classes)] + [(LOWER, False, 0)]
    found = {tuple(_in_domain(records))}
    for other in neighbours(records, moves, steps):
        found.add(tuple(_in_domain(other)))
    return [list(scope) for scope in found]


@functools.cache
def _summary(name, values, shift):
    """A(0..HORIZON−1) and the capped distances at caps 2 and HORIZON of one scope."""
    terms = CASES[name][1]
    a = _a(terms(list(values), shift))
    return a, {cap: distances(terms(list(values), shift, cap), LEVELS) for cap in (2, HORIZON)}


def _a(terms):
    return [terms.term(k) for k in range(terms.horizon)]


@pytest.mark.parametrize("units,rows,group_size", [(7, 1, 1), (4, 2, 1), (4, 1, 2)])
def test_terms_bound_ls_are_monotone_and_move_by_one_step(units, rows, group_size):
    seed = zlib.crc32(f"{units} {rows} {group_size}".encode())
    checked = 0
    for records in datasets(seed, 40, units, rows):
        shift = contribution_bound(records) * group_size
        values = _in_domain(records)
        moved = _scopes(records, group_size)
        for name, (ls, _) in CASES.items():
            a, mine = _summary(name, tuple(values), shift)
            assert a[0] >= ls(values, shift) - TOLERANCE, (name, values)
            assert all(x <= y for x, y in itertools.pairwise(a)), (name, values, a)
            assert a[-1] <= UPPER - LOWER
            for other in moved:
                b, theirs = _summary(name, tuple(other), shift)
                assert all(a[k] <= b[k + 1] for k in range(HORIZON - 1)), (name, values, other)
                for cap in (2, HORIZON):
                    assert all(abs(x - y) <= 1 for x, y in zip(mine[cap], theirs[cap])), \
                        (name, values, other, cap)
                checked += 1
    assert checked > 1000


@pytest.mark.parametrize("units,rows,group_size", [(6, 1, 1), (3, 2, 1), (4, 1, 2)])
def test_terms_bound_the_local_sensitivity_within_distance_k(units, rows, group_size):
    seed = zlib.crc32(f"far {units} {rows} {group_size}".encode())
    for records in datasets(seed, 10, units, rows):
        shift = contribution_bound(records) * group_size
        values = _in_domain(records)
        for k in (1, 2):
            for other in _scopes(records, k * group_size):
                for name, (ls, _) in CASES.items():
                    a, _ = _summary(name, tuple(values), shift)
                    assert a[k] >= ls(other, shift) - TOLERANCE, (name, k, values, other)


def test_ladder_threshold_and_horizon():
    assert ladder(0.01, 1e7) == [2.0 ** e for e in range(-6, 25)]
    assert ladder(0.25, 10.0) == [0.25, 0.5, 1, 2, 4, 8, 16]
    assert ladder(4, 3) == [4]
    for bad in ((0, 1), (1, math.inf), (1, math.nan), (1e-300, 1.7e308 * 2)):
        with pytest.raises(ValueError):
            ladder(*bad)
    with pytest.raises(ValueError):
        ladder(1.0, 1.7e308)  # the next power of two overflows
    levels = ladder(0.01, 1e7)
    assert threshold(1.0, levels, 0.05) == math.ceil(2 * math.log(40)) + math.ceil(
        4 * math.log(2 * 30 / 0.05))
    assert horizon(1.0, levels, 0.05) > threshold(1.0, levels, 0.05)
    assert horizon(1e-6, levels, 0.05) == 1 << 17
    assert private_level(Terms(lambda k: 0.0, 1), [4.0], 1.0, SeededSource(0)) == 4.0
    with pytest.raises(ValueError):
        by_hand(percentile_terms(3, 2, 1, 0.0, 1.0, 4), [0.1, 0.2, 0.3]).term(4)


# -- the exact law of AboveThreshold --------------------------------------------------

def _at_least(m, scale):
    """P(Z ≥ m) for Z ~ DL(scale), P(Z = z) ∝ exp(−|z|/scale), elementwise."""
    alpha = math.exp(-1 / scale)
    m = np.asarray(m, dtype=float)
    upper = alpha ** np.maximum(m, 1) / (1 + alpha)
    lower = 1 - alpha ** np.maximum(1 - m, 1) / (1 + alpha)
    return np.where(m >= 1, upper, lower)


def exact_law(capped, t, epsilon, query_scale=None, tail=1e-15):
    """P(out = j) for j = 0..len(capped) (the last: no level passed), and the mass left
    out: the threshold noise is summed over |ρ| ≤ M with P(|ρ| > M) ≤ ``tail``."""
    rho_scale, nu_scale = 2 / epsilon, query_scale or 4 / epsilon
    alpha = math.exp(-1 / rho_scale)
    reach = math.ceil(rho_scale * math.log(2 / tail))
    rho = np.arange(-reach, reach + 1)
    weight = (1 - alpha) / (1 + alpha) * alpha ** np.abs(rho)
    left_out = 2 * alpha ** (reach + 1) / (1 + alpha)
    out, none_yet = [], np.ones_like(weight)
    for d in capped:
        passes = _at_least(t + rho - d, nu_scale)
        out.append(float(np.sum(weight * none_yet * passes)))
        none_yet = none_yet * (1 - passes)
    out.append(float(np.sum(weight * none_yet)))
    return out, left_out


def _privacy_loss_holds(t, epsilon, cap, query_scale=None):
    laws = {}

    def law(d):
        if d not in laws:
            laws[d] = exact_law(d, t, epsilon, query_scale)
        return laws[d]

    for d in itertools.product(range(cap + 1), repeat=3):
        p, tail = law(d)
        for step in itertools.product((-1, 0, 1), repeat=3):
            other = tuple(min(cap, max(0, x + s)) for x, s in zip(d, step))
            q, _ = law(other)
            if any(pj > math.exp(epsilon) * qj + tail + 1e-12 for pj, qj in zip(p, q)):
                return False
    return True


@pytest.mark.parametrize("epsilon", [0.5, 1.0, 2.0])
@pytest.mark.parametrize("t", [0, 3])
def test_above_threshold_is_epsilon_dp_exactly(epsilon, t):
    assert _privacy_loss_holds(t, epsilon, cap=5)


def test_the_privacy_check_can_fail():
    """With query noise DL(2/ε) instead of DL(4/ε) the loss exceeds ε somewhere."""
    assert not _privacy_loss_holds(3, 1.0, cap=5, query_scale=2.0)


@pytest.mark.parametrize("epsilon", [0.01, 0.1, 1.0, 5.0])
@pytest.mark.parametrize("below_top", [1, 30, 200])
@pytest.mark.parametrize("failure", [0.05, 0.01])
def test_a_level_below_the_local_sensitivity_is_rare(epsilon, below_top, failure):
    """The worst case: every level below the top has distance 0 (A(0) above it)."""
    levels = [2.0 ** j for j in range(below_top + 1)]
    t = threshold(epsilon, levels, failure)
    law, tail = exact_law([0] * below_top, t, epsilon)
    assert 1 - law[-1] + tail <= failure
    # the bound discriminates: a threshold a quarter as high fails it
    law, _ = exact_law([0] * below_top, t // 4, epsilon)
    assert 1 - law[-1] > failure


def test_the_sampler_follows_the_exact_law():
    epsilon, failure = 2.0, 0.05
    levels = [1.0, 2.0, 4.0, 8.0, 16.0]
    t = threshold(epsilon, levels, failure)
    cap = horizon(epsilon, levels, failure)
    wanted = [1, t - 3, t, t + 3]  # the distances of levels 1, 2, 4, 8
    a = [levels[sum(k >= d for d in wanted)] - 0.5 for k in range(cap)]
    terms = Terms(lambda k: a[k], cap)
    assert distances(terms, levels) == wanted
    law, tail = exact_law(wanted, t, epsilon)
    assert tail < 1e-12 and abs(sum(law) - 1) < 1e-9
    draws = 2000
    rng = SeededSource(20240613)
    counts = {level: 0 for level in levels}
    for _ in range(draws):
        counts[private_level(terms, levels, epsilon, rng, failure)] += 1
    significance = 1e-6 / len(levels)
    for level, p in zip(levels, law):
        low, high = stats.binom.interval(1 - significance, draws, p)
        assert low <= counts[level] <= high, (level, counts, law)


def test_above_threshold_stops_at_the_first_pass():
    rng = SeededSource(3)
    assert above_threshold([], 0, Fraction(1), rng) == 0
    # far above/below the threshold: certain up to e^(−100)
    assert above_threshold([0, 0, 1000], 500, 1.0, rng) == 2
    assert above_threshold([1000, 1000], 500, 1.0, rng) == 0
    assert above_threshold([0, 0], 500, 1.0, rng) == 2


def test_private_level_on_a_data_set():
    """A wide gap at the median: the returned level is ≥ LS except with probability
    ≤ failure; at this ε it is never the top either."""
    rng_data = random.Random(5)
    values = sorted(rng_data.uniform(0, 1000) for _ in range(2001))
    values[1000] = 600.0
    values = sorted(values)
    lower, upper, epsilon = 0.0, 1000.0, 1.0
    levels = ladder(0.01, upper - lower)
    cap = horizon(epsilon, levels, 0.05)
    rank = percentile_rank(len(values), Fraction(1, 2))
    terms = by_hand(percentile_terms(len(values), rank, 1, lower, upper, cap), values)
    ls = local_sensitivity_of_percentile(
        len(values), order_values(values, percentile_refs(Fraction(1, 2), 1)),
        Fraction(1, 2), 1, lower, upper)[1]
    rng = SeededSource(11)
    got = [private_level(terms, levels, epsilon, rng) for _ in range(50)]
    assert sum(level < ls for level in got) <= 10  # P ≤ 0.05 each; 10 of 50 at ~1e-4
    assert max(got) < levels[-1]
