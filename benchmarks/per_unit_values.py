"""Aggregates over per-unit values on the demo (docs/privacy.md §3.11): the median
relative error of fresh answers against the backend's own nested query, at ε 1.

    python benchmarks/per_unit_values.py [--answers 10] [--epsilon 1]

Each statement is asked ``--answers`` times with a different trivially true condition
(a fresh release each time, not the answer cache's replay), on a copy of the demo's
DuckDB and its ledger. A statement the checkout refuses prints its refusal.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

import duckdb

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from proxy.errors import ProxyError  # noqa: E402
from proxy.rules import load_rules  # noqa: E402
from proxy.session import Session  # noqa: E402
from tests.factories import open_engine  # noqa: E402

DEMO = Path(os.path.expanduser("~/.local/share/idp-proxy/demo.duckdb"))
TOTALS = "(SELECT person_id, COUNT(*) AS n, SUM(cost) AS total FROM visits GROUP BY person_id) t"
BY_DEPARTMENT = ("(SELECT person_id, department, SUM(cost) AS total FROM visits "
                 "GROUP BY person_id, department) t")
# name -> (the proxy's SQL, DuckDB's for the truth); {i} a condition's constant
STATEMENTS = {
    "AVG(total)": f"SELECT AVG(total) FROM {TOTALS} WHERE {{i}} = {{i}}",
    "SUM(total)": f"SELECT SUM(total) FROM {TOTALS} WHERE {{i}} = {{i}}",
    "STDDEV(total)": f"SELECT STDDEV(total) FROM {TOTALS} WHERE {{i}} = {{i}}",
    "MEDIAN(total)": f"SELECT MEDIAN(total) FROM {TOTALS} WHERE {{i}} = {{i}}",
    "AVG(total), n >= 4": f"SELECT AVG(total) FROM {TOTALS} WHERE n >= 4 AND {{i}} = {{i}}",
    "AVG(total) per department (oncology)": (
        f"SELECT AVG(total) FROM {BY_DEPARTMENT} WHERE department = 'oncology' "
        f"AND {{i}} = {{i}}"),
}


def truth(sql: str) -> float:
    with duckdb.connect(str(DEMO), read_only=True) as con:
        return con.execute(sql.format(i=0).replace("MEDIAN(total)",
                                                   "quantile_disc(total, 0.5)")).fetchone()[0]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--answers", type=int, default=10)
    parser.add_argument("--epsilon", type=float, default=1.0)
    args = parser.parse_args()
    copy = Path(tempfile.mkdtemp()) / "demo.duckdb"
    shutil.copy(DEMO, copy)
    shutil.copy(f"{DEMO}.ledger.sqlite", f"{copy}.ledger.sqlite")
    with open_engine(f"duckdb:///{copy}", load_rules(ROOT / "rules" / "demo.toml")) as engine:
        for name, sql in STATEMENTS.items():
            true = truth(sql)
            errors: list[float] = []
            try:
                for i in range(1, args.answers + 1):
                    session = Session.open(engine, "alice")
                    list(session.execute(f"SET idp.epsilon = {args.epsilon}"))
                    (answer,) = list(session.execute(sql.format(i=i)))
                    errors.append(abs(float(answer.rows[0][0]) - true) / abs(true))
                shown = f"{100 * statistics.median(errors):.2f} %"
            except ProxyError as refused:
                shown = f"refused: {str(refused)[:70]}"
            print(f"{name:38} truth {true:<12.6g} median relative error {shown}")
    shutil.rmtree(copy.parent)


if __name__ == "__main__":
    main()
