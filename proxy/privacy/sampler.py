"""Exact discrete Laplace sampling from a cryptographically secure source.

Floating-point Laplace samplers leak the low bits of the true value (Mironov 2012), so
every released number here is an integer multiple of a power-of-two grid step plus an
exactly sampled integer. The sampler is Canonne, Kamath and Steinke's algorithm
("The Discrete Gaussian for Differential Privacy", NeurIPS 2020, Algorithms 1–2):
integer arithmetic and Bernoulli trials only, driven by ``secrets``. It is small enough
to check line by line, which is why it is written here rather than imported.
"""

from __future__ import annotations

import secrets
from fractions import Fraction
from typing import Protocol


class RandomSource(Protocol):
    def randbelow(self, n: int) -> int: ...


class SecureSource:
    """The operating system's CSPRNG (``secrets``)."""

    def randbelow(self, n: int) -> int:
        return secrets.randbelow(n)


def bernoulli(p: Fraction, rng: RandomSource) -> bool:
    """True with probability exactly p (0 ≤ p ≤ 1)."""
    return rng.randbelow(p.denominator) < p.numerator


def bernoulli_exp(gamma: Fraction, rng: RandomSource) -> bool:
    """True with probability exactly exp(−γ), γ ≥ 0 (CKS Algorithm 1)."""
    while gamma > 1:
        if not bernoulli_exp(Fraction(1), rng):
            return False
        gamma -= 1
    k = 1
    while bernoulli(gamma / k, rng):
        k += 1
    return k % 2 == 1


def discrete_laplace(scale: Fraction, rng: RandomSource) -> int:
    """An integer Z with P(Z = z) ∝ exp(−|z| / scale) (CKS Algorithm 2)."""
    if scale <= 0:
        raise ValueError("scale must be positive")
    s, t = scale.denominator, scale.numerator  # exp(-|z| s / t)
    while True:
        u = rng.randbelow(t)
        if not bernoulli_exp(Fraction(u, t), rng):
            continue
        v = 0
        while bernoulli_exp(Fraction(1), rng):
            v += 1
        magnitude = (u + t * v) // s
        negative = bernoulli(Fraction(1, 2), rng)
        if negative and magnitude == 0:
            continue
        return -magnitude if negative else magnitude


def uniform(rng: RandomSource) -> float:
    """A uniform float in [0, 1) with 53 random bits (for samplers of continuous laws)."""
    return rng.randbelow(1 << 53) / (1 << 53)
