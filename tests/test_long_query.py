"""One analyst's long query delays no one else's short ones (issue 17 item 1): the
backend runs independent sessions' statistics side by side (a pool of PostgreSQL
connections; DuckDB cursors over one database). Through ``idp-proxy serve`` with real
clients on both backends; the assertions are about what finishes first, not how fast."""

from __future__ import annotations

import threading
import time
from decimal import Decimal

import duckdb
import psycopg
import pytest

from tests.wireserver import PEOPLE_RULES, load_people, running_proxy

SESSIONS, SHORT = 4, 100
RULES = """
[server]
auth = "trust"

[defaults]
epsilon_per_query = 0.01

[analysts.patient]
budget = 10

[analysts.brisk]
budget = 10

[tables.slow]
[tables.slow.columns]
x = { type = "int", domain = [0, 1000] }
""" + PEOPLE_RULES.format()
# A view made slow without storing rows: on PostgreSQL each row sleeps 10 ms (the private
# COUNT scans it once: about 8 s); on DuckDB 400 M rows are generated and counted
# (several seconds of both cores).
SLOW_POSTGRES = ("CREATE VIEW slow AS SELECT g % 1001 AS x FROM generate_series(1, 800) g "
                 "WHERE pg_sleep(0.01) IS NOT NULL")
SLOW_DUCKDB = ("CREATE VIEW slow AS SELECT CAST((a.range * 7919 + b.range) % 1001 AS INTEGER) "
               "AS x FROM range(40000) a, range(10000) b")


@pytest.fixture(params=["duckdb", pytest.param("postgres", marks=pytest.mark.postgres)])
def served(request, tmp_path):
    if request.param == "duckdb":
        url = f"duckdb:///{tmp_path / 'data.duckdb'}"
        load_people(url, 500)
        with duckdb.connect(str(tmp_path / "data.duckdb")) as con:
            con.execute(SLOW_DUCKDB)
    else:
        url = request.getfixturevalue("fresh_postgres")
        load_people(url, 500)
        with psycopg.connect(url, autocommit=True) as con:
            con.execute(SLOW_POSTGRES)
    rules = tmp_path / "rules.toml"
    rules.write_text(RULES)
    return rules, url, tmp_path / "home"


def _budget(con: psycopg.Connection) -> Decimal:
    return Decimal(con.execute("SHOW idp.budget").fetchone()[0])


@pytest.mark.slow
def test_a_long_query_delays_no_other_sessions_short_ones(served):
    """The long query is under way in the backend (its debit, which precedes the
    statistics, is committed) before the first short one is sent; 100 short ones from
    four other sessions are all answered before it ends, and it ends with an answer."""
    with running_proxy(*served) as proxy:
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
        for thread in others:
            thread.join(120)
        asking.join(120)
    assert not failures, failures[:3]
    assert len(ended) == SHORT
    assert long.get("answer") is not None, long
    assert max(ended) < long["ended"], "a short query waited for the long one"
