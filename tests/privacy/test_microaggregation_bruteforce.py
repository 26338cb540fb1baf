"""The four release methods' sensitivities by brute force (seed 002; SPEC §6): for
random small clusters (ties, values at the domain bounds), every neighbour that moves
one record of the cluster to another value while the cluster's membership stays fixed
(the paper's assumption) moves the released centroid by at most the stated
sensitivity, and by exactly it for some neighbour where the formula is tight. CBLS
is checked with values far outside any domain: it needs none."""

from __future__ import annotations

import random

import pytest

from proxy.privacy.microaggregation import (
    DP_UM,
    IDP_CBLS,
    IDP_LS,
    MIN_K,
    Cluster,
    centroid,
    sensitivity,
)

LOWER, UPPER = 0.0, 10.0
GRID = [0.0, 0.5, 1.0, 2.0, 3.5, 5.0, 7.0, 9.0, 10.0]
FAR = [-1e6, -50.0, 15.0, 1e6]  # outside the domain: for CBLS only


def summarise(values: list[float]) -> Cluster:
    ordered = sorted(values)
    return Cluster(len(ordered), sum(ordered), tuple(ordered[:3]), tuple(ordered[-3:]))


def clusters(seed: int, smallest: int):
    rng = random.Random(seed)
    for _ in range(300):
        yield [rng.choice(GRID) for _ in range(rng.randint(smallest, 7))]


@pytest.mark.parametrize("method", [DP_UM, IDP_LS, IDP_CBLS])
def test_no_neighbour_moves_the_centroid_further_than_the_sensitivity(method):
    candidates = GRID + (FAR if method == IDP_CBLS else [])
    tight_somewhere = False
    for values in clusters(len(method), MIN_K[method]):
        base = centroid(method, summarise(values))
        bound = sensitivity(method, summarise(values), LOWER, UPPER)
        worst = 0.0
        for position in range(len(values)):
            for value in candidates:
                moved = values[:position] + [value] + values[position + 1:]
                worst = max(worst, abs(centroid(method, summarise(moved)) - base))
        assert worst <= bound + 1e-9, (method, values, worst, bound)
        tight_somewhere |= abs(worst - bound) <= 1e-9
    assert tight_somewhere, f"{method}: the bound is never reached"


def test_cbls_is_tight_on_every_cluster_when_values_may_go_anywhere():
    """Prop. 3 is the exact largest change: reached by moving the smallest value above
    the largest or the largest below the smallest."""
    for values in clusters(7, 3):
        bound = sensitivity(IDP_CBLS, summarise(values), None, None)
        base = centroid(IDP_CBLS, summarise(values))
        worst = max(abs(centroid(IDP_CBLS, summarise(values[:i] + [v] + values[i + 1:]))
                        - base) for i in range(len(values)) for v in GRID + FAR)
        assert worst == pytest.approx(bound, abs=1e-9), values
