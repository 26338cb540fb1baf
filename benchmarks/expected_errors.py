"""What `utility.py demo`'s COUNT(*) and MIN cells converge to, without the releases'
spread (benchmarks/README.md, "COUNT at the shift as is").

    PYTHONPATH=. .venv/bin/python benchmarks/expected_errors.py

COUNT: every system adds discrete Laplace noise of a scale the query and the guarantee
fix, so a cell's median relative error (over releases × groups) is a function of that
scale and the true counts alone: 4,000 draws a group (numpy, seeded) of P(z) ∝
exp(−|z|/b), b = (cells' share)·(rows a person moves)/ε, for idp-proxy with the scale
rounded up to a power of two (main before branch countgap: 8 for visits' 6 rows a
person), with the shift as is, and for OpenDP and SmartNoise at idp-proxy's guarantee
(ε/2 per group, benchmarks/README.md "The peers at idp-proxy's guarantee").

MIN(cost) of visits: the exact law of the default draw (the rank mechanism over one
value per unit, s = 1, docs/privacy.md §5.3) on the engine's own candidate grid, by the
target offset K (``extreme_offset``'s is starred): median and mean relative error and
the chance of an answer below the minimum."""

from __future__ import annotations

import sys
import tempfile
from fractions import Fraction
from pathlib import Path

import duckdb
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from utility_demo import TABLES, add_census, truth  # noqa: E402

from proxy.demo import create_demo  # noqa: E402
from proxy.privacy.inverse_sensitivity import (  # noqa: E402
    candidate_grid,
    exponent,
    extreme_offset,
)

# (table, scope, rows one person moves in one count: before, after, the peers; the
# histogram's share of ε: 1 ungrouped, min(2, G) = 2 grouped)
COUNT_CELLS = [("people", "where", 1, 1, 1, 1), ("people", "group5", 1, 1, 1, 2),
               ("people", "group50", 1, 1, 1, 2), ("visits", "where", 8, 6, 6, 1),
               ("visits", "group5", 8, 6, 6, 2), ("visits", "group50", 8, 6, 6, 2),
               ("census", "where", 1, 1, 1, 1), ("census", "group5", 1, 1, 1, 2),
               ("census", "group50", 1, 1, 1, 2)]


def discrete_laplace(rng, scale: float, size) -> np.ndarray:
    """P(z) ∝ exp(−|z|/scale): the difference of two geometric variables."""
    p = np.exp(-1.0 / scale)
    return rng.geometric(1 - p, size) - rng.geometric(1 - p, size)


def counts(con) -> None:
    rng = np.random.default_rng(1)
    print("| cell | ε | idp-proxy, power of two (scale) | idp-proxy, s as is (scale) | "
          "OpenDP, SmartNoise at substitution (scale) |\n|---|---|---|---|---|")
    for table, scope, before, after, peers, share in COUNT_CELLS:
        true = np.array(list(truth(con, TABLES[table], scope, "count").values()), float)
        for epsilon in (0.1, 1.0):
            cells = []
            for rows in (before, after, peers):
                scale = share * rows / epsilon
                noise = discrete_laplace(rng, scale, (4000, len(true)))
                cells.append(f"{100 * np.median(np.abs(noise) / true):.3g} % ({scale:g})")
            print(f"| {table}, {scope} | {epsilon:g} | " + " | ".join(cells) + " |")


def minimum(con) -> None:
    grid = candidate_grid(0.0, 100000.0, 0.01, False)  # cost's: rules/demo.toml
    candidates = np.array([grid.value(k) for k in range(grid.count)], float)
    for where in ("", " WHERE days >= 1"):
        values = np.sort(np.array([v for (v,) in con.execute(
            f"SELECT MIN(cost) FROM visits{where} GROUP BY person_id").fetchall()], float))
        below = np.searchsorted(values, candidates, side="left")
        at_or_below = np.searchsorted(values, candidates, side="right")
        error = np.abs(candidates - values[0]) / values[0]
        order = np.argsort(error)
        for epsilon in (1.0, 0.1):
            lam = float(exponent(Fraction(epsilon), 1))
            chosen = extreme_offset(Fraction(epsilon), 1, grid)
            cells = []
            for k in sorted({0, 1, 2, 3, 5, chosen // 4, chosen // 2, chosen, 2 * chosen}):
                rank = 1 + k
                distance = np.maximum(0, np.maximum(below - rank + 1, rank - at_or_below))
                weight = np.exp(-lam * (distance - distance.min()))
                weight /= weight.sum()
                median = error[order][np.searchsorted(np.cumsum(weight[order]), 0.5)]
                cells.append(f"K={k}{'*' if k == chosen else ''}: median {100 * median:.0f} %,"
                             f" mean {100 * (weight * error).sum():.0f} %, below the minimum "
                             f"{100 * weight[candidates < values[0]].sum():.0f} %")
            print(f"MIN(cost) of visits{where}, ε {epsilon:g} (minimum {values[0]}): "
                  + "; ".join(cells))


def main() -> None:
    path = Path(tempfile.mkdtemp()) / "demo.duckdb"
    create_demo(path)
    add_census(path)
    con = duckdb.connect(str(path))
    try:
        counts(con)
        minimum(con)
    finally:
        con.close()


if __name__ == "__main__":
    main()
