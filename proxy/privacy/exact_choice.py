"""Exact sampling of an index with probability proportional to m·e^{−x} (m a positive
integer, x a non-negative rational), for the exponential mechanism
(privacy/inverse_sensitivity.py).

The weights are irrational, so neither they nor their sum can be held exactly, and a
floating-point inverse CDF (or Gumbel-max) would make the output's probabilities
depend on rounding — the side channel Mironov (2012) found in Laplace samplers. Here
the inverse CDF is evaluated with certified bounds: a uniform U ∈ [0, 1) is read as
bits from the ``RandomSource`` only as far as needed, each weight is enclosed in an
interval [lo, hi] of integers on a common fixed-point scale (Python's ``decimal`` exp
is correctly rounded, so the neighbouring representable numbers enclose the true value),
and index j is returned only when every weight vector inside the bounds puts U in j's
part of the CDF. Otherwise more bits of U and more digits are taken. So index j is
returned exactly when U·W ∈ [W₁ + … + W_{j−1}, W₁ + … + W_j) for the true weights: with
probability exactly W_j / ΣW. Undecided rounds happen with probability about
2^−60 each; their count (and the run time) is the only thing that depends on the
weights beyond the returned index.

The first round is tried first with cheap bounds (``_quick``): each weight enclosed in
doubles from tables of certified exps on a grid of 2^−20 (no ``Decimal`` exp per
weight, no libm: every double operation's rounding is bounded by IEEE 754's
round-to-nearest and allowed for), the sums in doubles, and the decision checked on
integers with that allowance. A j it returns is decided for the same bits of U, so it
is the j the exact round would return; where it cannot decide (U within about 10^−5
of a boundary, or a count m ≥ 2^53) the exact round runs on the same bits. The index,
and the bits read, are the same as the exact rounds' alone for every U.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Sequence
from decimal import MAX_EMAX, MIN_EMIN, Decimal, localcontext
from fractions import Fraction
from functools import lru_cache
from itertools import accumulate

from proxy.privacy.sampler import RandomSource

_BITS = 64  # bits of U read per round
_FIRST_DIGITS = 30  # decimal digits of the first round's weights


def choose(weights: Sequence[tuple[int, Fraction]], rng: RandomSource) -> int:
    """Index j with probability exactly m_j·e^{−x_j} / Σ_i m_i·e^{−x_i}; every m_j ≥ 1
    and x_j ≥ 0."""
    if not weights:
        raise ValueError("choose needs at least one weight")
    if any(m < 1 or x < 0 for m, x in weights):
        raise ValueError("weights need m ≥ 1 and x ≥ 0")
    return _choose([m for m, _ in weights], [x.numerator for _, x in weights],
                   [x.denominator for _, x in weights], rng)


def choose_scaled(exponents: Sequence[int], denominator: int, rng: RandomSource) -> int:
    """``choose`` of the weights e^{−n_j/d} (every m_j 1), from the integers n_j ≥ 0 and
    d ≥ 1: without a Fraction per weight (a draw per group)."""
    if not exponents:
        raise ValueError("choose needs at least one weight")
    if denominator < 1 or min(exponents) < 0:
        raise ValueError("weights need x ≥ 0")
    return _choose([1] * len(exponents), exponents, [denominator] * len(exponents), rng)


def _choose(counts: Sequence[int], nums: Sequence[int], dens: Sequence[int],
            rng: RandomSource) -> int:
    """``choose`` of m_j·e^{−n_j/d_j}: the first round's cheap bounds, then exact rounds
    on the same bits."""
    u = rng.randbelow(1 << _BITS)
    found = _quick(counts, nums, dens, u, _BITS)
    return _exact(counts, nums, dens, u, rng) if found is None else found


def _exact(counts: Sequence[int], nums: Sequence[int], dens: Sequence[int], u: int,
           rng: RandomSource) -> int:
    """The exact rounds, from the first 64 bits ``u`` of U: ``Decimal`` bounds at 30
    digits, then twice the digits and 64 more bits until decided."""
    bits, digits = _BITS, _FIRST_DIGITS
    while True:
        low, high = zip(*(_enclosed(m, n, d, digits) for m, n, d in zip(counts, nums, dens)))
        found = _decided(low, high, u, bits)
        if found is not None:
            return found
        u, bits = (u << _BITS) | rng.randbelow(1 << _BITS), bits + _BITS
        digits *= 2


# The cheap first round: e^{−s/2^20} = e^{−i}·e^{−j/2^10}·e^{−l/2^20} for s = i·2^20 +
# j·2^10 + l, each factor enclosed in doubles [lo, hi] from a correctly rounded 40-digit
# exp (the grid points are exact decimals), i up to 64; beyond, e^{−64} bounds it.
_GRID, _PART, _TOP = 20, 10, 64
_MOST = 1 << 26  # weights: beyond, the rounding allowance's bound below does not hold


def _bounds_of(x: Decimal) -> tuple[float, float]:
    """Doubles lo ≤ e^{−x} ≤ hi, for an exact decimal x ≥ 0."""
    with localcontext() as context:
        context.prec = 40
        rounded = (-x).exp()  # correctly rounded: its neighbours enclose e^{−x}
        lower, upper = rounded.next_minus(), rounded.next_plus()
    lo, hi = float(lower), float(upper)
    if Decimal(lo) > lower:
        lo = math.nextafter(lo, 0.0)
    if Decimal(hi) < upper:
        hi = math.nextafter(hi, math.inf)
    return lo, hi


@lru_cache(maxsize=1)  # public constants (2,113 exps), built once on the first draw
def _tables() -> tuple[list[tuple[float, float]], ...]:
    whole = [_bounds_of(Decimal(i)) for i in range(_TOP + 1)]
    middle = [_bounds_of(Decimal(j) / Decimal(1 << _PART)) for j in range(1 << _PART)]
    low = [_bounds_of(Decimal(k) / Decimal(1 << _GRID)) for k in range(1 << _PART)]
    return whole, middle, low


def _quick(counts: Sequence[int], nums: Sequence[int], dens: Sequence[int], u: int,
           bits: int) -> int | None:
    """The j every U in [u/2^bits, (u+1)/2^bits) falls to, from cheap bounds, or None
    where they cannot tell (or a count is 2^53 or more: not exact as a double).

    t_j = ⌊x_j·2^20⌋ (integers), t the least: the weights are taken over e^{−t/2^20},
    which changes no ratio, so w_j = m_j·e^{−(x_j − t/2^20)} lies between
    m_j·e^{−(t_j − t + 1)/2^20} and m_j·e^{−(t_j − t)/2^20}, read off the tables (0 and
    m_j·e^{−64} from 64 on). Each double product and sum is within 2^−53 of its exact
    value, relative to it (round to nearest; nothing subnormal), so with n ≤ 2^26
    weights each computed partial sum of the lower (upper) bounds, times 1 − δ (1 + δ),
    δ = 2(n + 4)·2^−52, lies below (above) the exact one, and j is returned when
    (u+1)·W_hi ≤ 2^bits·F_j,lo (U·W < F_j; for the last j, U < 1 says it) and, j > 0,
    u·W_lo ≥ 2^bits·F_{j−1},hi (U·W ≥ F_{j−1}), checked on integers: the j of the true
    weights for that U."""
    if len(counts) > _MOST or max(counts) >= 1 << 53:
        return None
    whole, middle, low = _tables()
    mask, cap = (1 << _PART) - 1, _TOP << _GRID
    floors = [(n << _GRID) // d for n, d in zip(nums, dens)]
    least = min(floors)
    lows, highs = [], []
    for m, t in zip(counts, floors):
        above = t - least  # x − least/2^20 ∈ [above, above + 1]/2^20
        if above >= cap:
            lows.append(0.0)
            highs.append(m * whole[_TOP][1])
            continue
        a, b, c = whole[above >> _GRID], middle[(above >> _PART) & mask], low[above & mask]
        highs.append(m * (a[1] * b[1] * c[1]))
        below = above + 1
        if below >= cap:
            lows.append(0.0)
            continue
        a, b, c = whole[below >> _GRID], middle[(below >> _PART) & mask], low[below & mask]
        lows.append(m * (a[0] * b[0] * c[0]))
    f_low, f_high = list(accumulate(lows)), list(accumulate(highs))
    j = min(bisect_right(f_low, (u + 1) / (1 << bits) * f_high[-1]), len(f_low) - 1)
    slack = 2 * (len(f_low) + 4)
    shrink, grow = (1 << 52) - slack, (1 << 52) + slack
    if j < len(f_low) - 1 and not _at_most((u + 1) * grow, f_high[-1], shrink << bits,
                                           f_low[j]):
        return None
    if j and not _at_most(grow << bits, f_high[j - 1], u * shrink, f_low[-1]):
        return None
    return j


def _at_most(a: int, x: float, b: int, y: float) -> bool:
    """a·x ≤ b·y exactly, for integers a, b ≥ 0 and finite doubles x, y ≥ 0."""
    (xn, xd), (yn, yd) = x.as_integer_ratio(), y.as_integer_ratio()
    return a * xn * yd <= b * yn * xd


def _decided(low: Sequence[int], high: Sequence[int], u: int, bits: int) -> int | None:
    """The j with U·W in j's part of the CDF for every weight vector within the bounds,
    U anywhere in [u/2^bits, (u+1)/2^bits); None when the bounds cannot tell.

    With F the weights up to j and G those after it, U·W < F ⇔ U·G < (1 − U)·F: certain
    when (u+1)·G_hi ≤ (2^bits − u − 1)·F_lo, and U·W ≥ F certain when
    u·G_lo ≥ (2^bits − u)·F_hi. The first j below which U·W certainly lies is the answer
    when U·W is certainly at or above every earlier F."""
    scale = 1 << bits
    total_low, total_high = sum(low), sum(high)
    f_low = f_high = 0
    for j in range(len(low)):
        f_low, f_high = f_low + low[j], f_high + high[j]
        g_low, g_high = total_low - f_low, total_high - f_high  # the weights after j
        if (u + 1) * g_high <= (scale - u - 1) * f_low:
            return j
        if u * g_low < (scale - u) * f_high:  # neither certainly below nor above F_j
            return None
    return None


def exp_upper(x: Fraction, digits: int = 40) -> Fraction:
    """A rational h ≥ e^{−x} within about 10^{−digits} of it (x ≥ 0, x ≤ 2·digits): for
    mechanisms whose weights must be exact rationals, certified on the safe side."""
    return Fraction(_enclosed(1, x.numerator, x.denominator, digits)[1], 10 ** digits)


@lru_cache(maxsize=4096)  # a pure function; a rejection loop asks for the same ones
def _enclosed(m: int, num: int, den: int, digits: int) -> tuple[int, int]:
    """Integers lo ≤ m·e^{−x}·10^digits ≤ hi, x = num/den. Beyond what the precision can
    show (x over ~2·digits), lo is 0 and hi a power-of-two bound; it tightens as digits
    grow."""
    scale = 10 ** digits
    if num > 2 * digits * den:
        # e^{−x} ≤ 2^{−k} for k ≤ x/ln 2; 1.4426 < 1/ln 2 = 1.44269…
        k = max(0, num * 14426 // (den * 10000) - 1)
        return 0, -(-m * scale // (1 << k))
    with localcontext() as context:
        context.prec, context.Emin, context.Emax = digits, MIN_EMIN, MAX_EMAX
        rounded = Decimal(num) / Decimal(den)  # within half an ulp of x
        # x ∈ [prev(rounded), next(rounded)]; exp is correctly rounded, so likewise
        lowest = (-rounded.next_plus()).exp().next_minus()
        highest = (-rounded.next_minus()).exp().next_plus()
    (low, low_den), (high, high_den) = lowest.as_integer_ratio(), highest.as_integer_ratio()
    return max(0, low * m * scale // low_den), -(-high * m * scale // high_den)
