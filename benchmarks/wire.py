"""The server under load: queries per second and p50/p99 latency of private COUNT and
MEDIAN through ``idp-proxy serve``, with 1, 8 and 32 clients, next to the same client
(psycopg 3) asking PostgreSQL directly for the plain aggregate, in one run.

    python benchmarks/wire.py [--rows 1000000] [--queries 200] [--clients 1,8,32]

The proxy serves a throwaway PostgreSQL (started from the system's binaries, as in the
tests) holding the same table the direct client reads. Each client runs its share of
``--queries`` queries over one connection.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

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
CASES = [
    ("COUNT with range", "SELECT COUNT(*) FROM rows WHERE a BETWEEN %s AND 50",
     "SELECT count(*) FROM rows WHERE a BETWEEN %s AND 50"),
    ("MEDIAN", "SELECT MEDIAN(x) FROM rows WHERE a >= %s",
     "SELECT percentile_disc(0.5) WITHIN GROUP (ORDER BY x) FROM rows WHERE a >= %s"),
]


def load(url: str, rows: int) -> None:
    with psycopg.connect(url, autocommit=True) as con:
        con.execute("CREATE TABLE rows AS SELECT (random() * 1000)::float8 AS x, "
                    "(random() * 100)::int AS a FROM generate_series(1, %s)", (rows,))
        con.execute("ANALYZE rows")


def drive(dsn: str, sql: str, clients: int, queries: int) -> tuple[float, list[float]]:
    """Run ``queries`` statements spread over ``clients`` connections; return the wall
    time and every statement's latency."""
    latencies: list[float] = []
    lock = threading.Lock()
    share = max(1, queries // clients)

    def client(index: int) -> None:
        mine = []
        with psycopg.connect(dsn, autocommit=True) as con:
            for step in range(share):
                started = time.perf_counter()
                con.execute(sql, ((index + step) % 10,)).fetchall()
                mine.append(time.perf_counter() - started)
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
    args = parser.parse_args()
    counts = [int(c) for c in args.clients.split(",")]
    with throwaway_postgres({"max_connections": "200"}) as url, \
            tempfile.TemporaryDirectory() as folder:
        print(f"loading {args.rows:,} rows ...", file=sys.stderr)
        load(url, args.rows)
        rules = Path(folder) / "rules.toml"
        rules.write_text(RULES)
        with running_proxy(rules, url, Path(folder) / "home") as proxy:
            via_proxy = proxy.dsn("bench")
            print(f"{'query':<34}{'clients':>8}{'q/s':>10}{'p50 ms':>10}{'p99 ms':>10}")
            for name, private, plain in CASES:
                for clients in counts:
                    drive(via_proxy, private, clients, clients)  # warm up: c, caches
                    print(row(f"{name}, idp-proxy", clients,
                              *drive(via_proxy, private, clients, args.queries)), flush=True)
                    print(row(f"{name}, PostgreSQL direct", clients,
                              *drive(url, plain, clients, args.queries)), flush=True)


if __name__ == "__main__":
    main()
