"""The server under load: queries per second and p50/p99 latency of private COUNT and
MEDIAN through ``idp-proxy serve``, with 1, 8 and 32 clients, next to the same client
(psycopg 3) asking PostgreSQL directly for the plain aggregate, in one run.

    python benchmarks/wire.py [--backend postgres|duckdb] [--rows 1000000] [--queries 200]
                              [--clients 1,8,32]

The proxy serves a throwaway PostgreSQL (started from the system's binaries, as in the
tests) holding the same table the direct client reads, or a DuckDB file whose copy the
direct clients read in-process (one cursor each). Each client runs its share of
``--queries`` queries over one connection.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import duckdb
import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.pgserver import throwaway_postgres
from tests.wireserver import running_proxy

RULES = """
[server]
auth = "trust"
max_connections = 64
[defaults]
epsilon_per_query = 0.001
[analysts.bench]
budget = 1000000
[tables.rows]
[tables.rows.columns]
x = { type = "float", domain = [0, 1000] }
a = { type = "int", domain = [0, 100] }
"""
# (name, private SQL, plain SQL, repeated). Every statement is new (the second
# parameter, always true, is unique) so that the answer cache never answers, except in
# the repeated case, which shows what a cache hit costs.
_MEDIAN = ("SELECT percentile_disc(0.5) WITHIN GROUP (ORDER BY x) FROM rows "
           "WHERE a >= %s AND x <= %s")
CASES = [
    ("COUNT with range", "SELECT COUNT(*) FROM rows WHERE a BETWEEN %s AND 50 AND x <= %s",
     "SELECT count(*) FROM rows WHERE a BETWEEN %s AND 50 AND x <= %s", False),
    ("MEDIAN", "SELECT MEDIAN(x) FROM rows WHERE a >= %s AND x <= %s", _MEDIAN, False),
    ("MEDIAN repeated (cache)", "SELECT MEDIAN(x) FROM rows WHERE a >= %s AND x <= %s",
     _MEDIAN, True),
]
_unique = itertools.count(1)


def load_postgres(url: str, rows: int) -> None:
    with psycopg.connect(url, autocommit=True) as con:
        con.execute("CREATE TABLE rows AS SELECT (random() * 1000)::float8 AS x, "
                    "(random() * 100)::int AS a FROM generate_series(1, %s)", (rows,))
        con.execute("ANALYZE rows")


def load_duckdb(path: Path, rows: int) -> None:
    with duckdb.connect(str(path)) as con:
        con.execute("CREATE TABLE rows AS SELECT random() * 1000 AS x, "
                    "CAST(random() * 100 AS INTEGER) AS a FROM range(?)", [rows])


class _DuckDBClient:
    """The raw DuckDB baseline: one cursor per client on an in-process copy of the file
    (the proxy holds the file itself)."""

    def __init__(self, database: duckdb.DuckDBPyConnection) -> None:
        self._cursor = database.cursor()

    def execute(self, sql: str, parameters):
        return self._cursor.execute(sql.replace("%s", "?"), list(parameters))

    def close(self) -> None:
        self._cursor.close()


def drive(connect, sql: str, clients: int, queries: int,
          repeated: bool = False) -> tuple[float, list[float]]:
    """Run ``queries`` statements spread over ``clients`` connections (``connect()``
    opens one); return the wall time and every statement's latency."""
    latencies: list[float] = []
    lock = threading.Lock()
    share = max(1, queries // clients)

    def client(index: int) -> None:
        mine = []
        con = connect()
        for step in range(share):
            started = time.perf_counter()
            parameters = (5, 1000) if repeated else ((index + step) % 10,
                                                      1000 + next(_unique))
            con.execute(sql, parameters).fetchall()
            mine.append(time.perf_counter() - started)
        con.close()
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - started, latencies


def row(label: str, clients: int, wall: float, latencies: list[float]) -> str:
    ordered = sorted(latencies)
    p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
    return (f"{label:<34}{clients:>8}{len(latencies) / wall:>10.1f}"
            f"{statistics.median(ordered) * 1000:>10.1f}{p99 * 1000:>10.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--clients", default="1,8,32")
    parser.add_argument("--backend", choices=["postgres", "duckdb"], default="postgres")
    args = parser.parse_args()
    counts = [int(c) for c in args.clients.split(",")]
    with contextlib.ExitStack() as stack:
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        print(f"loading {args.rows:,} rows ...", file=sys.stderr)
        if args.backend == "postgres":
            url = stack.enter_context(throwaway_postgres({"max_connections": "200"}))
            load_postgres(url, args.rows)
            direct = lambda: psycopg.connect(url, autocommit=True)
        else:
            load_duckdb(folder / "served.duckdb", args.rows)
            shutil.copy(folder / "served.duckdb", folder / "direct.duckdb")
            url = f"duckdb:///{folder / 'served.duckdb'}"
            database = stack.enter_context(duckdb.connect(str(folder / "direct.duckdb")))
            direct = lambda: _DuckDBClient(database)
        rules = folder / "rules.toml"
        rules.write_text(RULES)
        proxy = stack.enter_context(running_proxy(rules, url, folder / "home"))
        via_proxy = lambda: psycopg.connect(proxy.dsn("bench"), autocommit=True)
        raw = "PostgreSQL" if args.backend == "postgres" else "DuckDB"
        print(f"{'query':<34}{'clients':>8}{'q/s':>10}{'p50 ms':>10}{'p99 ms':>10}")
        for name, private, plain, repeated in CASES:
            for clients in counts:
                drive(via_proxy, private, clients, clients, repeated)  # warm up
                print(row(f"{name}, idp-proxy", clients, *drive(
                    via_proxy, private, clients, args.queries, repeated)), flush=True)
                print(row(f"{name}, {raw} direct", clients, *drive(
                    direct, plain, clients, args.queries, repeated)), flush=True)


if __name__ == "__main__":
    main()
