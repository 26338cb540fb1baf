"""The answer cache (SPEC §7) on both backends: a repeat is free and identical, anything
that could change the answer misses, and entries outlive the process but not the data."""

from __future__ import annotations

from decimal import Decimal

import pytest

from proxy.analyze import analyze, parse_statements
from proxy.backends import open_backend
from proxy.engine import Engine
from proxy.rules import parse_rules
from proxy.session import Session
from proxy.settings import Settings
from tests.databases import execute
from tests.factories import ENGINE_RULES, ODD, load, people
from tests.probes import run

pytestmark = pytest.mark.postgres

QUERY = "SELECT region, MEDIAN(income) AS m, COUNT(*) AS n FROM people WHERE age > 40 GROUP BY region"
SAME_QUERY = [("select region, median(INCOME) as m, count(*) AS n\n  from people  where AGE>40 "
              "group by region -- refreshed by the dashboard"),
              ("/* tile 3 */ SELECT region, MEDIAN(income) AS m, COUNT(*) AS n FROM people "
              "WHERE age > 40 GROUP BY region;")]


@pytest.fixture
def url(backend_url):
    load(backend_url, {"people": people(), "odd": ODD})
    return backend_url


def _engine(url):
    return Engine(parse_rules(ENGINE_RULES), open_backend(url))


def _plan(engine, sql):
    return analyze(parse_statements(sql)[0], engine.rules, Settings())


def _statuses(engine):
    return [(entry[9], entry[6]) for entry in engine.ledger.entries()]


def test_a_repeated_query_returns_the_first_answer_without_a_debit(url):
    engine = _engine(url)
    zoe = Session.open(engine, "zoe")
    first = run(zoe, QUERY)[0]
    assert first.privacy["epsilon_spent"] == pytest.approx(0.6)
    for text in SAME_QUERY * 3:
        again = run(zoe, text)[0]
        assert again.rows == first.rows and again.columns == first.columns
        assert again.privacy["ci95"] == first.privacy["ci95"]
        assert again.privacy["epsilon_spent"] == 0
        assert "answer cache" in again.notice
    assert _statuses(engine) == [("charged", Decimal("0.6"))] + \
        [("served from cache", Decimal(0))] * 6
    assert engine.ledger.remaining("zoe") == Decimal("99.4")


@pytest.mark.parametrize("change", [
    ("SELECT /*+ epsilon=0.2 */ region, MEDIAN(income) AS m, COUNT(*) AS n FROM people "
    "WHERE age > 40 GROUP BY region"),
    ("SELECT region, MEDIAN(income) AS m, COUNT(*) AS n FROM people WHERE age > 41 "
    "GROUP BY region"),
    "SET idp.model = 'dp'",
])
def test_anything_that_changes_the_answer_is_charged_again(url, change):
    engine = _engine(url)
    zoe = Session.open(engine, "zoe")
    run(zoe, QUERY)
    run(zoe, change)
    if change.startswith("SET"):
        run(zoe, QUERY)
    assert [status for status, _ in _statuses(engine)] == ["charged", "charged"]


def test_each_analyst_has_their_own_answers(url):
    engine = _engine(url)
    run(Session.open(engine, "zoe"), QUERY)
    run(Session.open(engine, "alice"), "SELECT COUNT(*) FROM people WHERE age > 40")
    run(Session.open(engine, "zoe"), "SELECT COUNT(*) FROM people WHERE age > 40")
    assert [status for status, _ in _statuses(engine)] == ["charged"] * 3


def test_the_cache_survives_a_restart(url):
    engine = _engine(url)
    first = run(Session.open(engine, "zoe"), QUERY)[0]
    engine.backend.close()
    engine = _engine(url)
    assert run(Session.open(engine, "zoe"), QUERY)[0].rows == first.rows
    assert [status for status, _ in _statuses(engine)] == ["charged", "served from cache"]


@pytest.mark.parametrize("change", [
    "UPDATE people SET income = income + 1 WHERE person_id = 1",  # same row count
    ("ALTER TABLE people RENAME COLUMN age TO tmp; ALTER TABLE people RENAME COLUMN "
     "person_id TO age; ALTER TABLE people RENAME COLUMN tmp TO person_id"),
])
def test_a_change_of_the_data_is_charged_again_and_drops_the_old_entries(url, change):
    """DuckDB: the file is written by another process while the proxy is stopped (the
    proxy holds its lock while it runs); PostgreSQL: while the proxy runs."""
    engine = _engine(url)
    zoe = Session.open(engine, "zoe")
    run(zoe, QUERY)
    if url.startswith("duckdb"):
        engine.backend.close()
        execute(url, change)
        engine = _engine(url)
        zoe = Session.open(engine, "zoe")
    else:
        execute(url, change)
    run(zoe, QUERY)
    assert [status for status, _ in _statuses(engine)] == ["charged", "charged"]
    assert engine.ledger.backend.query("SELECT count(*) FROM idp.answers")[0][0] == 1


def test_a_view_is_answered_but_not_cached(url):
    """A view has no cheap data version on either backend: every repeat is charged, and
    its per-unit bound c comes from reading its unit column."""
    execute(url, "CREATE VIEW adults AS SELECT person_id, age FROM people WHERE age >= 18 "
                "UNION ALL SELECT person_id, age FROM people WHERE person_id <= 3")
    rules = parse_rules(ENGINE_RULES + '''
[tables.adults]
privacy_unit = "person_id"
[tables.adults.columns]
person_id = { type = "int" }
age = { type = "int", domain = [0, 120] }
''')
    engine = Engine(rules, open_backend(url))
    zoe = Session.open(engine, "zoe")
    for _ in range(2):
        run(zoe, "SELECT COUNT(*) FROM adults WHERE age > 40")
    assert [status for status, _ in _statuses(engine)] == ["charged", "charged"]
    assert engine.statistics(_plan(engine, "SELECT COUNT(*) FROM adults"))[0] == 2


def test_the_cache_can_be_switched_off(url):
    rules = parse_rules(ENGINE_RULES.replace('model = "idp"', 'model = "idp"\nanswer_cache = false'))
    engine = Engine(rules, open_backend(url))
    zoe = Session.open(engine, "zoe")
    first, second = run(zoe, QUERY)[0], run(zoe, QUERY)[0]
    assert first.rows != second.rows  # fresh noise: the medians differ
    assert [status for status, _ in _statuses(engine)] == ["charged", "charged"]
    assert engine.ledger.backend.query("SELECT count(*) FROM idp.answers")[0][0] == 0


def test_a_query_reads_the_data_version_once_and_looks_up_without_writing(url):
    """The lookup and the statistics share one snapshot (the version read once in it);
    a fresh answer writes twice (debit with its row, cache entry: on PostgreSQL on the
    view's own connection, ``Transaction.end_with``), a repeat never: its
    ledger row is kept in memory and written with others (Ledger.flush). (The per-unit
    bound c, written to the store once per data version and never again, is read before
    the writes are counted: tests/test_engine.py counts its own.)"""
    engine = _engine(url)
    engine.statistics(analyze(parse_statements(QUERY)[0], engine.rules, Settings()))
    zoe = Session.open(engine, "zoe")
    versions, writes, alone = [], [], []
    backend, store = engine.backend, engine.ledger.backend  # DuckDB: its SQLite store
    data_version, transaction, query = backend.data_version, store.transaction, store.query

    def version(tx, table):
        versions.append(table)
        end_with = tx.end_with

        def ended_with(statements):  # the cache entry's write ending the view (PostgreSQL)
            ended = end_with(statements)
            writes.append(ended)
            return ended

        tx.end_with = ended_with
        return data_version(tx, table)

    def counted(snapshot=False, durable=True):
        if not alone:  # else counted as the statement's own (DuckDB's query is one)
            writes.append(not snapshot)
        return transaction(snapshot, durable)

    def one_statement(sql, params=(), durable=True):  # a write alone (PostgreSQL: no BEGIN)
        writes.append(True)
        alone.append(sql)
        try:
            return query(sql, params, durable)
        finally:
            alone.pop()

    backend.data_version = version
    store.transaction, store.query = counted, one_statement
    first = run(zoe, QUERY)[0]
    assert (len(versions), sum(writes)) == (1, 2)
    assert run(zoe, QUERY)[0].rows == first.rows
    # DuckDB: nothing written to the data since (the ledger is in its store), so the
    # version read first still stands; its row kept, written in a batch
    read_again = 1 if engine.backend.quiet_mark() is not None else 2
    assert (len(versions), sum(writes)) == (read_again, 2)
    assert _statuses(engine) == [("charged", Decimal("0.6")), ("served from cache", 0)]
    assert sum(writes) == 3  # the batch, written when the ledger was read


def test_a_kept_duckdb_version_is_that_of_the_snapshot_it_is_used_in(duckdb_url):
    """DuckDB keeps a table's version while no write transaction of the proxy's
    connection ended or was under way (its probe skipped: the snapshot's first read is
    its one statement), but a snapshot that sees a write, committed after its BEGIN and
    before its first read, gets the new version, and one taken while a write was under
    way is not trusted to be the old data's."""
    load(duckdb_url, {"people": people(), "odd": ODD})
    backend = open_backend(duckdb_url)

    def version(tx=None):
        if tx is not None:
            return backend.data_version(tx, "people"), tx.executed
        with backend.transaction(snapshot=True) as tx:
            return version(tx)

    old, _ = version()
    assert version() == (old, 1)  # kept: the snapshot's first read, no probe
    with backend.transaction(snapshot=True) as tx:  # BEGIN: no snapshot taken yet
        backend.query("DELETE FROM people WHERE person_id = 1")
        seen, _ = version(tx)
        assert tx.execute("SELECT count(*) FROM people WHERE person_id = 1") == [(0,)]
    assert seen != old and version() == (seen, 1)
    with backend.transaction() as write:
        write.execute("DELETE FROM people WHERE person_id = 2")
        before, statements = version()  # the write is not committed: not seen
        assert before == seen and statements > 1  # under way: read, not kept
    after, _ = version()
    assert after not in (old, seen)
    backend._versions.clear()
    assert version()[0] == after  # as read afresh
    backend.close()


def test_a_snapshot_the_debit_left_dead_is_replaced(duckdb_url):
    """DuckDB opens the database again after a commit whose checkpoint failed (a full
    disk, tests/ledger/test_disk_full.py): the snapshot opened before the debit is then dead, so
    the statistics are read in a new one and the paid answer is sent and cached."""
    url = duckdb_url  # DuckDB reopens its database; a PostgreSQL connection stays
    load(url, {"people": people(), "odd": ODD})
    engine = _engine(url)
    backend, debit = engine.backend, engine.ledger.debit

    def invalidating(charge):
        left = debit(charge)
        backend._invalid = backend._con  # as DuckDBBackend._commit does then
        return left

    engine.ledger.debit = invalidating
    zoe = Session.open(engine, "zoe")
    first = run(zoe, QUERY)[0]
    engine.ledger.debit = debit
    assert run(zoe, QUERY)[0].rows == first.rows
    assert _statuses(engine) == [("charged", Decimal("0.6")), ("served from cache", 0)]


def test_the_answer_stored_first_is_the_one_both_racers_get(url):
    """Two sessions that asked the same new query at once both paid; the second to
    store meets the first's entry (the primary key, a rolled-back INSERT) and gets that
    answer back, so there is one answer per key. Its transaction left nothing behind:
    the cache still holds one entry, and a third store of the key is refused the same."""
    engine = _engine(url)
    cache = engine.cache
    first = cache.store("zoe", "k", "people", "v1", {"rows": [[1.0]]})
    second = cache.store("zoe", "k", "people", "v1", {"rows": [[2.0]]})
    assert first == second == {"rows": [[1.0]]}
    assert cache.store("zoe", "k", "people", "v1", {"rows": [[3.0]]}) == first
    with engine.ledger.backend.transaction(snapshot=True) as tx:
        assert tx.execute("SELECT count(*) FROM idp.answers") == [(1,)]
        assert cache.lookup(tx, "zoe", "k") == first
    assert cache.store("ann", "k", "people", "v1", {"rows": [[4.0]]}) == {"rows": [[4.0]]}
