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

DP: three noisy releases in turn (docs/privacy.md §3.8) — the count N, S1 = Σ(x − L),
whose mean m̂ = L + S1/N is then public, and S2 = Σ(x − m̂)², each term in [0, D²],
D = max(U − m̂, m̂ − L) — combined afterwards (``noisy_moments``; with a drawn clipping
bound, §3.14, ``clipped_centred_moments``; several rows per unit: each unit's
Σ(x − m̂)² clipped, read in a second statement, ``unit_centre`` and ``unit_moments``):
the variance is S2's, not the small
difference of two large noisy moments about a fixed origin (on ages that amplified
the noise about 15×), and its noise shrinks like 1/N. (The variance itself has global
sensitivity (U − L)²/2, every answer lying in [0, (U − L)²/2], whatever s and N:
``global_sensitivity_of_variance``, the bound the brute force checks, and far coarser.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from proxy.loss import Loss
from proxy.privacy.contribution_bounds import draw_rung, sum_at
from proxy.privacy.mechanisms import Noisy, grid_step, laplace_integer, laplace_real
from proxy.privacy.sampler import RandomSource
from proxy.privacy.sensitivity import clamped_sum_sensitivity, finite_only
from proxy.statistics import BOTTOM, TOP, RankRef, sum_shrink

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
        return (f"{what} from a noisy count and a noisy mean (a tenth of the epsilon each) "
                "and the noisy sum of squared distances to that mean")
    return f"{what} with noise scaled to its local sensitivity"


def square_about(n: int, total: float, m2: float, point: float) -> float:
    """Σ(x − p)² of n values with sum ``total`` and Σ(x − mean)² = ``m2``: M2 +
    n·(mean − p)² (each value in [L, U] adds a term in [0, max(U − p, p − L)²])."""
    if not n:
        return 0.0
    offset = total / n - point
    return max(m2, 0.0) + n * offset * offset


# A spread's loss under DP (docs/privacy.md §3.8): the count a tenth, and where a
# clipping bound is drawn (§3.14) the draw a fifth; the rest goes to the mean and the
# squared distances to it, split by the released count (``mean_and_squares``). Public,
# as is whether the bound is drawn (``draws_bound``).
COUNT_PART, DRAW_PART = Fraction(1, 10), Fraction(1, 5)
# The mean's share of the rest stays within these (and is a multiple of 1/1000).
LEAST_MEAN, MOST_MEAN = Fraction(1, 20), Fraction(1, 2)
# A ladder of at most NARROW rungs (a domain at most 2⁷ resolutions wide, one value per
# unit) is not drawn from: its top rung, the declared domain, is the bound. On such a
# domain (ages in [0, 120]) the draw chose the top rung with probability ≈ 1 (the data
# fill more than half of it) and its ε was lost to the moments.
NARROW = 8


def spread_parts(loss: Loss, drawn: bool) -> tuple[Loss, Loss | None, Loss]:
    """(count, draw or None, the rest) parts of a spread's loss; they add up to it."""
    if drawn:
        return loss.split(COUNT_PART, DRAW_PART, 1 - COUNT_PART - DRAW_PART)
    of_count, rest = loss.split(COUNT_PART, 1 - COUNT_PART)
    return of_count, None, rest


def mean_and_squares(rest: Loss, count: Noisy, shift: int) -> tuple[Loss, Loss]:
    """The mean's and the squares' parts of ``rest``, chosen from the released count N
    (adaptive composition: the parts add up to ``rest`` whatever N, so the spend is
    public). The centre's error adds n·(m − m̂)² ≈ 2(s·B/ε₁)²/N to S2, whose own noise
    is about s·B²/ε₂ (B the values' reach): ε₁³ = 2√2·s·ε₂²/N balances the two (a
    small scope needs a better mean: its error is divided by N once, not twice)."""
    total = float(rest.epsilon)
    k = 2 * math.sqrt(2) * shift / max(count.value, 1)
    low, high = 0.0, total  # ε₁³ − k(total − ε₁)² rises from −k·total² to total³
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if middle ** 3 < k * (total - middle) ** 2 else (low, middle)
    share = min(max(Fraction(round(1000 * low / total), 1000), LEAST_MEAN), MOST_MEAN) \
        if total > 0 else LEAST_MEAN
    return rest.split(share, 1 - share)


def draws_bound(ladder_rungs: tuple[float, ...]) -> bool:
    """Whether a one-value-per-unit spread draws its bound: a function of the public
    ladder alone (the declared domain, its resolution), never of the data."""
    return len(ladder_rungs) > NARROW


def released_centre(count: Noisy, linear: Noisy, reach: float) -> float:
    """a = m̂ − o, the released mean's distance from the origin o (Σ(x − o)/N of the two
    noisy releases), within [0, reach]: post-processing, so public once released."""
    return min(max(linear.value / max(count.value, 1), 0.0), reach)


def centred_square_sum(second: float, first: float, n: int, centre: float) -> float:
    """Σ(x − o − a)² = Σ(x − o)² − 2a·Σ(x − o) + n·a², in exact arithmetic from the
    (exact-summed) moments about o: no cancellation beyond the inputs' own rounding."""
    a = Fraction(centre)
    return float(Fraction(second) - 2 * a * Fraction(first) + n * a * a)


# Per value, the inputs' rounding (the ladder's exact sums: each contribution to 10⁻⁶ of
# its shrunk value) and the doubles' relative error, allowed for in the sensitivity.
ROUNDING, RELATIVE = 1e-6, 1e-9


def centred_sensitivity(shift: int, centre: float, reach: float,
                        rounding: float = 0.0) -> float:
    """How far s values in [0, reach] can move Σ(x − a)² for a public a in [0, reach]:
    each term lies in [0, D²], D = max(reach − a, a) (plus each term's ``rounding``)."""
    distance = max(reach - centre, centre)
    return shift * (distance * distance + rounding) * (1 + RELATIVE)


def noisy_moments(kind: str, stats, column, shift: int, loss: Loss,
                  rng: RandomSource) -> Noisy:
    """STDDEV/VARIANCE under DP without a drawn bound (values clamped to [L, U]): a noisy
    count N (sensitivity s), a noisy S1 = Σ(x − L) (values in [0, U − L]: s·(U − L)),
    whose m̂ = L + S1/N is then public, and a noisy S2 = Σ(x − m̂)² (values in [0, D²],
    D = max(U − m̂, m̂ − L): s·D²), computed from n, Σx and M2 as M2 + n·(mean − m̂)²:
    ``spread_about_mean``. Sequential (adaptive) composition of the three parts
    (``spread_parts``): ε. Centred at m̂, the variance is not the small difference of
    two large noisy numbers (S2/N − (S1/N)² about L cost 15× on ages)."""
    lower, upper = column.lower, column.upper
    width = upper - lower
    of_count, _, rest = spread_parts(loss, drawn=False)
    step = grid_step(column.resolution)
    n = stats.n
    first = stats.total - n * lower
    count = laplace_integer(n, shift, of_count.epsilon, rng, MOMENTS_CONFIDENCE)
    of_mean, of_square = mean_and_squares(rest, count, shift)
    linear_sensitivity = clamped_sum_sensitivity(shift, 0.0, width)
    linear = laplace_real(first, linear_sensitivity, of_mean.epsilon, rng, step,
                          MOMENTS_CONFIDENCE)
    centre = released_centre(count, linear, width)
    square = laplace_real(square_about(n, stats.total, stats.m2, lower + centre),
                          centred_sensitivity(shift, centre, width),
                          of_square.epsilon, rng, step, MOMENTS_CONFIDENCE)
    return spread_about_mean(kind, count, linear, square,
                             float(linear_sensitivity / of_mean.epsilon), lower, upper,
                             "discrete Laplace / Laplace (sampled on the column's grid): "
                             "noisy count, mean and squared distances to it")


MOMENTS_CONFIDENCE = 1 - 0.05 / 3  # each of three noisy sums: all three at once ≥ 95 %


def spread_about_mean(kind: str, count: Noisy, linear: Noisy, square: Noisy,
                      linear_scale: float, lower: float, upper: float,
                      mechanism: str) -> Noisy:
    """STDDEV/VARIANCE from a noisy count N, the noisy S1 the centre m̂ came from, and a
    noisy S2 = Σ(x − m̂)² = M2 + n·(m − m̂)²: M2 ≈ S2 − 2b²/N (b the Laplace scale of
    S1: E[n·(m − m̂)²] ≈ 2b²/N), over N − 1 (N for the population form), clamped to
    [0, largest]; post-processing of the three. The 95 % bound: the largest distance at
    the corners of N's and S2's intervals, with n·(m − m̂)² anywhere in [0, c₁²/N]
    (c₁ S1's half-width)."""
    form = POPULATION if kind.endswith("_pop") else SAMPLE
    root = kind.startswith("stddev")
    largest = largest_variance(form, lower, upper)
    least = 2 if form == SAMPLE else 1

    def combined(n: float, s2: float, less: float) -> float:
        n = max(n, least)
        value = (s2 - less) / (n - 1 if form == SAMPLE else n)
        value = min(max(value, 0.0), largest)
        return math.sqrt(value) if root else value

    n = max(count.value, least)
    # the correction is for S1's noise: an S1 released exactly (no interval) needs none
    value = combined(n, square.value, 2 * linear_scale * linear_scale / n if linear.ci95 else 0.0)
    low_n = max(count.value - count.ci95, least)
    spread = max(abs(combined(size, s2, less) - value)
                 for size in (low_n, count.value + count.ci95)
                 for s2 in (square.value - square.ci95, square.value + square.ci95)
                 for less in (0.0, linear.ci95 * linear.ci95 / low_n))
    return Noisy(value, spread, mechanism)


def clipped_centred_moments(kind: str, n: int, first, second, loss: Loss, count_scale: int,
                            group_size: int, column, rng: RandomSource) -> Noisy:
    """STDDEV/VARIANCE of one value per unit, its values clipped to L + B (docs/privacy.md
    §3.14): the ladders ``first`` and ``second`` of x − L and (x − L)² (the same units
    clipped at every rung: one value each), n the values in scope. The bound B (rung k)
    is drawn from ``first`` unless its ladder is narrow (``draws_bound``: then the
    top rung); then a noisy count, a noisy S1 = Σ min(x − L, B) (sensitivity g·B), the
    centre a = S1/N within [0, B], and a noisy S2 = Σ(x̃ − L − a)², x̃ the clipped
    values, from the ladders' sums (``centred_square_sum``): each unit's term lies in
    [0, D²], D = max(B − a, a), so g·D² (plus the sums' rounding) bounds it."""
    parts = unit_centre(n, first, loss, count_scale, group_size, column, rng, one_value=True)
    bound, centre = parts.bound, parts.centre
    rounding = ROUNDING * (sum_shrink(bound * bound) + 2 * centre * sum_shrink(bound))
    k = parts.rung
    square = laplace_real(centred_square_sum(second.clipped[k], first.clipped[k], n, centre),
                          centred_sensitivity(group_size, centre, bound, rounding),
                          parts.of_square.epsilon, rng, grid_step(column.resolution ** 2),
                          MOMENTS_CONFIDENCE)
    return spread_about_mean(kind, parts.count, parts.linear, square, parts.scale,
                             column.lower, column.upper, "discrete Laplace / Laplace: noisy "
                             "count, mean and squared distances to it, their bound "
                             + ("by the exponential mechanism" if draws_bound(first.rungs)
                                else "the domain"))


# The ladder of each unit's Σ(x − m̂)² divided by its group's B₂ (``square_bound``): one
# rung, 1 (public; B₂ itself is a function of released numbers).
UNIT_RUNGS = (1.0,)


@dataclass(frozen=True)
class UnitCentre:
    """A spread's first releases in one group, several rows per unit: the noisy count,
    the noisy S1 = Σ_u min(Σ(x − L), B₁) (B₁ the ladder's rung ``rung``, drawn; ``scale``
    S1's Laplace scale), the centre a = S1/N in [0, U − L] (one value per unit: in
    [0, B₁]), and the squares' part of the loss."""

    count: Noisy
    linear: Noisy
    scale: float
    centre: float
    bound: float
    of_square: Loss
    rung: int


def unit_centre(n: int, first, loss: Loss, count_scale: int, group_size: int, column,
                rng: RandomSource, one_value: bool = False) -> UnitCentre:
    """The count (sensitivity ``count_scale`` = c·g rows), the bound B₁ drawn from the
    ladder ``first`` of each unit's Σ(x − L) (utility sensitivity g; a narrow ladder's
    top rung, ``draws_bound``), S1 at B₁ (sensitivity g·B₁) and its centre, with the
    parts of one value per unit (``spread_parts``): released numbers, public from here."""
    drawn = draws_bound(first.rungs)
    of_count, of_draw, rest = spread_parts(loss, drawn)
    count = laplace_integer(n, count_scale, of_count.epsilon, rng, MOMENTS_CONFIDENCE)
    of_mean, of_square = mean_and_squares(rest, count, group_size)
    k = (draw_rung(first.beyond, of_draw.epsilon, group_size, rng) if drawn
         else len(first.rungs) - 1)
    linear = sum_at(first, k, of_mean, group_size, 0.0, 1.0, column.resolution, rng,
                    MOMENTS_CONFIDENCE)
    # one value per unit: each clipped to L + B₁, so the centre lies within [0, B₁]
    centre = released_centre(count, linear, first.rungs[k] if one_value
                             else column.upper - column.lower)
    return UnitCentre(count, linear, float(group_size * first.rungs[k] / of_mean.epsilon),
                      centre, first.rungs[k], of_square, k)


def square_bound(bound: float, centre: float, rows_per_unit: int) -> float:
    """B₂ = c·a² + max(0, B₁² − 2a·B₁): the largest Σ(y − a)² of at most c values
    y = x − L ≥ 0 with Σy ≤ B₁ (a convex function on that simplex: largest at a vertex,
    all of Σy on one value or none), so S2 clips no unit that S1 kept whole. A public
    function of released numbers: no draw (a second draw, from the squares, clipped the
    heavy tail the variance lives in: visits at ε 0.1 5 % → 20 %)."""
    return rows_per_unit * centre * centre + max(0.0, bound * bound - 2 * centre * bound)


def square_scale(bound: float) -> float:
    """What x − m̂ is multiplied by before squaring, so that each unit's sum is T_u/B₂
    (``UNIT_RUNGS``): 1/√B₂ (0 where B₂ is 0: every term is then 0)."""
    return 1 / math.sqrt(bound) if bound > 0 else 0.0


def unit_square_sensitivity(group_size: int, bound: float, rows_per_unit: int,
                            centre: float, width: float) -> float:
    """How far g units move Σ_u min(T_u, B₂), T_u = Σ(x − L − a)² over a unit's rows:
    each unit's term lies in [0, min(B₂, c·D²)], D = max(W − a, a), plus its rounding
    (the exact sum's 10⁻⁶ of T_u/B₂, times B₂) and the doubles' relative error."""
    distance = max(width - centre, centre)
    most = min(bound, rows_per_unit * distance * distance)
    return group_size * (most + ROUNDING * bound) * (1 + RELATIVE)


def unit_moments(kind: str, centre: UnitCentre, squares, rows_per_unit: int,
                 group_size: int, column, rng: RandomSource) -> Noisy:
    """STDDEV/VARIANCE of several rows per unit, after ``unit_centre``: from ``squares``,
    the ladder (``UNIT_RUNGS``) of each unit's T_u/B₂, T_u = Σ(x − m̂)² (read in a second
    statement once m̂ was released), S2 = B₂·Σ_u min(T_u/B₂, 1) at ``square_bound``'s
    B₂, with Laplace noise of ``unit_square_sensitivity``; combined as one value's."""
    bound = square_bound(centre.bound, centre.centre, rows_per_unit)
    sensitivity = unit_square_sensitivity(group_size, bound, rows_per_unit, centre.centre,
                                          column.upper - column.lower)
    square = laplace_real(squares.clipped[0] * bound, sensitivity, centre.of_square.epsilon,
                          rng, grid_step(column.resolution ** 2), MOMENTS_CONFIDENCE)
    return spread_about_mean(kind, centre.count, centre.linear, square, centre.scale,
                             column.lower, column.upper,
                             "discrete Laplace / Laplace: noisy count, mean and squared "
                             "distances to it, each unit's sums clipped, the bound by the "
                             "exponential mechanism")
