"""The exact samplers alone, as TPC-H's per-group releases call them (issue 34): 10,000
per-group rung draws of Q21-like ladders (a supplier's few units), one choice over
10,000 weights as Q15's over its suppliers, and 10,000 discrete Laplace draws; best of
5, in seconds. The proxy it imports is the one on ``PYTHONPATH`` (no path of its own),
so one copy of it times two versions:

    PYTHONPATH=/tmp/before python benchmarks/exact_samplers.py
    PYTHONPATH=. python benchmarks/exact_samplers.py
"""

from __future__ import annotations

import random
import time
from fractions import Fraction

from proxy.privacy.contribution_bounds import COUNT_PRIOR, draw_rung
from proxy.privacy.exact_choice import choose
from proxy.privacy.sampler import SecureSource, discrete_laplace


def best(action, rounds: int = 5) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    rng, r = SecureSource(), random.Random(1)
    ladders = []
    for _ in range(10000):  # β_k of 9 rungs: a handful of units, most below the top rungs
        n = r.randrange(0, 12)
        ladders.append(tuple(sorted([n] + [max(0, n - r.randrange(0, 3) * k)
                                           for k in range(1, 7)], reverse=True)) + (0, 0))
    weights = [(1, Fraction(r.randrange(0, 10 ** 9), 7 * 10 ** 6)) for _ in range(10000)]
    print("Q21-like: 10,000 draw_rung  %.3f s" % best(
        lambda: [draw_rung(b, Fraction(1, 3), 1, rng, COUNT_PRIOR) for b in ladders]))
    print("Q15-like: choose of 10,000  %.3f s" % best(lambda: choose(weights, rng)))
    print("10,000 discrete_laplace     %.3f s" % best(
        lambda: [discrete_laplace(Fraction(10 ** 6 + 1, 2), rng) for _ in range(10000)]))


if __name__ == "__main__":
    main()
