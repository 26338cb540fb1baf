"""How wide the private upper bound of the local sensitivity (report_scale = "private",
proxy/privacy/private_bound.py) is on demo-like data, against the true LS rounded up to
a power of two (what "rounded" prints).

10,000 incomes lognormal(ln 40,000, 0.6) clipped to [0, 1e7]; MEDIAN and MAX (U = 1e7),
s = 1, floor 0.01, ε_b = 0.01, 0.05, 0.1 (10 % of ε = 0.1, 0.5, 1), failure 0.05;
200 draws each. Usage: python examples/private_bound_width.py
"""

from __future__ import annotations

import statistics
from fractions import Fraction

import numpy as np

from proxy.privacy.private_bound import (
    horizon,
    ladder,
    max_terms,
    percentile_terms,
    private_level,
    threshold,
)
from proxy.privacy.sampler import SecureSource
from proxy.privacy.sensitivity import round_up_to_power_of_two
from proxy.statistics import percentile_rank

N, LOWER, UPPER, FLOOR, FAILURE, DRAWS = 10_000, 0.0, 1e7, 0.01, 0.05, 200


def main() -> None:
    incomes = np.clip(np.random.default_rng(13).lognormal(np.log(40_000), 0.6, N), LOWER, UPPER)
    x = sorted(float(v) for v in incomes)
    fetch = lambda first, last: x[first - 1: last]
    from_top = lambda first, last: x[::-1][first - 1: last]
    rank = percentile_rank(N, Fraction(1, 2))
    true_ls = {"MEDIAN": max(x[rank] - x[rank - 1], x[rank - 1] - x[rank - 2]),
               "MAX": max(UPPER - x[-1], x[-1] - x[-2])}
    levels = ladder(FLOOR, UPPER - LOWER)
    rng = SecureSource()
    print(f"{'aggregate':<9} {'eps_b':>6} {'T':>6} {'K':>6} {'true LS':>10} {'rounded':>10} "
          f"{'private median':>15} {'private p95':>12} {'ratio':>8} {'P(<LS)':>7}")
    for name, ls in true_ls.items():
        rounded = round_up_to_power_of_two(max(ls, FLOOR))
        for epsilon_b in (0.01, 0.05, 0.1):
            cap = horizon(epsilon_b, levels, FAILURE)
            if name == "MEDIAN":
                terms = percentile_terms(N, rank, 1, LOWER, UPPER, fetch, cap)
            else:
                terms = max_terms(N, 1, LOWER, UPPER, from_top, cap)
            got = sorted(private_level(terms, levels, epsilon_b, rng, FAILURE)
                         for _ in range(DRAWS))
            middle = statistics.median_low(got)
            print(f"{name:<9} {epsilon_b:>6} {threshold(epsilon_b, levels, FAILURE):>6} "
                  f"{cap:>6} {ls:>10.4g} {rounded:>10.4g} {middle:>15.4g} "
                  f"{got[int(0.95 * DRAWS)]:>12.4g} {middle / rounded:>7.0f}x "
                  f"{sum(g < ls for g in got) / DRAWS:>7.3f}")


if __name__ == "__main__":
    main()
