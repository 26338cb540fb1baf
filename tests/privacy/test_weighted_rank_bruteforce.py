"""Weighted ranks for percentiles of a user-level table under GROUP BY (docs/privacy.md
§5.3, "Weighted ranks instead of one row per unit": evaluated, not built), by brute
force: the proof's claims checked on a reference written from the definition, over the
product's own candidates (``ranked_grid``) and snapping (``snapped``), so that whoever
builds it has the claim pinned.

Every value v of unit u in scope (NULL and NaN out, the rest clamped, then snapped)
weighs W_u = ⌊2²⁰/n_u⌋, n_u the unit's values in scope over all groups; in a group,
A(y) and B(y) are the weights below and at or below y, N their total, t = p·N, and

    d(y) = max(0, A(y) − t, t − B(y)) / 2²⁰.

Claims: a neighbour that modifies every record of g units (values to ties, both bounds,
NaN, ±inf and overflow-sized, in or out of the WHERE, in any group, so n_u changes)
moves group k's d by at most Σ_u max(m_uk, m′_uk) (m_uk the unit's share of its weight in
group k) and so the groups' d together by at most 2g; the groups' joint law at
λ = ε/(2g·min(2g, G)) — one row per unit's — moves by at most e^ε. And the two rules it
rests on are needed: over all rows (each row weighing 2²⁰) or with n_u counted per group
the same λ fails.
"""

from __future__ import annotations

import bisect
import itertools
import random
import zlib
from fractions import Fraction

import numpy as np
import pytest

from proxy.privacy.inverse_sensitivity import ranked_grid, snapped
from tests.privacy.harness import (
    EXTREME,
    LOWER,
    UPPER,
    assert_sound,
    datasets,
    neighbours,
    options,
)
from tests.privacy.laws import groups_loss
from tests.privacy.reference import normalise

ONE = 1 << 20  # a unit's whole weight


class _Column:
    lower, upper, resolution, type = LOWER, UPPER, 512.0, "float"


GRID = ranked_grid(_Column, True)  # steps of ½ on [0, 10]: 21 candidates
CANDIDATES = [GRID.value(k) for k in range(GRID.first, GRID.last + 1)]
NEIGHBOUR_VALUES = [LOWER, 3.5, 5.0, UPPER] + EXTREME[:3]


def weighted_scores(records, groups: int, fraction: Fraction, per_group: bool = False,
                    unweighted: bool = False) -> list[list[Fraction]]:
    """d of every candidate in every group (``per_group``: n_u counted in each group, the
    rule the proof rejects; ``unweighted``: every row weighs a whole unit)."""
    kept = [(r.unit, r.group, normalise(r.value, LOWER, UPPER)) for r in records
            if r.in_scope]
    kept = [(u, k, v) for u, k, v in kept if v is not None]
    count: dict = {}
    for u, k, _ in kept:
        count[(u, k) if per_group else u] = count.get((u, k) if per_group else u, 0) + 1
    found = []
    for group in range(groups):
        mine = [(v, ONE if unweighted else ONE // count[(u, k) if per_group else u])
                for u, k, v in kept if k == group]
        pairs = sorted(zip(snapped(GRID, [v for v, _ in mine]), (w for _, w in mine)))
        points = [v for v, _ in pairs]
        through = list(itertools.accumulate((w for _, w in pairs), initial=0))
        target = fraction * through[-1]
        found.append([max(Fraction(0), through[bisect.bisect_left(points, y)] - target,
                          target - through[bisect.bisect_right(points, y)]) / ONE
                      for y in CANDIDATES])
    return found


def _logs(scores: list[Fraction], scale: Fraction) -> np.ndarray:
    logs = np.array([-float(scale * d) for d in scores])
    return logs - np.logaddexp.reduce(logs)


def _scores_moved(before, after) -> float:
    """Σ over groups of the largest change of a candidate's d."""
    return float(sum(max(abs(b - a) for b, a in zip(bs, as_)) for bs, as_ in zip(before, after)))


CASES = {  # name: (fraction, groups, group size)
    "median, 2 groups": (Fraction(1, 2), 2, 1),
    "p90, 3 groups": (Fraction(9, 10), 3, 1),
    "p0, 3 groups": (Fraction(0), 3, 1),
    "p95, 3 groups, g 2": (Fraction(19, 20), 3, 2),
}


@pytest.mark.parametrize("case", list(CASES))
def test_weighted_scores_move_by_at_most_two_per_unit_and_the_law_by_e_to_the_epsilon(case):
    fraction, groups, g = CASES[case]
    epsilon = Fraction(1)
    bound = min(2 * g * max(fraction, 1 - fraction), g * groups)
    scale = epsilon / (2 * bound)
    sets = list(datasets(zlib.crc32(case.encode()), 6, 4, 3, groups=groups))
    choices = options(groups, NEIGHBOUR_VALUES)
    rng = random.Random(zlib.crc32(f"weighted {case}".encode()))

    def nearby(records):
        return neighbours(records, choices, g, limit=25, rng=rng)

    outcomes = assert_sound(lambda records: weighted_scores(records, groups, fraction),
                            lambda _: float(bound), sets, nearby, change=_scores_moved)
    assert max(outcome.worst for outcome in outcomes) >= float(bound) - 1e-9  # reached
    assert_sound(lambda records: [_logs(s, scale) for s in
                                  weighted_scores(records, groups, fraction)],
                 lambda _: float(epsilon), sets, nearby, change=groups_loss, tolerance=1e-9)


@pytest.mark.parametrize("rule", ["unweighted", "per_group"])
def test_the_proof_needs_weights_over_the_whole_scope(rule):
    """The median over three groups, whose bound is 1: over all rows (a unit of three
    rows moves a group's d by up to 3) or with n_u counted per group (its weight whole in
    each of its groups, three of them) a neighbour moves the groups' d by more."""
    groups, fraction = 3, Fraction(1, 2)
    rng = random.Random(7)
    choices = options(groups, NEIGHBOUR_VALUES)
    worst = 0.0
    for records in datasets(11, 6, 4, 3, groups=groups):
        base = weighted_scores(records, groups, fraction, **{rule: True})
        for other in neighbours(records, choices, 1, limit=25, rng=rng):
            worst = max(worst, _scores_moved(
                base, weighted_scores(other, groups, fraction, **{rule: True})))
    assert worst > 1
