"""Seed 001 Table 5 and the Boolean example of its §6.1, from the engine's knowledge
refinement (proxy/privacy/refinement.py).

Table 5: an individual query with a uniform prior on [0, 1], f(D) = 0.5; for each ε the
refined law's variance, the size of U_u and P(answer ∈ U_u) on the prior's grid of
2^20 cells (U_u: the cells it raises), next to the paper's; and the Laplace(1/ε)
columns. Boolean example: prior P(B = 1) = 0.01, ε = 1.
Writes paper_table5.csv and paper_table5.png (the refined densities) to --out.
Usage: python examples/paper_table5.py
"""

from __future__ import annotations

import argparse
import csv
import math
from pathlib import Path

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from proxy.privacy.refinement import CELLS, Uniform, discrete, refine

# ε -> (Laplace variance, Laplace P(answer in [0, 1]), variance, size of U_u, P(in U_u))
PAPER = {0.1: (200, 0.476, 0.077, 0.475, 0.525), math.log(2): (4.16, 0.549, 0.046, 0.333, 0.667),
         1.0: (2, 0.607, 0.034, 0.269, 0.731), 2.0: (0.5, 0.684, 0.012, 0.119, 0.881)}


def paper_factors(epsilon: float) -> tuple[float, float]:
    """The seed's individual-query factors e^{±ε} (its Prop. 2), which Table 5 uses.
    The proxy refines with e^{±ε/2}: e^{±ε} protects against the person's absence but
    loses 2ε between two of their values (docs/privacy.md §5.1)."""
    return math.exp(epsilon), math.exp(-epsilon)


def refined_columns(epsilon: float) -> tuple[float, float, float, object]:
    """(variance, size of U_u, P(answer ∈ U_u), the refined law) at f(D) = 0.5: U_u the
    cells whose factor is raised (the α_u cells and the two edge cells of the ``else``
    branch), so its size and mass are the paper's to within 2 cells (2·2^−20)."""
    law = refine(Uniform(0, 1), 0.5, *paper_factors(epsilon))
    raised = [run for run in law.runs if run.factor > paper_factors(epsilon)[1]]
    start, end = raised[0].start, raised[-1].end
    values, probabilities = _cells(law)
    # the law is symmetric about 0.5: its variance is E[(X − 0.5)²]
    variance = float(np.sum(probabilities * (values - 0.5) ** 2))
    return variance, (end - start) / CELLS, float(law.mass(start, end)), law


def _cells(law) -> tuple[np.ndarray, np.ndarray]:
    """The grid's cell values (medians) and the law's probabilities, as arrays."""
    factor = np.empty(CELLS)
    for run in law.runs:
        factor[run.start:run.end] = float(run.factor)
    return (np.arange(CELLS) + 0.5) / CELLS, factor / CELLS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "output")
    out = parser.parse_args().out
    out.mkdir(parents=True, exist_ok=True)
    print("Table 5: individual query, uniform prior on [0, 1], f(D) = 0.5 (paper / ours)")
    print(f"{'epsilon':>8} | {'Laplace var':>14} {'P in [0,1]':>14} | {'variance':>14} "
          f"{'size U_u':>14} {'P in U_u':>14}")
    rows, laws = [], {}
    for epsilon, paper in PAPER.items():
        variance, size, inside, laws[epsilon] = refined_columns(epsilon)
        laplace_variance = 2 / epsilon ** 2
        laplace_inside = 1 - math.exp(-epsilon / 2)  # P(|Laplace(1/ε)| ≤ 0.5)
        ours = (laplace_variance, laplace_inside, variance, size, inside)
        rows.append((epsilon, *paper, *ours))
        cells = " ".join(f"{p:>6.3g}/{o:<7.3f}" for p, o in zip(paper, ours))
        print(f"{epsilon:>8.3f} | {cells}")
        verdict = all(round(o, 3) == p for p, o in zip(paper[2:], ours[2:]))
        print(f"{'':>8}   refinement columns {'agree' if verdict else 'DIFFER'} to three "
              "decimals")
    print("The paper's 'P in [0,1]' Laplace column does not follow from Laplace(1/ε) at "
          "f(D) = 0.5 (that is 1 − e^(−ε/2)); its variances 2/ε² do.")
    prior = discrete([(0, 0.99), (1, 0.01)], nominal=True)
    alpha_u, alpha_d = paper_factors(1.0)
    given = {b: float(dict(refine(prior, b, alpha_u, alpha_d).atoms())[1]) for b in (0, 1)}
    overall = given[0] * 0.99 + given[1] * 0.01
    print("\nBoolean example (§6.1): prior P(B = 1) = 0.01, epsilon = 1")
    print(f"  P(answer = 1 | B = 0) = {given[0]:.6f}   (paper 0.003678)")
    print(f"  P(answer = 1 | B = 1) = {given[1]:.6f}   (paper 0.027182)")
    print(f"  P(answer = 1)         = {overall:.6f}   (paper 0.003912, which uses its misprint "
          "0.02182 for 0.027182; Laplace: 0.19)")
    with (out / "paper_table5.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["epsilon", "paper_laplace_variance", "paper_laplace_p_in_0_1",
                         "paper_variance", "paper_size_u", "paper_p_in_u",
                         "laplace_variance", "laplace_p_in_0_1", "variance", "size_u",
                         "p_in_u"])
        writer.writerows([[round(v, 6) for v in row] for row in rows])
        writer.writerow([])
        writer.writerow(["boolean", "p_answer_1_given_0", "p_answer_1_given_1", "p_answer_1"])
        writer.writerow(["ours", round(given[0], 6), round(given[1], 6), round(overall, 6)])
    _figure(laws, out / "paper_table5.png")
    print(f"wrote {out / 'paper_table5.csv'} and {out / 'paper_table5.png'}")


def _figure(laws: dict, path: Path) -> None:
    plt.figure(figsize=(7, 4))
    for epsilon, law in laws.items():
        xs, ys = [], []
        for run in law.runs:
            xs += [run.start / CELLS, run.end / CELLS]
            ys += [float(run.factor), float(run.factor)]
        plt.plot(xs, ys, label=f"ε = {epsilon:.3g}")
    plt.xlabel("answer")
    plt.ylabel("density")
    plt.title("Refined uniform prior, f(D) = 0.5, individual query (seed 001 Table 5)")
    plt.legend()
    plt.tight_layout()
    plt.savefig(path, dpi=120)
    plt.close()


if __name__ == "__main__":
    main()
