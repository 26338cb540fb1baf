"""What a COUNT over the demo's visits (one table read on its own unit, up to s = 6 rows
a person) loses or gains when each person's rows in scope are clipped to a drawn bound
instead of §3.3's noise of scale min(2, G)·s/ε (issues 32 and 33; docs/privacy.md §3.3
"Counts in a window", §6): the exact expected error of both forms, query by query, and
which the engine's public rule (``contribution_bounds.windowed_counts``) chooses.

    PYTHONPATH=. .venv/bin/python benchmarks/window_counts.py [--epsilon 1,0.1]
        [--only 'LABEL;LABEL'] [--distinct]

For each query below the engine's plan gives G (the public keys answered) and the rule's
choice; each person's rows in scope per group n_{u,g} are read from the demo's DuckDB,
T_u = Σ_g n_{u,g}. "s" is §3.3's release: discrete Laplace of scale min(2, G)·s/ε per
group, E|Z| = 2p/(1 − p²), p = e^{−1/b}. The clipped forms, over a public ladder
(``rungs``' halving one: 1.5, 3, 6; the window's: 1, 1.5, 2, 3, 4, 6), with a share of ε for
the draw (a third, as sums take, or ``COUNT_SHARE``, a tenth): where G > 2 across groups
(§3.14 "Across groups": each unit's rows scaled by min(1, B/T_u), the rung drawn once
by ``joint_rule``, "q at ε_s" with its count of units q = 4gG/ε_s instead of 2gG/ε_b;
Laplace of scale 2gB/ε_s per group), else per group (the chain COUNT's draw with
``COUNT_PRIOR``, Laplace of scale gB/ε_s at ε/min(2, G) a group). Exactly over the
draw's law (the engine's ``rung_weights``) and the noise (continuous Laplace; the
engine's grid adds under 1 %): the mean over groups of E|clipped_k − true +
Laplace(b_k)| / true. "built" is what the engine answers: the clipped form it built
(the window's ladder, ⅒, q at ε_s; the halving ladder with q at 2gG/ε_b until
2026-11-28 15:00 UTC) where its rule says so, else s. ``--distinct``: COUNT(DISTINCT person_id)
instead, n_{u,g} = 1 in each group a person has rows in scope in, and "s" its release
without clipping, discrete Laplace of scale g·min(2s, G)/ε a group (one person's s rows
may leave s groups and join s others). It reads the data as the proxy's
statements do and prints what no analyst sees: a tool for choosing a public rule.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
from collections import defaultdict
from fractions import Fraction
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.tpch_bounds import expected_abs, probabilities  # noqa: E402
from proxy.privacy import contribution_bounds as bounds  # noqa: E402

DAY = "floor(extract(epoch FROM visited_at) / 86400) * 86400"  # Grafana's day
MARCH = "visited_at BETWEEN '2024-03-01' AND '2024-03-31 23:59:59'"
# label: (group terms, " | " between two, or None; WHERE or None; what the public rules
# can tell)
QUERIES = {
    "day, March 2024": (DAY, MARCH, "window 1/24, bucket day"),
    "day, Q1 2024": (DAY, "visited_at >= '2024-01-01' AND visited_at < '2024-04-01'",
                     "window 1/8, bucket day"),
    "day, December 2024": (DAY, "visited_at >= '2024-12-01'", "window 1/24, bucket day"),
    "day, 1–7 December 2024": (DAY, "visited_at >= '2024-12-01' AND visited_at < '2024-12-08'",
                               "window 1/104, bucket day, G 7"),
    "week, H1 2024": ("date_trunc('week', visited_at)",
                      "visited_at >= '2024-01-01' AND visited_at < '2024-07-01'",
                      "window 1/4, bucket week"),
    "month, 2024": ("date_trunc('month', visited_at)", "visited_at >= '2024-01-01'",
                    "window just over 1/2 (366 of 731 days)"),
    "month, 2024 from 2 January": ("date_trunc('month', visited_at)",
                                   "visited_at >= '2024-01-02'", "window just under 1/2"),
    "department, H1 2024": ("department",
                            "visited_at >= '2024-01-01' AND visited_at < '2024-07-01'",
                            "window 1/4, G 5"),
    "department, March 2024": ("department", MARCH, "window 1/24, G 5"),
    "total, March 2024": (None, MARCH, "window 1/24, ungrouped"),
    "day, whole range": (DAY, None, "no window, bucket day"),
    "week, whole range": ("date_trunc('week', visited_at)", None,
                          "no window, bucket week"),
    "53 weeks (utility)": ("extract(week FROM visited_at)", None,
                           "no window, G 53 > s"),
    "month, whole range": ("date_trunc('month', visited_at)", None,
                           "no window, bucket month"),
    "year": ("date_trunc('year', visited_at)", None, "no window, G 2"),
    "year × department": ("date_trunc('year', visited_at) | department", None,
                          "no window, G 10 > s"),
    "department (utility)": ("department", None, "no window, G 5 ≤ s"),
    "days >= 1 (utility)": (None, "days >= 1", "a window on days, ungrouped"),
}

def contributions(con, term: str | None, where: str | None, distinct: bool = False
                  ) -> dict:
    """{(person, group): rows in scope} (``distinct``: 1, people not NULL)."""
    term = term.replace(" | ", ", ") if term else None
    conditions = [c for c in (where, "person_id IS NOT NULL" if distinct else None) if c]
    sql = (f"SELECT {'1' if distinct else 'COUNT(*)'}, person_id"
           f"{', ' + term if term else ''} FROM visits"
           f"{' WHERE ' + ' AND '.join(conditions) if conditions else ''} GROUP BY ALL")
    return {(row[1], row[2:]): row[0] for row in con.execute(sql).fetchall()}


def discrete_abs(scale: float) -> float:
    """E|Z| for P(z) ∝ exp(−|z|/scale)."""
    p = math.exp(-1 / scale)
    return 2 * p / (1 - p * p)


def clipped_error(cells: dict, groups: int, rungs: tuple[float, ...], epsilon: Fraction,
                  share: Fraction, aimed: bool = False, g: int = 1) -> tuple[float, float]:
    """(expected mean relative error over the groups, the most likely rung) of the
    clipped form: across groups where G > 2, else per group."""
    truth: dict = defaultdict(int)
    total: dict = defaultdict(int)
    for (u, key), n in cells.items():
        truth[key] += n
        total[u] += n
    joint = groups > 2
    part = epsilon if joint else epsilon / min(2, groups)
    of_bound, of_sum = part * share, part * (1 - share)
    if joint:  # one draw from β_k over all units' totals
        beyond = tuple(sum(1 for t in total.values() if t > b) for b in rungs)
        # aimed: q = 4gG/ε_s whatever the draw's share, λq = 2G·ε_b/ε_s
        rule = bounds.joint_rule(groups, share if aimed else None)
        chance = probabilities(bounds.rung_weights(beyond, of_bound, g, **rule))
        errors = [0.0] * len(rungs)
        for k, bound in enumerate(rungs):
            clipped: dict = defaultdict(float)
            for (u, key), n in cells.items():
                clipped[key] += n * min(1.0, bound / total[u])
            scale = g * 2 * bound / float(of_sum)
            errors[k] = sum(expected_abs(clipped[key] - truth[key], scale) / truth[key]
                            for key in truth) / len(truth)
        expected = sum(p * e for p, e in zip(chance, errors))
        return expected, rungs[max(range(len(rungs)), key=lambda k: chance[k])]
    per_group, modes = [], []
    for key in truth:
        counts = [n for (u, k), n in cells.items() if k == key]
        beyond = tuple(sum(1 for n in counts if n > b) for b in rungs)
        chance = probabilities(bounds.rung_weights(beyond, of_bound, g, bounds.COUNT_PRIOR))
        errors = [expected_abs(sum(min(n, b) for n in counts) - truth[key],
                               g * b / float(of_sum)) / truth[key] for b in rungs]
        per_group.append(sum(p * e for p, e in zip(chance, errors)))
        modes.append(rungs[max(range(len(rungs)), key=lambda k: chance[k])])
    return sum(per_group) / len(per_group), max(set(modes), key=modes.count)


def statement(term: str | None, where: str | None, distinct: bool = False) -> str:
    """The COUNT the engine is asked (its plan gives G and the rule's choice)."""
    terms = term.split(" | ") if term else []
    count = "COUNT(DISTINCT person_id)" if distinct else "COUNT(*)"
    return (f"SELECT {', '.join([*terms, count])} FROM visits"
            f"{' WHERE ' + where if where else ''}"
            f"{' GROUP BY ' + ', '.join(str(i + 1) for i in range(len(terms))) if terms else ''}")


def main() -> None:
    import duckdb

    from proxy.analyze import analyze, parse_statements
    from proxy.demo import create_demo
    from proxy.rules import parse_rules
    from proxy.settings import Settings

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epsilon", default="1,0.1")
    parser.add_argument("--only", default=";".join(QUERIES), help="labels, ;-separated")
    parser.add_argument("--distinct", action="store_true",
                        help="COUNT(DISTINCT person_id) instead of COUNT(*)")
    args = parser.parse_args()
    rules = parse_rules((ROOT / "rules" / "demo.toml").read_text(), "demo.toml")
    s = 6  # the demo's most visits a person
    halving = bounds.rungs(bounds.Contribution("", power=0), None, s)
    window = bounds.rungs(bounds.Contribution("", power=0, fine=True), None, s)
    forms = [("halving, ⅓", halving, bounds.BOUND_SHARE, False),
             ("halving, ⅒ (built until 15:00 UTC 2026-11-28)", halving, bounds.COUNT_SHARE,
              False),
             ("halving, ⅒, q at ε_s", halving, bounds.COUNT_SHARE, True),
             ("window's, ⅒, q at ε_s (built)", window, bounds.COUNT_SHARE, True)]
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "demo.duckdb"
        create_demo(path)
        con = duckdb.connect(str(path))
        print("| query | public facts | G | clipped by the rule | ε | true counts | s (scale) "
              "| built | " + " | ".join(f"{name} (likeliest B)" for name, _, _, _ in forms)
              + " |\n|---|---|---|---|---|---|---|---|" + "---|" * len(forms))
        for label in args.only.split(";"):
            term, where, facts = QUERIES[label]
            plan = analyze(parse_statements(statement(term, where, args.distinct))[0], rules,
                           Settings())
            groups, rule = plan.group_count, bounds.windowed_counts(plan)
            if args.distinct:  # over few groups their own noise is the narrower
                rule = rule and bounds.units_clipped(plan, s)
            cells = contributions(con, term, where, args.distinct)
            truth: dict = defaultdict(int)
            for (_, key), n in cells.items():
                truth[key] += n
            for text in args.epsilon.split(","):
                epsilon = Fraction(text)
                scale = (min(2 * s, groups) if args.distinct else min(2, groups) * s
                          ) / float(epsilon)
                before = sum(discrete_abs(scale) / t for t in truth.values()) / len(truth)
                row = []
                for _, rungs, share, aimed in forms:
                    error, mode = clipped_error(cells, groups, rungs, epsilon, share, aimed)
                    row.append((error, mode))
                built = row[3][0] if rule else before
                print(f"| {label} | {facts} | {groups} | {'yes' if rule else 'no'} | {text} | "
                      f"{min(truth.values())}–{max(truth.values())} | {before:.2%} ({scale:g}) "
                      f"| {built:.2%} | " + " | ".join(f"{e:.2%} ({m:g})" for e, m in row)
                      + " |", flush=True)
        con.close()


if __name__ == "__main__":
    main()
