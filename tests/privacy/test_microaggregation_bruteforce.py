"""The four release methods' sensitivities by brute force (seed 002; SPEC §6): for
random small clusters (ties, values at the domain bounds), every neighbour that moves
one record of the cluster to another value while the cluster's membership stays fixed
(the paper's assumption) moves the released centroid by at most the stated
sensitivity, and by exactly it for some neighbour where the formula is tight. CBLS
is checked with values far outside any domain: it needs none."""

from __future__ import annotations

import math

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
from proxy.statistics import clamp_to_domain
from tests.factories import random_datasets, rows_of
from tests.privacy.harness import EXTREME, assert_sound, grid_or_extreme, neighbours

LOWER, UPPER = 0.0, 10.0
GRID = [0.0, 0.5, 1.0, 2.0, 3.5, 5.0, 7.0, 9.0, 10.0]
FAR = [-1e6, -50.0, 15.0, 1e6]  # outside the domain: for CBLS only
HUGE = [v for v in EXTREME if not math.isnan(v)]  # ±inf, ±1e308, ±1e300


def summarise(values: list[float], method: str = IDP_CBLS) -> Cluster:
    """The backend's summary of a cluster of raw values: normalised to the domain (to
    ±MAGNITUDE_CAP for CBLS, which has none here), then sorted."""
    domain = (None, None) if method == IDP_CBLS else (LOWER, UPPER)
    ordered = sorted(clamp_to_domain(v, *domain) for v in values)
    return Cluster(len(ordered), sum(ordered), tuple(ordered[:3]), tuple(ordered[-3:]))


def clusters(seed: int, smallest: int):
    """Random clusters of ``smallest``..7 values, one value in five ±inf or
    overflow-sized."""
    return random_datasets(seed, 300, rows_of(lambda rng, _: grid_or_extreme(rng, GRID, HUGE)),
                           units=(smallest, 7))


def moving_one_value(candidates):
    """The neighbours of a cluster: one of its values moved to any of ``candidates``."""
    return lambda values: neighbours(values, candidates, unit=None, make=lambda _, v: v)


def _tolerance(cluster: Cluster) -> float:
    """Float rounding relative to the largest magnitude (up to 1e15 for CBLS)."""
    return 1e-9 * max(1.0, *(abs(v) for v in cluster.smallest + cluster.largest))


@pytest.mark.parametrize("method", [DP_UM, IDP_LS, IDP_CBLS])
def test_no_neighbour_moves_the_centroid_further_than_the_sensitivity(method):
    candidates = GRID + HUGE + (FAR if method == IDP_CBLS else [])
    outcomes = assert_sound(
        lambda values: centroid(method, summarise(values, method)),
        lambda values: sensitivity(method, summarise(values, method), LOWER, UPPER),
        clusters(len(method), MIN_K[method]), moving_one_value(candidates),
        tolerance=lambda values: _tolerance(summarise(values, method)))
    assert any(abs(o.worst - o.bound) <= _tolerance(summarise(o.records, method))
               for o in outcomes), f"{method}: the bound is never reached"


def test_cbls_is_tight_on_every_cluster_when_values_may_go_anywhere():
    """Prop. 3 is the exact largest change: reached by moving the smallest value above
    the largest or the largest below the smallest."""
    assert_sound(lambda values: centroid(IDP_CBLS, summarise(values)),
                 lambda values: sensitivity(IDP_CBLS, summarise(values), None, None),
                 clusters(7, 3), moving_one_value(GRID + FAR + HUGE), tight=True,
                 tolerance=lambda values: _tolerance(summarise(values)))
