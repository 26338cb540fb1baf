"""The piecewise form of the exponential mechanism against the step form ('piecewise'
against 'instance', docs/privacy.md §5.3): the exact expected absolute error of the
median and MAX, summed over each mechanism's law (no sampling noise), on the same data
sets for both. A benchmark: it measures, it asserts nothing.

    python benchmarks/piecewise.py [--n 100,1000,10000] [--epsilon 0.1,1] [--datasets 100]

Columns and domains are ``utility.py``'s normal, lognormal and (integer, tied) age.
On a float column the grid (step ≈ 10⁻⁶ of the domain over 1024) is far finer than the
data's gaps, so the law is taken in its continuous limit: per gap, a 48-point
Gauss–Legendre rule of the density e^{−λd}; on the int column every integer of the
domain is a candidate. λ = ε/2 (one record per person). Prints, per cell, the mean
error of each form over the data sets and their ratio.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from utility import columns

_NODES, _WEIGHTS = np.polynomial.legendre.leggauss(48)
NODES, WEIGHTS = (_NODES + 1) / 2, _WEIGHTS / 2  # on [0, 1]


def continuous_error(values, lower, upper, rank, scale, truth, piecewise) -> float:
    """E|y − truth| with y ∝ e^{−λd(y)} on [L, U]: gap b between x₍ᵦ₎ and x₍ᵦ₊₁₎ (x₍₀₎ = L,
    x₍ₙ₊₁₎ = U) has d = floor + t (away from r) in the piecewise form, floor + 1 in the
    step form; the values themselves carry no mass in this limit."""
    points = np.concatenate([[lower], np.sort(values), [upper]])
    start, width = points[:-1], np.diff(points)
    gap = np.arange(len(start))
    rising = gap >= rank
    floor = np.where(rising, gap - rank, rank - gap - 1).astype(float)
    part = np.where(rising[:, None], NODES[None, :], 1 - NODES[None, :])
    d = floor[:, None] + (part if piecewise else 1.0)
    with np.errstate(divide="ignore"):
        logs = -scale * d + np.log(width)[:, None] + np.log(WEIGHTS)[None, :]
    weights = np.exp(logs - logs.max())
    y = start[:, None] + NODES[None, :] * width[:, None]
    return float((weights * np.abs(y - truth)).sum() / weights.sum())


def integer_error(values, lower, upper, rank, scale, truth, piecewise) -> float:
    """E|y − truth| over every integer of [L, U]: the step distance from counts, the
    piecewise one |r − b − t| strictly inside a gap."""
    ys = np.arange(lower, upper + 1, dtype=float)
    ordered = np.sort(values)
    below, through = np.searchsorted(ordered, ys, "left"), np.searchsorted(ordered, ys, "right")
    d = np.maximum.reduce([np.zeros_like(ys), below - rank + 1, rank - through]).astype(float)
    if piecewise:
        points = np.concatenate([[lower], ordered, [upper]])
        inside = below == through
        under, over = points[through], points[through + 1]
        position = through + (ys - under) / np.where(over > under, over - under, 1)
        d[inside] = np.abs(rank - position[inside])
    weights = np.exp(-scale * (d - d.min()))
    return float((weights * np.abs(ys - truth)).sum() / weights.sum())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", default="100,1000,10000")
    parser.add_argument("--epsilon", default="0.1,1")
    parser.add_argument("--datasets", type=int, default=100)
    parser.add_argument("--seed", type=int, default=19)
    args = parser.parse_args()
    found = columns()
    print("aggregate column n epsilon step piecewise piecewise/step")
    for aggregate in ("median", "max"):
        for name in ("normal", "lognormal", "age"):
            column = found[name]
            error = integer_error if column.integer else continuous_error
            for n in (int(v) for v in args.n.split(",")):
                for epsilon in (float(v) for v in args.epsilon.split(",")):
                    rng = np.random.default_rng(args.seed)
                    totals = np.zeros(2)
                    for _ in range(args.datasets):
                        values = np.clip(column.draw(n, rng).astype(float), column.lower,
                                         column.upper)
                        if aggregate == "max":
                            rank, truth = n, float(values.max())
                        else:
                            rank, truth = max(1, -(-n // 2)), float(np.quantile(values, 0.5))
                        totals += [error(values, column.lower, column.upper, rank,
                                         epsilon / 2, truth, form) for form in (False, True)]
                    step, piecewise = totals / args.datasets
                    print(f"{aggregate} {name} {n} {epsilon:g} {step:.4g} {piecewise:.4g} "
                          f"{piecewise / step:.4f}")


if __name__ == "__main__":
    main()
