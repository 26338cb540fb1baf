"""A differentially private upper bound of the local sensitivity (``report_scale =
"private"``, SPEC §3.3): propose-test-release over a public ladder of levels, tested
with AboveThreshold, so that the printed 95 % bound is not a function of the data.

Terms. A(k)(D) bounds the local sensitivity of every data set at distance ≤ k from D
(k neighbour steps of s = c·g records), with the sorted values in scope padded with L
below rank 1 and U above rank n — the A(k) of privacy/smooth_sensitivity.py. What the
mechanism needs of them (tests/privacy/test_private_bound.py checks each by
enumerating neighbours): A(0)(D) ≥ LS(D) as privacy/sensitivity.py computes it;
A(k)(D) ≤ A(k + 1)(D') for every neighbour D'; A non-decreasing in k; A(k) ≤ U − L
(values clamped to [L, U]: every term is a difference of two of them). Only MAX with a
declared U and MIN with a declared L qualify (without the bound no level is an upper
bound), and both bounds must be declared and finite.

Distances. Levels b_0 < … < b_J are powers of two from the floor's to the first one
≥ U − L, so b_J ≥ every LS. d_j(D) = min{k : A(k)(D) > b_j}, capped at a public K.
From A(k)(D) ≤ A(k + 1)(D'), |min(d_j(D), K) − min(d_j(D'), K)| ≤ 1 for every j (the
cap keeps it: min(·, K) is 1-Lipschitz). d_j ≥ 1 means A(0) ≤ b_j, hence LS ≤ b_j.

AboveThreshold (Dwork–Roth Alg. 1; Lyu, Su and Li 2017, Alg. 1) on the integers,
ε_b-DP: T̂ = T + DL(2/ε_b); the first j < J with d_j + DL(4/ε_b) ≥ T̂ returns b_j,
else b_J. The discrete version keeps the proof: shifting the threshold noise by 1
costs e^{ε_b/2}, the passing query's noise by 2 another e^{ε_b/2}.

Threshold. A level below LS has d_j = 0; the answer fails only if such a level passes.
With a = ⌈(2/ε_b)·ln(2/f)⌉ and T = a + ⌈(4/ε_b)·ln(2J/f)⌉ (J the levels below the top):
P(ρ ≤ −a) ≤ e^{−ε_b·a/2} ≤ f/2, and otherwise a zero-distance level passes only if its
noise is ≥ T − a + 1, probability ≤ e^{−ε_b(T−a+1)/4} < f/(2J) each, J at most:
P(returned level < LS) ≤ f.

Horizon. K = T + ⌈(4/ε_b)·ln(2/f)⌉ + ⌈(2/ε_b)·ln(2/f)⌉, at most K_CAP: a level whose
distance reaches K passes with probability ≥ 1 − f, as it would uncapped, so larger
distances need not be read. Any public K is private and sound (capping only lowers
distances, so levels pass less often and the answer can only go up); K_CAP bounds
the window, 2·K·s + 1 ranks around the percentile rank or K·s + 1 from the top, read
once (asked for: a ``RankRequest`` of privacy/requests.py, which the engine reads). d_j
is found by binary search in k (A is monotone), O(J·log K) terms of O(K·s) each.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from typing import NamedTuple

from proxy.privacy.requests import Asking
from proxy.privacy.sampler import RandomSource, discrete_laplace
from proxy.privacy.sensitivity import round_up_to_power_of_two
from proxy.privacy.smooth_sensitivity import _padded, max_term, percentile_term
from proxy.statistics import GroupStats, percentile_rank
from proxy.vocabulary import MAX, PERCENTILE, QueryPlan

K_CAP = 1 << 17
# The share of each bounded aggregate's ε that pays for its bound, and the bound's
# failure probability: the printed 95% bound holds with probability ≥ (1 − 2.5%)², as
# the noise's interval is then taken at 97.5%.
BOUND_SHARE = Fraction(1, 10)
FAILURE = 0.025


class Terms(NamedTuple):
    """A(k) for 0 ≤ k < horizon, from one window read."""
    term: Callable[[int], float]
    horizon: int


def private_levels(plan: QueryPlan, group: GroupStats, shift: int, floor: float,
                   rng: RandomSource) -> Asking[dict[int, float]]:
    """The private level of every aggregate that can have one (a percentile, MAX or
    MIN of a column with both bounds declared), by aggregate index, each paid with
    BOUND_SHARE of that aggregate's ε. ``floor``: the rules' floor, raised to the
    column's public resolution; each asks for the window of ranks in scope it needs."""
    epsilon_b = plan.aggregate_loss.split(BOUND_SHARE, 1 - BOUND_SHARE)[0].epsilon
    found = {}
    for index, agg in enumerate(plan.aggregates):
        column = plan.table.columns.get(agg.column) if agg.column else None
        if (not agg.kind.row.ranked or column.lower is None
                or column.upper is None):
            continue
        lower, upper = column.lower, column.upper
        levels = ladder(max(floor, column.resolution), upper - lower)
        reach = horizon(epsilon_b, levels, FAILURE)
        n = group.column(agg.column).n
        if agg.kind == PERCENTILE:
            terms = yield from percentile_terms(n, percentile_rank(n, agg.fraction), shift,
                                                lower, upper, reach, agg.column)
        elif agg.kind == MAX:
            terms = yield from max_terms(n, shift, lower, upper, reach, agg.column)
        else:
            terms = yield from min_terms(n, shift, lower, upper, reach, agg.column)
        found[index] = private_level(terms, levels, epsilon_b, rng, FAILURE)
    return found


def ladder(floor: float, top: float) -> list[float]:
    """Powers of two from round_up_pow2(floor) to the first one ≥ top (= U − L)."""
    if not (0 < floor < math.inf and 0 < top < math.inf):
        raise ValueError("the private bound needs a positive finite floor and domain")
    levels = [round_up_to_power_of_two(floor)]
    while levels[-1] < top:
        levels.append(levels[-1] * 2)
    if math.isinf(levels[-1]):
        raise ValueError("the domain is too wide for a private bound")
    return levels


def threshold(epsilon_b: float, levels: list[float], failure: float) -> int:
    """T of the module docstring: P(returned level < LS) ≤ failure."""
    below_top = len(levels) - 1
    if below_top == 0:
        return 0
    epsilon_b = float(epsilon_b)
    return (math.ceil(2 / epsilon_b * math.log(2 / failure))
            + math.ceil(4 / epsilon_b * math.log(2 * below_top / failure)))


def horizon(epsilon_b: float, levels: list[float], failure: float) -> int:
    """K: the cap on distances, hence the window read."""
    epsilon_b = float(epsilon_b)
    margin = math.log(2 / failure) / epsilon_b
    return min(K_CAP, threshold(epsilon_b, levels, failure)
               + math.ceil(4 * margin) + math.ceil(2 * margin))


def percentile_terms(n: int, rank: int, shift: int, lower: float, upper: float,
                     horizon: int, column: str = "") -> Asking[Terms]:
    """A(k) of the percentile at ``rank``; asks for ascending ranks of ``column``."""
    reach = horizon * shift
    x = yield from _padded(column, n, rank - reach, rank + reach, lower, upper)
    return Terms(_checked(lambda k: percentile_term(x, reach, shift, k), horizon), horizon)


def max_terms(n: int, shift: int, lower: float, upper: float, horizon: int,
              column: str = "", negated: bool = False) -> Asking[Terms]:
    """A(k) of MAX with declared U; asks for the ranks of ``column`` from the top (1 is
    the maximum), of −x when ``negated`` (``min_terms``)."""
    reach = horizon * shift
    top = yield from _padded(column, n, n - reach, n, lower, upper, from_top=True,
                             negated=negated)
    return Terms(_checked(lambda k: float(max_term(top, reach, shift, upper, k)), horizon),
                 horizon)


def min_terms(n: int, shift: int, lower: float, upper: float, horizon: int,
              column: str = "") -> Asking[Terms]:
    """MIN(x) = −MAX(−x) with declared L."""
    return (yield from max_terms(n, shift, -upper, -lower, horizon, column, negated=True))


def distances(terms: Terms, levels: list[float]) -> list[int]:
    """min(d_j, K) for every level below the top, by binary search (A is monotone)."""
    found, low = [], 0
    for level in levels[:-1]:
        high = terms.horizon  # invariant: A(k) ≤ level for k < low; d_j ≤ high
        while low < high:
            middle = (low + high) // 2
            if terms.term(middle) > level:
                high = middle
            else:
                low = middle + 1
        found.append(low)  # d_j is non-decreasing in j: the next search starts here
    return found


def above_threshold(capped: list[int], threshold: int, epsilon_b: Fraction | float,
                    rng: RandomSource) -> int:
    """The first j with capped[j] + DL(4/ε_b) ≥ T + DL(2/ε_b), else len(capped)."""
    epsilon_b = Fraction(epsilon_b)
    noisy_threshold = threshold + discrete_laplace(2 / epsilon_b, rng)
    for j, distance in enumerate(capped):
        if distance + discrete_laplace(4 / epsilon_b, rng) >= noisy_threshold:
            return j
    return len(capped)


def private_level(terms: Terms, levels: list[float], epsilon_b: Fraction | float,
                  rng: RandomSource, failure: float = 0.05) -> float:
    """An ε_b-DP level ≥ LS with probability ≥ 1 − failure (≥ round_up_pow2(max(LS, floor))
    then, the levels being powers of two from the floor's)."""
    if len(levels) == 1:
        return levels[0]
    j = above_threshold(distances(terms, levels), threshold(epsilon_b, levels, failure),
                        epsilon_b, rng)
    return levels[j]


def _checked(term: Callable[[int], float], horizon: int) -> Callable[[int], float]:
    def checked(k: int) -> float:
        if not 0 <= k < horizon:
            raise ValueError(f"A({k}) is outside the window read (horizon {horizon})")
        return term(k)
    return checked
