"""CORR, COVAR_POP, COVAR_SAMP, REGR_SLOPE, REGR_INTERCEPT and REGR_R2 from noisy
sufficient statistics about private centres (docs/privacy.md §3.17).

The rows. Those in scope where neither y (the first argument) nor x (the second) is NULL
(NaN is NULL, every value normalised into its declared domain, as for every statistic),
as PostgreSQL's CORR. Each value is winsorized at a bound drawn for the query:
x̃ = min(x − Lx, bx) ∈ [0, bx], ỹ = min(y − Ly, by) ∈ [0, by].

The mechanism, with the aggregate's ε split publicly 1 : 1 : 19 (``WEIGHTS``):

1. **Bounds**, once for the query (ε/21 each): bx from the public ladder Ux − Lx halved
   up to 20 times down to the column's resolution (``contribution_bounds.rungs`` of one
   row), by the exponential mechanism with utility −(units having a row with x − Lx
   beyond the rung) and a public prior of −3 per rung up (``PRIOR``), as a clipped
   SUM's (§3.14): a neighbour changes the count of g units. by alike.
2. **Per group** (the remaining 19/21, shared by the groups a unit touches as every
   aggregate's part is, §3.5), split 1 : 2 : 2 : 4 : 4 : 6 among:
   N (discrete Laplace, sensitivity s: a neighbour changes at most s = c·g rows in
   scope); Sx = Σx̃ and Sy = Σỹ (Laplace, s·bx and s·by: each row in [0, b]); from them
   the centres cx = clamp(Sx/N, 0, bx) and cy, released numbers; then
   Txx = Σ(x̃ − cx)², Tyy = Σ(ỹ − cy)² and Txy = Σ(x̃ − cx)(ỹ − cy), computed exactly from
   the backend's exact sums of x̃, x̃², ỹ, ỹ², x̃ỹ (the centres are public by then), with
   Laplace noise of sensitivity s·(hx² + slack), s·(hy² + slack) and s·(2·hx·hy +
   slack), h = max(c, b − c): each row's term lies in [0, hx²] or [−hx·hy, hx·hy]. The
   slack covers what the backend's doubles and the sums' rounding add per row
   (``_rounding``).

Sequential composition: 2/21 + 19/21 = ε (per group: parallel within the aggregate's
group share). Centring on a private mean matters: about Lx the second moments cancel
(N·Σx̃² − (Σx̃)²), whose noise is of scale bx² against N²·var; with the prior, measured on
the demo (benchmarks/README.md, ``correlation.py``) it cut the median error 2 to 7 times.

The answers (0 where SQL gives NULL: too few rows, no spread, so every data set has a
finite answer): CORR = Txy/√(Txx·Tyy) in [−1, 1]; COVAR_POP = Txy/N;
COVAR_SAMP = Txy/(N − 1); REGR_SLOPE = Txy/Txx; REGR_INTERCEPT = ȳ − slope·x̄ with the
noisy means x̄ = Lx + Sx/N, ȳ = Ly + Sy/N; REGR_R2 = Txy²/(Txx·Tyy) in [0, 1], and
PostgreSQL's rule on the released moments: NULL where the released Txx is not above 0
(x "has no spread"), else 1 where Tyy is not (post-processing: the released numbers
decide, never the data's own spread). Under raw iDP they are answered so too (DP implies iDP): no local
sensitivity is used, so the 95 % bound is a function of released numbers and is shown.

The 95 % bound: each released statistic inside its 1 − 5 %/6 interval (union bound: all
at once with probability ≥ 95 %), the answer's range over that box by interval
arithmetic (Txx, Tyy ≥ 0). It covers the noise, not the winsorizing (heavy tails pull
the answer toward 0) nor the centres' own error (it adds N·(x̄ − cx)² to Txx, about
(bx/ε)²/N). Where the box holds a zero spread (the noise could hide all of it) CORR and
REGR_* show no bound, and the note says so.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction

from proxy.loss import Loss
from proxy.privacy.contribution_bounds import draw_rung, rungs
from proxy.privacy.mechanisms import Noisy, grid_step, laplace_integer, laplace_real
from proxy.privacy.sampler import RandomSource
from proxy.rules import Column
from proxy.statistics import Contribution, PairSums, sum_shrink
from proxy.vocabulary import (
    CORR,
    COVAR_POP,
    COVAR_SAMP,
    REGR_INTERCEPT,
    REGR_R2,
    REGR_SLOPE,
    Kind,
    QueryPlan,
)

WEIGHTS = (1, 1, 19)  # of the aggregate's loss: bx, by (once), the groups' releases
PARTS = (1, 2, 2, 4, 4, 6)  # of a group's part: N, Sx, Sy, Txx, Tyy, Txy
PRIOR = Fraction(3)  # per rung up: winsorizing spares its noise (∝ b²) less than a sum's
CONFIDENCE = 1 - 0.05 / 6  # each of six statistics: all at once ≥ 95 %
MECHANISM = ("discrete Laplace / Laplace: noisy count, sums and centred moments, the "
             "bounds by the exponential mechanism")
NOTE = ("{what} from a noisy count, the noisy means of x and y and their noisy centred "
        "moments over the rows where both are present (docs/privacy.md §3.17), each value "
        "winsorized at a bound drawn privately for the query; the 95% bound covers the "
        "noise, not the winsorizing (heavy tails pull it toward 0)")
NO_BOUND = ("; no 95% bound: within it the noise could hide all of the spread of x (or "
            "y), so the answer could be anything")
NO_SPREAD = ("; NULL, as PostgreSQL's where x has no spread: the noisy centred moment of x "
             "came out at most 0")
Interval = tuple[float, float]


def row_rungs(column: Column) -> tuple[float, ...]:
    """The public ladder of one column's winsorizing bound: Ux − Lx, halved."""
    return rungs(Contribution(column.name, column.lower), column, 1)


def draw_bounds(plan: QueryPlan, index: int, beyond: tuple[tuple[int, ...], tuple[int, ...]],
                rng: RandomSource) -> tuple[float, float]:
    """Step 1 for the paired aggregate ``index``: (bx, by) from the units beyond each
    rung of x's and y's ladders over the whole scope, ε/21 each."""
    agg, columns = plan.aggregates[index], plan.table.columns
    of_x, of_y, _ = plan.aggregate_loss.split(*WEIGHTS)
    drawn = []
    for column, counts, loss in ((columns[agg.other], beyond[0], of_x),
                                 (columns[agg.column], beyond[1], of_y)):
        ladder = row_rungs(column)
        # its own prior, no evidence term (§3.14 is tuned for sums, §3.17 for winsorizing)
        drawn.append(ladder[draw_rung(counts, loss.epsilon, plan.table.group_size, rng,
                                      PRIOR, evidence=False)])
    return drawn[0], drawn[1]


def group_part(part: Loss) -> Loss:
    """What a group's releases spend of the aggregate's part in that group (the draws
    took their share once for the query)."""
    return part.split(*WEIGHTS)[2]


def _rounding(bound: float) -> float:
    """The most one row's summed value within [0, ``bound``] can differ from its exact
    value: the doubles' products (a few 2⁻⁵³ of it) and the sum's rounding to 10⁻⁶ of its
    value shrunk by ``sum_shrink`` (proxy.pushdown.scope.exact_sum)."""
    return 2.0 ** -50 * bound + 1e-6 * sum_shrink(bound)


def centres(n: int, sx: float, sy: float, bx: float, by: float) -> tuple[float, float]:
    """cx, cy from the released N, Sx and Sy: each mean within [0, b]."""
    count = max(n, 1)
    return min(max(sx / count, 0.0), bx), min(max(sy / count, 0.0), by)


def centred_moments(sums: PairSums, cx: float, cy: float) -> tuple[Fraction, Fraction,
                                                                    Fraction]:
    """Txx, Tyy, Txy about the public centres, exactly, from the backend's exact sums:
    Σ(x̃ − c)² = Σx̃² − 2c·Σx̃ + N·c², Σ(x̃ − cx)(ỹ − cy) = Σx̃ỹ − cy·Σx̃ − cx·Σỹ + N·cx·cy."""
    fx, fy, n = Fraction(cx), Fraction(cy), sums.n
    return (sums.sxx - 2 * fx * sums.sx + n * fx * fx,
            sums.syy - 2 * fy * sums.sy + n * fy * fy,
            sums.sxy - fy * sums.sx - fx * sums.sy + n * fx * fy)


def sensitivities(bx: float, by: float, cx: float, cy: float, shift: int) -> dict[str, float]:
    """What a neighbour (s rows of g units modified) moves each statistic by, at most:
    Sx and Sy (each row in [0, b]), Txx, Tyy (each row's term in [0, h²]) and Txy (in
    [−hx·hy, hx·hy]), h = max(c, b − c); each with the rounding of its terms
    (``_rounding``)."""
    hx, hy = max(cx, bx - cx), max(cy, by - cy)
    # a row's term Σx̃² − 2c·Σx̃ (+ N·c², exact) errs by that of x̃² and 2c times x̃'s
    return {"sx": shift * (bx + _rounding(bx)), "sy": shift * (by + _rounding(by)),
            "txx": shift * (hx * hx + _rounding(bx * bx) + 2 * bx * _rounding(bx)),
            "tyy": shift * (hy * hy + _rounding(by * by) + 2 * by * _rounding(by)),
            "txy": shift * (2 * hx * hy + _rounding(bx * by) + by * _rounding(bx)
                            + bx * _rounding(by))}


def noisy_pair(kind: Kind, sums: PairSums, shift: int, count_scale: int, part: Loss,
               low_x: float, low_y: float, widths: tuple[float, float],
               resolutions: tuple[float, float], rng: RandomSource) -> tuple[Noisy, str]:
    """Step 2 in one group: (the answer, its note) from the backend's sums at the drawn
    bounds. ``shift`` s scales the sums' sensitivities, ``count_scale`` N's; ``part``
    the group's releases' loss (``group_part``)."""
    of_n, of_sx, of_sy, of_txx, of_tyy, of_txy = part.split(*PARTS)
    bx, by = sums.bx, sums.by
    res_x, res_y = resolutions
    n = laplace_integer(sums.n, count_scale, of_n.epsilon, rng, CONFIDENCE)
    first = sensitivities(bx, by, 0.0, 0.0, shift)
    sx = laplace_real(float(sums.sx), first["sx"], of_sx.epsilon, rng, grid_step(res_x),
                      CONFIDENCE)
    sy = laplace_real(float(sums.sy), first["sy"], of_sy.epsilon, rng, grid_step(res_y),
                      CONFIDENCE)
    cx, cy = centres(int(n.value), sx.value, sy.value, bx, by)
    scale = sensitivities(bx, by, cx, cy, shift)
    txx, tyy, txy = centred_moments(sums, cx, cy)
    txx = laplace_real(float(txx), scale["txx"], of_txx.epsilon, rng,
                       grid_step(res_x * res_x), CONFIDENCE)
    tyy = laplace_real(float(tyy), scale["tyy"], of_tyy.epsilon, rng,
                       grid_step(res_y * res_y), CONFIDENCE)
    txy = laplace_real(float(txy), scale["txy"], of_txy.epsilon, rng,
                       grid_step(res_x * res_y), CONFIDENCE)
    if bx == 0 or by == 0:  # a constant column (a domain of one point): every x̃ is 0
        flat = Noisy(0.0, 0.0, MECHANISM)
        txx, tyy, txy = (flat if bx == 0 else txx), (flat if by == 0 else tyy), flat
    released = (n, sx, sy, txx, tyy, txy)
    note = NOTE.format(what=kind.upper())
    if kind == REGR_R2 and txx.value <= 0:  # the released moment, not the data's own
        return Noisy(None, None, MECHANISM), note + NO_SPREAD
    answer = ANSWERS[kind]
    context = (low_x, low_y, widths)
    value = answer(tuple((float(p.value),) * 2 for p in released), *context)[0]
    value = value if math.isfinite(value) else 0.0  # a spread of nearly 0 divided by
    low, high = answer(_box(released), *context)
    if math.isfinite(low) and math.isfinite(high):
        return Noisy(value, max(value - low, high - value, 0.0), MECHANISM), note
    return Noisy(value, None, MECHANISM), note + NO_BOUND


def _box(released: tuple[Noisy, ...]) -> tuple[Interval, ...]:
    """Each statistic's 1 − 5 %/6 interval; Txx and Tyy are ≥ 0 (public facts)."""
    box = [(float(p.value) - p.ci95, float(p.value) + p.ci95) for p in released]
    for at in (3, 4):
        box[at] = (max(box[at][0], 0.0), max(box[at][1], 0.0))
    return tuple(box)


def _mul(a: Interval, b: Interval) -> Interval:
    corners = [a[0] * b[0], a[0] * b[1], a[1] * b[0], a[1] * b[1]]
    return min(corners), max(corners)


def _over_positive(a: Interval, b: Interval) -> Interval:
    """a / b for b > 0 throughout."""
    return _mul(a, (1 / b[1], 1 / b[0]))


def _at_least(interval: Interval, least: float) -> tuple[Interval, bool]:
    """(the interval raised to ``least``, whether it reached below it: SQL's NULL there,
    answered 0). A released point is raised alone (the answer at N = least)."""
    low, high = interval
    return (max(low, least), max(high, least)), low < least and low != high


def _with_zero(range_: Interval, degenerate: bool) -> Interval:
    return (min(range_[0], 0.0), max(range_[1], 0.0)) if degenerate else range_


def _correlation(stats, low_x, low_y, widths) -> Interval:
    _, _, _, txx, tyy, txy = stats
    txx, tyy = (max(txx[0], 0.0), txx[1]), (max(tyy[0], 0.0), tyy[1])
    if txx[1] <= 0 or tyy[1] <= 0:
        return 0.0, 0.0  # no spread anywhere in the box: SQL's NULL
    if txx[0] <= 0 or tyy[0] <= 0:
        return -math.inf, math.inf  # the answer itself is clamped; no useful range
    least = math.sqrt(txx[0]) * math.sqrt(tyy[0])
    most = math.sqrt(txx[1]) * math.sqrt(tyy[1])
    low = txy[0] / (most if txy[0] >= 0 else least)
    high = txy[1] / (least if txy[1] >= 0 else most)
    return min(max(low, -1.0), 1.0), min(max(high, -1.0), 1.0)


def _covariance(sample: bool) -> Callable[..., Interval]:
    def covariance(stats, low_x, low_y, widths) -> Interval:
        n, *_, txy = stats
        divisor, degenerate = _at_least((n[0] - sample, n[1] - sample), 1)
        largest = widths[0] * widths[1] / (2 if sample else 4)  # |cov| ≤ σx·σy
        low, high = _over_positive(txy, divisor)
        return _with_zero((min(max(low, -largest), largest),
                           min(max(high, -largest), largest)), degenerate)
    return covariance


def _slope(stats, low_x, low_y, widths) -> Interval:
    txx, txy = stats[3], stats[5]
    txx = (max(txx[0], 0.0), txx[1])
    if txx[1] <= 0:
        return 0.0, 0.0
    if txx[0] <= 0:
        return -math.inf, math.inf
    return _over_positive(txy, txx)


def _intercept(stats, low_x, low_y, widths) -> Interval:
    """(Ly + ȳ') − slope·(Lx + x̄'), the means over the box of N, Sx and Sy."""
    slope = _slope(stats, low_x, low_y, widths)
    if not (math.isfinite(slope[0]) and math.isfinite(slope[1])):
        return -math.inf, math.inf
    n, degenerate = _at_least(stats[0], 1)
    mean_x = _over_positive(stats[1], n)
    mean_y = _over_positive(stats[2], n)
    mean_x = (low_x + max(mean_x[0], 0.0), low_x + max(mean_x[1], 0.0))
    mean_y = (low_y + max(mean_y[0], 0.0), low_y + max(mean_y[1], 0.0))
    low, high = mean_y[0] - max(_mul(slope, mean_x)), mean_y[1] - min(_mul(slope, mean_x))
    return _with_zero((low, high), degenerate)


def _r2(stats, low_x, low_y, widths) -> Interval:
    """Txy²/(Txx·Tyy) in [0, 1]; 1 where Tyy is not above 0 (PostgreSQL's where y has no
    spread and x has; ``noisy_pair`` answers NULL where Txx is not above 0)."""
    txx, tyy, txy = stats[3], stats[4], stats[5]
    if txx[0] <= 0:
        return -math.inf, math.inf  # NULL within the box: no range
    if tyy[1] <= 0:
        return 1.0, 1.0
    if tyy[0] <= 0:
        return 0.0, 1.0
    squares = sorted((txy[0] * txy[0], txy[1] * txy[1]))
    least = 0.0 if txy[0] <= 0 <= txy[1] else squares[0]
    return _share(least, txx[1] * tyy[1]), _share(squares[1], txx[0] * tyy[0])


def _share(part: float, whole: float) -> float:
    """part/whole capped at 1 (both ≥ 0), whatever a product over- or underflowed to."""
    return 0.0 if part == 0 else 1.0 if part >= whole else part / whole


# One row per paired kind: its range over intervals of (N, Sx, Sy, Txx, Tyy, Txy), which
# at the released values (intervals of one point) is its answer
ANSWERS: dict[Kind, Callable[..., Interval]] = {
    CORR: _correlation, COVAR_POP: _covariance(False), COVAR_SAMP: _covariance(True),
    REGR_SLOPE: _slope, REGR_INTERCEPT: _intercept, REGR_R2: _r2,
}
