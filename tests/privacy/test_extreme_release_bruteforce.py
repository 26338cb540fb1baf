"""MAX and MIN's three steps (privacy/inverse_sensitivity.extreme_release: a guarded
draw K ranks inside the data, a noisy count of the values beyond a point between it and
the domain's end, then either the guarded answer or a draw at the end itself), by brute
force: the output's exact law (``laws.extreme_law``, written out independently of the
sampler) changes no candidate's probability by more than e^ε over the neighbours of
small data sets (ties, both bounds, NULL, NaN, ±inf, several rows per unit), at ε where
K is a few ranks so the count decides both ways; and the sampler, asking the windows
and counts it needs, follows that law (χ² at significance ALPHA, seeded)."""

from __future__ import annotations

import zlib
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from proxy.privacy.inverse_sensitivity import (
    EXTREME_SHARE,
    GUARD_SHARE,
    candidate_grid,
    extreme_offset,
    extreme_release,
)
from proxy.statistics import BOTTOM, TOP, RankRef
from tests.privacy.harness import EXTREME, LOWER, UPPER, assert_sound, datasets, modifying
from tests.privacy.laws import ALPHA, SeededSource, extreme_law
from tests.privacy.reference import by_hand, in_domain

INTEGERS = candidate_grid(LOWER, UPPER, 1.0, integers=True)  # 0 .. 10
NEIGHBOUR_VALUES = [LOWER, 3.5, 5.0, UPPER, None] + EXTREME[:3]


def _target(largest: bool, epsilon: Fraction, shift: int) -> RankRef:
    """The guarded draw's target, as ``_targets`` makes it."""
    return RankRef(TOP if largest else BOTTOM,
                   extreme_offset(epsilon * GUARD_SHARE, shift, INTEGERS), EXTREME_SHARE)


@pytest.mark.parametrize("units,rows", [(6, 1), (4, 2)])
@pytest.mark.parametrize("epsilon", [Fraction(8), Fraction(20)])
def test_no_candidate_changes_probability_by_more_than_e_to_the_epsilon(units, rows,
                                                                        epsilon):
    shift = rows  # DP: the declared bound c (g = 1)
    assert 1 <= extreme_offset(epsilon * GUARD_SHARE, shift, INTEGERS) <= 6
    seed = zlib.crc32(f"extreme release {units} {rows} {epsilon}".encode())

    def laws(records):
        values = in_domain(records)
        return {largest: extreme_law(values, _target(largest, epsilon, shift), largest,
                                     INTEGERS, epsilon, shift) for largest in (True, False)}

    worst = 0.0
    for records in datasets(seed, 12, units, rows):
        (outcome,) = assert_sound(laws, lambda _: {True: float(epsilon), False: float(epsilon)},
                                  [records], modifying(NEIGHBOUR_VALUES),
                                  change=lambda before, after: {
                                      k: float(np.abs(before[k] - after[k]).max())
                                      for k in before})
        worst = max(worst, *outcome.worst.values())
    assert worst > float(epsilon) / 8  # neighbours that matter


@pytest.mark.parametrize("largest", [True, False], ids=["max", "min"])
def test_the_sampler_follows_the_exact_law(largest):
    """At ε 8 (K = 3 on 0..10): values spread at the low end and tied at the top, so the
    count keeps the guarded MAX and switches MIN to its end draw most of the time; the
    draws answered from the values follow ``extreme_law``."""
    epsilon, shift = Fraction(8), 1
    values = sorted([0.0, 2.0, 3.0, 5.0, 6.0, 7.0, 8.0, 9.0, 9.0, 9.0, 9.0, 9.0, 9.0, 9.0,
                     9.0, 9.0, 9.0, 9.0, 9.0, 9.0, 9.0, 9.0, 9.0, 9.0, 9.0, 9.0, 9.0, 9.0,
                     9.0, 9.0, 9.0, 9.0])
    target = _target(largest, epsilon, shift)
    n = len(values)
    rank = target.rank(n)
    rng = SeededSource(zlib.crc32(f"extreme law {largest}".encode()))
    draws = 3000
    observed = np.zeros(INTEGERS.count)
    for _ in range(draws):
        observed[by_hand(extreme_release(n, rank, largest, shift, epsilon, INTEGERS, rng),
                         values)] += 1
    expected = np.exp(extreme_law(values, target, largest, INTEGERS, epsilon, shift)) * draws
    big = expected >= 5
    assert stats.chisquare(np.append(observed[big], observed[~big].sum()),
                           np.append(expected[big], expected[~big].sum())).pvalue > ALPHA
