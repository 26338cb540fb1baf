"""CORR on the demo data (issue 33): the median absolute error over fresh answers of a
strong and a weak true correlation, at ε 1 and 0.1. A benchmark: it measures, it
asserts nothing.

    python benchmarks/correlation.py [--releases 20] [--epsilon 1,0.1] [--model dp]

Pairs (demo tables, rules/demo.toml): ``CORR(age, income)`` over people (independent:
true r ≈ 0), ``CORR(income, income + 1000 * age)`` over people (r ≈ 0.95: an
expression, its domain derived from the declared ones) and ``CORR(cost, days)`` over
visits (several rows per person). Each answer is a fresh run of the engine's statistics
(which draw the bounds) and release (``release_group``), without the session's ledger
and cache, so the errors are the mechanism's.
The truth is DuckDB's own CORR of the same SQL.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import sys
import tempfile
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PAIRS = [("weak", "people", "age", "income"),
         ("strong", "people", "income", "income + 1000 * age"),
         ("visits", "visits", "cost", "days")]


def main() -> None:
    from dataclasses import replace

    from proxy.analyze import analyze, parse_statements
    from proxy.backends import open_backend
    from proxy.demo import create_demo
    from proxy.engine import Engine
    from proxy.privacy.noisy_answers import Calibration, release_group
    from proxy.privacy.sampler import SecureSource
    from proxy.rules import parse_rules
    from proxy.settings import Settings

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--releases", type=int, default=20)
    parser.add_argument("--epsilon", default="1,0.1")
    parser.add_argument("--model", default="dp", choices=("dp", "idp"))
    args = parser.parse_args()
    print(f"$ python benchmarks/correlation.py {' '.join(sys.argv[1:])}")
    print(f"date {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC, load "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}, model {args.model}")
    text = (ROOT / "rules" / "demo.toml").read_text().replace(
        'model = "idp"', f'model = "{args.model}"', 1)
    rules = parse_rules(text)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "demo.duckdb"
        create_demo(path)
        backend = open_backend(f"duckdb:///{path}")
        rng = SecureSource()
        engine = Engine(rules, backend, rng)
        for name, table, y, x in PAIRS:
            sql = f"SELECT CORR({y}, {x}) FROM {table}"
            truth = float(backend.read(sql)[0][0])
            for epsilon in args.epsilon.split(","):
                plan = analyze(parse_statements(sql)[0], rules, Settings())
                plan = replace(plan, epsilon=Decimal(epsilon))
                released = []
                for _ in range(args.releases):  # the bounds are drawn with the statistics
                    shift, groups, _ = engine.statistics(plan)
                    calibration = Calibration(plan.mechanism.model, shift,
                                              rules.defaults.local_sensitivity_floor,
                                              rules.defaults.exact_release,
                                              rules.defaults.report_scale,
                                              plan.mechanism.local)
                    released.append(release_group(plan, groups[()], calibration, rng)[0])
                errors = [abs(r.value - truth) for r in released]
                bounds = [r.ci95 for r in released if r.ci95 is not None]
                covered = sum(1 for r in released
                              if r.ci95 is not None and abs(r.value - truth) <= r.ci95)
                print(f"{name:7} {sql:55} eps {epsilon:>4}: truth {truth:+.4f}, median |err| "
                      f"{statistics.median(errors):.4f}, max {max(errors):.4f}; 95% bound "
                      f"median {statistics.median(bounds) if bounds else float('nan'):.3f} "
                      f"({len(bounds)}/{len(released)} shown, {covered} cover the truth)")
        backend.close()


if __name__ == "__main__":
    main()
