"""The noise of DP via smooth sensitivity (seed 000 §VI-A2; SPEC §5.3).

Nissim, Raskhodnikova and Smith (STOC 2007): with Z of density h(z) ∝ 1/(1 + |z|^γ),
γ > 1, releasing f(D) + (S*/α)·Z is ε-DP when S* is the β-smooth sensitivity and
(α, β) = (ε/(4γ), ε/γ) (seed 000, Eq. before Table I). The law is heavy-tailed — that is
the price of smooth sensitivity the seed's Table I shows against Laplace.

h's normaliser is ∫ℝ dz/(1 + |z|^γ) = 2(π/γ)/sin(π/γ); its CDF has no elementary form
for γ ≠ 2, so quantiles integrate h numerically. The sampler is a rejection sampler
with proposal ∝ min(1, |z|^−γ) (uniform core, Pareto tails), accepting with
probability ≥ ½; uniforms come from the ``RandomSource`` (the OS CSPRNG in the product).
"""

from __future__ import annotations

import math

from proxy.privacy.sampler import RandomSource, uniform


def admissible(epsilon: float, gamma: float) -> tuple[float, float]:
    """(α, β) for which the law is (α, β)-admissible at ε: noise scale S*/α, and S*
    the β-smooth sensitivity."""
    _check(gamma)
    return epsilon / (4 * gamma), epsilon / gamma


def _check(gamma: float) -> None:
    if not gamma > 1:
        raise ValueError("gamma must be above 1 (the law has no mass 1 otherwise)")


def central_mass(q: float, gamma: float) -> float:
    """P(|Z| ≤ q): Simpson's rule on [0, q] (h is smooth and at most 1 there)."""
    _check(gamma)
    if q <= 0:
        return 0.0
    import numpy as np  # here: most answers never need it, and it costs every start

    points = np.linspace(0.0, q, 200_001)
    values = 1.0 / (1.0 + points ** gamma)
    step = q / (len(points) - 1)
    integral = step / 3 * (values[0] + values[-1] + 4 * values[1:-1:2].sum()
                           + 2 * values[2:-1:2].sum())
    return float(integral / (math.pi / gamma / math.sin(math.pi / gamma)))


def half_width(coverage: float, gamma: float) -> float:
    """The q with P(|Z| ≤ q) = coverage (bisection): the central interval is [−q, q]."""
    low, high = 0.0, 1.0
    while central_mass(high, gamma) < coverage:
        low, high = high, high * 2
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if central_mass(middle, gamma) < coverage else (low, middle)
    return (low + high) / 2


def sample(gamma: float, rng: RandomSource) -> float:
    """One draw of Z (exact rejection sampling, in floating point)."""
    _check(gamma)
    core = (gamma - 1) / gamma  # proposal mass of [0, 1] against the Pareto tail
    while True:
        if uniform(rng) < core:
            t = uniform(rng)
            accept = 1.0 / (1.0 + t ** gamma)
        else:
            t = (1.0 - uniform(rng)) ** (1.0 / (1.0 - gamma))  # P(T > t) = t^(1−γ)
            accept = t ** gamma / (1.0 + t ** gamma)
        if uniform(rng) < accept:
            return -t if rng.randbelow(2) else t
