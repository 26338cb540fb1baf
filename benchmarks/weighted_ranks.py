"""Weighted ranks against one row per unit for percentiles of the demo's visits (a
user-level table, up to 6 rows per person), by the exponential mechanism's exact laws
(docs/privacy.md §5.3, "Weighted ranks instead of one row per unit"). A benchmark: it
measures, it asserts nothing.

    python benchmarks/weighted_ranks.py [--epsilon 1] [--samples 20]

For each cell the law of the draw over the product's candidates (``ranked_grid``, the
values snapped as the draw snaps them, the answer the middle of the drawn cell) is
summed exactly, against the true percentile of all rows (PERCENTILE_CONT for the
held-out statement, whose tolerance this uses: 10 % of the truth, at least 1 % of the
largest; PERCENTILE_DISC elsewhere). Under GROUP BY: one row per unit (a random row of
each unit's rows in scope, as the MD5 picks one; averaged over ``--samples`` samples) at
λ = ε/(2g·min(2g, G)) = ε/4, against every row weighted 1/n_u at λ = ε/(4·max(p, 1 − p)).
Without GROUP BY: all rows at λ = ε/(2c) (c = 6, what the product draws over) against
weighted ranks at ε/2. Printed per cell: the mean over its groups of P(within the
tolerance), P(every group within), the median over groups of E|relative error|.
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import os
import tempfile
from pathlib import Path

import duckdb
import numpy as np

from proxy.demo import create_demo
from proxy.privacy.inverse_sensitivity import ranked_grid

ROWS_PER_UNIT = 6  # the demo's visits: the most rows one person owns
WINDOW = "visited_at BETWEEN '2023-01-01T00:00:00' AND '2024-12-31T23:59:59'"


class _Cost:  # rules/demo.toml's visits.cost
    lower, upper, resolution, type = 0.0, 100000.0, 0.01, "float"


def _law(index, weights, candidates: int, scale: float, target) -> np.ndarray:
    """P over the candidates: d = max(0, A − t, t − B) (weighted) or the product's
    max(0, a − r + 1, r − b) (``target`` an int rank)."""
    mass = np.bincount(index, weights=weights, minlength=candidates)
    through = np.cumsum(mass)
    below = through - mass
    if isinstance(target, int):
        d = np.maximum(0, np.maximum(below - target + 1, target - through))
    else:
        t = target * through[-1]
        d = np.maximum(0, np.maximum(below - t, t - through))
    logs = -scale * d
    p = np.exp(logs - logs.max())
    return p / p.sum()


def cell(con, name, where, group, fraction, epsilon, truth_sql, middles, values,
         samples, held_out=False):
    rows = con.execute(f"SELECT person_id, {group}, cost FROM visits WHERE {where} "
                       "AND cost IS NOT NULL AND NOT isnan(cost)").fetchall()
    unit = np.array([r[0] for r in rows])
    keys = sorted({r[1] for r in rows})
    group_of = np.array([keys.index(r[1]) for r in rows])
    x = np.clip(np.array([r[2] for r in rows]), _Cost.lower, _Cost.upper)
    index = np.searchsorted(values, x, side="right") - 1  # snapped to its candidate
    truth = dict(con.execute(truth_sql).fetchall())
    true = np.array([truth[k] for k in keys])
    largest = np.abs(true).max()
    tolerance = np.maximum(0.1 * np.abs(true), 0.01 * largest) if held_out else 0.1 * np.abs(true)
    _, inverse, counts = np.unique(unit, return_inverse=True, return_counts=True)
    per_unit = counts[inverse]
    grouped = len(keys) > 1
    spread = max(float(fraction), 1 - float(fraction))
    variants = ([("one row per unit, eps/4", "one", epsilon / 4),
                 (f"weighted, eps/{4 * spread:g}", "weighted", epsilon / (4 * spread))]
                if grouped else
                [(f"all rows, eps/{2 * ROWS_PER_UNIT}", "all", epsilon / (2 * ROWS_PER_UNIT)),
                 ("weighted, eps/2", "weighted", epsilon / 2)])
    rng = np.random.default_rng(1)
    for label, kind, scale in variants:
        rounds = samples if kind == "one" else 1
        within, error, every = np.zeros(len(keys)), np.zeros(len(keys)), []
        for _ in range(rounds):
            if kind == "one":  # a random row of each unit's rows in scope
                order = np.lexsort((rng.random(len(unit)), unit))
                first = np.r_[True, unit[order][1:] != unit[order][:-1]]
                weights = np.zeros(len(unit))
                weights[order[first]] = 1.0
            else:
                weights = 1.0 / per_unit if kind == "weighted" else np.ones(len(unit))
            product = 1.0
            for j in range(len(keys)):
                mine = group_of == j
                n = int(round(weights[mine].sum()))
                target = (fraction if kind == "weighted"
                          else max(1, math.ceil(fraction * n)))
                law = _law(index[mine], weights[mine], len(values), scale, target)
                near = law[np.abs(middles - true[j]) <= tolerance[j]].sum()
                within[j] += near / rounds
                error[j] += (law * np.abs(middles - true[j])).sum() / abs(true[j]) / rounds
                product *= near
            every.append(product)
        print(f"{name:34s} {label:26s} P(group within) {within.mean():.3f}  "
              f"P(all {len(keys)} within) {np.mean(every):.3g}  "
              f"median E|rel err| {100 * np.median(error):.3f} %", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--samples", type=int, default=20)
    args = parser.parse_args()
    print(f"date {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC, load "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}, epsilon {args.epsilon}")
    grid = ranked_grid(_Cost, True)
    values = np.array([grid.value(k) for k in range(grid.first, grid.last + 1)])
    middles = np.array([grid.middle(k) for k in range(grid.first, grid.last + 1)])
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "demo.duckdb"
        create_demo(path)
        con = duckdb.connect(str(path), read_only=True)
        month = "date_trunc('month', visited_at)"
        cell(con, "grafana-monthly-p95-cost", WINDOW, month, 0.95, args.epsilon,
             f"SELECT {month}, quantile_cont(cost, 0.95) FROM visits WHERE {WINDOW} "
             "GROUP BY 1", middles, values, args.samples, held_out=True)
        for fraction, label in ((0.5, "MEDIAN"), (0.9, "p90")):
            for scope, where, group in (("whole", "true", "1"),
                                        ("days >= 1", "days >= 1", "1"),
                                        ("per department", "true", "department"),
                                        ("per week", "true", "extract(week FROM visited_at)")):
                cell(con, f"{label}(cost) {scope}", where, group, fraction, args.epsilon,
                     f"SELECT {group}, quantile_disc(cost, {fraction}) FROM visits "
                     f"WHERE {where} GROUP BY 1", middles, values, args.samples)


if __name__ == "__main__":
    main()
