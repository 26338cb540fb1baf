"""What a TPC-H query's clipped sums lose, rung by rung (issue 34): the clipping bias and
the noise of each rung of the public ladder, the draw's probabilities, and the error an
oracle that knew the best rung (and spent nothing to find it) would have.

    python benchmarks/tpch_bounds.py --data DIR [--queries DIR] [--only 5,19]

``--data`` and ``--queries`` as for benchmarks/tpch.py (its rules, ε = 1 per aggregate).
Each query is answered once through a session on DuckDB; every clipped SUM or COUNT over
a chain (a group's own bound, docs/privacy.md §3.14, or a vector of groups clipped
together, "Across groups") is
recorded with the ladder the statement returned (per rung: the units beyond it, the
clipped sum) and the loss it was answered with. From those the script computes, exactly
for each rung k (no sampling): the draw's probability (the engine's ``rung_weights``),
and per group the expected relative error E|clipped_k − true + Laplace(b_k)| / |true|,
true the sum clipped at the top rung (nothing is clipped there), b_k the rung's noise
scale. A line per aggregate gives the median over its non-empty groups of that error
under the draw, the rungs drawn with probability ≥ 0.5 %, and the best rung's error with
the aggregate's whole ε for the sum ("oracle": a floor for this ladder and Laplace
noise, which no draw of the bound reaches). It reads the data as the proxy's statements
do and prints what no analyst sees (the clipped sums): a tool for the data owner's
benchmark, not a release.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
from fractions import Fraction
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.tpch import RULES, ask, load, queries
from proxy.backends import open_backend
from proxy.engine import Engine
from proxy.privacy import contribution_bounds as bounds
from proxy.privacy import noisy_answers
from proxy.rules import parse_rules


class Recorder:
    """Wraps the two places a clipped sum is answered (noisy_answers' ``clipped_sum``
    and ``joint_sum_at``) to keep each ladder with its loss; the answers are unchanged."""

    def __init__(self) -> None:
        self.sums: list[dict] = []
        self._single, self._joint = noisy_answers.clipped_sum, noisy_answers.joint_sum_at

    def __enter__(self) -> Recorder:
        def clipped_sum(ladder, loss, group_size, lower, upper, *args, **kwargs):
            noisy, k = self._single(ladder, loss, group_size, lower, upper, *args, **kwargs)
            self.sums.append(dict(joint=False, ladder=ladder, loss=loss, g=group_size,
                                  one_sided=lower >= 0 or upper <= 0, drawn=k,
                                  prior=kwargs.get("prior", bounds.PRIOR)))
            return noisy, k

        def joint_sum_at(ladder, k, loss, group_size, group_count, *args, **kwargs):
            self.sums.append(dict(joint=True, ladder=ladder, loss=loss, g=group_size,
                                  one_sided=False, drawn=k, groups=group_count,
                                  share=kwargs.get("share", bounds.BOUND_SHARE)))
            return self._joint(ladder, k, loss, group_size, group_count, *args, **kwargs)

        noisy_answers.clipped_sum, noisy_answers.joint_sum_at = clipped_sum, joint_sum_at
        return self

    def __exit__(self, *_) -> None:
        noisy_answers.clipped_sum, noisy_answers.joint_sum_at = self._single, self._joint


def expected_abs(mean: float, scale: float) -> float:
    """E|mean + Laplace(scale)|."""
    mean = abs(mean)
    return mean + scale * math.exp(-mean / scale) if scale > 0 else mean


def probabilities(weights: list[tuple[int, Fraction]]) -> list[float]:
    """The draw's probabilities from ``rung_weights``' exponents (weight ∝ e^{−x})."""
    low = min(float(x) for _, x in weights)
    raw = [math.exp(low - float(x)) for _, x in weights]
    return [p / sum(raw) for p in raw]


def aggregates(sums: list[dict]) -> list[list[dict]]:
    """The recorded sums by aggregate: a per-group one's each alone; the jointly clipped
    ones' records come group by group, each group's aggregates in the plan's order, so
    of n such aggregates over G groups the j-th's are every n-th from the j-th."""
    joint = [record for record in sums if record["joint"]]
    n = len(joint) // joint[0]["groups"] if joint else 0
    return ([[record] for record in sums if not record["joint"]]
            + [joint[j::n] for j in range(n)])


def describe(groups: list[dict]) -> str | None:
    """One aggregate's line: the error under the draw, the rungs drawn, the oracle's."""
    first = groups[0]
    rungs, g, loss = first["ladder"].rungs, first["g"], first["loss"]
    share = first["share"] if first["joint"] else bounds.BOUND_SHARE  # the engine's
    of_bound, of_sum = loss.split(share, 1 - share)
    if first["joint"]:
        beyond = tuple(sum(column) for column in zip(*(r["ladder"].beyond for r in groups)))
        # a COUNT's draw at its tenth keeps the rule of a third's (``draw_joint_bounds``)
        rule = bounds.joint_rule(first["groups"],
                                 share if share == bounds.joint_share(first["groups"]) else None)
    else:
        beyond, rule = first["ladder"].beyond, {"prior": first["prior"]}
    chance = probabilities(bounds.rung_weights(beyond, of_bound.epsilon, g, **rule))
    truths = [(r, r["ladder"].clipped[-1]) for r in groups if r["ladder"].clipped[-1] != 0]
    if not truths:
        return None

    def error(k: int, epsilon: float) -> float:
        width = 2 * rungs[k] if first["joint"] or not first["one_sided"] else rungs[k]
        return statistics.median(
            expected_abs(r["ladder"].clipped[k] - true, g * width / epsilon) / abs(true)
            for r, true in truths)

    drawn = [error(k, float(of_sum.epsilon)) for k in range(len(rungs))]
    oracle = min(range(len(rungs)), key=lambda k: error(k, float(loss.epsilon)))
    likely = ", ".join(f"B {rungs[k]:.4g} p {chance[k]:.2f} ({drawn[k]:.3%})"
                       for k in range(len(rungs)) if chance[k] >= 0.005)
    kind = f"across {len(groups)} groups" if first["joint"] else "a group's own bound"
    return (f"{kind}, ε {float(loss.epsilon):.3g}: under the draw {sum(p * e for p, e in zip(chance, drawn)):.3%}"
            f" [{likely}]; oracle B {rungs[oracle]:.4g} {error(oracle, float(loss.epsilon)):.3%}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--queries", type=Path)
    parser.add_argument("--only", default="1,5,6,14,19", help="query numbers, comma-separated")
    args = parser.parse_args()
    texts = queries(args.queries)
    with tempfile.TemporaryDirectory() as folder:
        database = Path(folder) / "tpch.duckdb"
        load(args.data, database)
        backend = open_backend(f"duckdb:///{database}")
        rules = RULES.replace("[defaults]", "[defaults]\nanswer_cache = false")
        engine = Engine(parse_rules(rules, "tpch.toml"), backend, store=backend)
        try:
            for number in (int(n) for n in args.only.split(",")):
                with Recorder() as recorder:
                    outcome, _ = ask(engine, texts[number])
                print(f"Q{number:02d}  {outcome}", flush=True)
                for groups in aggregates(recorder.sums):
                    line = describe(groups)
                    if line:
                        print(f"     {line}", flush=True)
        finally:
            backend.close()


if __name__ == "__main__":
    main()
