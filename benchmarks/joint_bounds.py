"""What the demo's sums clipped across groups lose under each rule for the joint draw
(issues 32 and 33; docs/privacy.md §3.14, "Across groups"): the draw's exact
distribution over the public ladder, and per rule the expected error of the group sums
and the chance that every group of one answer is within the held-out corpus's tolerance.

    python benchmarks/joint_bounds.py [--epsilon 1,0.1] [--rules before,engine,...]
        [--only QUERY,...] [--table]

Each query below is answered once through an in-process session on the demo's DuckDB
(rules/demo.toml, the answer cache off), and every jointly clipped SUM (or AVG's sum) is
recorded with the ladders the statement returned (per group and rung: the units beyond,
the clipped sum). From those, exactly (no sampling), for each rung k: the draw's
probability under each rule (``RULES``: the engine's ``rung_weights`` with that rule's
parameters; "before" the L1 draw until 2026-11-28, "engine" the checkout's
``joint_rule``, "m c pP" the quantile of ``joint_rule``'s form at c/2 of its count q,
prior P a rung, "J" ``joint_prior``), per group the expected relative error
E|clipped_k − true + Laplace(b_k)| / |true| (true the sum clipped at the top rung, b_k
the rung's noise scale g·2B_k/ε_s), and the chance that every group's answer lies within
max(3·b_k, 0.10·|true|, 0.01·max|true|) — bi_heldout.py's tolerance with the proxy's
95 % bound (3b for the Laplace scale b), for a SUM. Printed per query and rule: the
mean over groups of the expected relative error under the draw, the chance all groups
are within the tolerance, the most likely rung (``--table``: a line per query and ε,
"error/all within" per rule, the best single rung first). It reads the data as the proxy's
statements do and prints what no analyst sees (clipped sums): a tool for choosing a
public rule, not a release.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
import tempfile
from fractions import Fraction
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.tpch_bounds import Recorder, expected_abs, probabilities
from proxy.privacy import contribution_bounds as bounds

QUERIES = {
    "sum/month": "SELECT date_trunc('month', visited_at), SUM(cost) FROM visits GROUP BY 1",
    "sum/month 2023": "SELECT date_trunc('month', visited_at), SUM(cost) FROM visits "
                      "WHERE visited_at < '2024-01-01' GROUP BY 1",
    "sum/quarter": "SELECT date_trunc('quarter', visited_at), SUM(cost) FROM visits GROUP BY 1",
    "sum/week": "SELECT date_trunc('week', visited_at), SUM(cost) FROM visits GROUP BY 1",
    "sum/department": "SELECT department, SUM(cost) FROM visits GROUP BY 1",
    "sum/week×dept H1 2024": "SELECT date_trunc('week', visited_at), department, SUM(cost) "
                             "FROM visits WHERE visited_at BETWEEN '2024-01-01' AND "
                             "'2024-06-30 23:59:59' GROUP BY 1, 2",
    "avg/department": "SELECT department, AVG(cost) FROM visits GROUP BY 1",
    "avg/month": "SELECT date_trunc('month', visited_at), AVG(cost) FROM visits GROUP BY 1",
    "sum(days)/dept": "SELECT department, SUM(days) FROM visits GROUP BY 1",
    "sum(days)/month": "SELECT date_trunc('month', visited_at), SUM(days) FROM visits GROUP BY 1",
    "sum/month 2000 people": "SELECT date_trunc('month', visited_at), SUM(cost) FROM visits "
                               "WHERE person_id <= 2000 GROUP BY 1",
    "sum/dept 300 people": "SELECT department, SUM(cost) FROM visits WHERE person_id <= 300 "
                            "GROUP BY 1",
    "sum/month 300 people": "SELECT date_trunc('month', visited_at), SUM(cost) FROM visits "
                             "WHERE person_id <= 300 GROUP BY 1",
    "sum/dept 50 people": "SELECT department, SUM(cost) FROM visits WHERE person_id <= 50 "
                           "GROUP BY 1",
    # a day's or a week's few visits (the BI probe of 2026-11-28: 0.1 % of the truth)
    "sum/dept one day": "SELECT department, SUM(cost) FROM visits WHERE visited_at >= "
                        "'2024-09-03' AND visited_at < '2024-09-04' GROUP BY 1",
    "sum/dept one week": "SELECT department, SUM(cost) FROM visits WHERE visited_at >= "
                         "'2024-09-02' AND visited_at < '2024-09-09' GROUP BY 1",
    "sum/hour one day": "SELECT date_trunc('hour', visited_at), SUM(cost) FROM visits WHERE "
                        "visited_at >= '2024-09-03' AND visited_at < '2024-09-04' GROUP BY 1",
    "sum/day one month": "SELECT date_trunc('day', visited_at), SUM(cost) FROM visits WHERE "
                         "visited_at >= '2024-03-01' AND visited_at < '2024-04-01' GROUP BY 1",
    "sum(days)/dept days>=12": "SELECT department, SUM(days) FROM visits WHERE days >= 12 "
                               "GROUP BY 1",
}


def before(groups: int) -> dict:
    """The L1 draw until 2026-11-28: the per-group utility with ``joint_prior``."""
    return {"prior": bounds.joint_prior(groups)}


def quantile(share: str, prior: str, floor: bool = True):
    """``joint_rule``'s form with m = share·2gG/ε_s (λ·m = share·G/2), the evidence's t
    = m (with ``floor``: at least 2g·SHORTFALL/ε_b), the given prior a rung ("J":
    ``joint_prior``)."""
    def rule(groups: int) -> dict:
        allowance = Fraction(share) * groups / 2
        return {"prior": bounds.joint_prior(groups) if prior == "J" else Fraction(prior),
                "allowance": allowance, "slack": 1,
                "shortfall": max(allowance, bounds.SHORTFALL) if floor else allowance}
    return rule


RULES = {
    "before": before,
    # whatever the checkout's contribution_bounds says, at its share (``joint_share``)
    "engine": lambda groups: bounds.joint_rule(groups, bounds.joint_share(groups)),
    "prior G/2": lambda groups: {"prior": Fraction(groups, 2)},
    "prior 4": lambda groups: {"prior": Fraction(4)},
    **{f"m {share} p{prior}{' nofloor' if not floor else ''}": quantile(share, prior, floor)
       for share in ("1", "2", "3", "4") for prior in ("0", "1/16", "1/4", "1", "2", "J")
       for floor in (True, False)},
}


def analyse(records: list[dict], rule_names: list[str]) -> list[str]:
    """One line per rule for one aggregate's records (one per group)."""
    first = records[0]
    rungs, g, loss, count = first["ladder"].rungs, first["g"], first["loss"], first["groups"]
    beyond = [sum(column) for column in zip(*(r["ladder"].beyond for r in records))]
    truths = [r["ladder"].clipped[-1] for r in records]
    top = max(abs(t) for t in truths) or 1.0

    def errors_at(share: Fraction) -> tuple[list[float], list[float]]:
        """Per rung, the mean expected relative error and the chance all are within,
        with ``share`` of the loss for the draw and the rest for the noise."""
        eps = float(loss.split(share, 1 - share)[1].epsilon)
        mean_error, all_within = [], []
        for k, bound in enumerate(rungs):
            scale = g * 2 * bound / eps
            errors, within = [], 1.0
            for r, true in zip(records, truths):
                bias = r["ladder"].clipped[k] - true
                if true != 0:
                    errors.append(expected_abs(bias, scale) / abs(true))
                tol = max(3 * scale, 0.10 * abs(true), 0.01 * top)
                within *= laplace_within(bias, scale, tol)
            mean_error.append(sum(errors) / max(len(errors), 1))
            all_within.append(within)
        return mean_error, all_within
    # the other rules at the third they were drawn with; "engine" at ``joint_share``
    at_third = errors_at(bounds.BOUND_SHARE)
    mean_error, all_within = at_third
    eps = float(loss.split(bounds.BOUND_SHARE, 1 - bounds.BOUND_SHARE)[1].epsilon)
    best = min(range(len(rungs)), key=lambda k: mean_error[k])
    lines = [f"  G {count}, ε_s {eps:.3g}, units beyond per rung "
             + " ".join(f"{rungs[k]:.4g}:{beyond[k]}" for k in range(len(rungs))
                        if 0 < beyond[k] < sum(r["ladder"].beyond[0] for r in records) or k == best)
             + f"; best rung {rungs[best]:.4g} ({mean_error[best]:.2%}, all within "
             f"{all_within[best]:.2f})"]
    for name in rule_names:
        share = bounds.joint_share(count) if name == "engine" else bounds.BOUND_SHARE
        of_bound = loss.split(share, 1 - share)[0]
        mean_error, all_within = errors_at(share) if name == "engine" else at_third
        chance = probabilities(bounds.rung_weights(tuple(beyond), of_bound.epsilon, g,
                                                   **RULES[name](count)))
        likely = max(range(len(rungs)), key=lambda k: chance[k])
        lines.append(
            f"    {name:<22} error {sum(p * e for p, e in zip(chance, mean_error)):7.2%}"
            f"  all within {sum(p * w for p, w in zip(chance, all_within)):.3f}"
            f"  mode {rungs[likely]:.4g} (p {chance[likely]:.2f})")
    return lines


def laplace_within(mean: float, scale: float, tol: float) -> float:
    """P(|mean + Laplace(scale)| ≤ tol)."""
    if scale <= 0:
        return float(abs(mean) <= tol)

    def cdf(x: float) -> float:
        return 0.5 * math.exp(x / scale) if x < 0 else 1 - 0.5 * math.exp(-x / scale)
    return max(0.0, cdf(tol - mean) - cdf(-tol - mean))


def main() -> None:
    from proxy.backends import open_backend
    from proxy.demo import create_demo
    from proxy.engine import Engine
    from proxy.errors import ProxyError
    from proxy.rules import parse_rules
    from proxy.session import Session

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epsilon", default="1,0.1")
    parser.add_argument("--rules", default="before,engine,prior G/2,m 1 p1,m 2 p1/4,m 2 pJ,"
                        "m 3 p1", help=f"of: {', '.join(RULES)}")
    parser.add_argument("--only", default=",".join(QUERIES))
    parser.add_argument("--table", action="store_true")
    args = parser.parse_args()
    names = args.rules.split(",")
    text = (ROOT / "rules" / "demo.toml").read_text()
    text = text.replace("[defaults]", "[defaults]\nanswer_cache = false", 1)
    text = text.replace("budget_per_analyst = 100 ", "budget_per_analyst = 1000000000 ", 1)
    with tempfile.TemporaryDirectory() as folder:
        database = Path(folder) / "demo.duckdb"
        create_demo(database)
        backend = open_backend(f"duckdb:///{database}")
        engine = Engine(parse_rules(text, "demo.toml"), backend, store=backend)
        try:
            for epsilon in args.epsilon.split(","):
                for label in args.only.split(","):
                    session = Session.open(engine, "alice")
                    list(session.execute(f"SET idp.epsilon = {epsilon}"))
                    with Recorder() as recorder:
                        try:
                            list(session.execute(QUERIES[label]))
                            outcome = "answered"
                        except ProxyError as error:
                            outcome = f"{error.sqlstate} {error.message}"
                    joint = [r for r in recorder.sums if r["joint"]]
                    lines = analyse(joint, names) if joint else []
                    if args.table:
                        cells = [re.search(r"\(([\d.]+%), all within ([\d.]+)", lines[0])
                                 .groups()] if lines else []
                        cells += [re.search(r"error\s+([\d.]+%)\s+all within ([\d.]+)", line)
                                  .groups() for line in lines[1:]]
                        print(f"{label + ', ε ' + epsilon:<32}"
                              + "".join(f"{e:>9}/{w}" for e, w in cells), flush=True)
                        continue
                    print(f"{label}, ε {epsilon}: {outcome}, "
                          f"{'across groups' if joint else 'no joint sum'}", flush=True)
                    for line in lines:
                        print(line, flush=True)
        finally:
            backend.close()


if __name__ == "__main__":
    main()
