"""A full disk (issue 14): each query that must write gets one ErrorResponse 53100 and
one log line, the session stays, the ledger stays balanced, and answers resume once space
is freed. DuckDB on a real (small tmpfs) mount through a real server and client: its WAL
cannot grow, or its checkpoint fails and invalidates the database, which the backend
then opens again. PostgreSQL's own 53100 maps the same way."""

from __future__ import annotations

import errno
import json
import logging
import os
import subprocess
import time
from collections.abc import Callable
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path

import duckdb
import psycopg
import pytest

from proxy.backends import duckdb_backend
from proxy.backends.postgres_backend import PostgresBackend
from proxy.backends.sqlite_store import SQLiteStore
from proxy.errors import DiskFull
from tests.factories import Served, served_rules
from tests.wireserver import serving_in_process

QUERIES = 6


@contextmanager
def small_disk(folder: Path, size: str = "16m"):
    """A tmpfs of ``size`` mounted on ``folder`` (needs root), unmounted afterwards."""
    folder.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small filesystem needs root")
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                   check=True)
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


def fill(folder: Path, leave: int = 0) -> Path:
    """Write a file until the filesystem has no byte left, then give ``leave`` back."""
    filler = folder / "filler"
    descriptor = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(descriptor, bytes(1 << 16))
    except OSError as exc:
        assert exc.errno == errno.ENOSPC
    finally:
        os.close(descriptor)
    os.truncate(filler, filler.stat().st_size - leave)
    return filler


def _ask(con, number: int) -> str:
    try:
        con.execute(f"SELECT COUNT(*) FROM people WHERE age > {number}").fetchone()
        return "answer"
    except psycopg.Error as exc:
        return f"{exc.sqlstate} {exc}"


def _served(tmp_path: Path, disk: Path) -> Served:
    """A DuckDB file that holds its ledger itself (made before the SQLite store beside
    it, docs/budget.md "Where the ledger lives"): DuckDB's WAL and checkpoints meet
    the full disk."""
    served = Served.prepare(tmp_path, served_rules(), f"duckdb:///{disk / 'data.duckdb'}")
    with duckdb.connect(str(disk / "data.duckdb")) as con:
        con.execute("CREATE SCHEMA idp")
        con.execute("CREATE TABLE idp.budgets (analyst TEXT PRIMARY KEY, budget_micro "
                    "BIGINT NOT NULL, spent_micro BIGINT NOT NULL DEFAULT 0)")
    return served


def _settled(logged: Callable[[], list[str]], at_least: int) -> int:
    """How many lines are logged once there are ``at_least`` and none came for 0.3 s (a
    server's stderr is read by a thread: it lags)."""
    deadline = time.monotonic() + 10
    count, quiet_since = len(logged()), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.05)
        if len(logged()) != count:
            count, quiet_since = len(logged()), time.monotonic()
        elif count >= at_least and time.monotonic() - quiet_since >= 0.3:
            break
    return count


def _full_then_freed(proxy, disk: Path, logged: Callable[[], list[str]]) -> int:
    """Queries on the full disk each fail with 53100 (or, once paid, are answered
    uncached) and log one line; a repeat is answered (it writes nothing on its way); the
    session stays; once the filler is gone the same queries are answered. The WAL's
    last page may still take a write or a few (how many depends on the sizes of the
    rows written before: an answer's metadata a few bytes longer let two queries more
    through): queries are asked until the first fails, then QUERIES more are counted.
    Returns how many were answered before that first failure."""
    with psycopg.connect(proxy.dsn("alice"), autocommit=True) as con:
        assert _ask(con, 0) == "answer"
        filler = fill(disk)
        before, primed = len(logged()), 0
        while _ask(con, 1000 + primed) == "answer":
            primed += 1
            assert primed < 50, "the full disk kept taking writes"
        # the first failure's line, and those of primed queries that were answered
        # uncached (their cache entry met the full disk): counted once the log settles
        before = _settled(logged, at_least=before + 1)
        failed = [_ask(con, number) for number in range(1, QUERIES + 1)]
        deadline = time.monotonic() + 10
        while len(logged()) - before < len(failed) and time.monotonic() < deadline:
            time.sleep(0.05)
        lines = logged()[before:]
        # a repeat writes nothing on its way (its ledger row waits for a batch: once the
        # disk has room, at the next debit): answered from the cache on the full disk
        assert _ask(con, 0) == "answer"
        assert con.execute("SELECT label FROM regions WHERE region = 'east'").fetchone() \
            == ("E",)  # the session stays
        filler.unlink()
        resumed = [_ask(con, number) for number in range(1, QUERIES + 1)]
    # A query whose debit committed before its cache entry met the full disk is paid
    # for: it gets its answer, uncached (docs/sqlstate.md 53100); every other fails.
    refused = [outcome for outcome in failed if outcome != "answer"]
    assert len(refused) >= len(failed) - 1, failed
    assert all(outcome.startswith("53100 ") for outcome in refused), failed
    assert "disk" in refused[0] and "free space" in refused[0], refused[0]
    assert len(lines) == len(failed), lines
    assert all("No space left on device" in line and "\n" not in line.rstrip("\n")
               for line in lines), lines
    assert resumed == ["answer"] * QUERIES
    return primed


def _balanced(served: Served, primed: int) -> None:
    """docs/budget.md: spent is the sum of the ledger rows whose debit took effect. A
    failed query's debit may have committed before a later write (its cache entry) met
    the full disk: it is charged, like any failure after the debit."""
    entries = json.loads(served.admin("ledger", "--user", "alice", "--format", "json")
                         .stdout, parse_float=Decimal)
    (account,) = json.loads(served.admin("budget", "show", "--user", "alice",
                                         "--format", "json").stdout, parse_float=Decimal)
    statuses = [e["status"] for e in entries]
    assert statuses.count("served from cache") == 1  # the repeat, written once there was room
    assert set(statuses) == {"charged", "served from cache"}
    # the first query, those answered on the full disk, the first failure's (if its
    # debit committed), the counted failures' (likewise) and the queries after
    assert 1 + primed + QUERIES <= statuses.count("charged") <= 1 + primed + 1 + 2 * QUERIES
    assert Decimal(account["spent"]) == sum(Decimal(e["epsilon"]) for e in entries)


def test_a_wal_that_cannot_grow_is_one_error_53100_per_query(tmp_path):
    with small_disk(tmp_path / "disk") as disk:
        served = _served(tmp_path, disk)
        with served.serve() as proxy:
            primed = _full_then_freed(proxy, disk, lambda: list(proxy.log))
        _balanced(served, primed)


def test_a_failed_checkpoint_invalidates_the_database_and_it_is_opened_again(
        tmp_path, monkeypatch, caplog):
    """DuckDB checkpoints once its WAL passes checkpoint_threshold (16 MB; 20 kB here):
    on a full disk that fails and DuckDB refuses every later statement until the
    database is opened again."""
    monkeypatch.setitem(duckdb_backend._HARDENED, "checkpoint_threshold", "20kB")
    with small_disk(tmp_path / "disk") as disk:
        served = _served(tmp_path, disk)
        with serving_in_process(*served[:2]) as proxy:
            # this worker's earlier tests may leave threads that log (a PostgreSQL pool
            # whose database is gone, an unclosed ledger's replay writer): only the
            # DuckDB backend's lines are this test's
            primed = _full_then_freed(proxy, disk, lambda: [
                record.getMessage() for record in caplog.records
                if record.levelno >= logging.WARNING and not record.exc_info
                and record.name == "idp_proxy.backend"
                and record.getMessage().startswith("duckdb")])
            assert not any(record.exc_info for record in caplog.records)
        _balanced(served, primed)


def test_a_commit_duckdb_calls_durable_stands_though_its_checkpoint_failed(tmp_path,
                                                                             monkeypatch):
    """The checkpoint after a COMMIT fails: that transaction committed (it is not
    reported as failed), and the database is opened again for the next one; once the
    WAL itself cannot grow, each commit fails with DiskFull and nothing of it stays."""
    monkeypatch.setitem(duckdb_backend._HARDENED, "checkpoint_threshold", "50kB")
    insert = "INSERT INTO t SELECT range, repeat('y', 100) FROM range(200)"
    with small_disk(tmp_path / "disk", "4m") as disk:
        backend = duckdb_backend.DuckDBBackend(str(disk / "data.duckdb"))
        backend.query("CREATE TABLE t (a INTEGER, b TEXT)")
        filler = fill(disk, leave=1 << 20)
        outcomes = []
        for _ in range(60):
            try:
                with backend.transaction() as tx:
                    tx.execute(insert)
                outcomes.append("committed")
            except DiskFull:
                outcomes.append("53100")
        filler.unlink()
        backend.query(insert)
        ((rows,),) = backend.query("SELECT count(*) FROM t")
        backend.close()
    committed = outcomes.count("committed")
    assert outcomes == ["committed"] * committed + ["53100"] * (60 - committed)
    assert 0 < committed < 60
    assert rows == 200 * (committed + 1)


@pytest.mark.postgres
def test_postgresql_disk_full_is_53100_and_the_connection_stays(fresh_postgres, caplog):
    """PostgreSQL reports a full disk as SQLSTATE 53100 (raised here on purpose)."""
    backend = PostgresBackend(fresh_postgres, pool_size=1)
    try:
        pid = backend.query("SELECT pg_backend_pid()")
        with pytest.raises(DiskFull) as failed:
            backend.query("DO $$ BEGIN RAISE EXCEPTION 'could not extend file' "
                          "USING ERRCODE = 'disk_full'; END $$")
        assert failed.value.sqlstate == "53100"
        assert backend.query("SELECT pg_backend_pid()") == pid
    finally:
        backend.close()
    # (an earlier test's thread may log meanwhile: only this backend's lines count)
    (line,) = [record.getMessage() for record in caplog.records
               if record.getMessage().startswith("postgres: disk")]
    assert line.startswith("postgres: disk full: could not extend file") and "\n" not in line


def test_the_sqlite_store_on_a_full_disk_is_53100_and_nothing_of_a_failed_write_stays(
        tmp_path):
    """The DuckDB file's SQLite store (docs/budget.md "Where the ledger lives"): a write
    its WAL has no room for fails with DiskFull and leaves nothing; once there is room
    the store takes writes again, holding exactly those that committed."""
    with small_disk(tmp_path / "disk", "4m") as disk:
        store = SQLiteStore(str(disk / "data.duckdb.ledger.sqlite"))
        store.query("CREATE TABLE IF NOT EXISTS idp.t (a TEXT)")
        filler = fill(disk)
        outcomes = []
        for _ in range(40):
            try:
                store.query("INSERT INTO idp.t VALUES (%s)", ("x" * 20_000,))
                outcomes.append("committed")
            except DiskFull:
                outcomes.append("53100")
        filler.unlink()
        store.query("INSERT INTO idp.t VALUES (%s)", ("y",))
        assert store.read("SELECT count(*) FROM idp.t") == [(outcomes.count("committed") + 1,)]
        store.close()
    assert "53100" in outcomes
