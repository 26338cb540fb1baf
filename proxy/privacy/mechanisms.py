"""Noise mechanisms: each states the ε it spends and the 95% bound of its error.

Real answers are snapped to a power-of-two grid Λ and moved by Λ·Z with Z exactly
discrete-Laplace; integer answers get Z directly. Snapping can move two neighbouring
answers one more step apart, so the sensitivity in grid steps is ⌈S/Λ⌉ + 1, and the
scale is that over ε: the release is ε-(i)DP for sensitivity S exactly (Thm. 5 of
seed 000 on the grid), and its output carries no floating-point bits of the true value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from proxy.privacy import smooth
from proxy.privacy.sampler import RandomSource, discrete_laplace

GRID_STEPS_PER_SENSITIVITY = 1024  # Λ = S / 2^10: noise indistinguishable from Laplace(S/ε)


@dataclass(frozen=True)
class Noisy:
    """A released number, the half-width of its error interval (95% unless asked
    otherwise), and the mechanism's name."""

    value: float | int
    ci95: float | None
    mechanism: str


def grid_step(sensitivity: float) -> float:
    """Λ = 2^(⌊log₂ S⌋ − 10): a power of two, so grid points are exact floats."""
    _, exponent = math.frexp(sensitivity)
    return max(math.ldexp(1.0, exponent - 1 - 10), math.ulp(0.0))  # subnormal S: finest float


def grid_parameters(sensitivity: float, epsilon: Fraction) -> tuple[float, Fraction]:
    """(Λ, scale in grid steps) for sensitivity S at ε: scale = (⌈S/Λ⌉ + 1)/ε."""
    step = grid_step(sensitivity)
    steps = math.ceil(Fraction(sensitivity) / Fraction(step)) + 1
    return step, Fraction(steps) / epsilon


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
    """Discrete Laplace DL(exp(−ε/S)) on an integer answer (seed 000 Thm. 5)."""
    if sensitivity == 0:
        return Noisy(true, 0.0, "exact (sensitivity 0)")
    scale = Fraction(sensitivity) / epsilon
    return Noisy(true + discrete_laplace(scale, rng),
                 float(discrete_laplace_interval(scale, confidence)), "discrete Laplace")


def laplace_real(
    true: float, sensitivity: float, epsilon: Fraction, rng: RandomSource,
    confidence: float = 0.95,
) -> Noisy:
    """Laplace(S/ε) on a real answer, sampled exactly on the grid Λ (SPEC §5.3)."""
    if sensitivity == 0:
        return Noisy(true, 0.0, "exact (sensitivity 0)")
    step, scale = grid_parameters(sensitivity, epsilon)
    snapped = round(Fraction(true) / Fraction(step))
    value = (snapped + discrete_laplace(scale, rng)) * step
    ci95 = (discrete_laplace_interval(scale, confidence) + 0.5) * step
    return Noisy(value, ci95, "Laplace (exact, on a power-of-two grid)")


def smooth_real(true: float, smooth_sensitivity: float, epsilon: Fraction, gamma: float,
                rng: RandomSource) -> Noisy:
    """f(D) + (S/α)·Z with Z ∝ 1/(1 + |z|^γ) and α = ε/(4γ) (seed 000 §VI-A2), rounded
    to the power-of-two grid of the scale: Z is sampled in floating point, so the
    rounding keeps the low bits of f(D) out of the answer. No interval: its width is
    the data's smooth sensitivity."""
    alpha, _ = smooth.admissible(float(epsilon), gamma)
    scale = smooth_sensitivity / alpha
    step = grid_step(scale)
    value = round((true + scale * smooth.sample(gamma, rng)) / step) * step
    return Noisy(value, None, f"smooth sensitivity, noise 1/(1 + |z|^{gamma:g})")
