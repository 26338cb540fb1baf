"""Partition selection: which keys of a GROUP BY column without declared keys are
answered, chosen from the data under (ε, δ)-DP (docs/privacy.md §3.12).

The count of a key is the number of privacy units (rows, without a unit) with a row in
scope holding it, each unit counted in at most k of its keys (the backend keeps its k
smallest: ``proxy.pushdown.selection``). A neighbour modifies all records of m units
(m = ``group_size``); each of them leaves at most k keys and joins at most k, so the
counts of the keys present in both data sets move by at most 2km in L1, and at most km
keys are present in one of them only, each held there by at most m units. Every key of
the data gets discrete Laplace noise of scale 2km/ε (exact, on the integers:
``proxy.privacy.sampler``), and is released when its noisy count reaches the threshold
T. T is the least integer with km·P(Z ≥ T − m) ≤ δ for Z ~ DL(2km/ε), where
P(Z ≥ t) = αᵗ/(1 + α) for t ≥ 1, α = exp(−ε/(2km)):

    T = m + max(1, ⌈(2km/ε)·ln(km / ((1 + α)·δ))⌉)

which is Wilson et al.'s τ = 1 + (k/ε)·ln(k/(2δ)) ("Differentially private SQL with
bounded user contribution", PoPETs 2020, §4, union-bound form) for their add-or-remove
neighbour (m = 1, scale k/ε, continuous Laplace), here for the modify neighbour (scale
2km/ε) and with the discrete law's tail, which is heavier than ½·e^(−t/b) by the factor
2/(1 + α). The released keys (and their noisy counts) are then (ε, δ)-DP; the proof is in
docs/privacy.md §3.12, and tests/privacy/test_partition_selection.py computes the exact
privacy loss of every neighbour of small data sets.

Nothing here is a function of the data but the counts themselves: k, m, ε, δ, T and the
cap on the number of keys are public.
"""

from __future__ import annotations

import functools
import heapq
import math
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import ROUND_FLOOR, Decimal, localcontext
from fractions import Fraction
from typing import Any

from proxy.interrupts import checkpoint
from proxy.privacy.sampler import RandomSource, bernoulli_exp_ratio, discrete_laplace
from proxy.vocabulary import SELECTED, QueryPlan

SELECTION_SHARE = Decimal("0.5")  # of a query's ε, spent on choosing its keys
# keys drawn between two looks for a cancel (a key's draw takes a few microseconds; a
# million keys took 6.5 s that neither a cancel nor the statement timeout stopped)
CHECKED_EVERY = 4096
SELECTION_BATCH = 10_000  # (key, count) rows read from the backend at a time


@dataclass(frozen=True)
class PartitionSelection:
    """τ-thresholding of noisy per-key unit counts: ``keys_per_unit`` k (the most keys one
    unit adds to), ``units_changed`` m (units one neighbour modifies), ε and δ."""

    keys_per_unit: int
    units_changed: int
    epsilon: Fraction
    delta: Decimal

    @property
    def sensitivity(self) -> int:
        """L1 change of the counts of the keys present in both neighbours: 2km."""
        return 2 * self.keys_per_unit * self.units_changed

    @property
    def scale(self) -> Fraction:
        """The discrete Laplace scale 2km/ε."""
        return Fraction(self.sensitivity) / self.epsilon

    @property
    def threshold(self) -> int:
        """T: a key is released when its count plus noise is at least T."""
        return _threshold(self.keys_per_unit * self.units_changed, self.units_changed,
                          self.scale, self.delta)

    def keep_probability(self, count: int) -> float:
        """P(count + Z ≥ T), Z ~ DL(b): α^(T−count)/(1 + α) below T, else
        1 − α^(count−T+1)/(1 + α) (P(Z ≥ t) = αᵗ/(1 + α) for t ≥ 1)."""
        alpha = math.exp(-1 / float(self.scale))
        gap = self.threshold - count
        if gap >= 1:
            return alpha ** gap / (1 + alpha)
        return 1 - alpha ** (1 - gap) / (1 + alpha)

    def failure(self) -> float:
        """km·P(m + Z ≥ T): the probability that one of the at most km keys held only by
        the modified units is released; at most δ, the δ of the release."""
        return self.keys_per_unit * self.units_changed * \
            self.keep_probability(self.units_changed)

    def kept(self, count: int, rng: RandomSource) -> int | None:
        """count + Z (Z ~ DL(b)) when it reaches T, else None (``_kept``)."""
        return _kept(count, self.threshold, self.scale, rng)

    def select(self, counts: Iterable[tuple[Any, int]], cap: int, rng: RandomSource
               ) -> tuple[Any, ...]:
        """The released keys, in order: those whose noisy count reaches T; of more than
        ``cap`` of them, the ``cap`` with the largest noisy counts (ties by key). Both
        are functions of the released (key, noisy count) pairs alone, so the cap is
        post-processing. ``counts``: every key of the data with its count (≥ 1)."""
        threshold, scale = self.threshold, self.scale
        kept = []
        for index, (key, count) in enumerate(counts):
            if not index % CHECKED_EVERY:
                checkpoint()  # a column of a million distinct keys draws for seconds
            noisy = _kept(int(count), threshold, scale, rng)
            if noisy is not None:
                kept.append((-noisy, key))
                if len(kept) > 2 * cap:  # the cap best so far: memory bounded by the cap
                    kept = heapq.nsmallest(cap, kept)
        if len(kept) > cap:
            kept = heapq.nsmallest(cap, kept)
        return tuple(sorted(key for _, key in kept))


def _kept(count: int, threshold: int, scale: Fraction, rng: RandomSource) -> int | None:
    """count + Z for Z ~ DL(``scale``) when it reaches ``threshold``, else None: exactly
    that law, drawn cheaply for the many counts below the threshold. There, with
    t = T − count ≥ 1, P(count + Z = T + g) = P(Z = t + g) = αᵗ·P(Z = g) for g ≥ 0: a
    Bernoulli(αᵗ) (exp(−t/b), CKS Algorithm 1 on integers: about two Bernoulli(e⁻¹)
    trials when αᵗ is small), then Z itself, kept when it is ≥ 0, at T + Z. Drawing Z
    for every key instead cost about 20 µs a key."""
    gap = threshold - count
    if gap <= 0:
        noisy = count + discrete_laplace(scale, rng)
        return noisy if noisy >= threshold else None
    if not bernoulli_exp_ratio(gap * scale.denominator, scale.numerator, rng):
        return None
    above = discrete_laplace(scale, rng)
    return threshold + above if above >= 0 else None


def selection_of(plan: QueryPlan) -> PartitionSelection:
    """The partition selection of each GROUP BY term of ``plan`` without declared keys
    (``plan.delta`` set): k = the table's ``max_rows_per_unit`` (1 without a privacy
    unit), m = its ``group_size``, and an equal part of the selection's share of the
    query's ε and of its δ per such term. A function of the plan (text and rules)."""
    table = plan.table
    count = sum(term.kind == SELECTED for term in plan.group_by)
    per_unit = table.max_rows_per_unit if table.privacy_unit else 1
    return PartitionSelection(per_unit, table.group_size,
                              plan.loss.epsilon * Fraction(SELECTION_SHARE) / count,
                              plan.delta / count)


@functools.lru_cache(maxsize=256)
def _threshold(keys: int, units: int, scale: Fraction, delta: Decimal) -> int:
    """m + max(1, ⌈b·ln(km/((1 + α)δ))⌉) with b = ``scale`` and km = ``keys``, in
    60-digit decimal arithmetic; ``floor(x + 10⁻³⁰) + 1`` stands for ⌈x⌉ so that a
    rounding error in the last digits can only raise T (one more unit when x is a
    whole number), never lower it below what δ needs."""
    with localcontext() as context:
        context.prec = 60
        b = Decimal(scale.numerator) / Decimal(scale.denominator)
        alpha = (-1 / b).exp()
        steps = b * (Decimal(keys) / ((1 + alpha) * delta)).ln()
        whole = int((steps + Decimal("1e-30")).to_integral_value(rounding=ROUND_FLOOR)) + 1
    return units + max(1, whole)


def whole_root(value: int, degree: int) -> int:
    """The largest r with r**degree ≤ value (value ≥ 1): the keys each of ``degree``
    selected terms may keep so that their product stays within ``value``."""
    root = max(1, round(value ** (1 / degree)))
    while root ** degree > value:
        root -= 1
    while (root + 1) ** degree <= value:
        root += 1
    return root
