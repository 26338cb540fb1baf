"""The exact choice's cheap first round (``exact_choice._quick``) against its exact rounds
(``_exact``): whatever it decides, for the same bits of U, is what the exact rounds
decide, including U on and next to the boundaries of the CDF, and a draw through
``choose`` is the exact rounds' draw for the same seed. The law itself is tested in
test_instance_bruteforce.py (χ² of ``choose``'s frequencies)."""

from __future__ import annotations

import math
import random
from fractions import Fraction

import pytest

from proxy.privacy import exact_choice
from proxy.privacy.contribution_bounds import rung_exponents, rung_weights
from proxy.privacy.top_choice import choice_exponents, choice_weights
from tests.privacy.laws import SeededSource

BITS = 64


def _split(weights):
    return ([m for m, _ in weights], [x.numerator for _, x in weights],
            [x.denominator for _, x in weights])


def _exact(weights, u, seed=0):
    return exact_choice._exact(*_split(weights), u, SeededSource(seed))


def _quick(weights, u):
    return exact_choice._quick(*_split(weights), u, BITS)


def _random_weights(r: random.Random):
    """Up to 200 weights, x from 0 up to 1, 10, 70 or 300 (beyond the tables' 64; the
    exact rounds' first at 30 digits shows x up to 60), counts up to 2^40."""
    n = r.choice([1, 2, 3, 9, 21, 200])
    top = r.choice([1, 10, 70, 300])
    den = r.choice([1, 7, 1000, 2 ** 61 - 1])
    return [(r.choice([1, 1, 5, 2 ** 40]), Fraction(r.randrange(0, top * den), den))
            for _ in range(n)]


def _boundaries(weights):
    """2^64·F_j/W for each partial sum F_j, by the doubles (near the true boundaries)."""
    least = min(x for _, x in weights)
    w = [m * math.exp(-float(x - least)) for m, x in weights]
    total, running, out = sum(w), 0.0, []
    for value in w[:-1]:
        running += value
        out.append(int(running / total * 2 ** BITS))
    return out


def test_the_quick_round_decides_as_the_exact_rounds_over_many_seeds():
    """Random U and the ends 0 and 1 − 2^−64: the same index where it decides, and it
    decides nearly every random U."""
    r = random.Random(20261128)
    decided = 0
    for _ in range(1500):
        weights = _random_weights(r)
        randoms = [r.randrange(1 << BITS) for _ in range(3)]
        for u in randoms + [0, (1 << BITS) - 1]:
            quick = _quick(weights, u)
            if quick is not None:
                decided += u in randoms
                assert quick == _exact(weights, u)
    assert decided >= 4490


def test_next_to_every_boundary_the_quick_round_is_right_or_silent():
    """U within a few 2^−64 (and ±2·10⁻⁶, the tables' width) of a partial sum: the quick
    round either declines or returns the exact rounds' index. Twelve partial sums of
    each weight set at most (of 200 weights, each U costs a pass over all of them)."""
    r = random.Random(7)
    silent = 0
    for _ in range(120):
        weights = _random_weights(r)
        edges = _boundaries(weights)
        for edge in r.sample(edges, 12) if len(edges) > 12 else edges:
            for offset in (-2 ** 45, -2 ** 40, -3, -1, 0, 1, 2, 2 ** 40, 2 ** 45):
                u = min(max(edge + offset, 0), (1 << BITS) - 1)
                quick = _quick(weights, u)
                if quick is None:
                    silent += 1
                else:
                    assert quick == _exact(weights, u)
    assert silent > 0  # the boundaries were reached


@pytest.mark.parametrize("weights, u, expected", [
    # two equal weights: U just below ½ is index 0, from ½ on index 1
    ([(1, Fraction(0)), (1, Fraction(0))], (1 << 63) - (1 << 46), 0),
    ([(1, Fraction(0)), (1, Fraction(0))], (1 << 63) + (1 << 46), 1),
    # exponents far beyond the tables (shifted by the least: the same ratios)
    ([(1, Fraction(150)), (1, Fraction(150))], (1 << 63) + (1 << 46), 1),
    ([(1, Fraction(200)), (3, Fraction(200))], (1 << 62) - (1 << 46), 0),
    ([(1, Fraction(200)), (3, Fraction(200))], (1 << 62) + (1 << 46), 1),
    # a weight e^{−100} beside 1: not drawn by a U below 1 − 2^−14
    ([(1, Fraction(0)), (1, Fraction(100))], (1 << BITS) - (1 << 50), 0),
])
def test_the_quick_round_on_known_boundaries(weights, u, expected):
    assert _quick(weights, u) == expected == _exact(weights, u)


def test_on_a_boundary_the_quick_round_declines():
    """U's first 64 bits at ½ − 2^−64 of two equal weights: index 0 or 1 depends on the
    next bits, which only the exact rounds read."""
    weights = [(1, Fraction(0)), (1, Fraction(0))]
    assert _quick(weights, (1 << 63) - 1) is None
    assert _quick(weights, 1 << 63) is None


def test_a_count_beyond_a_double_goes_to_the_exact_rounds():
    weights = [(2 ** 53, Fraction(0)), (1, Fraction(0))]
    assert _quick(weights, 0) is None
    assert _exact(weights, 0) == 0


class Counted(SeededSource):
    def __init__(self, seed: int) -> None:
        super().__init__(seed)
        self.calls = 0

    def randbelow(self, n: int) -> int:
        self.calls += 1
        return super().randbelow(n)


def test_choose_draws_what_the_exact_rounds_draw_from_the_same_seed():
    """The same seed: the same index, never more bits read, and the same bits (the next
    number drawn the same) unless the exact first round could not decide (all weights
    beyond its 30 digits: the quick round weighs them relative to the largest)."""
    r = random.Random(3)
    same = 0
    for seed in range(600):
        weights = _random_weights(r)
        fast, slow = Counted(seed), Counted(seed)
        chosen = exact_choice.choose(weights, fast)
        assert chosen == exact_choice._exact(*_split(weights), slow.randbelow(1 << BITS),
                                             slow)
        assert fast.calls <= slow.calls
        if fast.calls == slow.calls:
            same += 1
            assert fast.randbelow(1 << 30) == slow.randbelow(1 << 30)
    assert same >= 500


def test_choose_scaled_is_choose_of_the_rationals():
    beyond = (40, 31, 17, 9, 4, 2, 1, 0, 0)
    exponents, denominator = rung_exponents(beyond, Fraction(1, 3), 2)
    weights = rung_weights(beyond, Fraction(1, 3), 2)
    assert [Fraction(n, denominator) for n in exponents] == [x for _, x in weights]
    for seed in range(200):
        assert exact_choice.choose_scaled(exponents, denominator, SeededSource(seed)) \
            == exact_choice.choose(weights, SeededSource(seed))


def test_rung_exponents_are_the_fractions_of_the_definition():
    """x_k = max(0, λβ_k − allowance) + prior·k + max(0, shortfall − λβ_{k−slack}),
    λ = ε/(2g), computed here in Fractions."""
    r = random.Random(11)
    for _ in range(200):
        beyond = tuple(sorted((r.randrange(0, 500) for _ in range(r.randrange(1, 22))),
                              reverse=True))
        epsilon, g = Fraction(r.randrange(1, 40), r.randrange(1, 30)), r.randrange(1, 4)
        rule = {"prior": Fraction(r.randrange(0, 9), 4),
                "allowance": Fraction(r.randrange(0, 30), r.randrange(1, 4)),
                "shortfall": Fraction(r.randrange(0, 20)), "slack": r.randrange(0, 3)}
        evidence = r.random() < 0.8
        lam = epsilon / (2 * g)
        expected = [max(Fraction(0), lam * b - rule["allowance"]) + rule["prior"] * k
                    + (max(Fraction(0), rule["shortfall"]
                           - lam * beyond[max(k - rule["slack"], 0)]) if evidence else 0)
                    for k, b in enumerate(beyond)]
        exponents, d = rung_exponents(beyond, epsilon, g, evidence=evidence, **rule)
        assert [Fraction(n, d) for n in exponents] == expected


def test_choice_exponents_are_the_fractions_of_the_definition():
    """x_j = ε·(u* − u_j)/(2Δ) in Fractions of the doubles, for doubles of every size
    (subnormal, negative, huge, integers)."""
    r = random.Random(5)
    for _ in range(200):
        utilities = [r.choice([r.uniform(-1e6, 1e6), float(r.randrange(-10, 10)),
                               5e-324 * r.randrange(1, 9), r.uniform(-1, 1) * 1e300, 0.0])
                     for _ in range(r.randrange(1, 30))]
        sensitivity = Fraction(r.uniform(1e-3, 1e5)) * Fraction(1000000001, 10 ** 9)
        epsilon = Fraction(r.randrange(1, 10 ** 6), 10 ** 6)
        top = max(Fraction(u) for u in utilities)
        expected = [epsilon * (top - Fraction(u)) / (2 * sensitivity) for u in utilities]
        exponents, d = choice_exponents(utilities, sensitivity, epsilon)
        assert [Fraction(n, d) for n in exponents] == expected
        assert [x for _, x in choice_weights(utilities, sensitivity, epsilon)] == expected
