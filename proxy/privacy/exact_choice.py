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
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import MAX_EMAX, MIN_EMIN, Decimal, localcontext
from fractions import Fraction
from functools import lru_cache

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
    u, bits, digits = 0, 0, _FIRST_DIGITS
    while True:
        u, bits = (u << _BITS) | rng.randbelow(1 << _BITS), bits + _BITS
        low, high = zip(*(_enclosed(m, x, digits) for m, x in weights))
        found = _decided(low, high, u, bits)
        if found is not None:
            return found
        digits *= 2


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
    return Fraction(_enclosed(1, x, digits)[1], 10 ** digits)


@lru_cache(maxsize=4096)  # a pure function; a rejection loop asks for the same ones
def _enclosed(m: int, x: Fraction, digits: int) -> tuple[int, int]:
    """Integers lo ≤ m·e^{−x}·10^digits ≤ hi. Beyond what the precision can show
    (x over ~2·digits), lo is 0 and hi a power-of-two bound; it tightens as digits grow."""
    scale = 10 ** digits
    if x > 2 * digits:
        # e^{−x} ≤ 2^{−k} for k ≤ x/ln 2; 1.4426 < 1/ln 2 = 1.44269…
        k = max(0, int(x * Fraction(14426, 10000)) - 1)
        return 0, -(-m * scale // (1 << k))
    with localcontext() as context:
        context.prec, context.Emin, context.Emax = digits, MIN_EMIN, MAX_EMAX
        rounded = Decimal(x.numerator) / Decimal(x.denominator)  # within half an ulp of x
        # x ∈ [prev(rounded), next(rounded)]; exp is correctly rounded, so likewise
        lowest = (-rounded.next_plus()).exp().next_minus()
        highest = (-rounded.next_minus()).exp().next_plus()
    (low, low_den), (high, high_den) = lowest.as_integer_ratio(), highest.as_integer_ratio()
    return max(0, low * m * scale // low_den), -(-high * m * scale // high_den)
