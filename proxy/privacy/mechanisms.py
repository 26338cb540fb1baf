"""Noise mechanisms: each states the ε (or, Gaussian noise, the ρ) it spends and the 95%
bound of its error.

Real answers are snapped to a power-of-two grid Λ and moved by Λ·Z with Z exactly
discrete-Laplace; integer answers get Z directly. Λ comes from the column's public
resolution ρ (Λ = 2^(⌊log₂ ρ⌋ − 10)), never from the data: a grid that followed the
local sensitivity would tell it from a single answer (SPEC §3.3). Snapping can move
two neighbouring answers one more step apart, so the sensitivity in grid steps is
⌈S/Λ⌉ + 1, and the scale is that over ε: the release is ε-(i)DP for sensitivity S
exactly (Thm. 5 of seed 000 on the grid), and its output is a function of one
integer, so it carries no floating-point bits of the true value.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from statistics import NormalDist

from proxy.privacy import smooth_noise
from proxy.privacy.sampler import RandomSource, bernoulli_exp, discrete_laplace


@dataclass(frozen=True)
class Noisy:
    """A released number, the half-width of its error interval (95% unless asked
    otherwise), and the mechanism's name."""

    value: float | int
    ci95: float | None
    mechanism: str


def grid_step(resolution: float) -> float:
    """Λ = 2^(⌊log₂ ρ⌋ − 10) for the public resolution ρ: a power of two, so grid points
    are exact floats as far as they can be, and ≤ ρ/1024, so at the noise floor S = ρ
    the extra step of snapping adds at most 0.1% to the scale."""
    _, exponent = math.frexp(resolution)
    return max(math.ldexp(1.0, exponent - 1 - 10), math.ulp(0.0))  # subnormal ρ: finest float


def grid_scale(sensitivity: float, epsilon: Fraction, step: float) -> Fraction:
    """The discrete-Laplace scale in grid steps for sensitivity S at ε: (⌈S/Λ⌉ + 1)/ε."""
    steps = grid_steps(sensitivity, step)
    return Fraction(steps * epsilon.denominator, epsilon.numerator)


def grid_steps(sensitivity: float, step: float) -> int:
    """How many grid steps two snapped neighbouring answers can be apart: ⌈S/Λ⌉ + 1."""
    (s_num, s_den), (l_num, l_den) = _ratio(sensitivity), _ratio(step)
    return -(-s_num * l_den // (s_den * l_num)) + 1


def snap(true: float, step: float) -> int:
    """The grid cell of ``true``: true/Λ rounded to the nearest integer, ties to even,
    computed exactly (as round(Fraction(true) / Fraction(step)) would)."""
    return _snap(*_ratio(true), *_ratio(step))


def _snap(t_num: int, t_den: int, l_num: int, l_den: int) -> int:
    cell, twice = divmod(t_num * l_den, t_den * l_num)
    twice *= 2
    denominator = t_den * l_num
    return cell + (twice > denominator or (twice == denominator and cell % 2 == 1))


def on_grid(steps: int, step: float) -> float:
    """steps·Λ as the nearest float, exactly rounded even where steps·Λ has more bits
    than a float holds (a function of the integer alone: post-processing). Python's
    int / int is correctly rounded."""
    l_num, l_den = _ratio(step)
    return steps * l_num / l_den


def _ratio(value: float) -> tuple[int, int]:
    """``value`` (a float, int, Fraction or Decimal) as an exact integer ratio: building
    Fractions cost most of a real answer's noise (a release draws one per value)."""
    ratio = getattr(value, "as_integer_ratio", None)
    return ratio() if ratio is not None else (int(value), 1)  # numpy integers


def discrete_laplace_interval(scale: Fraction, confidence: float = 0.95) -> int:
    """Smallest k with P(|Z| > k) ≤ 1 − confidence for P(Z = z) ∝ exp(−|z|/scale).

    P(|Z| > k) = 2·α^(k+1)/(1 + α) with α = exp(−1/scale).
    """
    # ln α = −1/scale written out: α itself underflows to 0.0 for a tiny scale.
    alpha = math.exp(-1 / float(scale))
    k = -float(scale) * math.log((1 - confidence) * (1 + alpha) / 2) - 1
    return max(0, math.ceil(k - 1e-12))


def laplace_integer(
    true: int, sensitivity: int, epsilon: Fraction, rng: RandomSource, confidence: float = 0.95
) -> Noisy:
    """Discrete Laplace DL(exp(−ε/S)) on an integer answer (seed 000 Thm. 5), S ≥ 1."""
    scale = Fraction(sensitivity) / epsilon
    return Noisy(true + discrete_laplace(scale, rng),
                 float(discrete_laplace_interval(scale, confidence)), "discrete Laplace")


def laplace_real(
    true: float, sensitivity: float, epsilon: Fraction, rng: RandomSource, step: float,
    confidence: float = 0.95,
) -> Noisy:
    """Laplace(S/ε) on a real answer, sampled exactly on the public grid Λ = ``step``
    (SPEC §5.3). S = 0 (only where the owner opted into exact releases) is exact."""
    return laplace_on_grid(sensitivity, epsilon, step, confidence).release(true, rng)


@dataclass(frozen=True)
class OnGrid:
    """A real answer's noise on the public grid Λ, worked out once for many answers of
    the same sensitivity, loss and grid (one per group of a GROUP BY): the exact
    integer sampler, its parameter (discrete Laplace's scale or the discrete Gaussian's
    σ², in grid steps), Λ, the bound and the mechanism's name. ``release`` makes the
    very calls of the sampler ``laplace_real`` and ``gaussian_real`` make, so the same
    random bits give the same value."""

    draw: Callable[[Fraction, RandomSource], int] | None  # None: exact (S = 0)
    parameter: Fraction | None
    step: float
    ci95: float
    mechanism: str

    def release(self, true: float, rng: RandomSource) -> Noisy:
        if self.draw is None:
            return Noisy(true, 0.0, self.mechanism)
        l_num, l_den = self.step_ratio
        steps = _snap(*_ratio(true), l_num, l_den) + self.draw(self.parameter, rng)
        return Noisy(steps * l_num / l_den, self.ci95, self.mechanism)  # ``on_grid``

    @functools.cached_property
    def step_ratio(self) -> tuple[int, int]:
        """Λ as an exact integer ratio, worked out once (``snap`` and ``on_grid``'s)."""
        return _ratio(self.step)


EXACT = "exact (sensitivity 0; exact_release)"


def laplace_on_grid(sensitivity: float, epsilon: Fraction, step: float,
                    confidence: float = 0.95) -> OnGrid:
    """``laplace_real``'s noise for sensitivity S at ε on the grid Λ = ``step``."""
    if sensitivity == 0:
        return OnGrid(None, None, step, 0.0, EXACT)
    scale = grid_scale(sensitivity, epsilon, step)
    return OnGrid(discrete_laplace, scale, step, _interval(scale, step, confidence),
                  "Laplace (sampled on the column's grid)")


def laplace_interval(sensitivity: float, epsilon: Fraction, step: float,
                     confidence: float = 0.95) -> float:
    """Half-width of ``laplace_real``'s interval at this confidence: the noise's, plus
    half a step of snapping."""
    return _interval(grid_scale(sensitivity, epsilon, step), step, confidence)


def _interval(scale: Fraction, step: float, confidence: float) -> float:
    return (discrete_laplace_interval(scale, confidence) + 0.5) * step


def smooth_real(true: float, smooth_sensitivity: float, epsilon: Fraction, gamma: float,
                rng: RandomSource, step: float) -> Noisy:
    """f(D) + (S/α)·Z with Z ∝ 1/(1 + |z|^γ) and α = ε/(4γ) (seed 000 §VI-A2), on the
    public grid Λ = ``step``: the answer is snapped to the grid and the noise rounded
    to it, so the output is a function of two integers and keeps no low bits of f(D).
    Snapping moves f by at most Λ more, so S + Λ (still β-smooth) sets the scale; the
    rounded noise's cell probabilities keep the density's admissibility. No interval:
    its width is the data's smooth sensitivity."""
    alpha, _ = smooth_noise.admissible(float(epsilon), gamma)
    scale = (smooth_sensitivity + step) / alpha
    noise = round(scale * smooth_noise.sample(gamma, rng) / step)
    return Noisy(on_grid(snap(true, step) + noise, step), None,
                 f"smooth sensitivity, noise 1/(1 + |z|^{gamma:g})")


def discrete_gaussian(sigma2: Fraction, rng: RandomSource) -> int:
    """An integer Z with P(Z = z) ∝ exp(−z²/(2σ²)), exactly (Canonne, Kamath and Steinke
    2020, Algorithm 3: discrete Laplace of scale t = ⌊σ⌋ + 1, kept with probability
    exp(−(|Y| − σ²/t)²/(2σ²))). Adding it to an integer answer of sensitivity Δ is
    Δ²/(2σ²)-zCDP (their Thm. 4)."""
    if sigma2 <= 0:
        raise ValueError("sigma2 must be positive")
    t = math.isqrt(sigma2.numerator // sigma2.denominator) + 1  # ⌊σ⌋ + 1
    while True:
        y = discrete_laplace(Fraction(t), rng)
        gap = abs(y) - sigma2 / t
        if bernoulli_exp(gap * gap / (2 * sigma2), rng):
            return y


def gaussian_rho(sensitivity: int, sigma2: Fraction) -> Fraction:
    """ρ of the discrete Gaussian of variance parameter σ² at sensitivity Δ: Δ²/(2σ²)."""
    return Fraction(sensitivity * sensitivity) / (2 * sigma2)


def gaussian_sigma2(sensitivity: int, rho: Fraction) -> Fraction:
    """σ² = Δ²/(2ρ): the discrete Gaussian whose ρ is the answer's share, exactly."""
    return Fraction(sensitivity * sensitivity) / (2 * rho)


def discrete_gaussian_interval(sigma2: Fraction, confidence: float = 0.95) -> int:
    """A k with P(|Z| > k) ≤ 1 − confidence for the discrete Gaussian of σ²: that of the
    continuous normal N(0, σ²), rounded up. Valid: the tail Σ_{z>k} e^{−z²/2σ²} is at
    most ∫_k^∞ e^{−x²/2σ²} dx (decreasing terms), and the normaliser Σ_z e^{−z²/2σ²} is
    at least σ√(2π) (Poisson summation: σ√(2π)·Σ_k e^{−2π²σ²k²})."""
    sigma = math.sqrt(sigma2.numerator / sigma2.denominator)
    return math.ceil(NormalDist().inv_cdf(1 - (1 - confidence) / 2) * sigma * (1 + 1e-12))


def gaussian_integer(true: int, sensitivity: int, rho: Fraction, rng: RandomSource,
                     confidence: float = 0.95) -> Noisy:
    """The discrete Gaussian on an integer answer of sensitivity Δ ≥ 1, ρ-zCDP."""
    sigma2 = gaussian_sigma2(sensitivity, rho)
    return Noisy(true + discrete_gaussian(sigma2, rng),
                 float(discrete_gaussian_interval(sigma2, confidence)), "discrete Gaussian")


def gaussian_real(true: float, sensitivity: float, rho: Fraction, rng: RandomSource,
                  step: float, confidence: float = 0.95) -> Noisy:
    """The discrete Gaussian on the public grid Λ = ``step``, as ``laplace_real`` does
    Laplace: snapped neighbours are at most ⌈S/Λ⌉ + 1 steps apart, so that is Δ and the
    release is ρ-zCDP; its output is a function of one integer."""
    return gaussian_on_grid(sensitivity, rho, step, confidence).release(true, rng)


def gaussian_on_grid(sensitivity: float, rho: Fraction, step: float,
                     confidence: float = 0.95) -> OnGrid:
    """``gaussian_real``'s noise for sensitivity S at ρ on the grid Λ = ``step``."""
    if sensitivity == 0:
        return OnGrid(None, None, step, 0.0, EXACT)
    sigma2 = gaussian_sigma2(grid_steps(sensitivity, step), rho)
    return OnGrid(discrete_gaussian, sigma2, step,
                  (discrete_gaussian_interval(sigma2, confidence) + 0.5) * step,
                  "discrete Gaussian (sampled on the column's grid)")
