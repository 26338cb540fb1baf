"""Replays without a durable write (issue 37, docs/budget.md "The answer cache"): a repeat
served from the answer cache writes nothing when it is answered; its `served from cache`
row is kept in memory and written in a batch (by the writer thread, before the next
debit, when the ledger is read here, at shutdown). A kill -9 loses at most the rows of
the last batch's span, never a debit, and never changes a budget."""

from __future__ import annotations

import contextlib
import json
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import replace
from decimal import Decimal
from pathlib import Path

import psycopg
import pytest

from proxy import ledger as ledger_module
from proxy.backends import open_backend
from proxy.backends.duckdb_backend import STORE_FILE
from proxy.backends.postgres_backend import POLLER_NAME
from proxy.engine import Engine
from proxy.rules import parse_rules
from proxy.session import Session
from tests.factories import ENGINE_RULES, ODD, Served, load, people, people_table
from tests.probes import run

pytestmark = pytest.mark.postgres

QUERY = "SELECT COUNT(*) FROM people WHERE age > 40"
OTHER = "SELECT COUNT(*) FROM people WHERE age > 50"


@pytest.fixture
def engine(backend_url):
    load(backend_url, {"people": people(), "odd": ODD})
    return Engine(parse_rules(ENGINE_RULES), open_backend(backend_url))


def _written(engine) -> list[tuple]:
    """The ledger's committed rows (status, ε, ρ), read past Ledger.entries (which
    writes the kept rows first)."""
    return engine.ledger.backend.read("SELECT status, epsilon_micro, rho FROM idp.ledger "
                                     "ORDER BY id")


def _spent(engine, analyst: str = "zoe") -> tuple:
    return tuple(engine.ledger.backend.read("SELECT spent_micro, spent_rho FROM idp.budgets "
                                     "WHERE analyst = %s", (analyst,))[0])


def test_a_replay_writes_nothing_until_its_batch_and_spends_nothing(engine):
    zoe = Session.open(engine, "zoe")
    first = run(zoe, QUERY)[0]
    spent = _spent(engine)
    writes = []
    store = engine.ledger.backend
    transaction = store.transaction

    def counted(snapshot=False, durable=True):
        writes.append(not snapshot)
        return transaction(snapshot, durable)

    store.transaction = counted
    for _ in range(5):
        again = run(zoe, QUERY)[0]
        assert again.rows == first.rows and again.privacy["epsilon_spent"] == 0
        assert again.privacy["epsilon_remaining"] == first.privacy["epsilon_remaining"]
    assert sum(writes) == 0  # snapshots only: the version and what remains
    store.transaction = transaction
    assert engine.ledger.pending_replays() == 5
    assert [status for status, _, _ in _written(engine)] == ["charged"]
    assert _spent(engine) == spent
    assert engine.ledger.flush() == 5
    rows = _written(engine)
    assert [status for status, _, _ in rows] == ["charged"] + ["served from cache"] * 5
    assert all(micro == 0 and rho == 0 for _, micro, rho in rows[1:])
    assert _spent(engine) == spent  # written rows change no budget either
    entries = engine.ledger.entries("zoe")  # oldest first, each at the moment served
    assert [entry[1] for entry in entries] == sorted(entry[1] for entry in entries)


def test_a_debit_writes_the_replays_served_before_it_first(engine):
    zoe = Session.open(engine, "zoe")
    run(zoe, QUERY)
    run(zoe, QUERY)
    run(zoe, OTHER)
    assert [status for status, _, _ in _written(engine)] == [
        "charged", "served from cache", "charged"]


def test_the_writer_thread_writes_a_batch_without_being_asked(engine, monkeypatch):
    monkeypatch.setattr(ledger_module, "REPLAY_SECONDS", 0.05)
    zoe = Session.open(engine, "zoe")
    run(zoe, QUERY)
    run(zoe, QUERY)
    deadline = time.monotonic() + 30
    while len(_written(engine)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [status for status, _, _ in _written(engine)] == ["charged", "served from cache"]
    assert engine.ledger.pending_replays() == 0


def test_within_the_replay_window_a_repeat_does_not_read_the_version(backend_url):
    """``replay_window_ms``: a repeat within the window of the version's last read is
    answered from memory, with no snapshot of the data at all; past it, read again."""
    load(backend_url, {"people": people(), "odd": ODD})
    rules = ENGINE_RULES.replace("[defaults]", "[defaults]\nreplay_window_ms = 60000")
    engine = Engine(parse_rules(rules), open_backend(backend_url))
    zoe = Session.open(engine, "zoe")
    first = run(zoe, QUERY)[0]
    versions = []
    data_version = engine.backend.data_version
    engine.backend.data_version = lambda tx, table: versions.append(table) or \
        data_version(tx, table)
    assert [run(zoe, QUERY)[0].rows for _ in range(3)] == [first.rows] * 3
    assert versions == []
    engine._versions.clear()  # as when the window has passed
    assert run(zoe, QUERY)[0].rows == first.rows and versions == ["people"]
    assert [status for status, _ in ((e[9], e[6]) for e in engine.ledger.entries())] == \
        ["charged"] + ["served from cache"] * 4


def test_on_duckdb_a_repeat_reads_nothing_until_something_is_written(duckdb_url,
                                                                      monkeypatch):
    """The proxy holds the DuckDB file, so while no write transaction has ended since the
    version and what remains were read, a repeat opens no transaction at all; a grant
    (what remains changes) or a change of the data through the proxy's own connection
    is seen by the next repeat, which reads again (and a new version is charged)."""
    monkeypatch.setattr(ledger_module, "REPLAY_SECONDS", 600)  # no batch written meanwhile
    load(duckdb_url, {"people": people(), "odd": ODD})
    engine = Engine(parse_rules(ENGINE_RULES), open_backend(duckdb_url))
    zoe = Session.open(engine, "zoe")
    first = run(zoe, QUERY)[0]
    # the debit and the entry wrote: the first repeat reads the version and what remains
    # in the view's snapshot, the second what remains in a read of its own (kept)
    assert [run(zoe, QUERY)[0].rows for _ in range(2)] == [first.rows] * 2
    opened, stored = [], []  # the data's transactions, the ledger store's (SQLite's)
    transaction, store = engine.backend.transaction, engine.ledger.backend
    engine.backend.transaction = lambda snapshot=False, durable=True: opened.append(snapshot) \
        or transaction(snapshot, durable)
    in_store = store.transaction
    store.transaction = lambda snapshot=False, durable=True: stored.append(snapshot) or \
        in_store(snapshot, durable)
    for _ in range(5):
        again = run(zoe, QUERY)[0]
        assert again.rows == first.rows and again.privacy["epsilon_spent"] == 0
        assert again.privacy["epsilon_remaining"] == first.privacy["epsilon_remaining"]
    assert opened == stored == []
    engine.ledger.grant("zoe", Decimal(1))
    again = run(zoe, QUERY)[0]
    assert again.rows == first.rows
    assert again.privacy["epsilon_remaining"] == pytest.approx(
        first.privacy["epsilon_remaining"] + 1)
    assert True in stored and False in stored  # the grant wrote, the repeat read
    assert opened == []  # the data did not change: its version is not read again
    engine.backend.query("DELETE FROM people WHERE person_id = 1")
    assert run(zoe, QUERY)[0].privacy["epsilon_spent"] > 0
    assert [e[9] for e in engine.ledger.entries("zoe")] == \
        ["charged"] + ["served from cache"] * 8 + ["charged"]



def _mark_moved(backend, since) -> None:
    """Wait (without a bound on how long it takes) for the poller to see a write."""
    deadline = time.monotonic() + 30
    while backend.quiet_mark() in (since, None):
        assert time.monotonic() < deadline, "the write was never seen"
        time.sleep(0.01)


def test_on_postgres_a_watched_repeat_reads_nothing_until_a_poll_sees_a_write(
        fresh_postgres, monkeypatch):
    """A server polls the data triggers' counters (``watch_writes``): while no poll saw
    one change and no debit of its own ended, a repeat opens no transaction; a write by
    another connection (to the data, or a grant to the ledger by this process) is seen
    by the next repeat, which reads again (a new version of the data is charged). With
    the poller's connection gone (a failed poll), every repeat reads again, as
    unwatched, and the mark it comes back with is a new one."""
    monkeypatch.setattr(ledger_module, "REPLAY_SECONDS", 600)  # no batch written meanwhile
    load(fresh_postgres, {"people": people(), "odd": ODD})
    engine = Engine(parse_rules(ENGINE_RULES), open_backend(fresh_postgres))
    backend = engine.backend
    assert backend.quiet_mark() is None  # not watched: every repeat asks the server
    backend.watch_writes(25)
    _mark_moved(backend, None)
    zoe = Session.open(engine, "zoe")
    first = run(zoe, QUERY)[0]
    assert [run(zoe, QUERY)[0].rows for _ in range(2)] == [first.rows] * 2
    opened = []
    transaction, alone = backend._transaction, backend._alone
    backend._transaction = lambda *a, **k: opened.append(a) or transaction(*a, **k)
    backend._alone = lambda *a, **k: opened.append(a) or alone(*a, **k)
    mark = backend.quiet_mark()
    for _ in range(5):
        again = run(zoe, QUERY)[0]
        assert again.rows == first.rows and again.privacy["epsilon_spent"] == 0
        assert again.privacy["epsilon_remaining"] == first.privacy["epsilon_remaining"]
    if backend.quiet_mark() == mark:  # else WATCH_SECONDS passed or a poll was late:
        assert opened == []          # read again, rightly
    engine.ledger.grant("zoe", Decimal(1))  # this process's durable write
    again = run(zoe, QUERY)[0]
    assert again.rows == first.rows and again.privacy["epsilon_remaining"] == \
        pytest.approx(first.privacy["epsilon_remaining"] + 1)
    mark = backend.quiet_mark()
    with psycopg.connect(fresh_postgres, autocommit=True) as con:
        con.execute("DELETE FROM people WHERE person_id = 1")
    _mark_moved(backend, mark)
    assert run(zoe, QUERY)[0].privacy["epsilon_spent"] > 0
    before = backend._mark
    with psycopg.connect(fresh_postgres, autocommit=True) as con:
        con.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE application_name = %s", (POLLER_NAME,))
    deadline = time.monotonic() + 30
    while backend.quiet_mark() is not None:  # until it is seen gone
        assert time.monotonic() < deadline
        run(zoe, QUERY)
    opened.clear()
    if backend.quiet_mark() is None:
        assert run(zoe, QUERY)[0].privacy["epsilon_spent"] == 0 and opened != []
    _mark_moved(backend, None)  # reconnected
    assert backend.quiet_mark() > before  # a mark of before the failure never comes back
    assert [e[9] for e in engine.ledger.entries("zoe")].count("charged") == 2
    backend.close()


def test_on_postgres_a_late_poll_is_a_moved_mark(fresh_postgres):
    """A poll that does not complete within its period (here: blocked behind a lock on
    ``idp.versions``) says nothing about writes: the mark is None while it is late (every
    repeat reads the data version), and the one it comes back with is new."""
    load(fresh_postgres, {"people": people(), "odd": ODD})
    engine = Engine(parse_rules(ENGINE_RULES), open_backend(fresh_postgres))
    backend = engine.backend
    backend.watch_writes(25)
    _mark_moved(backend, None)
    mark = backend.quiet_mark()
    with psycopg.connect(fresh_postgres) as locker:
        locker.execute("LOCK TABLE idp.versions IN ACCESS EXCLUSIVE MODE")
        deadline = time.monotonic() + 30
        while backend.quiet_mark() is not None:
            assert time.monotonic() < deadline, "a blocked poll was never taken as late"
            time.sleep(0.01)
        locker.rollback()
    _mark_moved(backend, None)
    assert backend.quiet_mark() != mark
    backend.close()



def test_a_repeat_memory_answers_is_the_kept_answer_and_its_row_is_kept(duckdb_url,
                                                                        monkeypatch):
    """``Session.replay_now`` (what a server answers on its event loop): for the text of a
    query answered before, under the same settings and while nothing was written, the
    kept answer, free, its row kept as any replay's; None (the worker path reads) once a
    write moved the mark, for a text never checked, after a SET, and under a time
    quantum (whose padding sleeps)."""
    monkeypatch.setattr(ledger_module, "REPLAY_SECONDS", 600)
    load(duckdb_url, {"people": people(), "odd": ODD})
    engine = Engine(parse_rules(ENGINE_RULES), open_backend(duckdb_url))
    zoe = Session.open(engine, "zoe")
    first = run(zoe, QUERY)[0]
    assert zoe.known(OTHER) is None
    step = zoe.known(QUERY)
    run(zoe, QUERY)  # reads what remains, kept from now on
    pending = engine.ledger.pending_replays()
    again = zoe.replay_now(step)
    assert again.rows == first.rows and again.privacy["epsilon_spent"] == 0
    assert again.privacy["epsilon_remaining"] == first.privacy["epsilon_remaining"]
    assert engine.ledger.pending_replays() == pending + 1
    engine.ledger.grant("zoe", Decimal(1))
    assert zoe.replay_now(step) is None  # what remains must be read again
    assert run(zoe, QUERY)[0].privacy["epsilon_remaining"] == pytest.approx(
        first.privacy["epsilon_remaining"] + 1)
    assert zoe.replay_now(step).rows == first.rows
    run(zoe, "SET idp.intervals = on")
    assert zoe.known(QUERY) is None
    padded = replace(engine.rules.defaults, time_quantum_ms=50)
    monkeypatch.setattr(engine, "rules", replace(engine.rules, defaults=padded))
    assert zoe.replay_now(step) is None
    assert [e[9] for e in engine.ledger.entries("zoe")].count("charged") == 1


# Through the server, killed -----------------------------------------------------------

RULES = f"""
[server]
auth = "trust"

[defaults]
epsilon_per_query = 0.05

[analysts.viewer]
budget = 10

{people_table()}"""
REPLAYS = 60


def _accounts(served) -> tuple[dict, list[dict]]:
    out = served.admin("budget", "show", "--format", "json")
    assert out.returncode == 0, out.stderr
    (account,) = [a for a in json.loads(out.stdout, parse_float=Decimal)
                  if a["analyst"] == "viewer"]
    out = served.admin("ledger", "--user", "viewer", "--format", "json")
    assert out.returncode == 0, out.stderr
    return account, json.loads(out.stdout, parse_float=Decimal)


def _writers_batch_in(backend_url: str, folder: Path) -> None:
    """Wait until the writer thread has written the REPLAYS rows, seen in idp.ledger
    without asking the server to write anything: on PostgreSQL from a connection of our
    own; on DuckDB in the SQLite store beside the file, read-only beside the server (WAL:
    only committed transactions are seen)."""
    deadline = time.monotonic() + 30
    if backend_url.startswith("postgres"):
        with psycopg.connect(backend_url, autocommit=True) as con:
            while con.execute("SELECT count(*) FROM idp.ledger WHERE status = "
                              "'served from cache'").fetchone()[0] < REPLAYS:
                assert time.monotonic() < deadline, "the writer thread wrote no batch"
                time.sleep(0.05)
        return
    store, seen = STORE_FILE.format(path=backend_url.removeprefix("duckdb:///")), None
    while True:
        try:
            with contextlib.closing(sqlite3.connect(f"file:{store}?mode=ro", uri=True)) as con:
                seen = con.execute("SELECT count(*) FROM ledger WHERE status = "
                                   "'served from cache'").fetchone()[0]
                if seen >= REPLAYS:
                    return
        except sqlite3.Error as exc:
            seen = exc
        assert time.monotonic() < deadline, f"the writer thread wrote no batch ({seen})"
        time.sleep(0.1)


@pytest.mark.parametrize("killed", [True, False], ids=["kill-9", "sigterm"])
def test_a_killed_server_loses_at_most_the_last_batch_of_replay_rows(backend_url, tmp_path,
                                                                     killed):
    """One answer, 60 repeats, their batch seen written, 20 more repeats, then
    SIGKILL at once: the first 60 rows were written by the writer thread, at most the
    last 20 are lost; the budget is the one answer's ε and equals its ledger. Stopped
    cleanly (SIGTERM) instead, every row is there. Restarted, the repeat is still
    answered free with the same answer (the cache entry is durable)."""
    served = Served.prepare(tmp_path, RULES, backend_url)
    with served.serve() as proxy:
        with psycopg.connect(proxy.dsn("viewer"), autocommit=True) as con:
            first = con.execute(QUERY).fetchall()
            for _ in range(REPLAYS):
                assert con.execute(QUERY).fetchall() == first
            _writers_batch_in(backend_url, tmp_path)
            for _ in range(20):
                assert con.execute(QUERY).fetchall() == first
        if killed:
            proxy.kill()
    account, entries = _accounts(served)
    statuses = [e["status"] for e in entries]
    assert statuses[0] == "charged" and set(statuses[1:]) == {"served from cache"}
    replays = len(statuses) - 1
    assert (REPLAYS <= replays <= REPLAYS + 20) if killed else replays == REPLAYS + 20
    assert Decimal(account["spent"]) == Decimal("0.05") == sum(
        Decimal(e["epsilon"]) for e in entries)
    with served.serve() as proxy, \
            psycopg.connect(proxy.dsn("viewer"), autocommit=True) as con:
        assert con.execute(QUERY).fetchall() == first
        assert Decimal(con.execute("SHOW idp.budget").fetchone()[0]) == Decimal("9.95")
    account, entries = _accounts(served)
    assert Decimal(account["spent"]) == Decimal("0.05")
    assert [e["status"] for e in entries].count("charged") == 1



def test_a_served_repeat_after_a_write_to_postgres_is_charged_again(fresh_postgres,
                                                                    tmp_path):
    """Through the server (which polls the triggers' counters): repeats are free and
    equal the first answer; once another connection deleted a row, a repeat is a new
    answer, charged (as soon as a poll begun after the write has completed: until then
    a repeat is still the first answer, free)."""
    served = Served.prepare(tmp_path, RULES, fresh_postgres)
    with served.serve() as proxy, \
            psycopg.connect(proxy.dsn("viewer"), autocommit=True) as con:
        first = con.execute(QUERY).fetchall()
        for _ in range(20):
            assert con.execute(QUERY).fetchall() == first
        spent = Decimal(con.execute("SHOW idp.budget").fetchone()[0])
        with psycopg.connect(fresh_postgres, autocommit=True) as writer:
            writer.execute("DELETE FROM people WHERE person_id = 1")
        deadline = time.monotonic() + 30
        while True:
            rows = con.execute(QUERY).fetchall()
            left = Decimal(con.execute("SHOW idp.budget").fetchone()[0])
            if left != spent:
                break
            assert rows == first  # free: the first answer, until the write is seen
            assert time.monotonic() < deadline, "the write was never seen"
        assert left == spent - Decimal("0.05")
    _, entries = _accounts(served)
    assert [e["status"] for e in entries].count("charged") == 2


# Killed between a debit and its cache entry ---------------------------------------------

_KILLED_AFTER_THE_DEBIT = """
import os, signal, sys
from proxy.answer_cache import AnswerCache
from proxy.backends import open_backend
from proxy.engine import Engine
from proxy.rules import parse_rules
from proxy.session import Session
from tests.factories import ENGINE_RULES

def killed(*args, **kwargs):  # paid and computed, the entry not yet written: kill -9
    os.kill(os.getpid(), signal.SIGKILL)

AnswerCache.store = killed
engine = Engine(parse_rules(ENGINE_RULES), open_backend(sys.argv[1]))
list(Session.open(engine, "zoe").execute(sys.argv[2]))
"""


def test_killed_between_the_debit_and_its_cache_entry_the_repeat_is_charged_again(
        backend_url):
    """A process killed (SIGKILL) after a debit committed and before its answer's cache
    entry: that answer was never sent nor kept, so the same query asked again is a new
    answer, charged again (never a free replay of an answer nobody holds, nor a different
    one); from then on it is replayed as the second answer, free."""
    load(backend_url, {"people": people(), "odd": ODD})
    done = subprocess.run([sys.executable, "-c", _KILLED_AFTER_THE_DEBIT, backend_url, QUERY],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == -signal.SIGKILL, done.stderr
    engine = Engine(parse_rules(ENGINE_RULES), open_backend(backend_url))
    assert [status for status, _, _ in _written(engine)] == ["charged"]
    assert engine.ledger.backend.read("SELECT count(*) FROM idp.answers") == [(0,)]
    zoe = Session.open(engine, "zoe")
    second = run(zoe, QUERY)[0]
    assert second.privacy["epsilon_spent"] > 0
    again = run(zoe, QUERY)[0]
    assert again.rows == second.rows and again.privacy["epsilon_spent"] == 0
    assert [e[9] for e in engine.ledger.entries("zoe")] == [
        "charged", "charged", "served from cache"]
    assert _spent(engine)[0] == 2 * engine.ledger.entries("zoe")[0][6] * 10**6
