"""The proxy's own time per fresh private answer, in process, on DuckDB (issue 17 item 2).

N fresh COUNT queries with varying literals (never answer-cache hits) through
``Engine.session`` on a small table in a DuckDB file; prints the median and mean time
per answer, and the DuckDB transactions (write ones apart) and statements per answer.

    .venv/bin/python benchmarks/per_answer.py [N [THREADS [REPEAT]]]

With REPEAT = 1 the N queries are one statement, answered once before (replays from
the answer cache). With THREADS > 1 the N queries are shared by that many sessions
asking at once (one thread each, as the server runs them), and the throughput is
printed too.

Measured 2026-11-23 on the shared 2-core machine (load average 3.4-4.5 from other
work, so absolute times are rough; before = main at c5b53f1, after = branch onewrite,
run alternately; temporary directory on the machine's /tmp):

| | before | after |
|---|---|---|
| 1 session, median ms per answer (3 runs of 500) | 44.1 / 43.9 / 17.4 | 39.9 / 35.9 / 13.5 |
| 1 session: transactions (writing) / statements per answer | 4 (3) / 11 | 3 (2) / 8 |
| 8 sessions, answers/s (2 runs of 400) | 56 / 56 | 77 / 53 |
| 8 sessions: transactions (writing) per answer | 4.02 (3.02) | 2.31 (1.31) |
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import duckdb

from proxy.backends import open_backend
from proxy.backends.base import Transaction
from proxy.engine import Engine
from proxy.rules import parse_rules
from proxy.session import Session

RULES = """
[defaults]
model = "idp"
epsilon_per_query = 0.001
budget_per_analyst = 1000000

[analysts.bench]
budget = 1000000

[tables.people]
privacy_unit = "person_id"
max_rows_per_unit = 1
[tables.people.columns]
person_id = { type = "int" }
age = { type = "int", domain = [0, 120] }
"""
REPEATED = "SELECT COUNT(*) FROM people WHERE age > 40"


def main(n: int = 500, threads: int = 1, repeat: int = 0) -> None:
    """``repeat`` 1: one statement, answered once untimed, then asked N times (replays)."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "bench.duckdb"
        with duckdb.connect(str(path)) as con:
            con.execute("CREATE TABLE people AS SELECT range AS person_id, "
                        "CAST(range % 90 AS INTEGER) AS age FROM range(1000)")
        backend = open_backend(f"duckdb:///{path}")
        engine = Engine(parse_rules(RULES), backend)
        session = Session.open(engine, "bench")
        for warm in range(20):
            list(session.execute(f"SELECT COUNT(*) FROM people WHERE age > {-warm - 1}"))
        if repeat:
            list(session.execute(REPEATED))
        counts = {"transactions": 0, "writes": 0, "statements": 0}
        transaction, cursor = type(backend).transaction, type(backend)._cursor
        execute = Transaction.execute

        def counted(self, snapshot=False):
            counts["writes"] += not snapshot
            return transaction(self, snapshot)

        def opened(self):
            counts["transactions"] += 1
            return cursor(self)

        def executed(self, sql, params=()):
            counts["statements"] += 1
            return execute(self, sql, params)

        type(backend).transaction, type(backend)._cursor = counted, opened
        Transaction.execute = executed
        times = []

        def ask(first: int, session) -> None:
            for number in range(first, n, threads):
                sql = (f"SELECT COUNT(*) FROM people WHERE age > {number % 90} "
                       f"AND person_id > {-number - 100}") if not repeat else REPEATED
                start = time.perf_counter()
                list(session.execute(sql))
                times.append(time.perf_counter() - start)

        began = time.perf_counter()
        workers = [threading.Thread(target=ask, args=(first, Session.open(engine, "bench")))
                   for first in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        took = time.perf_counter() - began
        type(backend).transaction, type(backend)._cursor = transaction, cursor
        Transaction.execute = execute
        backend.close()
    print(f"{n} {'repeated' if repeat else 'fresh'} COUNT answers on DuckDB, {threads} session(s): {n / took:.0f}/s, median {statistics.median(times) * 1e3:.2f} ms, "
          f"mean {statistics.fmean(times) * 1e3:.2f} ms, "
          f"{counts['transactions'] / n:.2f} transactions ({counts['writes'] / n:.2f} "
          f"writing) and {counts['statements'] / n:.2f} statements per answer")


if __name__ == "__main__":
    main(*(int(arg) for arg in sys.argv[1:4]))
