"""Seed 002 Figs. 5–6: F-measure of a Random Forest trained on iDP-LS and iDP-CBLS
releases of Census and Wine, against one trained on the original data.

As in §4.2: the whole data set is released (paper_release.mask: the engine's per-cluster
code, ε split over the attributes, domain [0, α·max]); a forest is trained on the first
66 % of the released records and scored on the remaining 34 % of the *original* ones.
Classes: Census ERNVAL ≤ 30,000 / > 30,000; Wine quality ≤ 6 ("Not Excellent") / > 6
("Excellent"). The class is not released — only the attributes are. 10 runs per point
(the forest's seed changes with the run; the original-data bound is averaged over the
same seeds). Writes paper_release_classification.csv and a PNG per data set to --out.
Needs scikit-learn (the `examples` extra). Usage:
python examples/paper_release_classification.py [--runs 10] [--trees 100]
[--quick: a smaller grid]
"""

from __future__ import annotations

import argparse
import csv
import itertools
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from paper_release import DATA, PAPER, SETS, Grid, load, mask, run_and_save
from sklearn.ensemble import RandomForestClassifier
from sklearn.metrics import f1_score

from proxy.privacy.microaggregation import IDP_CBLS, IDP_LS
from proxy.privacy.sampler import SecureSource

CLASSES = {"census": ("ERNVAL", 30_000, ("<=30K", ">30K")),
           "wine": ("quality", 6, ("Not Excellent", "Excellent"))}
FIGURES = Grid(PAPER.epsilons, PAPER.alphas,
               {"census": [3, 5, 10, 20, 50, 100], "wine": [3, 10, 20, 50, 100, 400]})
# The suite's check: both ends of ε, one α, the k where iDP-CBLS and iDP-LS do best (a
# forest per point is the cost).
QUICK = Grid((0.01, 1.0), (1.5,), {"census": [3, 50], "wine": [3, 20, 100]})
METHODS = (IDP_LS, IDP_CBLS)
TRAIN = 0.66
COLOURS = dict(zip(PAPER.epsilons, ("tab:red", "tab:orange", "tab:green"), strict=True))
# What §4.2.1 says of Census: how much worse than the original-data bound each method's
# best F-measure is, per ε (iDP-LS "around 20 %, 10 % and 5 %", iDP-CBLS "identical",
# "3 %", "10 %").
PAPER_CENSUS = {(IDP_LS, 0.01): 0.20, (IDP_LS, 0.1): 0.10, (IDP_LS, 1.0): 0.05,
                (IDP_CBLS, 0.01): 0.10, (IDP_CBLS, 0.1): 0.03, (IDP_CBLS, 1.0): 0.0}


def labels(name: str) -> np.ndarray:
    column, threshold, _ = CLASSES[name]
    with (DATA / SETS[name][0]).open() as handle:
        return np.array([float(row[column]) > threshold for row in csv.DictReader(handle)])


def f_measures(train: np.ndarray, data: np.ndarray, target: np.ndarray, seed: int,
               trees: int):
    """Both classes' F-measure of a forest trained on ``train``'s first 66 % and scored
    on the original rows after them."""
    cut = int(TRAIN * len(data))
    forest = RandomForestClassifier(trees, random_state=seed, n_jobs=1).fit(train[:cut],
                                                                            target[:cut])
    return f1_score(target[cut:], forest.predict(data[cut:]), average=None, labels=[0, 1])


def experiment(task: tuple[str, float, int, int, Grid]) -> list[tuple]:
    name, alpha, runs, trees, grid = task
    data, target, rng = load(name), labels(name), SecureSource()
    bound = np.mean([f_measures(data, data, target, seed, trees) for seed in range(runs)],
                    axis=0)
    rows = []
    for epsilon in grid.epsilons:
        for k in grid.k[name]:
            rows.append((name, alpha, epsilon, "ORIGINAL", k, *bound))
            for method in METHODS:
                scores = [f_measures(mask(data, method, k, epsilon, alpha, rng), data, target,
                                     seed, trees) for seed in range(runs)]
                rows.append((name, alpha, epsilon, method.upper(), k, *np.mean(scores, axis=0)))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--trees", type=int, default=100,
                        help="trees per forest (scikit-learn's and Weka's default: 100)")
    parser.add_argument("--quick", action="store_true",
                        help="ε 0.01 and 1, α 1.5, three k per data set (the test suite's)")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "output")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    grid = QUICK if args.quick else FIGURES
    tasks = [(name, alpha, args.runs, args.trees, grid) for name in SETS
             for alpha in grid.alphas]
    rows = run_and_save(experiment, tasks, args.out / "paper_release_classification.csv",
                        ["data", "alpha", "epsilon", "method", "k", "f_class0", "f_class1"])
    for name in SETS:
        _figure(name, rows, args.out / f"paper_release_classification_{name}.png", grid)
        _summary(name, rows, grid)
    print(f"wrote {args.out / 'paper_release_classification.csv'} and the figures")


def _summary(name: str, rows, grid: Grid) -> None:
    """Per method and ε: the best mean F-measure over k and α (both classes averaged),
    and how far below the original-data bound it is; beside it the paper's words."""
    bound = np.mean([np.mean(r[5:]) for r in rows if r[0] == name and r[3] == "ORIGINAL"])
    print(f"{name}: original-data bound, mean F over both classes {bound:.3f}")
    best = {}
    for method in METHODS:
        for epsilon in grid.epsilons:
            best[method, epsilon], k, alpha = max(
                (np.mean(r[5:]), r[4], r[1]) for r in rows
                if r[0] == name and r[3] == method.upper() and r[2] == epsilon)
            paper = PAPER_CENSUS.get((method, epsilon)) if name == "census" else None
            said = f"   paper: {paper:.0%} worse" if paper is not None else ""
            print(f"  {method:<9} eps={epsilon:<5} best F {best[method, epsilon]:.3f} (k={k}, "
                  f"alpha={alpha:g}), {best[method, epsilon] / bound - 1:+6.1%} against the "
                  f"bound{said}")
    close = all(best[IDP_CBLS, e] >= 0.95 * bound for e in grid.epsilons)
    # both releases can reach the bound (Census at ε 1, one run: both +0.6 %; Wine at
    # ε 0.01, one run: iDP-LS −0.4 %, iDP-CBLS −1.0 %), so a tie within 1 % of the bound
    # counts; CBLS's lead at the smallest ε is what the paper shows (Census: 10 % against
    # 20 % worse)
    smallest = min(grid.epsilons)
    tied = all(best[IDP_CBLS, e] >= best[IDP_LS, e] - 0.01 * bound for e in grid.epsilons)
    ahead = best[IDP_CBLS, smallest] > best[IDP_LS, smallest]
    print(f"{name}: iDP-CBLS within 5% of the bound at every eps: {'yes' if close else 'NO'}; "
          f"not 1% of the bound below iDP-LS at any: {'yes' if tied else 'NO'}; "
          f"above it at the smallest eps: {'yes' if ahead else 'NO'}")


def _figure(name: str, rows, path: Path, grid: Grid) -> None:
    classes = CLASSES[name][2]
    figure, axes = plt.subplots(1, 2, figsize=(12, 5), sharey=True)
    for side, label in enumerate(classes):
        ax = axes[side]
        for method, epsilon, alpha in itertools.product(METHODS, grid.epsilons, grid.alphas):
            points = [(r[4], r[5 + side]) for r in rows if r[0] == name
                      and r[3] == method.upper() and r[2] == epsilon and r[1] == alpha]
            ax.plot(*zip(*points), color=COLOURS[epsilon], marker="o" if alpha == grid.alphas[0]
                    else "s", markersize=4, linestyle="-" if method == IDP_CBLS else ":",
                    label=f"{method} ε={epsilon:g} α={alpha:g}")
        bound = [(r[4], r[5 + side]) for r in rows if r[0] == name and r[3] == "ORIGINAL"
                 and r[2] == grid.epsilons[0] and r[1] == grid.alphas[0]]
        ax.plot(*zip(*bound), color="black", linewidth=2, label="original data")
        ax.set_xscale("log")
        ax.set_xlabel("k")
        ax.set_title(f"{name}: F-measure of class {label}")
    axes[0].set_ylabel("F-measure")
    axes[1].legend(fontsize=6, ncol=2)
    figure.suptitle(f"{name}: Random Forest on released data (seed 002 Fig. "
                    f"{5 if name == 'census' else 6})")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


if __name__ == "__main__":
    main()
