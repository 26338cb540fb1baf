"""How far a drawn MAX or MIN of the demo's per-person costs lands, for several target
offsets K (docs/privacy.md §5.3, "MAX and MIN aim K ranks inside the data"): the
exponential mechanism's law computed from its own blocks (``inverse_sensitivity.blocks``,
the product's distances on cost's grid) over each person's least (MIN) or largest
(MAX) cost in ``visits``, as the per-unit draw sees them without GROUP BY, sampled
``--samples`` times; the median relative error against the true MIN and MAX. K = the
product's ``extreme_offset`` first, then smaller offsets no public rule can choose
(which is better depends on where the data end inside the domain). A benchmark: it
asserts nothing.

    PYTHONPATH=. python benchmarks/extreme_targets.py [--epsilon 1,0.2] [--samples 4000]
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
from fractions import Fraction
from pathlib import Path

import duckdb
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from proxy.demo import create_demo  # noqa: E402
from proxy.privacy.inverse_sensitivity import (  # noqa: E402
    EXTREME_SHARE,
    blocks,
    candidate_grid,
    exponent,
    extreme_offset,
)


def median_error(values: list[float], rank: int, scale: float, grid, truth: float,
                 samples: int, rng: np.random.Generator) -> float:
    """The median |y − truth| / truth over ``samples`` draws of the mechanism's law."""
    found = blocks(len(values), rank, grid, 1, values)
    logs = np.array([math.log(b.count) - scale * b.distance for b in found])
    weights = np.exp(logs - logs.max())
    chosen = rng.choice(len(found), samples, p=weights / weights.sum())
    draws = np.array([float(grid.value(found[i].first + rng.integers(found[i].count)))
                      for i in chosen])
    return float(np.median(np.abs(draws - truth) / truth))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epsilon", default="1,0.2",
                        type=lambda text: [Fraction(v) for v in text.split(",")])
    parser.add_argument("--samples", type=int, default=4000)
    arguments = parser.parse_args()
    path = Path(tempfile.mkdtemp()) / "demo.duckdb"
    create_demo(path)
    with duckdb.connect(str(path), read_only=True) as con:
        ends = {kind: sorted(row[0] for row in con.execute(
            f"SELECT {kind}(cost) FROM visits GROUP BY person_id").fetchall())
            for kind in ("min", "max")}
    grid = candidate_grid(0, 100_000, 0.01, False)  # rules/demo.toml's cost
    n = len(ends["min"])
    print(f"{n} people; least cost {ends['min'][0]}, largest {ends['max'][-1]}; "
          f"{grid.count:,} candidates")
    print("| ε | K | MIN | MAX |\n|---|---|---|---|")
    for epsilon in arguments.epsilon:
        scale = float(exponent(epsilon, 1))
        product = extreme_offset(epsilon, 1, grid)
        for offset in (product, 10, 0):
            aside = min(offset, math.floor(EXTREME_SHARE * n))
            rng = np.random.default_rng(0)
            low = median_error(ends["min"], 1 + aside, scale, grid, ends["min"][0],
                               arguments.samples, rng)
            high = median_error(ends["max"], n - aside, scale, grid, ends["max"][-1],
                                arguments.samples, rng)
            label = f"{offset} (extreme_offset)" if offset == product else str(offset)
            print(f"| {float(epsilon):g} | {label} | {100 * low:,.0f} % | {100 * high:,.0f} % |")


if __name__ == "__main__":
    main()
