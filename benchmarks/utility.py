"""Utility: how far from the truth each private MEDIAN, 90th percentile, MAX, SUM and
COUNT lands, for the default (iDP's private noise scale), raw iDP, every DP option of
ours and, on the percentiles and MAX, the peers (issue 19 item 4; issue 29 item 2: what
the default costs against raw iDP). A benchmark: it measures error, it asserts nothing.

    python benchmarks/utility.py [--n 100,1000,10000,100000,1000000] [--epsilon 0.1,1]
                                 [--trials 200] [--columns income,age,...] [--out DIR]
    python benchmarks/utility.py demo [--quick] ...

The ``demo`` form (benchmarks/utility_demo.py, issue 32 item 7) is a different table:
every everyday aggregate, scope and ε on the demo data, idp-proxy against OpenDP,
SmartNoise SQL and PipelineDP; what follows describes the first form.

For each column and n, a table of n values goes into a temporary DuckDB file; for each
aggregate, ε and method, ``--trials`` answers are drawn and compared with the exact
answer of the same SQL over the values (clamped to the declared domain, as every
method clamps): mean and 95th-percentile absolute error. SUM is over the whole column;
COUNT(*) keeps the rows above the median (``WHERE v > <median>``, about half), since a
whole table's COUNT(*) is public and exact. Our methods answer through the engine
(analysis, pushdown, noise; no ledger): the statistics are read once per query and each
trial draws the noise anew from them, which is what a fresh answer over unchanged data
does. They are "iDP default" (``idp.sensitivity = 'instance'``: percentiles and MAX by
the exponential mechanism, SUM at the domain's global sensitivity, COUNT at the shift),
"iDP raw" (``'local'``: noise scaled to the data's local sensitivity, which the rules
here opt into with ``noise_scale = "local"``) and every ``idp.sensitivity`` the DP model
accepts, so a new one joins the table by itself. Peers, on the percentiles and MAX:

- OpenDP ``make_private_quantile`` (exponential mechanism over a candidate grid, as
  its documentation recommends: 1,001 evenly spaced candidates over the domain, or
  every integer of it up to 10,001), with the data set's size public and the
  replace-one neighbour (symmetric distance 2), the same neighbour as ours; run as its
  two stages (candidate scores, then the noisy max) so that the scores are computed
  once and each trial draws the noisy max anew. MAX is its quantile at α = 1.
- SmartNoise SQL: each query is put to it once; it refuses all three (the refusal is
  recorded in the CSV).

The peers' packages are the ``bench`` extra (pyproject.toml).

Columns: ``income`` and ``age`` are the demo's (log-normal incomes, working-age skewed
integer ages with ties, ``proxy.demo.people_columns``; the demo rules' domains);
``census_income`` (PTOTVAL) and ``wine_alcohol`` are seed 002's real data sets
(examples/data), drawn with replacement when n exceeds their size, so large n has
ties; ``normal`` (0, 5) and ``lognormal`` (0, 1) are synthetic.

Writes ``utility.csv`` and one chart per aggregate (``utility_<aggregate>.png``,
mean error against n, log-log, one panel per column and ε) into ``--out``
(default: benchmarks/utility), and prints the comparison the issue's goals ask for.
"""

from __future__ import annotations

import argparse
import csv
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from decimal import Decimal
from pathlib import Path

import duckdb
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from proxy.analyze import analyze, parse_statements
from proxy.backends import open_backend
from proxy.demo import people_columns
from proxy.engine import Engine
from proxy.rules import parse_rules
from proxy.settings import FITS, Settings
from tests.privacy.reference import instance_draws

DATA = ROOT / "examples" / "data"
AGGREGATES = {  # name: (SQL, quantile of the order statistics the peers answer, else None)
    "median": ("MEDIAN(v)", 0.5),
    "p90": ("PERCENTILE_CONT(0.9) WITHIN GROUP (ORDER BY v)", 0.9),
    "max": ("MAX(v)", 1.0),
    "sum": ("SUM(v)", None),
    "count": ("COUNT(*)", None),
}
GRID = 1001  # OpenDP's candidates over a continuous domain
INTEGER_GRID = 10_001  # every integer of an integer domain up to this many


@dataclass(frozen=True)
class Column:
    name: str
    draw: Callable[[int, np.random.Generator], np.ndarray]
    lower: float
    upper: float
    integer: bool = False


def _resampled(values: np.ndarray) -> Callable[[int, np.random.Generator], np.ndarray]:
    """n values of a real data set: all of them in a random order when n fits, else
    drawn with replacement."""
    def draw(n: int, rng: np.random.Generator) -> np.ndarray:
        if n <= len(values):
            return rng.permutation(values)[:n]
        return rng.choice(values, size=n, replace=True)
    return draw


def _csv_column(file: str, name: str) -> np.ndarray:
    with open(DATA / file, newline="") as handle:
        return np.array([float(row[name]) for row in csv.DictReader(handle)])


def columns() -> dict[str, Column]:
    def demo(name):
        return lambda n, rng: people_columns(n, seed=int(rng.integers(2**31)))[name]
    return {column.name: column for column in (
        Column("income", demo("income"), 0, 10_000_000),
        Column("age", demo("age"), 0, 120, integer=True),
        Column("census_income", _resampled(_csv_column("census_casc.csv", "PTOTVAL")),
               0, 1_000_000),
        Column("wine_alcohol", _resampled(_csv_column("wine_white.csv", "alcohol")), 0, 20),
        Column("normal", lambda n, rng: rng.normal(0, 5, n), -50, 50),
        Column("lognormal", lambda n, rng: rng.lognormal(0, 1, n), 0, 100),
    )}


def _rules(column: Column) -> str:
    kind = "int" if column.integer else "float"
    return f"""
[defaults]
max_epsilon_per_query = 10
noise_scale = "local"
answer_cache = false
[analysts.bench]
budget = 1000000
[tables.t]
privacy_unit = "id"
max_rows_per_unit = 1
[tables.t.columns]
id = {{ type = "int" }}
v = {{ type = "{kind}", domain = [{column.lower}, {column.upper}] }}
"""


def query(aggregate: str, values: np.ndarray) -> tuple[str, float]:
    """The aggregate's SQL over t and its exact answer over the values (PERCENTILE_CONT,
    MEDIAN being its 0.5); COUNT's scope is the rows above the median."""
    sql, quantile = AGGREGATES[aggregate]
    if aggregate == "count":
        median = float(np.quantile(values, 0.5))
        return f"SELECT {sql} FROM t WHERE v > {median!r}", float(np.sum(values > median))
    if aggregate == "sum":
        return f"SELECT {sql} FROM t", float(np.sum(values))
    true = np.max(values) if quantile == 1.0 else np.quantile(values, quantile)
    return f"SELECT {sql} FROM t", float(true)


def our_methods() -> list[tuple[str, Settings]]:
    """The default, raw iDP (the rules opt into it) and every DP option."""
    return [("iDP default", Settings(model="idp", sensitivity="instance")),
            ("iDP raw", Settings(model="idp", sensitivity="local"))] + [
        (f"DP {sensitivity}", Settings(model="dp", sensitivity=sensitivity))
        for sensitivity in FITS["dp"]]


def ours(engine: Engine, sql: str, settings: Settings, trials: int) -> list[float]:
    """``trials`` fresh answers: the statistics read once, the noise drawn each time."""
    plan = analyze(parse_statements(sql)[0], engine.rules, settings)
    if plan.mechanism.exponential:
        return instance_draws(engine, plan, trials)
    computed = engine.statistics(plan)
    engine.statistics = lambda plan, view=None: computed  # unchanged data, new noise
    try:
        return [float(engine.answer(plan)[1][0][0].value) for _ in range(trials)]
    finally:
        del engine.statistics


def opendp_answers(values: np.ndarray, column: Column, quantile: float, epsilon: float,
                   trials: int) -> list[float]:
    import opendp.prelude as dp

    dp.enable_features("contrib")
    if column.integer and column.upper - column.lower < INTEGER_GRID:
        kind, candidates = int, list(range(int(column.lower), int(column.upper) + 1))
        data = [int(v) for v in values]
    else:
        kind, candidates = float, [float(c) for c in np.linspace(column.lower, column.upper,
                                                                  GRID)]
        data = [float(v) for v in values]
    atoms = dp.atom_domain(T=kind, nan=False) if kind is float else dp.atom_domain(T=kind)
    space = (dp.vector_domain(atoms, size=len(data)), dp.symmetric_distance())
    # make_private_quantile is these two stages; the scores (a pass over the data, 3 s
    # for a million values from Python) are computed once, the noisy max per trial
    scorer = dp.t.make_quantile_score_candidates(*space, candidates, quantile)

    def noisy_max(scale):
        return dp.m.make_noisy_max(scorer.output_domain, scorer.output_metric,
                                   dp.max_divergence(), scale, negate=True)

    scale = dp.binary_search_param(lambda s: scorer >> noisy_max(s), d_in=2, d_out=epsilon,
                                   bounds=(0.0, 1e25))  # α = 0.9 scales scores by 2^53
    scores, release = scorer(data), noisy_max(scale)
    return [float(candidates[release(scores)]) for _ in range(trials)]


def smartnoise_refusal(sql: str, values: np.ndarray, column: Column) -> str | None:
    """None when SmartNoise SQL answers the query, else its error, on one line."""
    import pandas as pd
    import snsql
    import yaml

    metadata = {"t": {"t": {"t": {"row_privacy": True, "v": {
        "type": "int" if column.integer else "float",
        "lower": column.lower, "upper": column.upper}}}}}
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as handle:
        yaml.safe_dump(metadata, handle)
    reader = snsql.from_df(pd.DataFrame({"v": values}), metadata=handle.name,
                           privacy=snsql.Privacy(epsilon=1.0, delta=1e-6))
    try:
        reader.execute(f"SELECT {sql} FROM t.t")
    except Exception as exc:  # noqa: BLE001 - whatever it refuses with is the result
        return " ".join(str(exc).split())[:160]
    finally:
        Path(handle.name).unlink()
    return None


def summary(errors: list[float]) -> tuple[float, float]:
    return float(np.mean(errors)), float(np.quantile(errors, 0.95))


def run(args) -> list[dict]:
    rng = np.random.default_rng(args.seed)
    chosen = columns()
    results = []
    refusals = {}
    for name in args.columns:
        column = chosen[name]
        for n in args.n:
            values = np.clip(column.draw(n, rng), column.lower, column.upper)
            with tempfile.TemporaryDirectory() as folder:
                path = Path(folder) / "u.duckdb"
                with duckdb.connect(str(path)) as con:
                    con.execute(f"CREATE TABLE t (id BIGINT, v "
                                f"{'BIGINT' if column.integer else 'DOUBLE'})")
                    con.register("frame", {"id": np.arange(n), "v": values})
                    con.execute("INSERT INTO t SELECT id, v FROM frame")
                engine = Engine(parse_rules(_rules(column)), open_backend(f"duckdb:///{path}"))
                try:
                    for aggregate, (sql, quantile) in AGGREGATES.items():
                        statement, true = query(aggregate, values)
                        if quantile is not None and aggregate not in refusals:
                            refusals[aggregate] = smartnoise_refusal(sql, values[:100], column)
                        for epsilon in args.epsilon:
                            base = {"column": name, "n": n, "epsilon": epsilon,
                                    "aggregate": aggregate, "true": true}
                            for method, settings in our_methods():
                                settings = replace(settings, epsilon=Decimal(str(epsilon)))
                                started = time.perf_counter()
                                answers = ours(engine, statement, settings, args.trials)
                                results.append(_row(base, method, answers, true, started))
                            if quantile is None:
                                _print_cell(results, base)
                                continue
                            started = time.perf_counter()
                            answers = opendp_answers(values, column, quantile, epsilon,
                                                     args.trials)
                            results.append(_row(base, "OpenDP quantile", answers, true,
                                                started))
                            results.append(dict(base, method="SmartNoise SQL",
                                                refused=refusals[aggregate] or ""))
                            _print_cell(results, base)
                finally:
                    engine.backend.close()
    return results


def _row(base: dict, method: str, answers: list[float], true: float, started: float) -> dict:
    mean, p95 = summary([abs(answer - true) for answer in answers])
    return dict(base, method=method, mean_error=mean, p95_error=p95, trials=len(answers),
                seconds=round(time.perf_counter() - started, 3), refused="")


def _print_cell(results: list[dict], base: dict) -> None:
    cell = [r for r in results if all(r[k] == base[k] for k in ("column", "n", "epsilon",
                                                                 "aggregate"))]
    errors = "  ".join(f"{r['method']} {r['mean_error']:.4g}" for r in cell
                       if "mean_error" in r)
    print(f"{base['column']:>14} n={base['n']:<8} eps={base['epsilon']:<4} "
          f"{base['aggregate']:<6} true={base['true']:.6g}  {errors}", flush=True)


FIELDS = ["column", "n", "epsilon", "aggregate", "true", "method", "mean_error", "p95_error",
          "trials", "seconds", "refused"]


def write(results: list[dict], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "utility.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, FIELDS)
        writer.writeheader()
        writer.writerows(results)
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    answered = [r for r in results if "mean_error" in r]
    names = sorted({r["column"] for r in answered}, key=list(columns()).index)
    epsilons = sorted({r["epsilon"] for r in answered})
    methods = list(dict.fromkeys(r["method"] for r in answered))
    for aggregate in AGGREGATES:
        figure, axes = plt.subplots(len(names), len(epsilons), squeeze=False,
                                    figsize=(5 * len(epsilons), 3 * len(names)))
        for i, name in enumerate(names):
            for j, epsilon in enumerate(epsilons):
                axis = axes[i][j]
                for method in methods:
                    points = sorted((r["n"], r["mean_error"]) for r in answered
                                    if (r["column"], r["epsilon"], r["aggregate"],
                                        r["method"]) == (name, epsilon, aggregate, method))
                    if points:
                        axis.plot(*zip(*points), marker="o", label=method)
                axis.set(xscale="log", yscale="log", title=f"{name}, ε = {epsilon}",
                         xlabel="n", ylabel="mean |error|")
        axes[0][0].legend(fontsize="small")
        figure.suptitle(f"{aggregate.upper()}: mean absolute error")
        figure.tight_layout()
        figure.savefig(out / f"utility_{aggregate}.png", dpi=80)
        plt.close(figure)


def goals(results: list[dict]) -> None:
    """The issues' goals per aggregate, cell by cell at n ≥ 1,000: the default's error
    within 2× of raw iDP's (issue 29), our best DP's within 2× of raw iDP's and at least
    5× below OpenDP's (issue 19)."""
    answered = [r for r in results if "mean_error" in r]
    print()
    for aggregate in AGGREGATES:
        cells = sorted({(r["column"], r["n"], r["epsilon"]) for r in answered
                        if r["n"] >= 1000 and r["aggregate"] == aggregate})
        default = best_near = below = 0
        for cell in cells:
            by = {r["method"]: r["mean_error"] for r in answered
                  if (r["column"], r["n"], r["epsilon"], r["aggregate"]) == cell + (aggregate,)}
            best = min(error for method, error in by.items() if method.startswith("DP "))
            default += by["iDP default"] <= 2 * by["iDP raw"]
            best_near += best <= 2 * by["iDP raw"]
            below += "OpenDP quantile" in by and best * 5 <= by["OpenDP quantile"]
        peers = f"; at least 5x below OpenDP in {below}" if AGGREGATES[aggregate][1] else ""
        print(f"{aggregate}: {len(cells)} cells with n >= 1,000; within 2x of raw iDP: the "
              f"default in {default}, our best DP in {best_near}{peers}")


def main() -> None:
    if sys.argv[1:2] == ["demo"]:  # every aggregate on the demo against the peers
        from utility_demo import main as demo
        return demo(sys.argv[2:])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", default="100,1000,10000,100000,1000000",
                        type=lambda text: [int(v) for v in text.split(",")])
    parser.add_argument("--epsilon", default="0.1,1",
                        type=lambda text: [float(v) for v in text.split(",")])
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--columns", default=",".join(columns()),
                        type=lambda text: text.split(","))
    parser.add_argument("--seed", type=int, default=19)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "utility")
    args = parser.parse_args()
    results = run(args)
    write(results, args.out)
    goals(results)
    print(f"wrote {args.out / 'utility.csv'} and {len(AGGREGATES)} charts")


if __name__ == "__main__":
    main()
