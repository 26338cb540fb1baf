"""The errors README quotes for the everyday aggregates on the demo: over ``--answers``
fresh answers each (a new WHERE that keeps every row makes each a new release, not the
cache's replay), the median relative error of AVG and SUM of cost per department, the
median of MAX(age), MAX(income) and MIN(age) against the true ends and percentiles,
and the median relative error of STDDEV(age), at ε 0.1 and 1; then (issue 32 item 2)
the percentiles of the user-level visits: the median relative error of MEDIAN(cost) and
p90 of days, whole and per department, and of MEDIAN(cost) per week. A benchmark: it
asserts nothing.

    python benchmarks/demo_errors.py [--answers 20] [--percentiles-only]

It builds the demo in a temporary IDP_PROXY_HOME and answers in process (analysis,
pushdown, noise, ledger) with the demo's rules and a large budget.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import duckdb
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["IDP_PROXY_HOME"] = tempfile.mkdtemp(prefix="idp-demo-errors-")

from proxy.demo import demo_path, open_demo  # noqa: E402
from proxy.engine import Engine  # noqa: E402
from proxy.rules import parse_rules  # noqa: E402
from proxy.session import Session  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--answers", type=int, default=20)
    parser.add_argument("--percentiles-only", action="store_true",
                        help="only the percentiles of visits")
    arguments = parser.parse_args()
    answers = arguments.answers
    open_demo().close()  # created on first use
    with duckdb.connect(str(demo_path()), read_only=True) as con:
        truth = {row[0]: row[1:] for row in con.sql(
            "SELECT department, AVG(cost), SUM(cost) FROM visits GROUP BY 1").fetchall()}
        ends = con.sql("SELECT MAX(age), MAX(income), MIN(age), STDDEV(age), "
                       "quantile_disc(age, 0.99), quantile_disc(income, 0.99), "
                       "quantile_disc(age, 0.01) FROM people").fetchall()[0]
        percentiled = percentile_truth(con)
    text = (ROOT / "rules" / "demo.toml").read_text().replace(
        "budget_per_analyst = 100 ", "budget_per_analyst = 100000000 ")
    engine = Engine(parse_rules(text), open_demo())
    if arguments.percentiles_only:
        percentiles(engine, answers, *percentiled)
        return
    for epsilon in ("0.1", "1"):
        session = Session.open(engine, "alice")
        list(session.execute(f"SET idp.epsilon = {epsilon}"))
        averages, sums, highs, lows, spreads = [], [], [], [], []
        for i in range(answers):
            keep = f"> {-1 - i - (0 if epsilon == '0.1' else answers)}"
            grouped = list(session.execute(f"SELECT department, AVG(cost), SUM(cost) FROM "
                                           f"visits WHERE cost {keep} GROUP BY 1"))[-1]
            for department, average, total in grouped.rows:
                averages.append(abs(average / truth[department][0] - 1))
                sums.append(abs(total / truth[department][1] - 1))
            (high_age, high_income, low_age, spread), = list(session.execute(
                f"SELECT MAX(age), MAX(income), MIN(age), STDDEV(age) FROM people "
                f"WHERE age {keep}"))[-1].rows
            highs.append((high_age, high_income))
            lows.append(low_age)
            spreads.append(abs(spread / ends[3] - 1))
        highs = np.array(highs)
        print(f"ε {epsilon}: AVG(cost) per department {100 * np.median(averages):.1f} %, "
              f"SUM {100 * np.median(sums):.1f} %; MAX(age) {np.median(highs[:, 0]):g} "
              f"(max {ends[0]}, p99 {ends[4]}); MAX(income) {np.median(highs[:, 1]):,.0f} "
              f"(max {ends[1]:,.0f}, p99 {ends[5]:,.0f}); MIN(age) {np.median(lows):g} "
              f"(min {ends[2]}, p1 {ends[6]}); STDDEV(age) {100 * np.median(spreads):.1f} %")
    percentiles(engine, answers, *percentiled)


PERCENTILES = "MEDIAN(cost), PERCENTILE_DISC(0.9) WITHIN GROUP (ORDER BY days)"
WEEK = "date_trunc('week', visited_at)"


def percentile_truth(con) -> tuple[dict, dict]:
    """PERCENTILE_DISC of all rows: MEDIAN(cost) and p90(days) by department (None: the
    whole table), MEDIAN(cost) by week."""
    truth = {row[0]: row[1:] for row in con.sql(
        "SELECT department, quantile_disc(cost, 0.5), quantile_disc(days, 0.9) "
        "FROM visits GROUP BY 1").fetchall()}
    truth[None] = con.sql("SELECT quantile_disc(cost, 0.5), quantile_disc(days, 0.9) "
                          "FROM visits").fetchall()[0]
    return truth, dict(con.sql(f"SELECT {WEEK}, quantile_disc(cost, 0.5) FROM visits "
                               "GROUP BY 1").fetchall())


def percentiles(engine: Engine, answers: int, truth: dict, weekly: dict) -> None:
    """Median relative errors of MEDIAN(cost) and p90(days) of visits (whole table and
    per department) and of MEDIAN(cost) per week, against ``percentile_truth``."""
    for epsilon in ("0.1", "1"):
        session = Session.open(engine, "alice")
        list(session.execute(f"SET idp.epsilon = {epsilon}"))
        errors: dict[str, list[float]] = {}
        for i in range(answers):
            keep = f"> {-1 - i - (0 if epsilon == '0.1' else answers)}"
            rows = list(session.execute(f"SELECT department, {PERCENTILES} FROM visits "
                                        f"WHERE cost {keep} GROUP BY 1"))[-1].rows
            rows += [(None, *list(session.execute(
                f"SELECT {PERCENTILES} FROM visits WHERE cost {keep}"))[-1].rows[0])]
            for department, median, p90 in rows:
                where = "whole" if department is None else "per department"
                errors.setdefault(f"MEDIAN(cost) {where}", []).append(
                    abs(median / truth[department][0] - 1))
                errors.setdefault(f"p90(days) {where}", []).append(
                    abs(p90 / truth[department][1] - 1))
            for week, median in list(session.execute(
                    f"SELECT {WEEK}, MEDIAN(cost) FROM visits WHERE cost {keep} "
                    "GROUP BY 1"))[-1].rows:
                if week in weekly:
                    errors.setdefault("MEDIAN(cost) per week", []).append(
                        abs(median / weekly[week] - 1))
        print(f"ε {epsilon}: " + "; ".join(f"{name} {100 * np.median(found):.1f} %"
                                           for name, found in errors.items()))


if __name__ == "__main__":
    main()
