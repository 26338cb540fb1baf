"""STDDEV and VARIANCE (sample and population) and their sensitivities.

The statistic. x₁..xₙ are the normalised values in scope (in [L, U]), m their mean and
M2 = Σ(xᵢ − m)² (the backend's VAR_POP · n). VAR_SAMP = M2/(n − 1) for n ≥ 2 and
VAR_POP = M2/n for n ≥ 1; with fewer values (SQL's NULL) the answer is 0, so that every
data set has a finite answer and the released value never says whether the scope is
tiny. STDDEV_* = √VAR_*.

iDP: local sensitivity from the scope's n, m, M2, x₍₁₎ and x₍ₙ₎ (derivation below, also
in docs/privacy.md), checked by brute force in tests/privacy/test_variance_bruteforce.py.
A neighbour modifies s = c·g records: k of them were in scope (0 ≤ k ≤ min(s, n)), j are
after (0 ≤ j ≤ s), so it removes a set R (|R| = k) and adds a set A (|A| = j) of values
in [L, U], and n' = n − k + j.

* Upper bound. M2 is the least Σ(x − c)² over c, so M2(D') ≤ Σ_{D'}(x − m)² =
  M2 − Σ_R(x − m)² + Σ_A(x − m)² ≤ M2 + j·w², with w = max(U − m, m − L) (w = U − L
  for an empty scope, measuring from any point of [L, U]). Also no n'
  values in [L, U] have M2 above ⌊n'/2⌋⌈n'/2⌉(U − L)²/n' (half at each end).
* Lower bound. Adding values never lowers M2 (M2 grows by |S|/(|S|+1)·(v − mean)²), so
  M2(D') ≥ M2(D − R). With m' the mean of D − R, M2(D) ≤ Σ_D(x − m')² =
  M2(D − R) + Σ_R(x − m')², and for x ∈ R, |x − m'| ≤ d_k = min(x₍ₙ₎ − x₍₁₎, w_d·n/(n − k))
  (both x and m' lie in [x₍₁₎, x₍ₙ₎]; |m' − m| = |Σ_R(x − m)|/(n − k) ≤ k·w_d/(n − k) with
  w_d = max(x₍ₙ₎ − m, m − x₍₁₎)). So M2(D') ≥ max(0, M2 − k·d_k²); 0 when k = n.
* For each reachable n' the variance lies between those bounds over n' − 1 (n' for the
  population form), or is 0 when n' < 2 (n' < 1). For a given n' the upper bound is
  largest with the most additions, j = min(s, n' − n + min(s, n)), and the lower one
  with the most removals, k = min(s, n, s + n − n'): one pass over n'.

The range [lo, hi] holds every neighbour's variance, so LS_VAR = max(hi − v, v − lo)
and, √ being increasing, LS_STDDEV = max(√hi − √v, √v − √lo). It is an upper bound,
not the exact LS (that needs the value nearest the mean, which the backend is not asked
for, and the mean's exact drift): measured row-level, at most 2× the exact LS on scopes
of a handful of values, 1.25× at 16 values, 1.1× at 32, closer as the scope grows.

DP: three noisy sums over the clipped scope — N, Σ(x − c) and Σ(x − c)² about the
domain's centre c, each with ε/3 and its clamped-sum sensitivity — combined afterwards
(``noisy_moments``); the noise on the variance shrinks like 1/N. (The variance itself has
global sensitivity (U − L)²/2, every answer lying in [0, (U − L)²/2], whatever s and N:
``global_sensitivity_of_variance``, the bound the brute force checks, and far coarser.)
"""

from __future__ import annotations

import math

from proxy.loss import Loss
from proxy.privacy.mechanisms import Noisy, grid_step, laplace_integer, laplace_real
from proxy.privacy.sampler import RandomSource
from proxy.privacy.sensitivity import clamped_sum_sensitivity, finite_only
from proxy.statistics import BOTTOM, TOP, RankRef

SAMPLE, POPULATION = "sample", "population"


def variance_of(n: int, m2: float, form: str) -> float:
    """The answer for n values with Σ(x − mean)² = m2 (0 when the form is undefined)."""
    divisor = n - 1 if form == SAMPLE else n
    return max(m2, 0.0) / divisor if divisor >= 1 else 0.0


def largest_m2(n: int, lower: float, upper: float) -> float:
    """The largest Σ(x − mean)² of n values in [lower, upper]: half at each end."""
    return (n // 2) * ((n + 1) // 2) * (upper - lower) ** 2 / n if n else 0.0


def largest_variance(form: str, lower: float, upper: float) -> float:
    """The largest answer on any data: (U − L)²/2 (sample, n = 2) or (U − L)²/4."""
    return (upper - lower) ** 2 / (2 if form == SAMPLE else 4)


@finite_only
def neighbour_variance_range(n: int, total: float, m2: float, smallest: float | None,
                             largest: float | None, shift: int, lower: float, upper: float,
                             form: str) -> tuple[float, float]:
    """[lo, hi] holding the variance of every data set that modifies up to ``shift``
    records of the scope (n values, sum ``total``, Σ(x − mean)² = ``m2``, extremes
    ``smallest``/``largest``, all in [lower, upper]); see the module docstring."""
    least_size = 2 if form == SAMPLE else 1
    if n == 0:  # no mean to measure from: any c in [L, U] bounds Σ(x − c)² by (U − L)²
        spread = width = 0.0
        reach = upper - lower
    else:
        mean = min(max(total / n, lower), upper)
        smallest = mean if smallest is None else smallest
        largest = mean if largest is None else largest
        spread = max(largest - mean, mean - smallest, 0.0)
        width = max(largest - smallest, 0.0)
        reach = max(upper - mean, mean - lower)
    removable = min(shift, n)
    low, high = math.inf, 0.0
    for size in range(n - removable, n + shift + 1):
        if size < least_size:
            low = 0.0
            continue
        divisor = size - 1 if form == SAMPLE else size
        added = min(shift, size - n + removable)
        high = max(high, min(m2 + added * reach ** 2, largest_m2(size, lower, upper)) / divisor)
        removed = min(removable, shift + n - size)
        if removed >= n:
            kept = 0.0
        else:
            gap = min(width, spread * n / (n - removed))
            kept = max(0.0, m2 - removed * gap ** 2)
        low = min(low, kept / divisor)
    return (0.0 if low == math.inf else low), high


@finite_only
def local_sensitivity_of_variance(n: int, total: float, m2: float, smallest: float | None,
                                  largest: float | None, shift: int, lower: float,
                                  upper: float, form: str, root: bool) -> tuple[float, float]:
    """(answer, LS) of VAR_* (``root``: STDDEV_*) under iDP (module docstring)."""
    answer = variance_of(n, m2, form)
    low, high = neighbour_variance_range(n, total, m2, smallest, largest, shift, lower, upper,
                                         form)
    low, high = min(low, answer), max(high, answer)
    if root:
        return math.sqrt(answer), max(math.sqrt(high) - math.sqrt(answer),
                                      math.sqrt(answer) - math.sqrt(low))
    return answer, max(high - answer, answer - low)


@finite_only
def global_sensitivity_of_variance(lower: float, upper: float, form: str, root: bool) -> float:
    """DP: every answer lies in [0, largest_variance], so no change exceeds it."""
    largest = largest_variance(form, lower, upper)
    return math.sqrt(largest) if root else largest


def spread_and_sensitivity(kind: str, stats, column,
                           shift: int) -> tuple[float, float, float]:
    """(answer, local sensitivity, largest possible answer) of one STDDEV_*/VAR_*
    aggregate under iDP (``kind``: proxy.vocabulary's VAR_SAMP, VAR_POP, STDDEV_SAMP
    or STDDEV_POP) from the backend's statistics of its column."""
    form = POPULATION if kind.endswith("_pop") else SAMPLE
    root = kind.startswith("stddev")
    lower, upper = column.lower, column.upper
    largest = largest_variance(form, lower, upper)
    largest = math.sqrt(largest) if root else largest
    values = stats.values
    smallest = values.get(RankRef(BOTTOM, 0))
    biggest = values.get(RankRef(TOP, 0))
    answer, sensitivity = local_sensitivity_of_variance(
        stats.n, stats.total, stats.m2, smallest, biggest, shift, lower, upper, form, root)
    return answer, sensitivity, largest


def spread_note(kind: str, local: bool) -> str:
    """``local``: raw iDP's spread, noised as a whole; else from noisy moments. (Where
    SQL gives NULL, too few values in scope, the answer is 0: docs/privacy.md §3.8 says
    so once; a note on every answer would say it also of 20,000 values.)"""
    what = "STDDEV" if kind.startswith("stddev") else "VARIANCE"
    if not local:
        return (f"{what} from a noisy count and noisy sums of x and x² (each a third of "
                "the epsilon)")
    return f"{what} with noise scaled to its local sensitivity"


def moment_sums(n: int, total: float, m2: float, lower: float,
                upper: float) -> tuple[float, float]:
    """Σ(x − c) and Σ(x − c)² about the domain's centre c = (L + U)/2, from n, Σx and M2
    (Σ(x − c)² = M2 + n·(mean − c)²): each record adds a value in [−h, h] and in [0, h²],
    h = (U − L)/2."""
    centre = (lower + upper) / 2
    first = total - n * centre
    second = max(m2, 0.0) + (first * first / n if n else 0.0)
    return first, second


def noisy_moments(kind: str, stats, column, shift: int, loss: Loss,
                  rng: RandomSource) -> Noisy:
    """STDDEV/VARIANCE under DP from three noisy sums over the (clipped) scope, each with
    ε/3 — the count N (sensitivity s), S1 = Σ(x − c) (values in [−h, h]: 2h·s) and
    S2 = Σ(x − c)² (values in [0, h²]: h²·s) — combined afterwards (post-processing):
    VAR = (S2 − S1²/N)/(N − 1) (÷ N for the population form), clamped to [0, largest].
    The noise on the variance shrinks like 1/N, unlike the global sensitivity of the
    variance itself ((U − L)²/2 whatever N). Sequential composition: 3 · ε/3 = ε.

    The 95 % bound: each sum inside its 1 − 5 %/3 interval (union bound), the answer's
    largest distance to the variance at the corners of that box (and at S1 = 0 when the
    box holds it, where S1² is least)."""
    lower, upper = column.lower, column.upper
    half = (upper - lower) / 2
    first, second = moment_sums(stats.n, stats.total, stats.m2, lower, upper)
    of_count, of_linear, of_square = loss.split(1, 1, 1)
    step = grid_step(column.resolution)
    count = laplace_integer(stats.n, shift, of_count.epsilon, rng, MOMENTS_CONFIDENCE)
    linear = laplace_real(first, clamped_sum_sensitivity(shift, -half, half), of_linear.epsilon,
                          rng, step, MOMENTS_CONFIDENCE)
    square = laplace_real(second, clamped_sum_sensitivity(shift, 0.0, half * half),
                          of_square.epsilon, rng, step, MOMENTS_CONFIDENCE)
    return spread_of_moments(kind, count, linear, square, lower, upper,
                             "discrete Laplace / Laplace (sampled on the column's grid): "
                             "noisy count and moment sums")


MOMENTS_CONFIDENCE = 1 - 0.05 / 3  # each of three noisy sums: all three at once ≥ 95 %


def spread_of_moments(kind: str, count: Noisy, linear: Noisy, square: Noisy, lower: float,
                      upper: float, mechanism: str) -> Noisy:
    """STDDEV/VARIANCE from a noisy count N and noisy sums S1 = Σ(x − o), S2 = Σ(x − o)²
    about any origin o (the variance does not depend on it): (S2 − S1²/N)/(N − 1) (÷ N
    for the population form), clamped to [0, largest]; post-processing of the three.
    The 95 % bound: the answer's largest distance at the corners of the three sums'
    intervals (and at S1 = 0 when that box holds it, where S1² is least)."""
    form = POPULATION if kind.endswith("_pop") else SAMPLE
    root = kind.startswith("stddev")
    largest = largest_variance(form, lower, upper)

    def combined(n: float, s1: float, s2: float) -> float:
        least = 2 if form == SAMPLE else 1
        n = max(n, least)
        value = (s2 - s1 * s1 / n) / (n - 1 if form == SAMPLE else n)
        value = min(max(value, 0.0), largest)
        return math.sqrt(value) if root else value

    value = combined(count.value, linear.value, square.value)
    s1_values = [linear.value - linear.ci95, linear.value + linear.ci95]
    if s1_values[0] <= 0 <= s1_values[1]:
        s1_values.append(0.0)
    spread = max(abs(combined(n, s1, s2) - value)
                 for n in (count.value - count.ci95, count.value + count.ci95)
                 for s1 in s1_values
                 for s2 in (square.value - square.ci95, square.value + square.ci95))
    return Noisy(value, spread, mechanism)
