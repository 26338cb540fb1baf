"""The server under load: throughput and p50/p99 latency of fresh private statements
through ``idp-proxy serve``, with 1, 8, 32 and 128 clients, next to the same clients
asking the backend directly for the plain aggregate, in one run.

    python benchmarks/wire.py [--backend postgres|duckdb] [--rows 1000000]
                              [--long-rows 4000000] [--seconds 10]
                              [--clients 1,8,32,128] [--cases count,median,mixed]
                              [--workers N] [--replay-window-ms MS]

The proxy serves a throwaway PostgreSQL (started from the system's binaries, as in the
tests) holding the same tables the direct clients read, or a DuckDB file whose copy the
direct clients read in-process (one cursor each). Each client (a thread with its own
psycopg 3 connection, or its own DuckDB cursor) connects, asks one statement untimed,
then asks statements back to back for ``--seconds``.

Cases: ``count`` (a private COUNT with a range), ``median`` (a MEDIAN with a range),
``mixed`` (every client cycles through a COUNT with a range, a MEDIAN and a COUNT per
group of an 11-key GROUP BY, while one more client asks a long query again and again: the
MEDIAN per group over the ``--long-rows`` table), and ``cache`` (one MEDIAN repeated: cache
hits, not in the default cases). Every other statement is new (one literal is unique), so
the answer cache never answers; the proxy's lines check this through the budget (each
fresh answer is charged, a cache hit is not) and print the share of fresh answers.
Throughput and latency count the short statements; the long query's count and median
latency are printed on their own.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from decimal import Decimal
from pathlib import Path

import duckdb
import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.pgserver import throwaway_postgres
from tests.wireserver import running_proxy

EPSILON = Decimal("0.001")
RULES = f"""
[server]
auth = "trust"
max_connections = 300
max_connections_per_analyst = 300
max_pending_connections = 300
[defaults]
epsilon_per_query = {EPSILON}
[analysts.bench]
budget = 1000000
[tables.rows]
[tables.rows.columns]
x = {{ type = "float", domain = [0, 1000] }}
a = {{ type = "int", domain = [0, 100] }}
b = {{ type = "int", keys = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10] }}
[tables.big]
[tables.big.columns]
x = {{ type = "float", domain = [0, 1000] }}
b = {{ type = "int", keys = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10] }}
"""

# (private SQL, plain SQL for PostgreSQL, plain SQL for DuckDB). The parameters are a
# small integer and a unique bound on x above its domain (always true, never repeated).
COUNT = ("SELECT COUNT(*) FROM rows WHERE a BETWEEN %s AND 50 AND x <= %s",
         "SELECT count(*) FROM rows WHERE a BETWEEN %s AND 50 AND x <= %s",
         "SELECT count(*) FROM rows WHERE a BETWEEN %s AND 50 AND x <= %s")
MEDIAN = ("SELECT MEDIAN(x) FROM rows WHERE a >= %s AND x <= %s",
          ("SELECT percentile_disc(0.5) WITHIN GROUP (ORDER BY x) FROM rows "
          "WHERE a >= %s AND x <= %s"),
          "SELECT quantile_disc(x, 0.5) FROM rows WHERE a >= %s AND x <= %s")
GROUPS = ("SELECT b, COUNT(*) FROM rows WHERE a >= %s AND x <= %s GROUP BY b",
          "SELECT b, count(*) FROM rows WHERE a >= %s AND x <= %s GROUP BY b",
          "SELECT b, count(*) FROM rows WHERE a >= %s AND x <= %s GROUP BY b")
LONG = ("SELECT b, MEDIAN(x) FROM big WHERE b >= %s AND x <= %s GROUP BY b",
        ("SELECT b, percentile_disc(0.5) WITHIN GROUP (ORDER BY x) FROM big "
        "WHERE b >= %s AND x <= %s GROUP BY b"),
        "SELECT b, quantile_disc(x, 0.5) FROM big WHERE b >= %s AND x <= %s GROUP BY b")
# case -> (label, the short statements a client cycles through, the long query or None,
# repeated: one statement again and again, for cache hits)
CASES = {
    "count": ("COUNT with range", [COUNT], None, False),
    "median": ("MEDIAN", [MEDIAN], None, False),
    "mixed": ("mixed (+1 long query)", [COUNT, MEDIAN, GROUPS], LONG, False),
    "cache": ("MEDIAN repeated (cache)", [MEDIAN], None, True),
}
_unique = itertools.count(1)


def load_postgres(url: str, rows: int, long_rows: int) -> None:
    with psycopg.connect(url, autocommit=True) as con:
        for table, n in (("rows", rows), ("big", long_rows)):
            con.execute(f"CREATE TABLE {table} AS SELECT (random() * 1000)::float8 AS x, "
                        "(random() * 100)::int AS a FROM generate_series(1, %s)", (n,))
            con.execute(f"ALTER TABLE {table} ADD COLUMN b int")
            con.execute(f"UPDATE {table} SET b = a / 10")
            con.execute(f"VACUUM ANALYZE {table}")


def load_duckdb(path: Path, rows: int, long_rows: int) -> None:
    with duckdb.connect(str(path)) as con:
        for table, n in (("rows", rows), ("big", long_rows)):
            con.execute(f"CREATE TABLE {table} AS SELECT x, a, a // 10 AS b FROM ("
                        "SELECT random() * 1000 AS x, CAST(random() * 100 AS INTEGER) AS a "
                        "FROM range(?))", [n])


class _DuckDBClient:
    """The raw DuckDB baseline: one cursor per client on an in-process copy of the file
    (the proxy holds the file itself)."""

    def __init__(self, database: duckdb.DuckDBPyConnection) -> None:
        self._cursor = database.cursor()

    def execute(self, sql: str, parameters):
        return self._cursor.execute(sql.replace("%s", "?"), list(parameters))

    def close(self) -> None:
        self._cursor.close()


def _parameters(index: int, step: int, repeated: bool) -> tuple[int, int]:
    return (5, 1000) if repeated else ((index + step) % 10, 1000 + next(_unique))


def drive(connect, statements: list[str], long: str | None, clients: int, seconds: float,
          repeated: bool = False) -> dict:
    """``clients`` connections (``connect()`` opens one) each ask one statement untimed,
    then cycle through ``statements`` for ``seconds``; with ``long``, one more connection
    asks it again and again meanwhile. Returns the short statements' wall time and
    latencies, the long query's latencies and how many statements were sent in all."""
    latencies: list[float] = []
    long_latencies: list[float] = []
    sent = [0]
    lock = threading.Lock()
    ready = threading.Barrier(clients + (long is not None) + 1)
    clock = {}
    finished: list[float] = []

    errors: list[BaseException] = []

    def client(index: int, mine: list[float], cycle: list[str]) -> None:
        count = 0
        try:
            con = connect()
            try:
                con.execute(cycle[index % len(cycle)],
                            _parameters(index, 0, repeated)).fetchall()
                count = 1
                ready.wait()
                deadline = clock["deadline"]
                step = 0
                while time.perf_counter() < deadline:
                    step += 1
                    sql = cycle[(index + step) % len(cycle)]
                    started = time.perf_counter()
                    con.execute(sql, _parameters(index, step, repeated)).fetchall()
                    mine.append(time.perf_counter() - started)
                    count += 1
            finally:
                con.close()
        except (psycopg.Error, duckdb.Error, OSError, threading.BrokenBarrierError) as error:
            errors.append(error)  # raised by the main thread
            ready.abort()
        with lock:
            sent[0] += count
            if cycle is statements:
                finished.append(time.perf_counter())

    shares = [[] for _ in range(clients)]
    threads = [threading.Thread(target=client, args=(i, shares[i], statements))
               for i in range(clients)]
    if long is not None:
        threads.append(threading.Thread(target=client, args=(0, long_latencies, [long])))
    for thread in threads:
        thread.start()
    # the clock starts once every client has connected and asked its untimed statement
    while ready.n_waiting < ready.parties - 1 and not errors:
        time.sleep(0.01)
    started = time.perf_counter()
    clock["deadline"] = started + seconds
    if not errors:
        with contextlib.suppress(threading.BrokenBarrierError):
            ready.wait()
    for thread in threads:
        thread.join()
    if errors:
        raise RuntimeError(f"{len(errors)} of {len(threads)} clients failed") from errors[0]
    for share in shares:
        latencies.extend(share)
    return {"wall": max(finished) - started, "latencies": latencies,
            "long": long_latencies, "sent": sent[0]}


def _percentile(ordered: list[float], share: float) -> float:
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def measure(result: dict) -> tuple[float, float, float]:
    ordered = sorted(result["latencies"])
    return (len(ordered) / result["wall"], statistics.median(ordered) * 1000,
            _percentile(ordered, 0.99) * 1000)


def line(label: str, clients: int, result: dict, ratios: str, fresh: str) -> str:
    rate, p50, p99 = measure(result)
    long = result["long"]
    long_text = f"{len(long)} x {statistics.median(long) * 1000:.0f} ms" if long else "-"
    return (f"{label:<40}{clients:>8}{rate:>10.1f}{p50:>10.1f}{p99:>10.1f}"
            f"{ratios:>18}{long_text:>16}{fresh:>8}")


def spent(dsn: str) -> Decimal:
    with psycopg.connect(dsn, autocommit=True) as con:
        remaining = con.execute("SHOW idp.budget").fetchone()[0]
    return Decimal(1000000) - Decimal(remaining)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--long-rows", type=int, default=None,
                        help="rows of the long query's table (default 4 x --rows)")
    parser.add_argument("--seconds", type=float, default=10.0,
                        help="timed seconds per configuration")
    parser.add_argument("--clients", default="1,8,32,128")
    parser.add_argument("--cases", default="count,median,mixed",
                        help=f"some of {','.join(CASES)}")
    parser.add_argument("--backend", choices=["postgres", "duckdb"], default="postgres")
    parser.add_argument("--workers", type=int, default=None,
                        help="the server's [server] workers (default: one per core)")
    parser.add_argument("--replay-window-ms", type=int, default=None,
                        help="the rules' [defaults] replay_window_ms (default: theirs, 0)")
    args = parser.parse_args()
    counts = [int(c) for c in args.clients.split(",")]
    long_rows = args.long_rows or 4 * args.rows
    column = 1 if args.backend == "postgres" else 2
    with contextlib.ExitStack() as stack:
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        print(f"loading {args.rows:,} + {long_rows:,} rows ...", file=sys.stderr, flush=True)
        if args.backend == "postgres":
            url = stack.enter_context(throwaway_postgres({"max_connections": "400"}))
            load_postgres(url, args.rows, long_rows)
            direct = lambda: psycopg.connect(url, autocommit=True)
        else:
            load_duckdb(folder / "served.duckdb", args.rows, long_rows)
            shutil.copy(folder / "served.duckdb", folder / "direct.duckdb")
            url = f"duckdb:///{folder / 'served.duckdb'}"
            database = stack.enter_context(duckdb.connect(str(folder / "direct.duckdb")))
            direct = lambda: _DuckDBClient(database)
        rules = folder / "rules.toml"
        text = RULES if args.workers is None else \
            RULES.replace("[server]", f"[server]\nworkers = {args.workers}")
        if args.replay_window_ms is not None:
            text = text.replace("[defaults]",
                                f"[defaults]\nreplay_window_ms = {args.replay_window_ms}")
        rules.write_text(text)
        proxy = stack.enter_context(running_proxy(rules, url, folder / "home"))
        dsn = proxy.dsn("bench")
        via_proxy = lambda: psycopg.connect(dsn, autocommit=True)
        raw = "PostgreSQL" if args.backend == "postgres" else "DuckDB"
        print(f"{args.backend}: {args.rows:,} rows (long query: {long_rows:,}), "
              f"{args.workers or 'default'} workers, "
              f"replay_window_ms {args.replay_window_ms or 0}, "
              f"{args.seconds:g} s per line; load average at start "
              f"{' '.join(f'{v:.2f}' for v in os.getloadavg())}")
        print("ratios: proxy q/s / direct q/s, proxy p50 / direct p50; long: runs x median "
              "latency; fresh: the proxy's statements charged (not cache hits)\n")
        print(f"{'query':<40}{'clients':>8}{'q/s':>10}{'p50 ms':>10}{'p99 ms':>10}"
              f"{'q/s, p50 ratio':>18}{'long':>16}{'fresh':>8}", flush=True)
        for case in args.cases.split(","):
            label, short, long, repeated = CASES[case]
            for clients in counts:
                before = spent(dsn)
                ours = drive(via_proxy, [s[0] for s in short], long and long[0], clients,
                             args.seconds, repeated)
                charged = (spent(dsn) - before) / EPSILON
                theirs = drive(direct, [s[column] for s in short], long and long[column],
                               clients, args.seconds, repeated)
                (rate, p50, _), (their_rate, their_p50, _) = measure(ours), measure(theirs)
                ratios = f"{rate / their_rate:.3f}x {p50 / their_p50:.1f}x"
                fresh = f"{100 * charged / ours['sent']:.0f}%"
                print(line(f"{label}, idp-proxy", clients, ours, ratios, fresh))
                print(line(f"{label}, {raw} direct", clients, theirs, "", "-"), flush=True)
        print(f"\nload average at end {' '.join(f'{v:.2f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
