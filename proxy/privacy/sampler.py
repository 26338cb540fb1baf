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
from typing import Callable, Protocol

import numpy as np


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

    def words(self, count: int) -> np.ndarray:
        """``count`` uniform 64-bit words of fresh ``os.urandom`` bytes (for the batched
        sampler, ``discrete_laplace_many``): bytes of their own, never the pool's."""
        return np.frombuffer(os.urandom(8 * count), dtype=np.uint64)


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
    """An integer Z with P(Z = z) ∝ exp(−|z| / scale) (CKS Algorithm 2); from the pools
    of a ``Batched`` source where ``rng`` is one (the same law, drawn many at a time)."""
    pooled = getattr(rng, "discrete_laplace", None)
    if pooled is not None:
        return pooled(scale)
    return _discrete_laplace(scale, rng)


def _discrete_laplace(scale: Fraction, rng: RandomSource) -> int:
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


# The batched sampler's integers stay below 2⁶³: t·K (K the Bernoulli loop's counter) and
# u + t·v (v the geometric count) for t below this, unless K or v pass BATCH_REACH, which
# happens with probability below 10⁻²⁰⁰ and is then finished in Python's integers.
BATCH_SCALE = 2**52
BATCH_REACH = 2**10
Words = Callable[[int], np.ndarray]


def discrete_laplace_many(scale: Fraction, count: int, words: Words) -> list[int]:
    """``count`` independent draws of ``discrete_laplace(scale)``: the same algorithm (CKS
    Algorithm 2, its Bernoulli trials those of Algorithm 1), each draw's loops run for
    all draws at once in numpy's 64-bit integers, each uniform integer below n taken
    from fresh 64-bit words (``_below``: uniform on 0..n−1, as ``SecureSource.randbelow``'s
    bytes are). Each draw's trials use words
    of their own, so the draws are independent and each has the law of
    ``discrete_laplace``. For a scale whose numerator t is below ``BATCH_SCALE``."""
    s, t = scale.denominator, scale.numerator
    if not 0 < t < BATCH_SCALE:
        raise ValueError("discrete_laplace_many needs a scale of numerator below 2^52")
    found: list[int] = []
    while len(found) < count:
        wanted = count - len(found)
        u = _below(np.full(wanted, t, dtype=np.uint64), words)
        kept = _bernoulli_exp_below(u, t, words)  # exp(−u/t)
        u = u[kept]
        v = np.zeros(len(u), dtype=np.uint64)  # trials of exp(−1) until one fails
        going = np.arange(len(u))
        while going.size:
            hit = _bernoulli_exp_below(np.ones(going.size, dtype=np.uint64), 1, words)
            going = going[hit]
            v[going] += 1
            if going.size and int(v[going].max()) >= BATCH_REACH:
                for i in going.tolist():  # past 2⁻¹⁴⁴⁰: the rest one by one, exactly
                    v[i] += _geometric_rest(words)
                break
        if s < BATCH_SCALE and int(v.max(initial=0)) < BATCH_REACH:  # below 2⁶²
            magnitude = ((u + np.uint64(t) * v) // np.uint64(s)).tolist()
        else:
            magnitude = [(a + t * b) // s for a, b in zip(u.tolist(), v.tolist())]
        negative = (_below(np.full(len(u), 2, dtype=np.uint64), words) == 0).tolist()
        found.extend(-m if n else m for m, n in zip(magnitude, negative) if m or not n)
    return found[:count]


def _below(n: np.ndarray, words: Words) -> np.ndarray:
    """Uniform integers on 0..n−1 for each n ≥ 1 of ``n`` (uint64): a fresh word w, kept
    when below m·n for m = ⌊(2⁶⁴ − 1)/n⌋ (then uniform on 0..m·n − 1, so w mod n is
    uniform on 0..n − 1), else another (for n below 2⁶², a word in 2²² or fewer)."""
    threshold = (np.uint64(2**64 - 1) // n) * n
    out = np.empty_like(n)
    todo = np.arange(len(n))
    while todo.size:
        word = words(todo.size)
        ok = word < threshold[todo]
        out[todo[ok]] = word[ok] % n[todo[ok]]
        todo = todo[~ok]
    return out


def _bernoulli_exp_below(num: np.ndarray, den: int, words: Words) -> np.ndarray:
    """exp(−num/den) for each 0 ≤ num ≤ den (uint64): CKS Algorithm 1's loop, K = 1 and
    K += 1 while a uniform integer below den·K is below num (Bernoulli(γ/K)), true where
    K ends odd."""
    k = np.ones(len(num), dtype=np.uint64)
    going = np.arange(len(num))
    while going.size:
        if int(k[going].max()) >= BATCH_REACH:  # past 1/1023!: the rest one by one
            for i in going.tolist():
                k[i] = _counter_rest(int(num[i]), den, int(k[i]), words)
            break
        hit = _below(np.uint64(den) * k[going], words) < num[going]
        going = going[hit]
        k[going] += 1
    return k % 2 == 1


def _below_one(n: int, words: Words) -> int:
    """A uniform integer on 0..n−1 for any n ≥ 1, from as many words as its bits need."""
    bits = (n - 1).bit_length()
    size = max(1, (bits + 63) // 64)
    while True:
        value = int.from_bytes(words(size).tobytes(), "little") & ((1 << bits) - 1)
        if value < n:
            return value


def _counter_rest(num: int, den: int, k: int, words: Words) -> int:
    while _below_one(den * k, words) < num:
        k += 1
    return k


def _geometric_rest(words: Words) -> int:
    v = 0
    while _counter_rest(1, 1, 1, words) % 2 == 1:
        v += 1
    return v


class Batched:
    """A release's random source that draws discrete Laplace integers many at a time
    (``discrete_laplace_many``) into a pool per scale, handing them out one per call of
    ``discrete_laplace``, in order; each is used once, the pool's rest is dropped with
    the source. A pool's first batch is small and each next one twice the last (at most
    ``largest``), so the draws made beyond those used are at most about as many as
    used. Everything else (``randbelow``) is the source's own. Which draw a call
    receives depends on nothing but the calls' order, so the draws used are
    independent, each of the law ``discrete_laplace`` draws."""

    def __init__(self, source: RandomSource, words: Words, largest: int = 4096) -> None:
        self.source, self._words, self._largest = source, words, largest
        self._pools: dict[tuple[int, int], tuple[list[int], int]] = {}  # by t and s

    def randbelow(self, n: int) -> int:
        return self.source.randbelow(n)

    def discrete_laplace(self, scale: Fraction) -> int:
        key = scale.numerator, scale.denominator  # a Fraction's hash is slow
        if not 0 < key[0] < BATCH_SCALE:  # a scale ≤ 0 refused there
            return _discrete_laplace(scale, self.source)
        pool, size = self._pools.get(key, ((), 8))
        if not pool:
            size = min(2 * size, self._largest)
            pool = discrete_laplace_many(scale, size, self._words)
            pool.reverse()  # handed out from the end
            self._pools[key] = (pool, size)
        return pool.pop()


def batched(rng: RandomSource, draws: int) -> RandomSource:
    """``rng`` as a ``Batched`` source for about ``draws`` draws where it gives words
    (``SecureSource``) and they are many; else ``rng`` itself."""
    words = getattr(rng, "words", None)
    return Batched(rng, words) if words is not None and draws >= 64 else rng
