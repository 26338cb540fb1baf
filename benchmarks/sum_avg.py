"""SUM and AVG: the statistics' time (engine.statistics: every backend pass, no noise,
no ledger) as a ratio to the plain aggregate run directly, on DuckDB and PostgreSQL.

    python benchmarks/sum_avg.py [--rows 1000000] [--backends duckdb,postgres] [--repeat 7]

Uses benchmarks/pushdown.py's table and rules (x a float in [0, 1000), a an int). The
plain aggregate and the statistics alternate; the median and the minimum of each are
printed (the minimum is the steadier on a busy machine).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.pushdown import RULES, load
from proxy.analyze import analyze, parse_statements
from proxy.backends import open_backend
from proxy.engine import Engine
from proxy.settings import Settings
from tests.pgserver import throwaway_postgres

CASES = [
    ("SUM with WHERE", "SELECT SUM(x) FROM rows WHERE a < 30",
     "SELECT sum(x) FROM rows WHERE a < 30"),
    ("AVG", "SELECT AVG(x) FROM rows", "SELECT avg(x) FROM rows"),
    ("SUM", "SELECT SUM(x) FROM rows", "SELECT sum(x) FROM rows"),
]


def seconds(action) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def compare(engine: Engine, name: str, private_sql: str, plain: str, repeat: int) -> None:
    """The statistics of ``private_sql`` (every backend pass, no noise, no ledger) against
    ``plain`` run directly, alternating; prints the median and the minimum of each."""
    backend = engine.backend
    plan = analyze(parse_statements(private_sql)[0], engine.rules, Settings())
    raws, stats = [], []
    for _ in range(repeat):  # interleaved, so a busy moment slows both
        raws.append(seconds(lambda: backend.query(plain)))
        stats.append(seconds(lambda: engine.statistics(plan)))
    for label, pick in (("median", statistics.median), ("min", min)):
        raw, ours = pick(raws), pick(stats)
        print(f"{backend.dialect:8} {name:34} {label:6} plain {raw * 1000:8.1f} ms  "
              f"statistics {ours * 1000:8.1f} ms  ratio {ours / raw:5.2f}x", flush=True)


def on_backends(names: str, run) -> None:
    """``run(url)`` on each of the comma-separated backends: a DuckDB file in a temporary
    folder, a throwaway PostgreSQL."""
    for name in names.split(","):
        if name == "duckdb":
            with tempfile.TemporaryDirectory() as tmp:
                run(f"duckdb:///{tmp}/bench.duckdb")
        else:
            with throwaway_postgres() as url:
                run(url)


def run(url: str, rows: int, repeat: int) -> None:
    backend = open_backend(url)
    load(backend, rows)
    engine = Engine(RULES, backend)
    for name, private_sql, plain in CASES:
        compare(engine, name, private_sql, plain, repeat)
    backend.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--backends", default="duckdb,postgres")
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    on_backends(args.backends, lambda url: run(url, args.rows, args.repeat))


if __name__ == "__main__":
    main()
