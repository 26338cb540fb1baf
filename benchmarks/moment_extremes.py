"""MAX and MIN of a timestamp on the demo (Metabase's Earliest and Latest, issue 33): over
``--answers`` fresh answers each (a new WHERE on cost that keeps every row makes each a
new release), at ε 0.1 and 1, the median distance in hours from the answer to the true
extreme, and the share of answers within the data's top (bottom) 1 % — issue 32's goal
for MAX and MIN — for the whole table, Grafana's last 30 days and per department. A
benchmark: it asserts nothing.

    python benchmarks/moment_extremes.py [--answers 20]

It builds the demo in a temporary IDP_PROXY_HOME and answers in process (analysis,
pushdown, noise, ledger) with the demo's rules and a large budget.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import tempfile
from pathlib import Path

import duckdb
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["IDP_PROXY_HOME"] = tempfile.mkdtemp(prefix="idp-moment-extremes-")

from proxy.demo import demo_path, open_demo  # noqa: E402
from proxy.engine import Engine  # noqa: E402
from proxy.rules import parse_rules  # noqa: E402
from proxy.session import Session  # noqa: E402

SCOPES = {  # name -> (WHERE beside the cost term, GROUP BY column or None)
    "whole table": ("", None),
    "last 30 days": ("AND visited_at >= TIMESTAMP '2024-12-02'", None),
    "per department": ("", "department"),
}


def _truth(con, where: str, group: str | None) -> dict:
    """Per group: (min, 1 % quantile, 99 % quantile, max) of the rows in scope."""
    key = group or "'all'"
    return {row[0]: row[1:] for row in con.sql(
        f"SELECT {key}, MIN(visited_at), quantile_disc(visited_at, 0.01), "
        f"quantile_disc(visited_at, 0.99), MAX(visited_at) FROM visits WHERE TRUE {where} "
        f"GROUP BY 1").fetchall()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--answers", type=int, default=20)
    answers = parser.parse_args().answers
    open_demo().close()  # created on first use
    with duckdb.connect(str(demo_path()), read_only=True) as con:
        truths = {name: _truth(con, where, group) for name, (where, group) in SCOPES.items()}
    text = (ROOT / "rules" / "demo.toml").read_text().replace(
        "budget_per_analyst = 100 ", "budget_per_analyst = 100000000 ")
    engine = Engine(parse_rules(text), open_demo())
    hour = dt.timedelta(hours=1)
    print("| scope | ε | MIN: median hours from the first | within the bottom 1 % | "
          "MAX: median hours from the last | within the top 1 % |")
    print("|---|---|---|---|---|---|")
    for name, (where, group) in SCOPES.items():
        truth = truths[name]
        for epsilon in ("0.1", "1"):
            session = Session.open(engine, "alice")
            list(session.execute(f"SET idp.epsilon = {epsilon}"))
            lows, highs, low_in, high_in = [], [], [], []
            for i in range(answers):
                keep = f"cost > {-1 - i - (0 if epsilon == '0.1' else answers)}"
                select = f"{group}, " if group else "'all', "
                grouped = f" GROUP BY {group}" if group else ""
                (answer,) = list(session.execute(
                    f"SELECT {select}MIN(visited_at), MAX(visited_at) FROM visits WHERE "
                    f"{keep} {where}{grouped}"))
                for key, low, high in answer.rows:
                    first, p01, p99, last = truth[key]
                    lows.append(abs(low - first) / hour)
                    highs.append(abs(last - high) / hour)
                    low_in.append(first <= low <= p01)
                    high_in.append(p99 <= high <= last)
            print(f"| {name} | {epsilon} | {np.median(lows):,.1f} | "
                  f"{100 * np.mean(low_in):.0f} % | {np.median(highs):,.1f} | "
                  f"{100 * np.mean(high_in):.0f} % |")


if __name__ == "__main__":
    main()
