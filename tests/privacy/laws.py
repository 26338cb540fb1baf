"""What the distribution tests compare samples with, and how strictly: the
significance they reject at, a seeded stand-in for the product's random source, and
laws computed independently of the code under test (the smooth-sensitivity noise by
quadrature, the exponential mechanism's from its own block weights).

Each statistical test rejects at significance ALPHA: with the fixed seeds a correct
sampler fails a run with probability 1e-4 per test (documented false-failure rate).
The tests draw from a seeded source so that a failure can be reproduced; the product
draws from ``secrets``."""

from __future__ import annotations

import functools
import random
import zlib
from fractions import Fraction

import numpy as np
from scipy import integrate

from proxy.engine import answered
from proxy.privacy.inverse_sensitivity import (
    Grid,
    Scaled,
    blocks,
    candidate_distance,
    instance_release,
    scaled_blocks,
)
from proxy.privacy.requests import CountRequest
from tests.privacy.reference import answer

ALPHA = 1e-4
DRAWS = 20_000
SAMPLER_ALPHA = 1e-6  # the OS's source, unseeded: a correct sampler fails once in 10⁶ runs


def draws_with_tails(values: list[float], rank: int, epsilon: Fraction, grid: Grid,
                     seed: str, draws: int, **release) -> tuple[list, list]:
    """``draws`` answers of ``instance_release`` (``release``: its options) over the
    sorted ``values``, read as the backend would answer, and the points of the counts
    its tail draws asked (a caller narrows the first window to make them)."""
    counts: list = []

    def read(request):
        if isinstance(request, CountRequest):
            counts.append(request.point)
        return answer(values, request)

    rng = SeededSource(zlib.crc32(seed.encode()))
    return [answered(instance_release(len(values), rank, 1, epsilon, grid, rng, **release),
                     read) for _ in range(draws)], counts


def pooled(observed, expected, least: float = 5.0) -> tuple[list[float], list[float]]:
    """Adjacent cells pooled, in order, until each expects at least ``least`` draws (the
    last short run joins the cell before it): χ²'s law holds only for such cells; a
    cell expecting 0.02 draws that gets one adds 50 to the statistic (p < 10⁻⁷)."""
    cells: list[list[float]] = []
    run = [0.0, 0.0]
    for seen, wanted in zip(observed, expected):
        run = [run[0] + seen, run[1] + wanted]
        if run[1] >= least:
            cells.append(run)
            run = [0.0, 0.0]
    if run[1] > 0 or run[0] > 0:
        if cells:
            cells[-1] = [cells[-1][0] + run[0], cells[-1][1] + run[1]]
        else:
            cells.append(run)
    return [c[0] for c in cells], [c[1] for c in cells]


class SeededSource:
    """A reproducible stand-in for ``secrets`` with the same interface."""

    def __init__(self, seed: int) -> None:
        self._random = random.Random(seed)

    def randbelow(self, n: int) -> int:
        return self._random.randrange(n)


def smooth_cdf(gamma):
    """P(Z ≤ z) by scipy's quadrature (independent of the code under test)."""
    def beyond(z):
        """∫ from |z| to ∞ of dt/(1 + t^γ); past 1 as ∫ from 0 to 1/|z| of
        u^(γ−2)/(1 + u^γ) du (t = 1/u), so that quad never integrates to infinity."""
        z = abs(z)
        tail = integrate.quad(lambda u: u ** (gamma - 2) / (1 + u ** gamma), 0,
                              1 / max(z, 1))[0]
        if z < 1:
            tail += integrate.quad(lambda t: 1 / (1 + t ** gamma), z, 1)[0]
        return tail

    half = beyond(0.0)

    def cdf(z):
        tail = beyond(z) / (2 * half)  # P(Z > |z|)
        return 1 - tail if z >= 0 else tail
    return cdf


def expanded(found, grid: Grid, rank: int) -> list[tuple]:
    """(distance, exact) of every candidate, from the exponential mechanism's blocks
    (which must tile the grid): the mechanism's own distance of each candidate, a
    tail's lower bound."""
    out = []
    for block in found:
        assert block.first == grid.first + len(out) and block.count >= 1
        out += [(candidate_distance(block, block.first + k, rank, grid, None, False)
                 if block.exact else block.distance, block.exact) for k in range(block.count)]
    assert len(out) == grid.count
    return out


def log_probabilities(values: list[float], rank: int, grid: Grid, scale: float,
                      piecewise: bool = False) -> np.ndarray:
    """log P(candidate) of the exponential mechanism from the full window's block
    weights exp(−scale·d)."""
    return _law(tuple(values), rank, grid, scale, piecewise)


def law_at_target(values: list[float], target, grid: Grid, scale: float,
                  piecewise: bool = False, scaled: Scaled | None = None) -> np.ndarray:
    """``log_probabilities`` of a draw aimed at ``target`` (a ``RankRef``) among the
    sorted ``values``, its rank kept within 1..n as ``instance_releases`` keeps it; with
    ``scaled`` a MAX or MIN by the scaled distance, from its own blocks."""
    n = len(values)
    rank = min(max(1, target.rank(n)), max(n, 1))
    if scaled is None:
        return log_probabilities(values, rank, grid, scale, piecewise)
    return _scaled_law(tuple(values), rank, grid, scale, scaled)


@functools.lru_cache(maxsize=4096)
def _scaled_law(values: tuple[float, ...], rank: int, grid: Grid, scale: float,
                scaled: Scaled) -> np.ndarray:
    n, listed = len(values), list(values)
    found = scaled_blocks(blocks(n, n if scaled.largest else 1, grid, 1, listed), n, rank,
                          grid, 1, listed, scaled)
    assert all(block.exact for block in found)
    logs = np.array([-scale * float(d) for d, _ in expanded(found, grid, rank)])
    return logs - np.logaddexp.reduce(logs)


def groups_loss(before: list[np.ndarray], after: list[np.ndarray]) -> float:
    """The privacy loss of the groups' draws together (the ``change`` of a brute-force
    test over per-group laws): Σ over groups of max |Δ log P|."""
    return sum(float(np.abs(b - a).max()) for b, a in zip(before, after))


@functools.lru_cache(maxsize=4096)  # the neighbours of a data set repeat its values
def _law(values: tuple[float, ...], rank: int, grid: Grid, scale: float,
         piecewise: bool) -> np.ndarray:
    found = blocks(len(values), rank, grid, 1, list(values), piecewise)
    logs = np.array([-scale * float(d) for d, exact in expanded(found, grid, rank)])
    assert all(block.exact for block in found)
    return logs - np.logaddexp.reduce(logs)


def released_both_ways(engine, plan, seed: int) -> tuple[list, list]:
    """Every group of ``plan`` released from one draw of its statistics twice, from the
    same seeded bits: by ``release_groups`` (what is alike in every group worked out
    once) and by ``release_group`` of each group in turn with nothing kept between them.
    The two must be equal: the samplers are called alike either way."""
    from proxy.privacy.noisy_answers import Calibration, release_group, release_groups
    from proxy.statistics import GroupStats

    shift, groups, _ = engine.statistics(plan)
    calibration, keys = Calibration(plan.mechanism.model, shift), plan.group_keys()
    together = release_groups(plan, groups, keys, calibration, SeededSource(seed))
    source = SeededSource(seed)
    return together, [release_group(plan, groups.get(key, GroupStats()), calibration, source)
                      for key in keys]
