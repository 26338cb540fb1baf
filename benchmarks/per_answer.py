"""The proxy's own time per fresh private answer, in process, on DuckDB or PostgreSQL
(issue 17 item 2, issue 37).

N fresh COUNT queries with varying literals (never answer-cache hits) through
``Engine.session`` on a small table in a DuckDB file (or a throwaway PostgreSQL,
started as the tests start theirs); prints the median and mean time per answer, the
median of the proxy's own part of it (the answer's time less the time spent inside the
backends: their statements, BEGIN and COMMIT, the durable commit of the debit
included), and the backend's transactions (write ones apart) and statements per
answer, the ledger store's apart where it is not the backend (DuckDB's SQLite store).

    .venv/bin/python benchmarks/per_answer.py [N [THREADS [REPEAT [duckdb|postgres]]]]

With REPEAT = 1 the N queries are one statement, answered once before (replays from
the answer cache). With THREADS > 1 the N queries are shared by that many sessions
asking at once (one thread each, as the server runs them), and the throughput is
printed too (the own time then includes waiting for the others' turn).

Measured 2026-11-23 on the shared 2-core machine (load average 3.4-4.5 from other
work, so absolute times are rough; before = main at c5b53f1, after = branch onewrite,
run alternately; temporary directory on the machine's /tmp):

| | before | after |
|---|---|---|
| 1 session, median ms per answer (3 runs of 500) | 44.1 / 43.9 / 17.4 | 39.9 / 35.9 / 13.5 |
| 1 session: transactions (writing) / statements per answer | 4 (3) / 11 | 3 (2) / 8 |
| 8 sessions, answers/s (2 runs of 400) | 56 / 56 | 77 / 53 |
| 8 sessions: transactions (writing) per answer | 4.02 (3.02) | 2.31 (1.31) |

Issue 37's numbers (the proxy's own time, before and after) are in benchmarks/README.md.
"""

from __future__ import annotations

import contextlib
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import duckdb
import psycopg

from proxy.backends import open_backend
from proxy.backends.base import Transaction
from proxy.engine import Engine
from proxy.rules import parse_rules
from proxy.session import Session
from tests.pgserver import throwaway_postgres

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


def main(n: int = 500, threads: int = 1, repeat: int = 0, backend_name: str = "duckdb"
         ) -> None:
    """``repeat`` 1: one statement, answered once untimed, then asked N times (replays)."""
    with contextlib.ExitStack() as stack:
        if backend_name == "postgres":
            url = stack.enter_context(throwaway_postgres())
            with psycopg.connect(url, autocommit=True) as con:
                con.execute("CREATE TABLE people AS SELECT g AS person_id, "
                            "(g % 90)::int AS age FROM generate_series(0, 999) AS g")
        else:
            folder = stack.enter_context(tempfile.TemporaryDirectory())
            path = Path(folder) / "bench.duckdb"
            with duckdb.connect(str(path)) as con:
                con.execute("CREATE TABLE people AS SELECT range AS person_id, "
                            "CAST(range % 90 AS INTEGER) AS age FROM range(1000)")
            url = f"duckdb:///{path}"
        backend = open_backend(url)
        stack.callback(backend.close)
        engine = Engine(parse_rules(RULES), backend)
        _measure(engine, n, threads, repeat, backend_name)


def _measure(engine: Engine, n: int, threads: int, repeat: int, backend_name: str) -> None:
    backend, store = engine.backend, engine.ledger.backend
    session = Session.open(engine, "bench")
    for warm in range(20):
        list(session.execute(f"SELECT COUNT(*) FROM people WHERE age > {-warm - 1}"))
    if repeat:
        list(session.execute(REPEATED))
    counts = {"transactions": 0, "writes": 0, "statements": 0, "store": 0}
    inside = threading.local()  # seconds this thread spent inside a backend

    def spent(since: float) -> None:
        inside.seconds = getattr(inside, "seconds", 0.0) + time.perf_counter() - since
    classes = {type(backend), type(store)}
    originals = {cls: cls.transaction for cls in classes}
    execute = Transaction.execute

    def timed(original):
        @contextlib.contextmanager
        def transaction(self, snapshot=False, durable=True):
            if self is backend:
                counts["transactions"] += 1
                counts["writes"] += not snapshot
            else:
                counts["store"] += 1
            start = time.perf_counter()
            with original(self, snapshot, durable) as tx:  # BEGIN (and its turn)
                spent(start)
                yield tx
                start = time.perf_counter()
            spent(start)  # COMMIT
        return transaction

    def executed(self, sql, params=()):
        counts["statements"] += 1
        start = time.perf_counter()
        try:
            return execute(self, sql, params)
        finally:
            spent(start)

    times, own = [], []

    def ask(first: int, session) -> None:
        for number in range(first, n, threads):
            sql = (f"SELECT COUNT(*) FROM people WHERE age > {number % 90} "
                   f"AND person_id > {-number - 100}") if not repeat else REPEATED
            inside.seconds = 0.0
            start = time.perf_counter()
            list(session.execute(sql))
            took = time.perf_counter() - start
            times.append(took)
            own.append(took - inside.seconds)

    for cls in classes:
        cls.transaction = timed(originals[cls])
    Transaction.execute = executed
    try:
        began = time.perf_counter()
        workers = [threading.Thread(target=ask, args=(first, Session.open(engine, "bench")))
                   for first in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        took = time.perf_counter() - began
    finally:
        for cls in classes:
            cls.transaction = originals[cls]
        Transaction.execute = execute
    apart = (f", {counts['store'] / n:.2f} ledger store transactions" if store is not backend
             else "")
    print(f"{n} {'repeated' if repeat else 'fresh'} COUNT answers on {backend_name}, "
          f"{threads} session(s): {n / took:.0f}/s, median {statistics.median(times) * 1e3:.2f} ms, "
          f"mean {statistics.fmean(times) * 1e3:.2f} ms, the proxy's own median "
          f"{statistics.median(own) * 1e3:.2f} ms; {counts['transactions'] / n:.2f} "
          f"transactions ({counts['writes'] / n:.2f} writing){apart} and "
          f"{counts['statements'] / n:.2f} statements per answer")


if __name__ == "__main__":
    main(*(int(arg) for arg in sys.argv[1:4]), *sys.argv[4:5])
