"""How far a drawn MAX or MIN of the demo's columns lands (docs/privacy.md §5.3, "MAX and
MIN aim K ranks inside the data"): each person's least (MIN) or largest (MAX) cost in
``visits``, as the per-unit draw sees them without GROUP BY, and the people's incomes
and ages, each drawn ``--samples`` times by the product's own sampler
(``inverse_sensitivity.instance_release``), its requests answered from the sorted
values; the median relative error against the true MIN and MAX, for K =
``extreme_offset`` (the product's rule), then K = 10 and K = 0 (no public rule picks
them: which is better depends on where and how densely the data end inside the
domain). A benchmark: it asserts nothing.

    PYTHONPATH=. python benchmarks/extreme_targets.py [--epsilon 1,0.1] [--samples 1000]
"""

from __future__ import annotations

import argparse
import bisect
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
from proxy.engine import answered  # noqa: E402
from proxy.privacy.inverse_sensitivity import (  # noqa: E402
    EXTREME_SHARE,
    candidate_grid,
    extreme_offset,
    instance_release,
)
from proxy.privacy.requests import CountRequest  # noqa: E402
from proxy.privacy.sampler import SecureSource  # noqa: E402

COLUMNS = {  # name: (SQL of the sorted values, declared domain, resolution or None for int)
    "cost (per person)": ("SELECT {kind}(cost) FROM visits GROUP BY person_id", 0, 100_000, 0.01),
    "income": ("SELECT income FROM people", 0, 10_000_000, 0.01),
    "age": ("SELECT age FROM people", 0, 120, None),
}


def reader(values: list[float]):
    """Requests answered from the sorted values, as the engine answers them."""
    def read(request):
        if isinstance(request, CountRequest):
            y = request.point
            below, through = bisect.bisect_left(values, y), bisect.bisect_right(values, y)
            return (below, through, values[below - 1] if below else None,
                    values[through] if through < len(values) else None)
        return values[request.first - 1: request.last]
    return read


def median_error(draw, truth: float, samples: int) -> float:
    return float(np.median([abs(draw() - truth) / abs(truth) for _ in range(samples)]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epsilon", default="1,0.1",
                        type=lambda text: [Fraction(v) for v in text.split(",")])
    parser.add_argument("--samples", type=int, default=1000)
    arguments = parser.parse_args()
    path = Path(tempfile.mkdtemp()) / "demo.duckdb"
    create_demo(path)
    rng = SecureSource()
    print("| column | ε | MIN: K (rule) | K = 10 | K = 0 | MAX: K (rule) | K = 10 | K = 0 |"
          "\n|---|---|---|---|---|---|---|---|")
    with duckdb.connect(str(path), read_only=True) as con:
        for name, (sql, lower, upper, resolution) in COLUMNS.items():
            grid = candidate_grid(lower, upper, resolution or 1.0, resolution is None)
            for epsilon in arguments.epsilon:
                cells = []
                for kind in ("min", "max"):
                    values = sorted(float(row[0]) for row in
                                    con.execute(sql.format(kind=kind)).fetchall())
                    n, read, largest = len(values), reader(values), kind == "max"
                    truth = values[-1] if largest else values[0]

                    def rank(offset, n=n, largest=largest):
                        aside = min(offset, math.floor(EXTREME_SHARE * n))
                        return n - aside if largest else 1 + aside

                    for offset in (extreme_offset(epsilon, 1, grid), 10, 0):
                        cells.append(median_error(lambda r=rank(offset): answered(
                            instance_release(n, r, 1, epsilon, grid, rng), read),
                            truth, arguments.samples))
                print(f"| {name} | {float(epsilon):g} | "
                      + " | ".join(f"{100 * c:,.0f} %" for c in cells) + " |", flush=True)


if __name__ == "__main__":
    main()
