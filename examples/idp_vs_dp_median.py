"""The median of the demo incomes by the default (iDP's neighbours, the exponential
mechanism over the data's ranks), by raw iDP (the owner's opt-in, noise_scale = "local")
and by DP with the global sensitivity, at the same ε.

Runs 50 queries per setting through the engine on the embedded demo DuckDB (a private
copy in a temporary folder, so no one's budget is spent) and prints the mean absolute
error of each against the true median. Usage: python examples/idp_vs_dp_median.py
[--runs 50]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
os.environ["IDP_PROXY_HOME"] = tempfile.mkdtemp(prefix="idp-example-")

from proxy.demo import open_demo, people_columns
from proxy.engine import Engine
from proxy.rules import parse_rules
from proxy.session import Session

RUNS = 50


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=RUNS, help="queries per setting")
    runs = parser.parse_args().runs
    rules_text = (ROOT / "rules" / "demo.toml").read_text()
    rules = parse_rules(rules_text + "\n[analysts.examples]\nbudget = 1000\n", "demo+examples")
    # fresh answers, not the first one over and over from the answer cache
    # and the bound of the noise actually used (the owner's view: report_scale "rounded");
    # raw iDP allowed, so that it can be compared (the default stays the one measured first)
    rules = replace(rules, defaults=replace(rules.defaults, answer_cache=False,
                                            report_scale="rounded", noise_scale="local"))
    engine = Engine(rules, open_demo())
    session = Session.open(engine, "examples")
    true = statistics.median_low(sorted(people_columns()["income"]))
    print(f"true median income: {true:,.2f} ({len(people_columns()['income']):,} people)")
    print(f"{'setting':<24} {'epsilon':>7} {'mean abs error':>16} {'95% bound':>14}")
    results = {}
    for model, sensitivity in (("idp", "instance"), ("idp", "local"), ("dp", "global")):
        list(session.execute(f"SET idp.model = '{model}'; SET idp.sensitivity = '{sensitivity}'"))
        answers, bounds = [], []
        for _ in range(runs):
            (answer,) = session.execute("/*+ epsilon=1 */ SELECT MEDIAN(income) FROM people")
            answers.append(answer.rows[0][0])
            bounds.append(answer.privacy["ci95"]["median"][0])
        setting = f"{model} {sensitivity}"
        results[setting] = statistics.mean(abs(a - true) for a in answers)
        bound = "none" if None in bounds else f"{statistics.median(bounds):,.2f}"
        print(f"{setting:<24} {1:>7} {results[setting]:>16,.2f} {bound:>14}")
    print(f"DP error / iDP error: {results['dp global'] / results['idp instance']:,.0f}x "
          f"(raw iDP: {results['dp global'] / results['idp local']:,.0f}x)")


if __name__ == "__main__":
    main()
