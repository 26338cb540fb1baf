"""Seed 000 Fig. 2: mean absolute error of the median, iDP (Laplace on the local
sensitivity) against DP with the smooth sensitivity (γ = 3), for data from U[0, 1],
N(0, 1) and Exp(1), n ∈ {10, 100, 1000}, ε from 0.5 to 1.

Every answer goes through the engine: each data set is a table of a DuckDB file
(--backend duckdb, default) or of a PostgreSQL database (--backend URL), its domain
declared as [min, max] of the data as the paper does, and each point is the mean
|answer − true median| over --runs queries (answer cache off, so each is a fresh
release). Writes paper_fig2.csv and paper_fig2.png to --out and prints whether iDP is
below DP-smooth in every panel. Usage: python examples/paper_fig2.py [--runs 100]
[--runs-large N: queries per point of n = 100 and 1000, default --runs]
[--quick: ε 0.5 and 1 only, the test suite's]
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import tempfile
from pathlib import Path

os.environ.setdefault("IDP_PROXY_HOME", tempfile.mkdtemp(prefix="idp-example-"))

import duckdb
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from proxy.backends import open_backend
from proxy.engine import Engine
from proxy.rules import parse_rules
from proxy.session import Session

SIZES = (10, 100, 1000)
EPSILONS = (0.5, 0.625, 0.75, 0.875, 1.0)
DISTRIBUTIONS = {
    "U[0,1]": lambda rng, n: rng.uniform(0, 1, n),
    "N(0,1)": lambda rng, n: rng.normal(0, 1, n),
    "Exp(1)": lambda rng, n: rng.exponential(1, n),
}
MECHANISMS = {
    "iDP (local sensitivity, Laplace)": "SET idp.model = 'idp'; SET idp.sensitivity = 'local'",
    "DP (smooth sensitivity, gamma = 3)":
        "SET idp.model = 'dp'; SET idp.sensitivity = 'smooth'; SET idp.gamma = 3",
}
RULES = """
[defaults]
answer_cache = false
noise_scale = "local"  # the paper's raw iDP, the owner's opt-in
[analysts.examples]
budget = 1000000
[tables.{table}]
[tables.{table}.columns]
x = {{ type = "float", domain = [{low!r}, {high!r}] }}
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100, help="queries per point")
    parser.add_argument("--runs-large", type=int, default=None,
                        help="queries per point of n = 100 and 1000 (default: --runs), "
                             "where iDP and DP-smooth lie further apart")
    parser.add_argument("--backend", default="duckdb",
                        help="'duckdb' (a temporary file) or a postgresql:// URL")
    parser.add_argument("--quick", action="store_true", help="ε 0.5 and 1 only")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "output")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    epsilons = (EPSILONS[0], EPSILONS[-1]) if args.quick else EPSILONS
    rng = np.random.default_rng(2017)
    results = []  # (distribution, n, mechanism, epsilon, mean absolute error)
    for dist, draw in DISTRIBUTIONS.items():
        for n in SIZES:
            values = [float(v) for v in draw(rng, n)]
            table = f"fig2_{len(results)}"
            engine = _engine(args.backend, table, values)
            true = sorted(values)[(n + 1) // 2 - 1]  # PERCENTILE_DISC(0.5): rank ⌈n/2⌉
            session = Session.open(engine, "examples")
            for mechanism, settings in MECHANISMS.items():
                list(session.execute(settings))
                for epsilon in epsilons:
                    sql = f"/*+ epsilon={epsilon} */ SELECT MEDIAN(x) FROM {table}"
                    runs = args.runs if n == SIZES[0] or args.runs_large is None else \
                        args.runs_large
                    errors = [abs(next(session.execute(sql)).rows[0][0] - true)
                              for _ in range(runs)]
                    results.append((dist, n, mechanism, epsilon, statistics.mean(errors)))
            engine.backend.close()
    _report(results, epsilons)
    _write(results, args.out)


def _engine(backend: str, table: str, values: list[float]) -> Engine:
    """A table holding the data set, and an engine whose rules declare [min, max]."""
    if backend == "duckdb":
        path = Path(tempfile.mkdtemp(prefix="idp-fig2-")) / "fig2.duckdb"
        with duckdb.connect(str(path)) as con:
            con.execute(f"CREATE TABLE {table} (x DOUBLE)")
            con.executemany(f"INSERT INTO {table} VALUES (?)", [(v,) for v in values])
        url = f"duckdb:///{path}"
    else:
        import psycopg

        with psycopg.connect(backend, autocommit=True) as con:
            con.execute(f"DROP TABLE IF EXISTS {table}")
            con.execute(f"CREATE TABLE {table} (x DOUBLE PRECISION)")
            with con.cursor().copy(f"COPY {table} (x) FROM STDIN") as copy:
                for v in values:
                    copy.write_row((v,))
        url = backend
    rules = parse_rules(RULES.format(table=table, low=min(values), high=max(values)), "fig2")
    return Engine(rules, open_backend(url))


def _report(results, epsilons) -> None:
    print(f"{'data':<7} {'n':>5} {'epsilon':>8} {'iDP MAE':>12} {'DP-smooth MAE':>14}")
    idp, dp = MECHANISMS
    by_key = {(d, n, m, e): err for d, n, m, e, err in results}
    below = True
    for dist in DISTRIBUTIONS:
        for n in SIZES:
            for epsilon in epsilons:
                a, b = by_key[(dist, n, idp, epsilon)], by_key[(dist, n, dp, epsilon)]
                below &= a < b
                print(f"{dist:<7} {n:>5} {epsilon:>8.3f} {a:>12.4f} {b:>14.4f}")
    print("iDP below DP-smooth in every panel and at every epsilon: "
          f"{'yes' if below else 'NO'}")


def _write(results, out: Path) -> None:
    with (out / "paper_fig2.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["distribution", "n", "mechanism", "epsilon", "mean_abs_error"])
        writer.writerows(results)
    figure, axes = plt.subplots(3, 3, figsize=(11, 9), sharex=True)
    for row, dist in enumerate(DISTRIBUTIONS):
        for col, n in enumerate(SIZES):
            ax = axes[row][col]
            for mechanism in MECHANISMS:
                points = [(e, err) for d, m_n, m, e, err in results
                          if d == dist and m_n == n and m == mechanism]
                ax.plot(*zip(*points), marker="o", label=mechanism)
            ax.set_yscale("log")
            ax.set_title(f"{dist}, n = {n}")
            if row == 2:
                ax.set_xlabel("ε")
            if col == 0:
                ax.set_ylabel("mean |error| of the median")
    axes[0][0].legend(fontsize=7)
    figure.suptitle("Median: iDP vs DP with smooth sensitivity (seed 000 Fig. 2)")
    figure.tight_layout()
    figure.savefig(out / "paper_fig2.png", dpi=110)
    plt.close(figure)
    print(f"wrote {out / 'paper_fig2.csv'} and {out / 'paper_fig2.png'}")


if __name__ == "__main__":
    main()
