"""PostgreSQL's write path in few round trips (issue 37 lever 2, docs/budget.md "Round
trips on PostgreSQL"): a debit and its ledger row are one atomic unit (a failure of the
row leaves no debit); the engine's read-only view does not wait for its COMMIT; a cache entry's
transaction commits without waiting for the WAL (``synchronous_commit = off``), which
never reaches a debit; and a crash of the server after an answer leaves its repeat either
free with that answer or charged again, never free with another."""

from __future__ import annotations

import os
import threading
import time
from decimal import Decimal
from pathlib import Path

import psycopg
import pytest
from psycopg import pq

from proxy.backends import open_backend
from proxy.backends.postgres_backend import PostgresBackend
from proxy.engine import Engine
from proxy.errors import BackendFailed, KeyTaken
from proxy.ledger import REPLAY_SECONDS, Charge, Ledger
from proxy.loss import Loss
from proxy.rules import parse_rules
from proxy.session import Session
from tests.factories import ENGINE_RULES, ODD, load, people
from tests.pgserver import postgres_cluster
from tests.probes import run

pytestmark = pytest.mark.postgres

QUERY = "SELECT COUNT(*) FROM people WHERE age > 40"
RULES = """
[defaults]
epsilon_per_query = 0.05
budget_per_analyst = 1.0
{extra}

[analysts.a]
budget = 1.0
"""


def _spent(backend) -> list[tuple]:
    return backend.read("SELECT analyst, spent_micro FROM idp.budgets ORDER BY analyst")


@pytest.mark.parametrize("extra", ["", "global_budget = 1.5"], ids=["alone", "global"])
def test_a_debit_whose_ledger_row_fails_takes_nothing(fresh_postgres, extra):
    """One account: the conditional UPDATE and its ``charged`` row are one statement;
    under a global budget, one transaction (its BEGIN sent with the first statement).
    Either way a ledger row that cannot be written leaves every budget as it was."""
    backend = open_backend(fresh_postgres)
    ledger = Ledger(backend, parse_rules(RULES.format(extra=extra)))
    ledger.ensure_analyst("a")
    before = _spent(backend)
    backend.query("ALTER TABLE idp.ledger ADD CONSTRAINT no_charges "
                  "CHECK (status <> 'charged')")
    charge = Charge("a", "SELECT 1", "idp", "count", Loss.of(Decimal("0.05")), "one record")
    with pytest.raises(BackendFailed):
        ledger.debit(charge)
    assert _spent(backend) == before
    assert backend.read("SELECT count(*) FROM idp.ledger") == [(0,)]
    backend.query("ALTER TABLE idp.ledger DROP CONSTRAINT no_charges")
    assert ledger.debit(charge) == Decimal("0.95")
    assert [spent for _, spent in _spent(backend)] == [50_000] * len(before)
    assert [e[9] for e in ledger.entries()] == ["charged"]
    backend.close()


def test_only_a_write_that_is_not_durable_skips_waiting_for_the_disk(fresh_postgres):
    """On the one connection of the pool: a transaction or a statement alone marked not
    durable runs with ``synchronous_commit`` off, and the setting ends with it (SET
    LOCAL): the next transaction on that connection (a debit) waits for the WAL again,
    also after a non-durable write that failed."""
    backend = PostgresBackend(fresh_postgres, pool_size=1)
    show = "SELECT current_setting('synchronous_commit')"
    assert backend.query(show) == [("on",)]
    assert backend.query(show, durable=False) == [("off",)]
    assert backend.query(show) == [("on",)]
    with backend.transaction(durable=False) as tx:
        assert tx.execute(show) == [("off",)]
    with backend.transaction() as tx:
        assert tx.execute(show) == [("on",)]
    backend.query("CREATE TABLE once (k int PRIMARY KEY)")
    backend.query("INSERT INTO once VALUES (1)", durable=False)
    with pytest.raises(KeyTaken):
        backend.query("INSERT INTO once VALUES (1)", durable=False)
    assert backend.query(show) == [("on",)]
    with backend.transaction(snapshot=True) as tx:
        assert tx.execute("SELECT current_setting('transaction_isolation')") == [
            ("repeatable read",)]
    assert backend.read("SELECT count(*) FROM once") == [(1,)]
    backend.close()


def test_a_read_only_snapshot_ends_without_waiting_for_its_commit(fresh_postgres):
    """The engine's view (``Backend.reading``) sends its COMMIT without reading the reply:
    the server ends the transaction at once (its locks go: another session's DROP needs
    no wait), the connection is lent again after its reply is read, and a write in the
    view fails (READ ONLY) instead of being committed unseen."""
    backend = PostgresBackend(fresh_postgres, pool_size=1)
    backend.query("CREATE TABLE kept (k int)")
    with backend.reading() as tx:
        assert tx.execute("SELECT count(*) FROM kept") == [(0,)]
    with psycopg.connect(fresh_postgres, autocommit=True) as other:
        other.execute("SET lock_timeout = '10s'")
        other.execute("DROP TABLE kept")
    assert backend.read("SELECT to_regclass('kept') IS NULL") == [(True,)]
    with pytest.raises(BackendFailed), backend.reading() as tx:
        tx.execute("CREATE TABLE written (k int)")
    assert backend.read("SELECT to_regclass('written') IS NULL, "
                        "current_setting('transaction_read_only')") == [(True, "off")]
    backend.close()


def test_a_snapshot_ended_by_its_cache_entry_commits_it_on_its_own_connection(
        fresh_postgres):
    """The answer's cache entry ends the view it was computed in (``end_with``): on the
    view's connection, the snapshot over (another session's DROP needs no wait), the
    entry committed in a transaction of its own that does not wait for the disk, the
    connection idle and lent again with ``synchronous_commit`` back on; a racing
    session's entry, stored first, is kept (KeyTaken, nothing written) and the
    connection is still lent again, not closed."""
    from proxy.answer_cache import AnswerCache

    backend = PostgresBackend(fresh_postgres, pool_size=1)
    backend.query("CREATE SCHEMA idp")
    cache = AnswerCache(backend)
    backend.query("CREATE TABLE kept (k int)")
    insert = "INSERT INTO idp.answers VALUES ('zoe', 'k', 'kept', 'v', %s)"
    with backend.reading() as tx:
        first = tx._con
        assert tx.execute("SELECT count(*) FROM kept") == [(0,)]
        assert tx.end_with([("SELECT set_config('idp.seen', "
                             "current_setting('synchronous_commit'), false)", ()),
                            (insert, ('"first"',))])
        with psycopg.connect(fresh_postgres, autocommit=True) as other:
            other.execute("SET lock_timeout = '10s'")
            other.execute("DROP TABLE kept")
    with backend.reading() as tx:
        assert tx._con is first
        assert tx.execute("SELECT current_setting('idp.seen'), "
                          "current_setting('synchronous_commit')") == [("off", "on")]
        with pytest.raises(KeyTaken):
            tx.end_with([(insert, ('"second"',))])
    assert backend.read("SELECT answer FROM idp.answers") == [('"first"',)]
    with backend.reading() as tx:
        assert tx._con is first
        assert cache.store("zoe", "k", "kept", "v", "third", after=tx) == "first"
    with backend.reading() as tx:
        assert cache.store("zoe", "k2", "kept", "v", "fourth", after=tx) == "fourth"
    assert backend.read("SELECT key, answer FROM idp.answers ORDER BY key") == [
        ("k", '"first"'), ("k2", '"fourth"')]
    backend.close()


def test_the_pools_connections_prepare_no_statement(fresh_postgres):
    """psycopg prepares a statement on the server on its fifth run and names it in a
    cache of its own; a pipeline aborted by an error (a racing session's cache entry,
    23505; a cancel) could leave that cache naming a statement the server never kept,
    and the connection's next run of it failed ("prepared statement _pg3_6 does not
    exist": an internal error, seen twice in the cancel storm of test_backend_pool). The
    pool's connections prepare nothing, so no such cache exists: ten runs of one
    statement, in pipelines and alone, leave none prepared."""
    backend = PostgresBackend(fresh_postgres, pool_size=1)  # one connection: reused
    backend.query("CREATE TABLE entries (k int PRIMARY KEY)")
    for k in range(10):
        backend.query("INSERT INTO entries (k) VALUES (%s)", (k,), durable=False)
        with backend.reading() as tx:
            tx.ahead("SELECT count(*) FROM entries WHERE k >= %s", (k,))
            tx.execute("SELECT 1")
            assert tx.execute("SELECT count(*) FROM entries WHERE k >= %s", (k,)) == [(1,)]
    assert backend.read("SELECT count(*) FROM pg_prepared_statements") == [(0,)]
    backend.close()


def test_a_crash_of_the_server_after_an_answer_never_gives_a_different_answer_free():
    """PostgreSQL stopped at once (as by a crash) right after an answer, its cache entry
    committed without waiting for the WAL: after the restart the repeat through a new
    engine is either the same answer, free (the entry survived), or a new one, charged
    again (it was lost); never a different answer free. Every budget equals its ledger."""
    with postgres_cluster({"wal_writer_delay": "10000ms"}) as cluster:
        url = cluster.url
        load(url, {"people": people(), "odd": ODD})
        engine = Engine(parse_rules(ENGINE_RULES), open_backend(url))
        first = run(Session.open(engine, "zoe"), QUERY)[0]
        assert first.privacy["epsilon_spent"] > 0
        cluster.stop("immediate")
        cluster.start()
        # its pool's connections died with the server (one maybe with a COMMIT's reply
        # unread): each is closed when next taken, and a new one is opened
        assert engine.backend.read("SELECT 1") == [(1,)]
        engine.backend.close()
        again = Engine(parse_rules(ENGINE_RULES), open_backend(url))
        second = run(Session.open(again, "zoe"), QUERY)[0]
        statuses = [e[9] for e in again.ledger.entries("zoe")]
        if second.privacy["epsilon_spent"] == 0:
            assert second.rows == first.rows
            assert statuses == ["charged", "served from cache"]
        else:
            assert statuses == ["charged", "charged"]
        spent = again.ledger.backend.read(
            "SELECT spent_micro FROM idp.budgets WHERE analyst = 'zoe'")[0][0]
        assert again.ledger.backend.read("SELECT sum(epsilon_micro) FROM idp.ledger "
                                         "WHERE analyst = 'zoe'") == [(spent,)]
        again.backend.close()



def test_a_read_sent_ahead_in_the_view_runs_with_its_first_statement(fresh_postgres):
    """``Transaction.ahead`` in a read-only view: the read goes in the first statement's
    pipeline (it ran before a statement executed after that one: its clock is earlier),
    a later ``execute`` of the same text and parameters returns its rows and columns
    without running it, and only once (the next runs it again). In a transaction that
    may write, nothing is sent early: its read runs when executed."""
    backend = PostgresBackend(fresh_postgres, pool_size=1)
    early = "SELECT %s::text AS who, clock_timestamp() AS at"
    with backend.reading() as tx:
        tx.ahead(early, ("ahead",))
        tx.execute("SELECT 1")
        between = tx.execute("SELECT clock_timestamp()")[0][0]
        who, sent = tx.execute(early, ("ahead",))[0]
        assert (who, tx.columns()) == ("ahead", [("who", "text"), ("at", "timestamptz")])
        assert sent < between
        assert tx.execute(early, ("ahead",))[0][1] > between  # run again
    with backend.transaction() as tx:
        tx.ahead(early, ("ahead",))
        tx.execute("SELECT 1")
        between = tx.execute("SELECT clock_timestamp()")[0][0]
        assert tx.execute(early, ("ahead",))[0][1] > between
    backend.close()


def test_a_repeat_is_one_round_trip_and_a_fresh_answer_four(fresh_postgres, tmp_path):
    """Counted in libpq's own trace of every connection of the pool (a round trip is a
    statement sent alone, a Query message, or a pipeline, ended by a Sync; not the
    view's COMMIT, whose reply is read later): once the table's version was read, a
    fresh answer sends the cache look-up with the version (4 round trips: the view, the
    debit, the statistics, the entry) and a repeat sends what the analyst has left with
    it (1: the view). Both answers are as without the guess: the repeat is the first
    answer, free, with what remains after the one debit; a guess the version proves
    wrong (the table written) is read again and the repeat is charged."""
    load(fresh_postgres, {"people": people(), "odd": ODD})
    backend = PostgresBackend(fresh_postgres, pool_size=1)
    traces: list[Path] = []
    connect = backend._pool._connect

    def traced() -> psycopg.Connection:  # libpq writes every message it sends
        con = connect()
        traces.append(tmp_path / f"trace{len(traces)}")
        con.pgconn.trace(os.open(traces[-1], os.O_WRONLY | os.O_CREAT | os.O_APPEND))
        con.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
        return con

    def trips(ask: str) -> tuple[int, dict]:
        before = sum(_syncs(path) for path in traces)
        answer = run(zoe, ask)[0]
        return sum(_syncs(path) for path in traces) - before, answer.privacy

    backend._pool._connect = traced
    engine = Engine(parse_rules(ENGINE_RULES), backend)
    zoe = Session.open(engine, "zoe")
    first = run(zoe, QUERY)[0]
    assert trips("SELECT COUNT(*) FROM people WHERE age > 41")[0] == 4
    count, privacy = trips(QUERY)
    assert count == 1 and privacy["epsilon_spent"] == 0
    assert run(zoe, QUERY)[0].rows == first.rows
    assert Decimal(str(privacy["epsilon_remaining"])) == engine.ledger.remaining("zoe")
    backend.query("UPDATE people SET age = age")
    assert run(zoe, QUERY)[0].privacy["epsilon_spent"] > 0
    backend.close()


def _syncs(path: Path) -> int:
    """Round trips in a trace: Syncs and Queries sent, less the view's COMMIT (sent as a
    Query, its reply not waited for: ``ConnectionPool.end_later``)."""
    return sum(1 for line in path.read_text().splitlines()
               if line.startswith("F\t") and line.split("\t")[2] in ("Sync", "Query")
               and not line.endswith('"COMMIT"'))


def test_a_debit_in_its_view_never_waits_on_the_replays_writer_waiting_for_it(
        fresh_postgres):
    """A pool of one connection, held by a query's view (as a debit is made inside it)
    while the writer thread of the replays' rows wakes up and asks for a connection: the
    writer waits for the connection without holding the lock of batches, so the debit
    writes the pending row itself (on a further connection: a thread that holds one may
    take another) and is made. Before, the writer took the lock first, the debit waited
    for it, and neither moved (a served proxy hung under 50 clients)."""
    load(fresh_postgres, {"people": people(), "odd": ODD})
    engine = Engine(parse_rules(ENGINE_RULES), PostgresBackend(fresh_postgres, pool_size=1))
    zoe = Session.open(engine, "zoe")
    run(zoe, QUERY)
    run(zoe, QUERY)  # its row kept for the writer thread, which wakes REPLAY_SECONDS later
    assert engine.ledger.pending_replays() == 1
    charge = Charge("zoe", "SELECT 2", "idp", "count", Loss.of(Decimal("0.05")), "one record")
    made = []

    def debit_in_a_view() -> None:
        with engine.backend.reading() as tx:  # the pool's one connection
            tx.execute("SELECT 1")
            time.sleep(3 * REPLAY_SECONDS)  # the writer wakes and waits for a connection
            made.append(engine.ledger.debit(charge))

    debiting = threading.Thread(target=debit_in_a_view, daemon=True)
    debiting.start()
    debiting.join(120)
    assert made and engine.ledger.pending_replays() == 0
    engine.ledger.flush()
    assert [e[9] for e in engine.ledger.entries("zoe")] == [
        "charged", "served from cache", "charged"]
    engine.backend.close()
