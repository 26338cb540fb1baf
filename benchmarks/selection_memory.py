"""What a partition selection over many distinct keys costs the proxy's memory
(docs/privacy.md §3.12): a row-level table of N distinct text keys plus one common key,
``SELECT city, COUNT(*) … GROUP BY city`` answered through a session on an embedded
DuckDB, against the growth the same per-key count takes in DuckDB alone (its own hash
aggregation, which the embedded backend holds in the same process).

    python benchmarks/selection_memory.py [--keys 3000000]

Each part runs in a process of its own, so that each peak RSS is its own.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

RULES = """
[defaults]
model = "idp"
epsilon_per_query = 1
budget_per_analyst = 1000
delta = 1e-9
max_groups = 1000
[analysts.alice]
[tables.events]
[tables.events.columns]
city  = { type = "text" }
stay  = { type = "int", domain = [0, 10] }
"""
COUNTS = ("SELECT k, COUNT(*) FROM (SELECT city AS k FROM events WHERE city IS NOT NULL) "
          "GROUP BY k")


def _peak_mib() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024


def through_proxy(path: str) -> None:
    sys.path.insert(0, str(ROOT))
    from proxy.backends import open_backend
    from proxy.engine import Engine
    from proxy.rules import parse_rules
    from proxy.session import Session

    engine = Engine(parse_rules(RULES), open_backend(f"duckdb:///{path}"))
    session = Session.open(engine, "alice")
    before, started = _peak_mib(), time.perf_counter()
    (answer,) = session.execute("SELECT city, COUNT(*) FROM events GROUP BY city")
    print(f"through the proxy: peak RSS +{_peak_mib() - before} MiB, "
          f"{time.perf_counter() - started:.1f} s, {len(answer.rows)} key(s) released")


def duckdb_alone(path: str) -> None:
    import duckdb

    con = duckdb.connect(path, read_only=True)
    before = _peak_mib()
    con.execute(COUNTS)
    rows = 0
    while batch := con.fetchmany(10_000):
        rows += len(batch)
    print(f"DuckDB alone: peak RSS +{_peak_mib() - before} MiB over {rows:,} keys")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=3_000_000)
    parser.add_argument("--part", choices=["proxy", "duckdb"], help=argparse.SUPPRESS)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.part:
        (through_proxy if args.part == "proxy" else duckdb_alone)(args.path)
        return
    import duckdb

    with tempfile.TemporaryDirectory() as folder:
        path = str(Path(folder) / "keys.duckdb")
        con = duckdb.connect(path)
        con.execute(f"CREATE TABLE events AS SELECT 'k' || i::VARCHAR AS city, "
                    f"(i % 11)::INTEGER AS stay FROM range({args.keys}) t(i)")
        con.execute("INSERT INTO events SELECT 'paris', 1 FROM range(5000)")
        con.close()
        for part in ("duckdb", "proxy"):
            subprocess.run([sys.executable, __file__, "--part", part, "--path", path],
                           check=True)


if __name__ == "__main__":
    main()
