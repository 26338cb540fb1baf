"""Round trips to PostgreSQL and the proxy's own time per private answer, in process
(issue 37 lever 2).

N fresh COUNT queries with varying literals (never answer-cache hits), then N repeats of
one answered statement, through ``Engine`` and ``Session`` on a throwaway PostgreSQL
(started from the system's binaries, as in the tests) holding wire.py's tables (1,000
rows) under its rules. Counts each ``psycopg`` statement sent outside a pipeline as one
round trip and each pipeline as one; the time spent inside those calls (waiting for the
server) is subtracted from the answer's time to give the proxy's own time. Prints
medians per answer.

    PYTHONPATH=. .venv/bin/python benchmarks/pg_trips.py [N]
"""

from __future__ import annotations

import statistics
import sys
import threading
import time
from contextlib import contextmanager

import psycopg

from benchmarks.wire import RULES, load_postgres
from proxy.backends.postgres_backend import PostgresBackend
from proxy.engine import Engine
from proxy.rules import parse_rules
from proxy.session import Session
from tests.pgserver import throwaway_postgres

REPEATED = "SELECT COUNT(*) FROM rows WHERE a BETWEEN 1 AND 50"


class _Counter:
    """Round trips and the time spent in them, of this thread."""

    def __init__(self) -> None:
        self.trips, self.waited, self._in_pipeline = 0, 0.0, threading.local()

    def install(self):
        execute, pipeline, counter = psycopg.Connection.execute, psycopg.Connection.pipeline, self

        def counted_execute(con, *args, **kwargs):
            if getattr(counter._in_pipeline, "on", False):
                return execute(con, *args, **kwargs)
            began = time.perf_counter()
            try:
                return execute(con, *args, **kwargs)
            finally:
                counter.trips += 1
                counter.waited += time.perf_counter() - began

        @contextmanager
        def counted_pipeline(con):
            began = time.perf_counter()
            counter._in_pipeline.on = True
            try:
                with pipeline(con) as p:
                    yield p
            finally:
                counter._in_pipeline.on = False
                counter.trips += 1
                counter.waited += time.perf_counter() - began

        psycopg.Connection.execute, psycopg.Connection.pipeline = counted_execute, counted_pipeline
        return lambda: (setattr(psycopg.Connection, "execute", execute),
                        setattr(psycopg.Connection, "pipeline", pipeline))


def _measure(session: Session, statements, counter: _Counter) -> tuple[float, float, float]:
    """Medians per answer: milliseconds in all, the proxy's own milliseconds, trips."""
    total, own, trips = [], [], []
    for sql in statements:
        counter.trips, counter.waited = 0, 0.0
        began = time.perf_counter()
        list(session.execute(sql))
        took = time.perf_counter() - began
        total.append(took * 1e3)
        own.append((took - counter.waited) * 1e3)
        trips.append(counter.trips)
    return statistics.median(total), statistics.median(own), statistics.median(trips)


def main(n: int = 300) -> None:
    with throwaway_postgres() as url:
        load_postgres(url, 1000, 1000)  # wire.py's tables and rules
        backend = PostgresBackend(url)
        engine = Engine(parse_rules(RULES), backend)
        session = Session.open(engine, "bench")
        for warm in range(20):
            list(session.execute(f"SELECT COUNT(*) FROM rows WHERE a > {-warm - 1}"))
        list(session.execute(REPEATED))
        counter = _Counter()
        restore = counter.install()
        try:
            fresh = _measure(session, (f"SELECT COUNT(*) FROM rows WHERE a BETWEEN 1 AND 50 "
                                       f"AND x <= {2000 + i}" for i in range(n)), counter)
            repeat = _measure(session, [REPEATED] * n, counter)
        finally:
            restore()
            engine.ledger.close()
            backend.close()
    for label, (total, own, trips) in (("fresh", fresh), ("repeat", repeat)):
        print(f"{n} {label} COUNT answers on PostgreSQL, 1 session: median {total:.2f} ms "
              f"per answer, the proxy's own {own:.2f} ms, {trips:g} round trips")


if __name__ == "__main__":
    main(*(int(arg) for arg in sys.argv[1:2]))
