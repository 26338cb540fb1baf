"""One analyst's long query delays no one else's short ones (issue 17 item 1): the
backend runs independent sessions' statistics side by side (a pool of PostgreSQL
connections; DuckDB cursors over one database). Through ``idp-proxy serve`` with real
clients on both backends; the assertions are about what finishes first, not how fast.
On DuckDB alone, reads do not wait for the writers' turn, and an interrupt stops only
the statement of the thread it was meant for."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from contextlib import contextmanager
from decimal import Decimal
from typing import NamedTuple

import duckdb
import psycopg
import pytest

from proxy.backends.duckdb_backend import DuckDBBackend
from proxy.errors import QueryCanceled
from tests.factories import Served, people_table

SESSIONS, SHORT = 4, 100
RULES = """
[server]
auth = "trust"
start_check_seconds = 0  # the slow view would hold the start-time check until let go

[defaults]
epsilon_per_query = 0.01

[analysts.patient]
budget = 10

[analysts.brisk]
budget = 10

[tables.slow]
[tables.slow.columns]
x = { type = "int", domain = [0, 1000] }
""" + people_table()
# A view made slow without storing rows. On PostgreSQL each row takes a shared advisory
# lock the test holds exclusively until every short query is answered (or given up on):
# long by exactly as much as the short ones need, so a loaded machine cannot end it
# before them, with no time spent meanwhile (it was 800 rows of pg_sleep(0.01), 8 s).
# DuckDB runs no sleep or lock in SQL, and serve's DuckDB reads no file the test could
# hold: a recursive CTE counts to 500,000 one row at a time (about 3 s of one core; the
# 100 short queries took 2.6–3.3 s while it ran 6.3–9.7 s at load 11 on two cores; the
# million it counted before ran 16 s there; generating as many rows in bulk keeps both
# cores busy, which the short queries then wait for, and costs the suite three times
# the CPU).
LOCK = 1717
SLOW_POSTGRES = ("CREATE VIEW slow AS SELECT g % 1001 AS x FROM generate_series(1, 800) g "
                 f"WHERE pg_advisory_xact_lock_shared({LOCK}) IS NOT NULL")
SLOW_DUCKDB = ("CREATE VIEW slow AS WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 "
               "FROM r WHERE i < 500000) SELECT CAST(i % 1001 AS INTEGER) AS x FROM r")
WAIT_FOR_SHORT = 120  # seconds the short queries get before the long one is let go


class Slow(NamedTuple):
    served: Served
    hold: Callable[[], Callable[[], None]]  # holds the view's scan; returns its release


def _hold_postgres(url: str) -> Callable[[], None]:
    holder = psycopg.connect(url, autocommit=True)
    holder.execute("SELECT pg_advisory_lock(%s)", (LOCK,))
    return holder.close  # the session's lock goes with it (closing twice does nothing)


@pytest.fixture(params=["duckdb", pytest.param("postgres", marks=pytest.mark.postgres)])
def served(request, tmp_path) -> Slow:
    if request.param == "duckdb":
        served = Served.prepare(tmp_path, RULES, f"duckdb:///{tmp_path / 'data.duckdb'}")
        with duckdb.connect(str(tmp_path / "data.duckdb")) as con:
            con.execute(SLOW_DUCKDB)
        return Slow(served, lambda: lambda: None)  # it ends on its own
    served = Served.prepare(tmp_path, RULES, request.getfixturevalue("fresh_postgres"))
    with psycopg.connect(served.backend, autocommit=True) as con:
        con.execute(SLOW_POSTGRES)
    return Slow(served, lambda: _hold_postgres(served.backend))


@contextmanager
def _finally(release: Callable[[], None]):
    """``release`` on the way out too (a failed test leaves no scan waiting)."""
    try:
        yield
    finally:
        release()


def _budget(con: psycopg.Connection) -> Decimal:
    return Decimal(con.execute("SHOW idp.budget").fetchone()[0])


@pytest.mark.slow
def test_a_long_query_delays_no_other_sessions_short_ones(served):
    """The long query is under way in the backend (its debit, which precedes the
    statistics, is committed) before the first short one is sent; 100 short ones from
    four other sessions are all answered before it ends, and it ends with an answer. It
    ends on its own (DuckDB) or when the test lets it go (PostgreSQL): once all short
    ones are answered, or after WAIT_FOR_SHORT seconds (short ones waiting for it then
    end after it: the test fails)."""
    release = served.hold()
    with served.served.serve() as proxy, _finally(release):
        long: dict = {}

        def ask_long():
            with psycopg.connect(proxy.dsn("patient"), autocommit=True) as con:
                try:
                    long["answer"] = con.execute(
                        "SELECT COUNT(*) FROM slow WHERE x > 10").fetchone()[0]
                finally:
                    long["ended"] = time.monotonic()

        with psycopg.connect(proxy.dsn("patient"), autocommit=True) as watcher:
            before = _budget(watcher)
            asking = threading.Thread(target=ask_long)
            asking.start()
            while _budget(watcher) == before:
                assert asking.is_alive(), f"the long query ended before its debit: {long}"
                time.sleep(0.02)

        ended: list[float] = []
        failures: list[str] = []

        def ask_short(session: int):
            with psycopg.connect(proxy.dsn("brisk"), autocommit=True) as con:
                for number in range(session, SHORT, SESSIONS):
                    try:
                        con.execute("SELECT COUNT(*) FROM people WHERE income > %s",
                                    (1000 * number,)).fetchone()
                        ended.append(time.monotonic())
                    except psycopg.Error as exc:
                        failures.append(f"{exc.sqlstate} {exc}")

        others = [threading.Thread(target=ask_short, args=(n,)) for n in range(SESSIONS)]
        for thread in others:
            thread.start()
        deadline = time.monotonic() + WAIT_FOR_SHORT
        for thread in others:
            thread.join(max(0.0, deadline - time.monotonic()))
        release()
        asking.join(120)
        for thread in others:
            thread.join(120)
    assert not failures, failures[:3]
    assert len(ended) == SHORT
    assert long.get("answer") is not None, long
    assert max(ended) < long["ended"], "a short query waited for the long one"


def test_duckdb_reads_do_not_wait_for_the_writers_turn(tmp_path):
    """A login's, a budget's or the catalog's read runs while a write transaction holds
    the writers' lock, and sees the data as last committed."""
    backend = DuckDBBackend(str(tmp_path / "data.duckdb"))
    backend.query("CREATE TABLE t (x INTEGER)")
    seen: dict = {}

    def read():
        seen["rows"] = backend.read("SELECT count(*) FROM t")
        seen["columns"] = backend.column_types("t")

    with backend.transaction() as writing:
        writing.execute("INSERT INTO t VALUES (1)")
        reader = threading.Thread(target=read)
        reader.start()
        reader.join(30)
        assert not reader.is_alive(), "a read waited for the writer"
    assert seen == {"rows": [(0,)], "columns": [("x", "integer")]}
    backend.close()


def test_a_duckdb_interrupt_stops_only_its_own_statement(tmp_path):
    """Two statements run at once, each on its thread's cursor; interrupting one thread
    fails its statement with 57014 and the other answers."""
    backend = DuckDBBackend(str(tmp_path / "data.duckdb"))
    scan = ("SELECT count(*) FROM range(10000) a, range(10000) b "
            "WHERE (a.range * 7919 + b.range) % 1001 > 10")
    outcome: dict[str, object] = {}

    def run(name: str):
        try:
            outcome[name] = backend.read(scan)[0][0]
        except QueryCanceled as exc:
            outcome[name] = exc.sqlstate

    threads = {name: threading.Thread(target=run, args=(name,)) for name in ("hit", "spared")}
    for thread in threads.values():
        thread.start()
    time.sleep(0.2)
    backend.interrupt(threads["hit"].ident)
    for thread in threads.values():
        thread.join(60)
    backend.forget_interrupt(threads["hit"].ident)
    assert outcome == {"hit": "57014", "spared": 98_901_100}, outcome
    backend.close()
