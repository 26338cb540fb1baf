"""Embedded DuckDB backend, opened so that no SQL can reach files or other databases."""

from __future__ import annotations

import os
import pwd
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
from sqlglot import exp

from proxy.backends.base import (
    Backend,
    Capabilities,
    GroupedRanks,
    Nullable,
    Transaction,
    log,
    one_line,
)
from proxy.backends.sqlite_store import SQLiteStore
from proxy.errors import (
    BackendFailed,
    BackendLost,
    DatabaseInUse,
    DiskFull,
    KeyTaken,
    PrivilegeMissing,
    QueryCanceled,
)
from proxy.pgtypes import postgres_type

# Settings that SPEC §9 requires: no file or network access from SQL, and the
# configuration locked so that a statement cannot switch it back on.
_HARDENED = {"enable_external_access": False, "lock_configuration": True}
# The ledger's SQLite store beside a DuckDB file (``DuckDBBackend.ledger_store``).
STORE_FILE = "{path}.ledger.sqlite"
_ELSEWHERE = "ledger_elsewhere"  # in the data file: its ledger is in the store beside it


class DuckDBBackend(Backend):
    capabilities = Capabilities(
        dialect="duckdb", transactional=True,
        group_commit=True,  # its writers take turns on the proxy's lock
        identity_columns=False, one_process=True,  # one process holds the file
        located_tables=False, grouped_ranks=GroupedRanks.LISTS, projected_scope=True,
        extremes_in_pass=True, released_lists=True, scalar_links=True)
    row_identity = "rowid"

    def __init__(self, path: str, memory_limit: str | None = None) -> None:
        super().__init__()
        self.name = Path(path).stem or "memory"  # the demo's file is demo.duckdb
        self.path = path
        self._config = dict(_HARDENED) | ({"memory_limit": memory_limit} if memory_limit else {})
        self._con = self._open()
        self._lock = threading.RLock()
        self._opening = threading.Lock()
        self._invalid: duckdb.DuckDBPyConnection | None = None  # to reopen before use
        self._content: dict[tuple, str] = {}  # (table, columns, rows) -> hash of every row
        self._base_tables: set[str] = set()  # names known to be base tables, not views
        self._writes = 0  # write transactions ended (``quiet_mark``)
        self._writing = 0  # write transactions begun and not ended yet
        # table -> (the quiet mark of the snapshot its version was read in, that version)
        self._versions: dict[str, tuple[int, str]] = {}
        self._probes: dict[str, tuple[str, str]] = {}  # table -> its two statements
        self._store: Backend | None = None  # ``ledger_store``, made on first use

    def _open(self) -> duckdb.DuckDBPyConnection:
        try:
            return duckdb.connect(self.path, config=self._config)
        except (duckdb.InvalidInputException, duckdb.ParserException) as exc:
            raise BackendFailed(f"the DuckDB URL's memory_limit is not valid ({exc}); write "
                                "e.g. ?memory_limit=2GB", "22023") from None
        except duckdb.IOException as exc:
            if "permission denied" in str(exc).lower():  # the owner's setup, said at start
                user = pwd.getpwuid(os.geteuid()).pw_name
                held = self.path if os.path.exists(self.path) else str(Path(self.path).parent)
                raise PrivilegeMissing(f"the user {user} may not read and write {held} (the "
                                       "DuckDB file keeps the ledger too): as its owner, run "
                                       f"chown {user} {held}, or run the proxy as its "
                                       "owner") from None
            if "lock" not in str(exc).lower():
                raise
            raise DatabaseInUse(f"the DuckDB file {self.path} is in use by another process "
                                "(a running idp-proxy serve?); ask through that server (psql), "
                                "or stop it first", self.path) from None

    @classmethod
    def from_url(cls, url: str, connections: int) -> DuckDBBackend:
        """``duckdb:///:memory:``, ``duckdb:///relative.duckdb``, ``duckdb:////abs.duckdb``,
        optionally ``?memory_limit=2GB``: DuckDB then spills to disk beyond it (sorts,
        temporary tables) instead of growing with the data. ``connections`` is not
        used: writers take turns on one connection, readers each have a cursor."""
        path, _, query = url.removeprefix("duckdb://").removeprefix("/").partition("?")
        if not path:
            raise BackendFailed("duckdb URL needs a path, e.g. duckdb:///data.duckdb", "22023")
        options = dict(part.partition("=")[::2] for part in query.split("&") if part)
        if set(options) - {"memory_limit"}:
            raise BackendFailed("a duckdb URL takes only ?memory_limit=..., e.g. "
                                "duckdb:///data.duckdb?memory_limit=2GB", "22023")
        return cls(path, options.get("memory_limit"))

    @contextmanager
    def transaction(self, snapshot: bool = False, durable: bool = True
                    ) -> Iterator[Transaction]:
        """Writers take turns (DuckDB's optimistic concurrency would fail one of two
        debits of the same budget row); snapshot readers run beside them and each other,
        each on its own cursor."""
        with self._lock if not snapshot else nullcontext():
            if not snapshot:  # before its BEGIN: a snapshot taken meanwhile sees it
                self._writing += 1
            try:
                con, cursor = self._cursor()
                try:
                    with self._running(cursor):
                        with _errors("BEGIN TRANSACTION"):
                            cursor.execute("BEGIN TRANSACTION")
                        tx = _DuckDBTransaction(self._stopped, cursor, con, snapshot)
                        yield tx
                        if not snapshot or self.readable(tx):
                            self._commit(con, cursor)
                        # else a snapshot kept open while the database was opened again:
                        # it wrote nothing, and its connection is closed (nothing to commit)
                except BaseException:
                    try:
                        cursor.execute("ROLLBACK")
                    except duckdb.FatalException:
                        self._invalid = con
                    except duckdb.Error:
                        pass
                    raise
                finally:
                    cursor.close()
            finally:
                if not snapshot:  # after its end: a mark read before it differs then
                    self._writes += 1
                    self._writing -= 1

    def _cursor(self) -> tuple[duckdb.DuckDBPyConnection, duckdb.DuckDBPyConnection]:
        """A cursor of the open database. After a fatal error (an automatic checkpoint
        that failed: the disk is full) DuckDB refuses every statement until the database
        is opened again; its cursors still running fail with it."""
        with self._opening:
            if self._invalid is self._con:
                self._con.close()
                with _errors("reopening the database"):
                    self._con = self._open()
            return self._con, self._con.cursor()

    def _commit(self, con: duckdb.DuckDBPyConnection, cursor: duckdb.DuckDBPyConnection) -> None:
        """A COMMIT that DuckDB reports durable stands, though the automatic checkpoint
        after it failed (the debit is spent: the query goes on); the database is
        reopened before its next use."""
        with _errors("COMMIT"):
            try:
                cursor.execute("COMMIT")
            except duckdb.FatalException as exc:
                if "COMMIT succeeded" not in str(exc):
                    raise
                log.error("duckdb: committed, but then %s; reopening the database",
                          one_line(exc))
                self._invalid = con

    def ledger_store(self) -> Backend:
        """The SQLite store beside the file (``FILE.ledger.sqlite``; in memory beside an
        in-memory database), made for the ledger's small transactions; made on first
        use. A file whose schema idp holds a ledger already, with no store beside it
        (made before the store), keeps it: nothing is copied, so no debit can be lost
        or counted twice (docs/budget.md, "Where the ledger lives")."""
        if self._store is None:
            if self.path == ":memory:":
                self._store = SQLiteStore(":memory:")
                return self._store
            beside = STORE_FILE.format(path=self.path)
            if not os.path.exists(beside):
                held = {name for name, in self.read("SELECT table_name FROM duckdb_tables() "
                                                    "WHERE schema_name = 'idp'")}
                if "budgets" in held:
                    self._store = self
                    return self._store
                if _ELSEWHERE in held:  # deleted, or the data file restored alone
                    raise BackendFailed(
                        f"the ledger of {self.path} is kept in {beside}, which is missing: "
                        "restore it beside the data file (without it every budget would "
                        "start full again)", "58P01")
                with self.transaction() as tx:  # the mark that a store was made
                    tx.execute("CREATE SCHEMA IF NOT EXISTS idp")
                    tx.execute(f"CREATE TABLE IF NOT EXISTS idp.{_ELSEWHERE} (store TEXT)")
                    tx.execute(f"INSERT INTO idp.{_ELSEWHERE} VALUES (%s)",
                               (Path(beside).name,))
            self._store = SQLiteStore(beside)
        return self._store

    def readable(self, tx: Transaction) -> bool:
        """Not once the database was (or is to be) opened again after a fatal error:
        the transaction's cursor belongs to the old connection."""
        return (not isinstance(tx, _DuckDBTransaction)
                or tx.connection is self._con and tx.connection is not self._invalid)

    def _stop(self, handle: duckdb.DuckDBPyConnection) -> None:
        handle.interrupt()

    def quiet_mark(self) -> int:
        """The write transactions ended through this object: this process holds the
        file's lock, and every write of the proxy and the owner's commands run in it goes
        through ``transaction`` (a second connection of this process to the file is the
        one way around it, which only tests take, and they close the proxy first)."""
        return self._writes

    def data_version(self, tx: Transaction, table: str) -> str | None:
        # The proxy holds the file's write lock while it runs and never writes a data
        # table, so the content is hashed once per process (every row, with its columns'
        # names and types, which a rename changes); the row count (storage metadata)
        # guards against writes through this very connection, which only tests and the
        # data owner's own tools make. Another process can only have written the file
        # before this one opened it, which the hash sees. A view has no cheap version:
        # counting it runs it; that a name is a base table is read once per process
        # (duckdb_tables(), 0.8 ms, costs more than the probe below).
        #
        # Every write through this connection is a write transaction of this object
        # (``quiet_mark``), so a snapshot taken while none was under way and none ended
        # since the version was read sees the very data it was read from: the version
        # is kept (``_versions``) and the probe (0.6 ms) skipped. DuckDB takes a
        # transaction's snapshot at its first read of the file, not at BEGIN, so that
        # first read is made here, between two reads of the marks (``_marks``).
        fixing = isinstance(tx, _DuckDBTransaction) and tx.snapshot and not tx.executed
        before = self._marks() if fixing else None
        if table not in self._base_tables:
            if not tx.execute("SELECT 1 FROM duckdb_tables() WHERE table_name = %s "
                              "AND schema_name = current_schema()", (table,)):
                return None
            self._base_tables.add(table)
        probe, first = self._probes.get(table) or self._probe_sql(table)
        if fixing:
            tx.execute(first)  # takes the snapshot
            tx.quiet = before[0] if before == self._marks() and not before[1] else None
        quiet = tx.quiet if isinstance(tx, _DuckDBTransaction) else None
        kept = self._versions.get(table)
        if quiet is not None and kept is not None and kept[0] == quiet:
            return kept[1]
        # One statement: the row count, and DuckDB's own names and types of the columns
        # from the description of an empty side (two statements cost 1.6 times as much).
        count = tx.execute(probe)[0][0]
        columns = [(name, str(kind)) for name, kind, *_ in tx.description()[1:]]
        key = (table, tuple(columns), count)
        if key not in self._content:
            quoted = exp.to_table(table, quoted=True).sql(dialect="duckdb")
            row = exp.func("hash", *(exp.column(name, quoted=True) for name, _ in columns))
            self._content[key] = tx.execute(
                f"SELECT CAST(sum({row.sql(dialect='duckdb')}) AS VARCHAR) FROM {quoted}")[0][0]
        shape = (f"{name} {kind}" for name, kind in columns)
        version = self.fingerprint_text((count, self._content[key], *shape))
        if quiet is not None:
            self._versions[table] = (quiet, version)
        return version

    def _marks(self) -> tuple[int, int]:
        """The write transactions ended and those under way. Read in the other order
        than a write changes them (begun; committed; ended, then no longer under way):
        a write that begins and ends between the two reads shows as ended."""
        writing = self._writing
        return self._writes, writing

    def _probe_sql(self, table: str) -> tuple[str, str]:
        """``data_version``'s statements for ``table``, rendered once: its probe, and the
        cheapest read of it (0.15 ms), which takes a snapshot."""
        quoted = exp.to_table(table, quoted=True).sql(dialect="duckdb")
        self._probes[table] = (f"SELECT * FROM (SELECT count(*) FROM {quoted}) AS n "
                               f"LEFT JOIN (SELECT * FROM {quoted} LIMIT 0) AS t ON true",
                               f"SELECT 1 FROM {quoted} LIMIT 0")
        return self._probes[table]

    def fingerprint_aggregates(self, unit: str, integer: bool) -> list[exp.Expression]:
        column = exp.column(unit, quoted=True)
        return [exp.Count(this=column), exp.Sum(this=exp.func("hash", column))]

    def close(self) -> None:
        if self._store is not None and self._store is not self:
            self._store.close()
        with self._lock:
            self._con.close()


class _DuckDBTransaction(Transaction):
    def __init__(self, stopped, cursor: duckdb.DuckDBPyConnection,
                 connection: duckdb.DuckDBPyConnection, snapshot: bool = False) -> None:
        super().__init__(stopped)
        self._cursor = cursor
        self.connection = connection  # the database connection the cursor belongs to
        self.snapshot = snapshot
        self.executed = 0  # statements run
        # the backend's quiet mark its snapshot was taken under, when no write was under
        # way or ended meanwhile (``DuckDBBackend.data_version``); None: not known
        self.quiet: int | None = None

    def _execute(self, sql: str, params: Sequence[Any]) -> list[tuple]:
        self.executed += 1
        with _errors(sql):
            # placeholders only where there are parameters: the statistics' SQL carries
            # its literals inline, and a pattern such as '%special%' holds "%s"
            self._cursor.execute(sql.replace("%s", "?") if params else sql, list(params))
            return self._cursor.fetchall() if self._cursor.description else []

    def read_columns(self, sql: str) -> tuple[int, list[Any]]:
        """``Transaction.read_columns`` through Arrow where every column is an integer type
        (HUGEINT included) or text: integers as numpy's 64-bit integers where each
        column's fit (``_arrow_integers``), text as Python strings, the same values
        ``fetchall`` gives (TPC-H Q15's 86,514 bucket rows: a tenth of the time). Other
        types, a statement read ``ahead`` and a Python without pyarrow, as rows."""
        if self._stopped() or self._early or pa_types is None:
            return super().read_columns(sql)
        self.executed += 1
        with _errors(sql):
            relation = self._cursor.sql(sql)  # bound, its types known, not yet run
            if relation is None or not hasattr(relation, "to_arrow_table") or any(
                    str(kind) not in _COLUMNAR for kind in relation.types):
                rows = relation.fetchall() if relation is not None else []
                return len(rows), list(zip(*rows))
            table = relation.to_arrow_table()
        return table.num_rows, [_arrow_column(column) for column in table.columns]

    def batches(self, sql: str, size: int) -> Iterator[list[tuple]]:
        self.executed += 1
        with _errors(sql):
            self._cursor.execute(sql)
        while True:
            with _errors(sql):
                rows = self._cursor.fetchmany(size)
            if not rows:
                return
            yield rows

    def append(self, table: str, columns: Sequence[Sequence[Any]]) -> None:
        # lists bind as DuckDB LISTs; unnesting them side by side zips them into rows
        unnested = ", ".join("unnest(?)" for _ in columns)
        self._execute(f"INSERT INTO {table} SELECT {unnested}", [list(c) for c in columns])

    def description(self) -> list[tuple]:
        return self._cursor.description or []

    def columns(self) -> list[tuple[str, str]]:
        return [(d[0], postgres_type(str(d[1]))) for d in self.description()]


try:  # Arrow's Python package, where installed (not a dependency: else rows)
    from pyarrow import types as pa_types
except ImportError:  # pragma: no cover - installed with the tests' pandas
    pa_types = None

_INTEGERS = ("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT")
_COLUMNAR = frozenset((*_INTEGERS, "VARCHAR"))


def _arrow_column(column) -> Any:
    """One Arrow column as ``_DuckDBTransaction.read_columns`` gives it: integers without NULL
    as a numpy int64 array, with NULLs as a ``Nullable``, where every value fits 64
    bits; else (and text) as Python values, as ``fetchall`` gives them."""
    array = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    kind = array.type
    if pa_types.is_integer(kind) or (pa_types.is_decimal(kind) and kind.scale == 0):
        values = _arrow_integers(array)
        if values is not None:
            valid = None if array.null_count == 0 else \
                np.asarray(array.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
            return values if valid is None else Nullable(np.where(valid, values, 0), valid)
        return [None if value is None else int(value) for value in array.to_pylist()]
    return array.to_pylist()


def _arrow_integers(array) -> np.ndarray | None:
    """An Arrow integer or DECIMAL(38, 0) (DuckDB's HUGEINT) array's values as numpy
    int64 (anything where NULL), exactly: a decimal's 128-bit two's complement words
    where each high word is the sign of its low word; None where one is not (a value
    beyond 64 bits)."""
    if pa_types.is_integer(array.type):
        if pa_types.is_unsigned_integer(array.type) and array.type.bit_width == 64:
            return None
        if array.null_count:
            array = array.fill_null(0)
        return np.asarray(array.to_numpy(zero_copy_only=False), dtype=np.int64)
    if array.type.byte_width != 16:
        return None
    words = np.frombuffer(array.buffers()[1], dtype=np.int64)[
        2 * array.offset: 2 * (array.offset + len(array))].reshape(-1, 2)
    low, high = words[:, 0], words[:, 1]
    if not np.array_equal(high, low >> 63):
        return None
    return low.copy()


@contextmanager
def _errors(sql: str) -> Iterator[None]:
    """Around every DuckDB call an interrupt can reach (BEGIN and COMMIT included: a
    cancel may land on them): 57014 for an interrupt, 53100 for a full disk, 23505
    (``KeyTaken``, not logged) for a primary key a racing transaction took, the
    backend's text to the log only (one line) for anything else."""
    try:
        yield
    except duckdb.InterruptException:
        raise QueryCanceled("canceling statement due to user request") from None
    except duckdb.OutOfMemoryException as exc:
        log.error("duckdb: out of memory: %s -- in: %s", one_line(exc), sql)
        raise BackendLost("the backend could not run this query") from None
    except duckdb.Error as exc:
        if isinstance(exc, duckdb.ConstraintException) and "duplicate key" in str(exc).lower():
            raise KeyTaken("the key is taken") from None
        if "No space left on device" in str(exc):
            log.error("duckdb: disk full: %s -- in: %s", one_line(exc), sql)
            raise DiskFull() from None
        log.error("duckdb error: %s -- in: %s", one_line(exc), sql)
        raise BackendFailed("the backend could not run this query") from None
