"""β-smooth sensitivity of percentiles and of MAX/MIN (seed 000 §VI-A2, §VI-B2; Nissim,
Raskhodnikova and Smith 2007), for DP with a declared domain [L, U].

S(D) = max_k e^{−kβ}·A(k), A(k) the largest local sensitivity at distance k. With x₍ᵢ₎
the sorted values in scope, padded with L below rank 1 and U above rank n, and s the
records one neighbour step may change (SPEC §5.2):
  percentile at rank r: A(k) = max_{0 ≤ t ≤ (k+1)s} x₍ᵣ₊ₜ₎ − x₍ᵣ₊ₜ₋₍ₖ₊₁₎ₛ₎
  MAX:                  A(k) = max(U − x₍ₙ₋ₖₛ₎, x₍ₙ₎ − x₍ₙ₋₍ₖ₊₁₎ₛ₎, U − x₍ₙ₋₍ₖ₊₁₎ₛ₊₁₎ [k ≥ 1])
(seed 000 writes MAX for s = 1, where the third term is the first; for s > 1 it is
raising the top record to U and lowering ks − 1 of the next, which the brute-force
test found).

Only a window of ranks is read: once e^{−(K+1)β}(U − L) is at most the maximum found,
no larger k can raise it (A(k) ≤ U − L), so K grows (×4) only until then, or until the
window covers all n values. The seed calls the full maximum O(n²); this reads
O(K·s) values and does O(K²·s) arithmetic. tests/privacy/test_smooth_bruteforce.py
checks S ≥ LS and S(D) ≤ e^β·S(D') over every neighbour D' of small data sets.
The window's values are normalised in the backend (finite, within the domain); each
read and each S is checked finite (``finite_only``, ``require_finite``). Each S is a
generator that asks for its windows (``RankRequest``, privacy/requests.py): the engine
reads them, a test answers them from a list.
"""

from __future__ import annotations

import math

import numpy as np

from proxy.privacy.requests import Asking, RankRequest
from proxy.privacy.sensitivity import finite_only, require_finite
from proxy.privacy.smooth_noise import admissible
from proxy.statistics import GroupStats, percentile_rank
from proxy.vocabulary import MAX, PERCENTILE, QueryPlan

_FIRST_K = 16


def smooth_sensitivities(plan: QueryPlan, group: GroupStats,
                         shift: int) -> Asking[dict[int, float]]:
    """S of every percentile, MAX and MIN of the plan, by aggregate index, at
    β = ε/γ; each asks for the ranks of its column in scope that it needs."""
    beta = admissible(float(plan.epsilon), plan.mechanism.gamma)[1]
    found = {}
    for index, agg in enumerate(plan.aggregates):
        if not agg.kind.row.ranked:
            continue
        column = plan.table.columns[agg.column]
        n, lower, upper = group.column(agg.column).n, column.lower, column.upper
        if agg.kind == PERCENTILE:
            found[index] = yield from smooth_sensitivity_of_percentile(
                n, percentile_rank(n, agg.fraction), shift, beta, lower, upper, agg.column)
        elif agg.kind == MAX:
            found[index] = yield from smooth_sensitivity_of_max(n, shift, beta, lower, upper,
                                                                agg.column)
        else:
            found[index] = yield from smooth_sensitivity_of_min(n, shift, beta, lower, upper,
                                                                agg.column)
    return found


@finite_only
def smooth_sensitivity_of_percentile(n: int, rank: int, shift: int, beta: float,
                                     lower: float, upper: float,
                                     column: str = "") -> Asking[float]:
    """Asks for ascending ranks of ``column`` around ``rank``."""
    def terms(k_max: int) -> Asking[list[float]]:
        reach = (k_max + 1) * shift
        x = yield from _padded(column, n, rank - reach, rank + reach, lower, upper)
        return [percentile_term(x, reach, shift, k) for k in range(k_max + 1)]

    return (yield from _smooth(terms, beta, upper - lower))


@finite_only
def smooth_sensitivity_of_max(n: int, shift: int, beta: float, lower: float, upper: float,
                              column: str = "", negated: bool = False) -> Asking[float]:
    """Asks for the ranks of ``column`` counted from the top (1 is the maximum); of −x
    when ``negated`` (``smooth_sensitivity_of_min``)."""
    def terms(k_max: int) -> Asking[list[float]]:
        reach = (k_max + 1) * shift
        top = yield from _padded(column, n, n - reach, n, lower, upper, from_top=True,
                                 negated=negated)
        return [max_term(top, reach, shift, upper, k) for k in range(k_max + 1)]

    return (yield from _smooth(terms, beta, upper - lower))


@finite_only
def smooth_sensitivity_of_min(n: int, shift: int, beta: float, lower: float, upper: float,
                              column: str = "") -> Asking[float]:
    """MIN(x) = −MAX(−x): the bottom ranks of x are the top ranks of −x."""
    return (yield from smooth_sensitivity_of_max(n, shift, beta, -upper, -lower, column,
                                                 negated=True))


def percentile_term(x: np.ndarray, reach: int, shift: int, k: int) -> float:
    """A(k) of a percentile; x holds the padded ranks r − reach .. r + reach and
    (k + 1)·shift ≤ reach. Also used by privacy/private_bound.py."""
    width = (k + 1) * shift
    above = x[reach: reach + width + 1]  # ranks r .. r + width
    below = x[reach - width: reach + 1]  # ranks r − width .. r
    return float((above - below).max())


def max_term(top: np.ndarray, reach: int, shift: int, upper: float, k: int) -> float:
    """A(k) of MAX; top[i] is x₍ₙ₋reach₊ᵢ₎, so x₍ₙ₋ⱼ₎ = top[reach − j], and
    (k + 1)·shift ≤ reach. Also used by privacy/private_bound.py."""
    return max(upper - top[reach - k * shift], top[reach] - top[reach - (k + 1) * shift],
               upper - top[reach - (k + 1) * shift + 1] if k else 0.0)


def _smooth(terms, beta: float, span: float) -> Asking[float]:
    """max_k e^{−kβ}·A(k), widening the window until no further k can matter: a term
    e^{−(K+1)β}(U − L) below the maximum, or A(K) = U − L (the window reached past
    both ends of the data, and A never exceeds U − L). ``terms(K)`` asks for the window
    that A(0..K) need."""
    k_max = _FIRST_K
    while True:
        found = yield from terms(k_max)
        best = max(math.exp(-k * beta) * a for k, a in enumerate(found))
        if math.exp(-(k_max + 1) * beta) * span <= best or found[-1] >= span:
            return best
        k_max *= 4


def _padded(column: str, n: int, first: int, last: int, lower: float, upper: float,
            from_top: bool = False, negated: bool = False) -> Asking[np.ndarray]:
    """Values at ranks first..last (ascending), L below rank 1 and U above rank n: asked
    for from the top when ``from_top`` (ranks n+1−b .. n+1−a from the top are a..b), of
    −x when ``negated`` (its top ranks are the bottom ranks of x, negated)."""
    inside_first, inside_last = max(first, 1), min(last, n)
    values = []
    if inside_first <= inside_last:
        if from_top and not negated:
            values = (yield RankRequest(column, n + 1 - inside_last, n + 1 - inside_first,
                                        from_top=True))[::-1]
        elif from_top:
            values = [-v for v in (yield RankRequest(column, n + 1 - inside_last,
                                                     n + 1 - inside_first))][::-1]
        else:
            values = yield RankRequest(column, inside_first, inside_last)
    require_finite(values, "smooth sensitivity window")
    below = [lower] * max(0, min(last, 0) - first + 1)
    above = [upper] * max(0, last - max(first, n + 1) + 1)
    import numpy as np  # here: most answers never need it, and it costs every start

    return np.array(below + list(values) + above, dtype=float)
