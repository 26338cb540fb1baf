"""Exact discrete Laplace sampling from a cryptographically secure source.

Floating-point Laplace samplers leak the low bits of the true value (Mironov 2012), so
every released number here is an integer multiple of a power-of-two grid step plus an
exactly sampled integer. The sampler is Canonne, Kamath and Steinke's algorithm
("The Discrete Gaussian for Differential Privacy", NeurIPS 2020, Algorithms 1–2):
integer arithmetic and Bernoulli trials only, driven by the OS's CSPRNG. It is small enough
to check line by line, which is why it is written here rather than imported.
"""

from __future__ import annotations

import os
import threading
from fractions import Fraction
from typing import Protocol


class RandomSource(Protocol):
    def randbelow(self, n: int) -> int: ...


class _Pool(threading.local):
    """One thread's bytes of ``os.urandom`` and how many of them are used."""

    def __init__(self) -> None:
        self.pool, self.at = b"", 0


class SecureSource:
    """The operating system's CSPRNG (``os.urandom``), read 4 KiB at a time per thread:
    a system call per integer cost more than the sampling itself. Each byte is used
    once; threads never share a pool."""

    def __init__(self) -> None:
        self._local = _Pool()

    def randbelow(self, n: int) -> int:
        """Uniform on 0..n−1: the low bits of fresh bytes, rejected when ≥ n (the bytes
        taken from the pool inline: a draw per group reads ten of these)."""
        if n < 1:
            raise ValueError("randbelow needs n ≥ 1")
        bits = (n - 1).bit_length()
        size, mask = (bits + 7) // 8, (1 << bits) - 1
        local = self._local
        while True:
            at = local.at
            if at + size > len(local.pool):
                local.pool, at = os.urandom(max(4096, size)), 0
            local.at = at + size
            value = int.from_bytes(local.pool[at: at + size], "little") & mask
            if value < n:
                return value


def bernoulli_exp(gamma: Fraction, rng: RandomSource) -> bool:
    """True with probability exactly exp(−γ), γ ≥ 0 (CKS Algorithm 1)."""
    return _bernoulli_exp(gamma.numerator, gamma.denominator, rng)


def bernoulli_exp_ratio(num: int, den: int, rng: RandomSource) -> bool:
    """True with probability exactly exp(−num/den), for integers num ≥ 0 and den ≥ 1:
    ``bernoulli_exp`` without building a Fraction (for draws in a loop)."""
    return _bernoulli_exp(num, den, rng)


def _bernoulli_exp(num: int, den: int, rng: RandomSource) -> bool:
    """exp(−num/den) on integers: Fraction arithmetic cost most of a draw's time."""
    while num > den:
        if not _bernoulli_exp(1, 1, rng):
            return False
        num -= den
    k = 1
    while rng.randbelow(den * k) < num:  # Bernoulli(γ/k)
        k += 1
    return k % 2 == 1


def discrete_laplace(scale: Fraction, rng: RandomSource) -> int:
    """An integer Z with P(Z = z) ∝ exp(−|z| / scale) (CKS Algorithm 2)."""
    if scale <= 0:
        raise ValueError("scale must be positive")
    s, t = scale.denominator, scale.numerator  # exp(-|z| s / t)
    while True:
        u = rng.randbelow(t)
        if not _bernoulli_exp(u, t, rng):
            continue
        v = 0
        while _bernoulli_exp(1, 1, rng):
            v += 1
        magnitude = (u + t * v) // s
        negative = rng.randbelow(2) == 0  # Bernoulli(1/2)
        if negative and magnitude == 0:
            continue
        return -magnitude if negative else magnitude


def uniform(rng: RandomSource) -> float:
    """A uniform float in [0, 1) with 53 random bits (for samplers of continuous laws)."""
    return rng.randbelow(1 << 53) / (1 << 53)
