"""A large release (SPEC §6, issue 6): rows, time and the proxy's peak memory, against
the backend sorting the same columns on its own.

    python benchmarks/release.py [--backend duckdb|postgres] [--rows 10000000] [--k 10]
                                 [--memory-limit 1GB]

Creates a table of --rows rows with three float columns (uniform, lognormal, normal)
in a DuckDB file or a throwaway PostgreSQL, runs ``idp-proxy release`` on it with
idp-cbls to a Parquet file, and prints the wall time, the peak resident memory of the
release process (proxy + embedded DuckDB: ru_maxrss), the mean SSE, and the time the
backend takes for the three ORDER BYs alone (the floor of any exact microaggregation).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.pgserver import throwaway_postgres

RULES = """
[analysts.owner]
budget = 10
[tables.big]
[tables.big.columns]
a = { type = "float", domain = [0, 1] }
b = { type = "float", domain = [0, 1000000] }
c = { type = "float", domain = [-10, 10] }
"""
COLUMNS = ("random()", "exp(10 + random() * 2)", "(random() + random() + random() - 1.5) * 2")


def _load(backend: str, url: str, rows: int) -> None:
    select = ", ".join(f"{expr} AS {name}" for expr, name in zip(COLUMNS, "abc"))
    if backend == "duckdb":
        with duckdb.connect(url.removeprefix("duckdb:///")) as con:
            con.execute(f"CREATE TABLE big AS SELECT {select} FROM range(?)", [rows])
        return
    with psycopg.connect(url, autocommit=True) as con:
        con.execute(f"CREATE TABLE big AS SELECT {select} FROM generate_series(1, %s)", (rows,))
        con.execute("ANALYZE big")


def _sorts(backend: str, url: str) -> float:
    """Seconds for the backend to rank the three columns (no proxy)."""
    query = ("SELECT count(*), max(ra), max(rb), max(rc) FROM (SELECT row_number() OVER "
             "(ORDER BY a) AS ra, row_number() OVER (ORDER BY b) AS rb, row_number() OVER "
             "(ORDER BY c) AS rc FROM big) AS s")
    start = time.perf_counter()
    if backend == "duckdb":
        with duckdb.connect(url.removeprefix("duckdb:///")) as con:
            con.execute(query).fetchall()
    else:
        with psycopg.connect(url) as con:
            con.execute(query).fetchall()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["duckdb", "postgres"], default="duckdb")
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--memory-limit", default="1GB",
                        help="DuckDB's memory_limit for the release (the URL's ?memory_limit)")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="idp-release-bench-"))
    with contextlib.ExitStack() as stack:
        if args.backend == "duckdb":
            url = f"duckdb:///{folder / 'big.duckdb'}"
        else:
            url = stack.enter_context(throwaway_postgres())
        _load(args.backend, url, args.rows)
        (folder / "rules.toml").write_text(RULES)
        script = Path(sys.executable).parent / "idp-proxy"
        target = f"{url}?memory_limit={args.memory_limit}" if args.backend == "duckdb" else url
        env = {**os.environ, "IDP_PROXY_HOME": str(folder / "home")}
        start = time.perf_counter()
        done = subprocess.run(
            [str(script), "release", "big", "--rules", str(folder / "rules.toml"), "--backend",
             target, "--user", "owner", "--columns", "a,b,c", "--k", str(args.k), "--epsilon", "1",
             "--method", "idp-cbls", "--out", str(folder / "big.parquet")],
            env=env, capture_output=True, text=True, check=True)
        seconds = time.perf_counter() - start
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        floor = _sorts(args.backend, url)
    print(done.stdout.strip())
    limit = f" (DuckDB memory_limit {args.memory_limit})" if args.backend == "duckdb" else ""
    print(f"{args.backend}{limit}: {args.rows:,} rows x 3 columns, k = {args.k}: "
          f"release {seconds:.1f} s, "
          f"peak memory of the release process {peak:.0f} MiB; the backend's three sorts "
          f"alone {floor:.1f} s (ratio {seconds / floor:.1f}x)")


if __name__ == "__main__":
    main()
